"""Decoder-only sources end to end: a Llama-style source (untied LM head, SentencePiece-style BPE with
byte fallback, no pad token, as Llama-2) and a GPT-2-style source (tied, byte-level BPE), each tiny
(hidden 32, 2 layers, random weights) and built here from a config with a tokenizer trained on English
text, run through the whole small workflow with `snakemake` ONCE per source; the tests read that run's
artefacts. (Bad inputs, missing task heads, LM-head biases and the hub download: test_decoder_only_inputs.py.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest
import torch
import yaml
from conftest import BIN, REPO

from vocabtransfer.app.params import validate_params

from vocabtransfer.pipeline.config import merge_overlay, read_yaml

from helpers import gpt2_seed, llama_seed, text_lines, wide_table_rows, wording_faults

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytestmark = pytest.mark.slow
LLAMA_METHODS = ["random", "overlap", "mean", "fvt", "focus", "ofa", "snmf", "wechsel", "omp"]
EXACT_OVERLAP = ("overlap", "mean", "focus", "omp", "fvt")  # copy the source rows of overlapping tokens
ESCAPES = "ŋ€😀"  # not in the tiny vocabularies: byte fallback (Llama) or byte-level pieces (GPT-2)


# ------------------------------------------------------------------ the sources and the run


def build_source(kind: str, out: Path) -> Path:
    """A tiny decoder with random weights and a 1000-token tokenizer of its family trained on English
    text (the tokenizer stage's `train_tokenizer` on a seed tokenizer with the family's conventions):
    `llama`: LlamaForCausalLM, untied, SentencePiece-style BPE with the 256 byte-fallback pieces, <s> </s>
    <unk>, no pad token; `gpt2`: GPT2LMHeadModel, tied, byte-level BPE, <|endoftext|> only."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    from vocabtransfer.data.tokenizer import train_tokenizer

    seed = llama_seed() if kind == "llama" else gpt2_seed()
    tok = train_tokenizer(seed, [text_lines("en", 3000)], vocab_size=1000)
    torch.manual_seed(0)
    if kind == "llama":
        model = LlamaForCausalLM(
            LlamaConfig(
                vocab_size=len(tok),
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=2,
                num_key_value_heads=2,
                intermediate_size=64,
                max_position_embeddings=256,
                tie_word_embeddings=False,
                bos_token_id=tok.bos_token_id,
                eos_token_id=tok.eos_token_id,
            )
        )
    else:
        model = GPT2LMHeadModel(
            GPT2Config(
                vocab_size=len(tok),
                n_embd=32,
                n_layer=2,
                n_head=2,
                n_positions=256,
                bos_token_id=tok.bos_token_id,
                eos_token_id=tok.eos_token_id,
            )
        )
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def data_root(root: Path, shared: Path) -> Path:
    """Slices of the English and Swahili text (source-side text, WECHSEL's source fastText, the corpus)
    and links to the Swahili task data and dictionary."""
    (root / "pretrain_text").mkdir(parents=True)
    for lang, n in (("en", 3000), ("sw", 3000)):
        with open(shared / "pretrain_text" / f"{lang}.txt", encoding="utf-8") as fh:
            (root / "pretrain_text" / f"{lang}.txt").write_text("".join(next(fh) for _ in range(n)), encoding="utf-8")
    for name in ("xnli", "tydiqa_goldp", "masakhaner2", "wechsel_dicts"):
        (root / name).symlink_to(shared / name)
    return root


