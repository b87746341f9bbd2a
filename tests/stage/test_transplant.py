"""`tokenizer.from`: an existing tokenizer as the target (docs/methods.md#an-existing-tokenizer-as-the-target).

Two small transplants run in-process from the source_model stage to init_eval, on tiny models built from configs:

* a tiny BERT with a 300-token WordPiece tokenizer (`##` markers, [CLS] [SEP] …) moved to a Gemma-style tokenizer
  read from a GGUF file (SentencePiece-style BPE: `▁` word starts, the 256 `<0xNN>` byte pieces, <bos> <eos> …;
  800 tokens, more than the source's), written here with the GGUF export's own tokenizer writer;
* a tiny Llama with a 300-token SentencePiece-style tokenizer moved to MiniLM's WordPiece tokenizer (30,522 tokens)
  named by its hub id while HF_HUB_OFFLINE is set, so found in the package that ships it.

And the refusals before any job: a tokenizer that cannot be read, a hub tokenizer not in the cache when offline.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
from safetensors.torch import load_file

from helpers import MINILM, llama_seed, save_dir, text_lines, tiny_bert, tiny_llama, wordpiece_tokenizer
from vocabtransfer.app.params import validate_params
from vocabtransfer.app.plan import preflight
from vocabtransfer.app.runner import run_stage
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.pipeline import paths
from vocabtransfer.plan.params_root import Params
from vocabtransfer.plan.stages import STAGES

LANG = {"lang": "sw"}
MODEL_FILE = "model/model.safetensors"


def gemma_style_gguf(path: Path, lines: list[str], vocab_size: int = 800) -> Path:
    """A tokenizer-only GGUF file (architecture gemma3, no tensors): a SentencePiece-style BPE with byte fallback
    trained on `lines`, its metadata written by `model.gguf_vocab` (what `export.gguf` writes)."""
    import gguf
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    from vocabtransfer.data.families import insert_byte_tokens
    from vocabtransfer.model import gguf_vocab

    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]  # Gemma 3's head: <mask> at id 4
    tok.train_from_iterator(
        [lines], trainers.BpeTrainer(vocab_size=vocab_size - 256, special_tokens=specials, show_progress=False)
    )
    tok = Tokenizer.from_str(json.dumps(insert_byte_tokens(json.loads(tok.to_str()), len(specials))))
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 2)])
    roles = {f"{name}_token": f"<{name}>" for name in ("bos", "eos", "unk", "pad", "mask")}  # Gemma's names
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, **roles)
    writer = gguf.GGUFWriter(str(path), "gemma3")
    writer.add_name("tokenizer only")
    for add, value in (
        (writer.add_context_length, 128),
        (writer.add_embedding_length, 32),
        (writer.add_block_count, 1),
        (writer.add_feed_forward_length, 64),
        (writer.add_head_count, 2),
        (writer.add_head_count_kv, 1),
        (writer.add_vocab_size, len(hf)),
    ):
        add(value)
    writer.add_layer_norm_rms_eps(1e-6)
    gguf_vocab.add_to(writer, gguf_vocab.vocab(hf, len(hf)))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _params(source: Path, tokenizer_from: str, methods: list[str], donor: str | None = None) -> dict:
    return validate_params(
        {
            "languages": ["sw"],
            "seed": 3,
            "source_model": str(source),
            "corpus": {"sources": {"sw": {"path": "sw.txt"}}, "valid_fraction": 0.1},
            "tokenizer": {"from": tokenizer_from, "vocab_size": 16000, "donor_model": donor},
            "fasttext": {"dim": 8, "epochs": 1, "min_count": 2},
            "init": {"methods": methods, "omp": {"k": 4}, "omp_donor": {"k": 4}},
            "pretrain": {"methods": [], "steps": 1},
            "init_eval": {"max_lines": 8, "seq_len": 32, "batch_size": 4, "retrieval_sentences": 0},
        }
    )


def _transplant(
    root: Path, monkeypatch, model, source_tok, tokenizer_from: str, methods: list[str], donor: str | None = None
) -> dict:
    """Run source_model … init_eval in `root` with `source_model` a directory of (model, source_tok); with `donor`
    (tokenizer.donor_model), stage donor before init."""
    data = root / "data"
    data.mkdir(parents=True)
    (data / "sw.txt").write_text("\n".join(text_lines("sw", 400)) + "\n", encoding="utf-8")
    (data / "pretrain_text").mkdir()  # init_eval scores the source on source_head.text's language too
    (data / "pretrain_text" / "en.txt").write_text("\n".join(text_lines("en", 50)) + "\n", encoding="utf-8")
    monkeypatch.setenv("VOCABTRANSFER_DATA", str(data))
    monkeypatch.chdir(root)
    source = save_dir(model, source_tok, root / "source")
    params = _params(source, tokenizer_from, methods, donor)
    run_stage("source_model", params, {}, threads=1)
    save_dir(model, source_tok, root / paths.SOURCE_MODEL)  # complete already: what source_head would leave
    for stage in ("corpus", "tokenizer", "pretokenize", "fasttext", "overlap"):
        run_stage(stage, params, LANG, threads=1)
    for wildcards in STAGES["donor"].jobs(Params(params)):
        run_stage("donor", params, wildcards, threads=1)
    for method in methods:
        run_stage("init", params, {**LANG, "method": method, "pseed": "1"}, threads=1)
    run_stage("init_eval", params, LANG, threads=1)
    return params


def _read(root: Path, template: str) -> dict:
    return json.loads((root / paths.fill(template, lang="sw")).read_text())


def _check_init_eval(root: Path, methods: list[str], n_target: int) -> None:
    from safetensors import safe_open

    rows = {r["method"]: r for r in pq.read_table(root / paths.fill(paths.INIT_EVAL, lang="sw")).to_pylist()}
    assert set(methods) <= set(rows), rows
    for method in methods:
        row = rows[method]  # bits per byte for a causal source (a masked LM's loss is per masked token)
        assert math.isfinite(row["loss"]) and row["n_eval_tokens"] > 0 and row["n_bytes"] > 0, row
        assert (row["bits_per_byte"] > 0) if row["kind"] == "causal" else row["bits_per_byte"] is None, row
        init_dir = root / paths.fill(paths.INIT_DIR, lang="sw", method=method, pseed=1)
        with safe_open(str(init_dir / "model" / "model.safetensors"), "pt") as f:
            shapes = [f.get_slice(k).get_shape() for k in f.keys() if "embed" in k and "position" not in k]
        assert [n_target, 32] in shapes, (method, shapes)


def test_a_gguf_gemma_style_tokenizer_as_the_target_of_a_wordpiece_source(tmp_path, monkeypatch):
    source_tok = wordpiece_tokenizer("sw", vocab_size=300)
    gguf_file = gemma_style_gguf(tmp_path / "target.gguf", text_lines("sw", 400, start=400))
    methods = ["random", "overlap", "fvt", "focus", "omp"]
    root = tmp_path / "work"
    _transplant(root, monkeypatch, tiny_bert(len(source_tok)), source_tok, str(gguf_file), methods)

    from transformers import AutoTokenizer

    expected = AutoTokenizer.from_pretrained(str(tmp_path), gguf_file="target.gguf")
    target = AutoTokenizer.from_pretrained(str(root / paths.fill(paths.TOKENIZER, lang="sw")))
    assert target.get_vocab() == expected.get_vocab() and len(target) >= 800 > len(source_tok)
    stats = _read(root, paths.TOKENIZER_STATS)
    assert stats["from"]["route"] == "gguf" and stats["from"]["gguf_kind"] == "file", stats
    assert stats["from"]["sha256"] == __import__("hashlib").sha256(gguf_file.read_bytes()).hexdigest()
    assert stats["vocab_size"] == len(target) and stats["vocab_size_param"] == 16000 and stats["family"] == "bpe"
    assert stats["style"] == "sentencepiece" and {"<bos>", "<eos>"} <= set(stats["special_tokens"])

    # the target's own word markers and byte pieces against the source's `##`: `▁x` is the source's word `x`,
    # a piece without `▁` its `##x`; the byte pieces are counted as the target's byte tokens
    overlap = _read(root, paths.OVERLAP_STATS)
    assert overlap["schemes"] == {"target": "sentencepiece", "source": "wordpiece"}, overlap
    assert overlap["byte_tokens"]["target"] == 256 and overlap["n_target_tokens"] == len(target), overlap
    pairs = {
        r["target_token"]: r["source_token"]
        for r in pq.read_table(root / paths.fill(paths.OVERLAP, lang="sw")).to_pylist()
        if r["source_token"] is not None
    }
    words = [t for t, s in pairs.items() if t.startswith("▁") and len(t) > 2]
    pieces = [t for t, s in pairs.items() if not t.startswith(("▁", "<")) and len(t) > 1]
    assert words and all(pairs[t] == t[1:] for t in words), [(t, pairs[t]) for t in words[:5]]
    assert pieces and all(pairs[t] == "##" + t for t in pieces), [(t, pairs[t]) for t in pieces[:5]]
    assert overlap["counts"]["exact_match"] > 100, overlap
    _check_init_eval(root, methods, len(target))

    # each special token takes the source's of its role, <bos> and <eos> the [CLS] and [SEP] a BERT begins and ends
    # with, so the masked-LM loss masks with the source's own [MASK] row in every method (families.role_pairs)
    by_role = {
        r["target_token"]: r["source_token"]
        for r in pq.read_table(root / paths.fill(paths.OVERLAP, lang="sw")).to_pylist()
        if r["match"] == "special_role"
    }
    expected_roles = {"<mask>": "[MASK]", "<pad>": "[PAD]", "<unk>": "[UNK]", "<bos>": "[CLS]", "<eos>": "[SEP]"}
    assert by_role == expected_roles and overlap["specials_by_role"] == 5, (by_role, overlap)
    assert overlap["counts"]["special_role"] == 5 and overlap["crossed_specials_unmatched"] == 0, overlap
    source = load_file(str(root / paths.SOURCE_MODEL / "model.safetensors"))
    key = next(k for k in source if k.endswith("word_embeddings.weight"))
    for method in ("overlap", "fvt", "focus", "omp"):
        init = load_file(str(root / paths.fill(paths.INIT_DIR, lang="sw", method=method, pseed=1) / MODEL_FILE))[key]
        for mine, theirs in expected_roles.items():
            torch.testing.assert_close(
                init[target.convert_tokens_to_ids(mine)], source[key][source_tok.convert_tokens_to_ids(theirs)]
            )


def test_minilms_wordpiece_by_hub_id_offline_as_the_target_of_a_sentencepiece_llama(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    source_tok = llama_seed()
    methods = ["random", "fvt", "focus"]
    root = tmp_path / "work"
    params = _transplant(root, monkeypatch, tiny_llama(len(source_tok)), source_tok, MINILM, methods)
    assert preflight(params) is not None  # the package's copy counts as reachable offline

    target = json.loads((root / paths.fill(paths.TOKENIZER, lang="sw") / "tokenizer.json").read_text())
    assert target["model"]["type"] == "WordPiece" and len(target["model"]["vocab"]) == 30522
    stats = _read(root, paths.TOKENIZER_STATS)
    assert stats["from"]["route"] == "hub" and stats["vocab_size"] == 30522 and stats["family"] == "wordpiece"
    assert set(stats["special_tokens"]) == {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}, stats
    overlap = _read(root, paths.OVERLAP_STATS)
    assert overlap["schemes"]["target"] == "wordpiece" and overlap["counts"]["exact_match"] > 50, overlap
    pairs = {
        r["target_token"]: r["source_token"]
        for r in pq.read_table(root / paths.fill(paths.OVERLAP, lang="sw")).to_pylist()
        if r["source_token"] is not None and r["target_token"].startswith("##") and len(r["target_token"]) > 3
    }
    assert pairs and all(s == t[2:] for t, s in pairs.items()), list(pairs.items())[:5]
    by_role = {
        r["target_token"]: r["source_token"]
        for r in pq.read_table(root / paths.fill(paths.OVERLAP, lang="sw")).to_pylist()
        if r["match"] == "special_role"
    }  # the Llama has no pad or mask: MiniLM's [PAD] and [MASK] stay new tokens
    assert by_role == {"[CLS]": "<s>", "[SEP]": "</s>", "[UNK]": "<unk>"}, by_role
    _check_init_eval(root, methods, 30522)
    torch.testing.assert_close(  # fvt's row of a token both vocabularies share is the source's row
        *_rows(root, "fvt", source_tok, overlap_token=next(iter(pairs)))
    )


def _rows(root: Path, method: str, source_tok, overlap_token: str):
    from transformers import AutoTokenizer

    target = AutoTokenizer.from_pretrained(str(root / paths.fill(paths.TOKENIZER, lang="sw")))
    source = load_file(str(root / paths.SOURCE_MODEL / "model.safetensors"))["model.embed_tokens.weight"]
    init = load_file(str(root / paths.fill(paths.INIT_DIR, lang="sw", method=method, pseed=1) / MODEL_FILE))
    return (
        init["model.embed_tokens.weight"][target.convert_tokens_to_ids(overlap_token)],
        source[source_tok.convert_tokens_to_ids(overlap_token[2:])],
    )


def test_omp_in_the_donors_space_runs_from_the_donor_stage_to_init_eval(tmp_path, monkeypatch):
    """A tiny untied Llama moved to the tokenizer of a tiny untied Llama donor (tokenizer.from and
    tokenizer.donor_model: the donor's folder): stage donor writes both of the donor's matrices, and the init job's
    input and output rows are `donor_embeddings` of the source's and donor's own matrices, bit for bit."""

    from vocabtransfer.data.overlap import overlap_pairs
    from vocabtransfer.init.methods.omp import donor_embeddings
    from vocabtransfer.plan.method_options import OmpDonorOptions

    target_tok = wordpiece_tokenizer("sw", vocab_size=300)
    donor = save_dir(tiny_llama(len(target_tok), seed=1), target_tok, tmp_path / "donor")
    source_tok, root = llama_seed(), tmp_path / "work"
    params = _transplant(
        root, monkeypatch, tiny_llama(len(source_tok)), source_tok, str(donor), ["omp_donor"], donor=str(donor)
    )
    typed = Params(params)
    assert STAGES["donor"].jobs(typed) == [{}] and STAGES["donor"].leaves(typed, {}) == [
        "tokenizer.from",
        "tokenizer.donor_model",
    ]
    assert STAGES["donor"].data_files(typed, {}) == {"data_donor": str(donor), "data_tokenizer": str(donor)}
    job = {**LANG, "method": "omp_donor", "pseed": "1"}
    assert STAGES["init"].input_templates(typed, job)["donor"] == paths.DONOR_EMB
    assert "tokenizer.donor_model" not in STAGES["tokenizer"].leaves(typed, LANG)

    stats = json.loads((root / paths.DONOR_STATS).read_text())
    assert stats["tied"] is False and stats["tensors"] == ["input", "output"] and stats["rows"] == len(target_tok)
    assert stats["from"]["route"] == "directory" and stats["dim"] == 32
    weights = {"source": load_file(str(root / paths.SOURCE_MODEL / "model.safetensors"))}
    weights["donor"] = load_file(str(donor / "model.safetensors"))
    table = pq.read_table(root / paths.fill(paths.OVERLAP, lang="sw"))
    pairs = overlap_pairs(table)
    init_dir = root / paths.fill(paths.INIT_DIR, lang="sw", method="omp_donor", pseed=1)
    rows = load_file(str(init_dir / "embeddings.safetensors"))
    init_stats = json.loads((init_dir / "stats.json").read_text())
    for which, name in (("input", "model.embed_tokens.weight"), ("output", "lm_head.weight")):
        expected, method_stats = donor_embeddings(
            weights["source"][name][: len(source_tok)],
            weights["donor"][name],
            *pairs,
            OmpDonorOptions(k=4),
        )
        assert torch.equal(rows[f"{which}_embeddings"], expected), which
        ran = init_stats["method_stats" if which == "input" else "output_method_stats"]
        assert ran["matrix"] == ran["donor_matrix"] == which and ran["omp_combined"] == method_stats["omp_combined"]
    n_overlap = len(pairs[0])
    assert (
        4 <= n_overlap < len(target_tok) and init_stats["method_stats"]["omp_combined"] == len(target_tok) - n_overlap
    )
    assert init_stats["target_rows"] == {"overlap": n_overlap, "donor": len(target_tok) - n_overlap}
    _check_init_eval(root, ["omp_donor"], len(target_tok))

    # the report's set-up names the existing tokenizer and the donor's space, from stage donor's stats.json
    from vocabtransfer.report.study_setup import StageStats, target_tokenizer_lines

    lines = target_tokenizer_lines(typed, StageStats.read(root).donor)
    assert lines[0].startswith(f"* Target tokenizer: an existing one, `{donor}` (tokenizer.from), copied"), lines
    assert lines[1] == (
        f"* Donor model: `{donor}` (tokenizer.donor_model), the model that owns that tokenizer: omp_donor codes the "
        f"new tokens in its 32-wide input and output embeddings, {len(target_tok)} rows"
    )
    trained = Params(validate_params(_tree(None)))
    assert target_tokenizer_lines(trained, None) == []  # a trained tokenizer: no line


# ---------------------------------------------------------------- refused before any job


def _refusal(params_tree: dict) -> str:
    with pytest.raises(VocabTransferError) as info:
        preflight(validate_params(params_tree))
    message = str(info.value)
    assert "\n" not in message and "tokenizer.from" in message, message
    return message


def _tree(tokenizer_from: str | None) -> dict:
    return {
        "languages": ["sw"],
        "source_model": MINILM,
        "corpus": {"sources": {"sw": {"path": "pretrain_text/sw.txt"}}},
        "tokenizer": {"from": tokenizer_from},
    }


def test_an_existing_tokenizer_plans_the_same_jobs_and_reruns_on_its_key_alone(tmp_path, shared_data):
    folder = tmp_path / "tok"
    wordpiece_tokenizer("sw", vocab_size=300).save_pretrained(str(folder))
    trained, existing = Params(validate_params(_tree(None))), Params(validate_params(_tree(str(folder))))
    preflight(existing)
    for stage in ("corpus", "tokenizer", "overlap", "init"):
        assert STAGES[stage].jobs(trained, "sw") == STAGES[stage].jobs(existing, "sw"), stage
    leaves = STAGES["tokenizer"].leaves
    assert leaves(existing, LANG) == ["source_model", "tokenizer.from"]
    assert "tokenizer.from" not in leaves(trained, LANG) and "tokenizer.vocab_size" in leaves(trained, LANG)
    assert "tokenizer.from" in STAGES["overlap"].leaves(existing, LANG)
    assert STAGES["tokenizer"].data_files(existing, LANG) == {"data_tokenizer": str(folder)}


def test_unreadable_and_offline_uncached_tokenizers_are_refused_before_any_job(tmp_path, monkeypatch, shared_data):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "tokenizer.json").write_text('{"model": {"type": "WordPiece"', encoding="utf-8")
    assert "cannot be read as a tokenizer" in _refusal(_tree(str(broken)))
    assert "cannot be read as a tokenizer" in _refusal(_tree(str(broken / "tokenizer.json")))
    (tmp_path / "empty").mkdir()
    assert "no tokenizer.json" in _refusal(_tree(str(tmp_path / "empty")))
    assert "no such file or folder" in _refusal(_tree(str(tmp_path / "missing" / "tok")))
    assert "no installed module" in _refusal(_tree("package:no_such_tokenizer_package"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    message = _refusal(_tree("no-such-owner/no-such-tokenizer"))
    assert "not in the Hugging Face cache" in message and "HF_HUB_OFFLINE" in message, message
    preflight(validate_params(_tree(MINILM)))  # offline, but an installed package ships it


def test_an_existing_targets_special_tokens_are_not_matched_to_ordinary_ones():
    """A source's special <s> and an existing target's ordinary `<s>` spell the same bytes: a trained target is refused
    for it (families.special_token_clash), an existing one leaves the pair unmatched (families.crossed_specials)."""
    from helpers import bytelevel_from_tokens, unigram_from_tokens

    from vocabtransfer.data.families import crossed_specials, special_token_clash
    from vocabtransfer.data.overlap import compute_overlap, overlap_pairs, rematched

    source = unigram_from_tokens(["<unk>", "<s>", "</s>", "▁hello", "▁world"] + [f"▁f{i}" for i in range(101)])
    target = bytelevel_from_tokens(["<|endoftext|>", "<s>", "Ġhello", "Ġworld", "x"])
    assert "special token '<s>'" in special_token_clash(target, source)
    table = compute_overlap(target, source, match_bytes=True)
    pairs = dict(zip(table["target_token"].to_pylist(), table["source_token"].to_pylist()))
    assert pairs["<s>"] == "<s>" and pairs["Ġhello"] == "▁hello" and pairs["x"] is None, pairs
    crossed = crossed_specials(target, source, table["target_id"].to_pylist(), table["source_id"].to_pylist())
    assert [table["target_token"][i].as_py() for i in crossed] == ["<s>"]
    kept = rematched(table, dict.fromkeys(crossed), source)
    assert kept.schema == table.schema and kept["match"][crossed[0]].as_py() == "none"
    assert overlap_pairs(kept)[0].tolist() == [i for i in overlap_pairs(table)[0].tolist() if i != crossed[0]]


def _donor_tree(tokenizer_from: str | None, donor: str | None, method: str = "omp_donor") -> dict:
    return {
        **_tree(tokenizer_from),
        "tokenizer": {"from": tokenizer_from, "donor_model": donor},
        "init": {"methods": ["fvt", method]},
    }


def _donor_refusal(tree: dict) -> str:
    with pytest.raises(VocabTransferError) as info:
        preflight(validate_params(tree))
    message = str(info.value)
    assert "\n" not in message and message.startswith("params.yaml: "), message
    return message


def test_a_donor_is_refused_before_any_job_without_its_keys_or_of_another_vocabulary(
    tmp_path, monkeypatch, shared_data
):
    message = _donor_refusal(_donor_tree(MINILM, None))
    assert "asks for omp_donor" in message and "set tokenizer.donor_model" in message, message
    message = _donor_refusal(_donor_tree(None, MINILM))
    assert "tokenizer.donor_model: " in message and "tokenizer.from is not set" in message, message
    assert "is neither an existing directory nor a hub id" in _donor_refusal(_donor_tree(MINILM, str(tmp_path / "x")))
    preflight(validate_params(_donor_tree(MINILM, MINILM)))  # MiniLM owns its own tokenizer
    preflight(validate_params(_donor_tree(MINILM, None, method="omp")))

    # a donor folder whose tokenizer is not tokenizer.from's: refused by the plan, and by stage donor's first step with
    # the same line (the donor has a config and a tokenizer, no weights: the refusal comes before any is read)
    target, other = tmp_path / "target", tmp_path / "donor"
    wordpiece_tokenizer("sw", vocab_size=300).save_pretrained(str(target))
    tiny_llama(300).config.save_pretrained(str(other))
    wordpiece_tokenizer("en", vocab_size=300).save_pretrained(str(other))
    tree = _donor_tree(str(target), str(other))
    planned = _donor_refusal(tree)
    assert "tokenizer.donor_model: " in planned and "its vocabulary is not the target tokenizer's" in planned
    assert "point tokenizer.donor_model at the model that owns tokenizer.from's tokenizer" in planned, planned
    monkeypatch.setenv("VOCABTRANSFER_DATA", str(shared_data))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(VocabTransferError) as info:
        run_stage("donor", validate_params(tree), {}, threads=1)
    assert planned == f"params.yaml: {info.value}"

    # a GGUF target tokenizer is not read by the plan: the same donor passes it, and stage donor refuses it first
    gguf_file = gemma_style_gguf(tmp_path / "target.gguf", text_lines("sw", 400, start=400))
    tree = _donor_tree(str(gguf_file), str(other))
    preflight(validate_params(tree))
    with pytest.raises(
        VocabTransferError, match=r"^tokenizer\.donor_model: .*its vocabulary is not the target"
    ) as info:
        run_stage("donor", validate_params(tree), {}, threads=1)
    assert "\n" not in str(info.value) and "target token '<pad>' (id 0) is absent from the donor" in str(info.value)


def test_donor_jobs_read_only_what_they_declare(tmp_path, shared_data, monkeypatch):
    """The donor stage's and the donor-space init job's planning read only their declared params (the recording of
    tests/project/test_params_reads.py, on a config with a donor: no shipped config has one)."""
    from params_reads import undeclared

    monkeypatch.setenv("VOCABTRANSFER_DATA", str(shared_data))
    params = Params(
        validate_params(
            {**_donor_tree(MINILM, MINILM), "init": {"methods": ["omp_donor", "omp_donor+svd", "omp", "focus"]}}
        )
    )
    methods = ("omp_donor", "omp_donor+svd", "omp", "focus")
    jobs = [("donor", {})] + [("init", {**LANG, "method": m, "pseed": "1"}) for m in methods]
    for stage, wildcards in jobs:
        assert undeclared(STAGES[stage], params, wildcards) == [], (stage, wildcards)
    # omp_donor+svd codes in the donor's space too; omp, in the fastText space, reads no donor
    assert "donor" in STAGES["init"].input_templates(params, jobs[2][1])
    assert not any("donor" in STAGES["init"].input_templates(params, job) for _, job in jobs[3:])
    assert STAGES["donor"].jobs(Params(validate_params(_donor_tree(MINILM, MINILM, method="omp")))) == []