def overlay(source: Path, methods: list[str], objectives: list[str]) -> dict:
    """The small workflow, sized for about a minute on 2 cores: one language, a 1000-token vocabulary,
    tiny fastText, 10 pretraining steps per objective, a handful of examples per task."""
    return {
        "languages": ["sw"],
        "source_model": str(source),
        "corpus": {"sources": {"sw": {"path": "pretrain_text/sw.txt"}}, "max_bytes": 150000},
        "tokenizer": {"vocab_size": 1000},
        "fasttext": {"dim": 16, "epochs": 1, "min_count": 2, "bucket": 10000},
        # the sources have their own LM head: source_head only scores it on these held-out lines
        "source_head": {"batch_size": 8, "seq_len": 32, "eval_lines": 20},
        "init": {
            "methods": methods,
            "omp": {"k": 8},
            "ofa": {"keep_dim": 16},
            "snmf": {"rank": 8, "max_iter": 10, "init": "svd"},
            "wechsel": {
                "dictionaries": {"sw": "wechsel_dicts/swahili.txt"},
                "fasttext": {"dim": 16, "epochs": 1, "min_count": 2, "bucket": 10000},
            },
        },
        "init_eval": {"max_lines": 20, "seq_len": 32, "batch_size": 8, "retrieval_sentences": 0},
        "pretrain": {
            "methods": ["focus"],
            "objectives": objectives,
            "seeds": 1,
            "steps": 10,
            "batch_size": 8,
            "seq_len": 32,
            "learning_rate": 0.003,
            "warmup_steps": 1,
            "eval_every": 5,
            "eval_lines": 40,
            "log_every": 5,
            "save_every": 10,
        },
        "token_frequency_loss": {"buckets": 3, "max_lines": 20, "seq_len": 32},
        "gradient_scenarios": {"batches": 1, "batch_size": 2, "seq_len": 32},
        "eval": {
            "models": ["focus-standard-pseed1"],
            "tasks": {
                "nli": {"max_train": 16, "max_test": 16, "max_length": 64, "batch_size": 8},
                "qa": {"max_train": 8, "max_test": 8, "max_length": 96, "doc_stride": 32, "batch_size": 8},
                "ner": {"max_train": 16, "max_test": 16, "max_length": 64, "batch_size": 8, "epochs": 1},
            },
        },
        "report": {"bootstrap_resamples": 200},
    }


def workflow_run(
    kind: str, methods: list[str], objectives: list[str], tmp_path_factory, shared_data
) -> SimpleNamespace:
    """`snakemake --cores 2` on a checkout-like copy with the overlay; --max-threads 1 runs two of these
    small (import-bound) jobs side by side instead of one job on both cores."""
    root = tmp_path_factory.mktemp(f"decoder_{kind}")
    data = data_root(root / "data", shared_data)
    source = build_source(kind, root / "source")
    work = root / "work"
    work.mkdir()
    shutil.copy(REPO / "Snakefile", work)
    shutil.copytree(REPO / "workflow", work / "workflow")
    shutil.copytree(REPO / "src", work / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copy(REPO / "params.yaml", work)
    settings = overlay(source, methods, objectives)
    (work / "overlay.yaml").write_text(yaml.safe_dump(settings, sort_keys=False))
    env = {
        **os.environ,
        "VOCABTRANSFER_DATA": str(data),
        "PATH": f"{BIN}:{os.environ['PATH']}",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(REPO / "src"),
    }
    start = time.perf_counter()
    proc = subprocess.run(
        # the export, a target of its own, named before --configfile (which takes every word after it)
        [str(BIN / "snakemake"), "all", "results/sw/export", "--cores", "2", "--max-threads", "1"]
        + ["--configfile", "overlay.yaml"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    params = validate_params(merge_overlay(read_yaml(REPO / "params.yaml"), settings))
    return SimpleNamespace(
        kind=kind, work=work, source=source, params=params, seconds=time.perf_counter() - start, log=proc.stderr
    )


@pytest.fixture(scope="module")
def llama_run(tmp_path_factory, shared_data):
    return workflow_run("llama", LLAMA_METHODS, ["standard", "selfish"], tmp_path_factory, shared_data)


@pytest.fixture(scope="module")
def gpt2_run(tmp_path_factory, shared_data):
    # tied, so one matrix per method: the methods' tied path is the encoders' (test_workflow); two suffice. The
    # standard objective alone: selfish and its analyses on a causal source run in the Llama workflow
    return workflow_run("gpt2", ["random", "focus"], ["standard"], tmp_path_factory, shared_data)


def _run(request, kind: str) -> SimpleNamespace:
    return request.getfixturevalue(f"{kind}_run")


def _json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _causal(path: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(path))


def _overlap_ids(work: Path):
    from vocabtransfer.init.initialise import read_overlap

    return read_overlap(work / "results/sw/overlap/overlap.parquet", 1000, 1000)


# ------------------------------------------------------------------ tokenizer and overlap


def test_decoder_only_llama_tokenizer_is_sentencepiece_bpe_with_byte_fallback(llama_run):
    from transformers import AutoTokenizer

    work = llama_run.work
    stats = _json(work / "results/sw/tokenizer_stats.json")
    assert (stats["family"], stats["style"], stats["vocab_size_reached"]) == ("bpe", "sentencepiece", 1000)
    tok = AutoTokenizer.from_pretrained(str(work / "results/sw/tokenizer"))
    assert tok.convert_ids_to_tokens([0, 1, 2]) == ["<unk>", "<s>", "</s>"] and tok.pad_token is None
    assert tok.convert_ids_to_tokens(list(range(3, 259))) == [f"<0x{b:02X}>" for b in range(256)]
    # characters outside the vocabulary are spelled by their UTF-8 bytes, never <unk>, and decode back
    ids = tok(ESCAPES, add_special_tokens=False)["input_ids"]
    assert 0 not in ids and all(3 <= i < 259 for i in ids[1:]) and tok.decode(ids) == ESCAPES
    # both vocabularies carry the 256 byte pieces: each is an exact overlap whatever else matches
    overlap = _json(work / "results/sw/overlap/stats.json")
    assert overlap["byte_tokens"] == {"target": 256, "source": 256, "matched": 256}
    assert overlap["n_overlapping"] > 256


def test_decoder_only_gpt2_tokenizer_is_byte_level_bpe(gpt2_run):
    from tokenizers import pre_tokenizers
    from transformers import AutoTokenizer

    work = gpt2_run.work
    stats = _json(work / "results/sw/tokenizer_stats.json")
    assert (stats["family"], stats["style"]) == ("bpe", "byte_level") and stats["special_tokens"] == {
        "<|endoftext|>": 0
    }
    tok = AutoTokenizer.from_pretrained(str(work / "results/sw/tokenizer"))
    assert set(pre_tokenizers.ByteLevel.alphabet()) <= set(tok.get_vocab())
    ids = tok(ESCAPES)["input_ids"]
    assert tok.decode(ids) == ESCAPES
    overlap = _json(work / "results/sw/overlap/stats.json")
    assert overlap["schemes"] == {"source": "bytelevel", "target": "bytelevel"}
    assert overlap["byte_tokens"]["matched"] == overlap["byte_tokens"]["target"] > 0


# ------------------------------------------------------------------ initialisation


def test_decoder_only_llama_every_method_initialises_input_and_untied_lm_head(llama_run):
    """Every method writes both matrices, each built from the source's own matrix: the target model is
    untied, its rows are the written ones, and the LM head's overlap rows are nearer the source LM head's
    rows than the source input embeddings' (equal to them for the methods that copy the overlap)."""
    from safetensors.torch import load_file

    work = llama_run.work
    source = _causal(work / "results/source/model")
    src_in, src_out = source.get_input_embeddings().weight.detach(), source.lm_head.weight.detach()
    assert not torch.equal(src_in, src_out)
    target_ids, source_ids = map(torch.as_tensor, _overlap_ids(work))
    table = _json(work / "results/source/head_stats.json")
    assert table["skipped"] is True and table["trained_parameters"] == [] and table["kind"] == "causal"
    for method in LLAMA_METHODS:
        d = work / f"results/sw/init/{method}/pseed1"
        stats = _json(d / "stats.json")
        assert stats["untied_output_embeddings"] is True and stats["output_method_stats"] is not None, method
        written = load_file(str(d / "embeddings.safetensors"))
        model = _causal(d / "model")
        emb, head = model.get_input_embeddings().weight.detach(), model.lm_head.weight.detach()
        assert model.config.tie_word_embeddings is False and emb.data_ptr() != head.data_ptr(), method
        assert torch.equal(emb, written["input_embeddings"]) and torch.equal(head, written["output_embeddings"]), method
        assert tuple(head.shape) == (1000, 32) and not torch.equal(emb, head), method
        if method in EXACT_OVERLAP:
            assert torch.equal(emb[target_ids], src_in[source_ids]), method
            assert torch.equal(head[target_ids], src_out[source_ids]), method
        elif method not in ("random", "wechsel"):  # those two draw the overlap rows (special tokens aside)
            # ofa and snmf rebuild the overlap rows from a low-rank factorisation of each source matrix
            for name, rows, own, other in (("input", emb, src_in, src_out), ("output", head, src_out, src_in)):
                near, far = ((rows[target_ids] - m[source_ids]).norm(dim=1).mean() for m in (own, other))
                assert near < 0.9 * far, (method, name, float(near), float(far))
    # every snmf method read the one factorisation of both source matrices
    factors = load_file(str(work / "results/source/snmf.safetensors"))
    assert {"input_coordinates", "output_coordinates"} <= set(factors)
    rows = {
        r["method"]: r
        for r in __import__("pyarrow.parquet", fromlist=["x"])
        .read_table(work / "results/sw/init_eval.parquet")
        .to_pylist()
    }
    models = {m: r for m, r in rows.items() if not m.startswith("floor:")}  # the floors: kind "floor"
    assert set(LLAMA_METHODS) | {"source"} <= set(models) and {r["kind"] for r in models.values()} == {"causal"}
    assert {r["kind"] for m, r in rows.items() if m.startswith("floor:")} == {"floor"}


def test_decoder_only_gpt2_methods_keep_the_embeddings_tied(gpt2_run):
    from safetensors.torch import load_file

    work = gpt2_run.work
    source = _causal(work / "results/source/model")
    target_ids, source_ids = map(torch.as_tensor, _overlap_ids(work))
    for method in ("random", "focus"):
        d = work / f"results/sw/init/{method}/pseed1"
        assert _json(d / "stats.json")["untied_output_embeddings"] is False
        written = load_file(str(d / "embeddings.safetensors"))
        assert set(written) == {"input_embeddings"}
        model = _causal(d / "model")
        emb = model.get_input_embeddings().weight
        assert model.lm_head.weight.data_ptr() == emb.data_ptr() and torch.equal(emb, written["input_embeddings"])
    assert torch.equal(emb[target_ids], source.get_input_embeddings().weight[source_ids])  # focus copies the overlap


# ------------------------------------------------------------------ pretraining, generation, fine-tuning


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_decoder_only_pretraining_lowers_the_clm_loss_and_the_result_generates(request, kind):
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    run = _run(request, kind)
    objectives = run.params["pretrain"]["objectives"]
    assert objectives == (["standard", "selfish"] if kind == "llama" else ["standard"])
    for objective in objectives:
        d = run.work / f"results/sw/pretrain/focus/{objective}/pseed1"
        stats = _json(d / "stats.json")
        assert stats["kind"] == "causal" and stats["objective"] == objective
        valid = pq.read_table(d / "metrics.parquet").to_pandas().dropna(subset=["valid_loss"])
        assert list(valid["step"]) == [0, 5, 10]
        assert valid["valid_loss"].iloc[-1] < valid["valid_loss"].iloc[0] - 0.05, (objective, list(valid["valid_loss"]))
        model, tok = _causal(d / "model"), AutoTokenizer.from_pretrained(str(d / "model"))
        assert (model.lm_head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()) is (kind == "gpt2")
        prompt = tok("Habari ya", return_tensors="pt")
        out = model.generate(
            **prompt, max_new_tokens=5, min_new_tokens=5, do_sample=False, pad_token_id=tok.eos_token_id
        )
        assert out.shape == (1, prompt["input_ids"].shape[1] + 5)
        # the prompt comes back through the target tokenizer's decoder, the five new tokens after it
        assert tok.decode(out[0], skip_special_tokens=True).startswith("Habari ya")
    for objective in objectives:
        grads = pq.read_table(run.work / f"results/sw/gradients/focus/{objective}/pseed1.parquet").to_pandas()
        assert set(grads["phase"]) == {"start", "end"} and (grads["output_nontarget_norm"] >= 0).all()
    buckets = pq.read_table(run.work / "results/sw/token_frequency_loss.parquet").to_pandas()
    assert set(buckets["objective"]) == {"init", *objectives}


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_decoder_only_export_writes_gguf_where_transformers_reads_it_back(request, kind):
    """The run's export (rule all): the Llama source's recommended run as a folder and a GGUF file that transformers
    read back at export with the same token ids; the GPT-2 source (256 positions, which transformers' GGUF loader
    would read as 1,024) gets the folder and the reason it has no GGUF file."""
    from transformers import AutoTokenizer

    run = _run(request, kind)
    folder = run.work / "results/sw/export"
    exported = _json(folder / "export.json")
    assert exported["model"].startswith("focus-")  # focus is the one pretrained method besides the baseline
    assert (
        _causal(folder).config.model_type == kind
        and "pipeline_tag: text-generation" in (folder / "README.md").read_text()
    )
    files = list(folder.glob("*.gguf"))
    if kind == "gpt2":
        assert files == [] and "n_positions" in exported["no_gguf"]
        return
    (path,) = files
    check = exported["gguf"]["round_trip"]
    assert check["lines"] > 0 and check["identical_token_ids"] == check["lines"]
    assert check["max_abs_loglik_per_token"] <= check["tolerance"] == 1e-3  # the source's float32: f32
    lines = text_lines("sw", 50, start=2000)
    ours, back = AutoTokenizer.from_pretrained(folder), AutoTokenizer.from_pretrained(folder, gguf_file=path.name)
    assert [back(line)["input_ids"] for line in lines] == [ours(line)["input_ids"] for line in lines]


@pytest.mark.parametrize("kind, family", [("llama", "Llama"), ("gpt2", "GPT2")])
def test_decoder_only_fine_tuning_uses_the_architectures_task_heads(request, kind, family):
    """NLI, QA and NER each ran with the architecture's own head; the tokenizer had no pad token, so the
    job padded with its eos token; the report names the source and skips nothing."""
    run = _run(request, kind)
    heads = {"nli": "ForSequenceClassification", "qa": "ForQuestionAnswering", "ner": "ForTokenClassification"}
    eos = "</s>" if kind == "llama" else "<|endoftext|>"
    for task, head in heads.items():
        result = _json(run.work / f"results/sw/eval/{task}/focus-standard-pseed1/seed1.json")
        assert result["head_class"] == f"{family}{head}" and result["pad_token_set"] == eos, task
        assert result["metrics"][result["metric"]] >= 0 and len(result["examples"]["ids"]) == result["n_test"] > 0
    report = (run.work / "results/report.md").read_text(encoding="utf-8")
    source_class = "LlamaForCausalLM" if kind == "llama" else "GPT2LMHeadModel"
    assert f"({source_class}, causal LM)" in report
    assert "Nothing: every configured job has results." in report
    # bits per byte beside its floors (predictors without a model), in init_eval and the report, whose
    # verdict words the share kept from the best floor; every table line within 160 characters
    init = {r["method"]: r for r in pq.read_table(run.work / "results/sw/init_eval.parquet").to_pylist()}
    assert {"floor:unigram-target", "floor:unigram-source", "floor:uniform"} <= set(init), list(init)
    assert all(init[f"floor:{n}"]["bits_per_byte"] > 0 for n in ("unigram-target", "unigram-source", "uniform"))
    bpb = report.split("\n### Bits per byte\n", 1)[1].split("\n### ", 1)[0]
    assert "| unigram, target tokenizer " in bpb and "#### Bits per byte: model − best floor" in bpb, bpb[:3000]
    assert "- **Share of the source's advantage kept**, from the best floor (" in report
    assert not wide_table_rows(report) and not wording_faults(report), wide_table_rows(report)[:2]
    print(f"{kind}: workflow {run.seconds:.0f} s")
