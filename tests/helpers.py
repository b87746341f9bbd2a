"""Builders that several test modules share (plain functions, no tests, no fixtures; shared fixtures are in
conftest.py): lines of the shared data's text, tiny tokenizers trained on it or made from token lists, tiny
models built from configs with random weights, stage contexts and inputs, a small project for the pretrain
stage and its multi-process launch, and the subprocess helpers of the end-to-end workflow tests."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import torch
import yaml
from conftest import BIN, REPO, shared_file

from vocabtransfer import io
from vocabtransfer.data import token_ids
from vocabtransfer.app.params import validate_params
from vocabtransfer.app.runner import run_stage
from vocabtransfer.model.hub import load_tokenizer, resolve_model_path
from vocabtransfer.pipeline.stage_spec import launch_prefix

MINILM = "sentence-transformers/all-MiniLM-L6-v2"


# ---------------------------------------------------------------- text and tokenizers


def text_lines(lang: str, n: int, start: int = 0) -> list[str]:
    with shared_file(f"pretrain_text/{lang}.txt").open(encoding="utf-8") as fh:
        lines = [line.strip() for line in fh if line.strip()]
    return lines[start : start + n]


def wordpiece_tokenizer(lang: str, vocab_size: int = 300, n_lines: int = 300):
    """A BERT-style WordPiece tokenizer in the source tokenizer's conventions, trained by the tokenizer
    stage's `train_tokenizer`: the same one on every run (transformers' `train_new_from_iterator`
    is not, huggingface/tokenizers#1794, and tests then saw different data from run to run)."""
    from vocabtransfer.data.tokenizer import train_tokenizer

    base = load_tokenizer(resolve_model_path(MINILM))
    return train_tokenizer(base, [list(text_lines(lang, n_lines))], vocab_size=vocab_size, min_frequency=0)


def bpe_tokenizer(lang: str, vocab_size: int = 300, n_lines: int = 300):
    """A Llama-style byte-level BPE tokenizer: <s> prepended, </s> as eos, a pad token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        text_lines(lang, n_lines),
        trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=["<s>", "</s>", "<pad>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")


def llama_seed():
    """Llama-2's conventions: ▁ Metaspace without splitting, byte_fallback, <unk> <s> </s>."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tok.train_from_iterator(
        [text_lines("en", 300)],
        trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False),
    )
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def gpt2_seed():
    """GPT-2's conventions: byte-level pre-tokenizer and decoder, <|endoftext|>."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    tok.train_from_iterator(
        [text_lines("en", 300)],
        trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False),
    )
    tok.add_special_tokens(["<|endoftext|>"])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>", unk_token="<|endoftext|>"
    )


# hand-made vocabularies for the overlap tests
N_FILLER = 101  # deepfocus picks a scheme when more than 100 tokens carry its marker
SOURCE_TOKENS = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "hello",
    "##lo",
    "world",
    "##hello",
    "Hello",
    ",",
    "123",
    "##A",
    "##<0x41>",
] + [f"##q{i}" for i in range(N_FILLER)]
UNIGRAM_TOKENS = [
    "<unk>",
    "<s>",
    "</s>",
    "▁hello",
    "lo",
    "▁HELLO",
    ",",
    "▁123",
    "▁wow",
    "<0x41>",
    "▁world",
    "hello",
] + [f"▁f{i}" for i in range(N_FILLER)]


def wordpiece_from_tokens(tokens: list[str]):
    """A BERT-style WordPiece tokenizer whose vocabulary is `tokens`, in that order."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(tokens)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=False)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )


def unigram_from_tokens(tokens: list[str]):
    """A SentencePiece-style Unigram tokenizer (Metaspace, byte fallback) whose vocabulary is `tokens`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.Unigram([(t, -float(i)) for i, t in enumerate(tokens)], unk_id=0, byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace()])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


def bytelevel_from_tokens(tokens: list[str]):
    """A GPT-2-style byte-level BPE tokenizer without merges whose vocabulary is `tokens`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")


class Tok:
    """Just enough of a tokenizer: tokens "t0", "t1", … and optional special tokens by role."""

    def __init__(self, n: int, prefix: str = "t", specials: dict[str, int] | None = None):
        self.tokens = [f"{prefix}{i}" for i in range(n)]
        self.special_tokens_map = {role: self.tokens[i] for role, i in (specials or {}).items()}
        self.all_special_ids = sorted((specials or {}).values())

    def __len__(self) -> int:
        return len(self.tokens)

    def get_vocab(self) -> dict[str, int]:
        return {t: i for i, t in enumerate(self.tokens)}

    def convert_ids_to_tokens(self, ids):
        return [self.tokens[i] for i in ids]


# ---------------------------------------------------------------- tiny models


def tiny_bert(vocab_size: int, seed: int = 0):
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(seed)
    return BertForMaskedLM(
        BertConfig(
            vocab_size=vocab_size,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=128,
        )
    )


def tiny_llama(vocab_size: int, seed: int = 0, tie: bool = False, **config):
    """A 2-layer Llama of width 32; `config`: LlamaConfig fields over these (heads, special token ids, …)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    defaults = dict(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=2,
    )
    return LlamaForCausalLM(LlamaConfig(vocab_size=vocab_size, tie_word_embeddings=tie, **{**defaults, **config}))


def tiny_gpt2(vocab_size: int, seed: int = 0):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    return GPT2LMHeadModel(
        GPT2Config(
            vocab_size=vocab_size, n_embd=32, n_layer=2, n_head=2, n_positions=64, bos_token_id=0, eos_token_id=1
        )
    )


def tiny_model(kind: str, vocab: int):
    """A tiny BERT ("masked") or GPT-2 ("causal") with dropout off, for runs that must equal each other."""
    from transformers import BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    if kind == "masked":
        return BertForMaskedLM(
            BertConfig(
                vocab_size=vocab,
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=2,
                intermediate_size=64,
                max_position_embeddings=128,
                hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0,
            )
        )
    return GPT2LMHeadModel(
        GPT2Config(
            vocab_size=vocab,
            n_embd=32,
            n_layer=2,
            n_head=2,
            n_positions=64,
            bos_token_id=0,
            eos_token_id=1,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
        )
    )


def tiny_gptj(directory: Path, tokenizer) -> Path:
    """GPT-J: untied LM head with a bias, and no token-classification head in transformers."""
    from transformers import GPTJConfig, GPTJForCausalLM

    torch.manual_seed(0)
    GPTJForCausalLM(
        GPTJConfig(
            vocab_size=len(tokenizer),
            n_embd=32,
            n_layer=1,
            n_head=2,
            n_positions=64,
            rotary_dim=8,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
    ).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def save_dir(model, tokenizer, path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(path))
    tokenizer.save_pretrained(str(path))
    return path


# ---------------------------------------------------------------- stages


def init_params(init: dict, seed: int = 7) -> dict:
    """Params for a stage that reads `init` (the init and source_snmf stages): `init` over the schema's
    defaults, as validation fills them in."""
    from vocabtransfer.app.params import section_defaults
    from vocabtransfer.pipeline.config import merge_overlay

    return {"seed": seed, "init": merge_overlay(section_defaults("init"), init)}


def over_defaults(section: str, given: dict) -> dict:
    """params section `section` (e.g. `init_eval`) with `given` over the schema's defaults, as validation
    fills it in: what a stage's typed section (`ctx.section`) is built from."""
    from vocabtransfer.app.params import section_defaults
    from vocabtransfer.pipeline.config import merge_overlay

    return merge_overlay(section_defaults(section), given)


def filled_params(tree: dict):
    """`tree` (a partial params tree, e.g. a report test's) as typed Params, every section laid over the schema's
    defaults as validation fills them, without validation's cross-key checks (no corpus for each language is
    needed): what a stage below app/ reads of a section it is given."""
    from vocabtransfer.app.params import SECTIONS, section_defaults
    from vocabtransfer.pipeline.config import merge_overlay
    from vocabtransfer.plan.params_root import Params

    filled = {name: merge_overlay(section_defaults(name), tree.get(name) or {}) for name in SECTIONS}
    return Params({**tree, **filled})


def make_ctx(func: str, wildcards: dict, inputs: dict, outputs: dict, params):
    """A stage Context with explicit paths, for the stage function `func` ("module:function")."""
    from vocabtransfer.pipeline.stage_spec import Context, Stage

    module, _, function = func.partition(":")
    stage = Stage(
        name=module.rsplit(".", 1)[-1],
        run=func,
        help="",
        wildcards=tuple(wildcards),
    )
    from vocabtransfer.plan.stages import STAGES

    from vocabtransfer.plan.params_root import Params

    return Context(
        stage=stage,
        params=Params.of(params),
        wildcards=wildcards,
        input={k: Path(v) for k, v in inputs.items()},
        output={k: Path(v) for k, v in outputs.items()},
        threads=1,
        stages=STAGES,
    )


def write_inputs(tmp_path, source_model, source_tok, target_tok):
    """source model dir, target tokenizer dir, overlap parquet and fastText tensors, as the pipeline writes them."""
    src = save_dir(source_model, source_tok, tmp_path / "source" / "model")
    tok_dir = tmp_path / "sw" / "tokenizer"
    target_tok.save_pretrained(str(tok_dir))
    source_vocab = source_tok.get_vocab()
    target_vocab = sorted(target_tok.get_vocab().items(), key=lambda kv: kv[1])
    rows = [
        {
            "target_id": i,
            "target_token": t,
            "source_id": source_vocab.get(t),
            "source_token": t if t in source_vocab else None,
            "match": "exact" if t in source_vocab else None,
        }
        for t, i in target_vocab
    ]
    overlap = tmp_path / "sw" / "overlap" / "overlap.parquet"
    io.write_parquet(
        pa.Table.from_pylist(
            rows,
            schema=pa.schema(
                [
                    ("target_id", pa.int32()),
                    ("target_token", pa.string()),
                    ("source_id", pa.int32()),
                    ("source_token", pa.string()),
                    ("match", pa.string()),
                ]
            ),
        ),
        overlap,
    )
    n = len(target_tok)
    fasttext = tmp_path / "sw" / "fasttext" / "embeddings.safetensors"
    io.save_tensors(
        {"embeddings": torch.randn(n, 8, generator=torch.Generator().manual_seed(0)), "mask": torch.arange(n) % 3 != 0},
        fasttext,
    )
    pairs = [(r["target_id"], r["source_id"]) for r in rows if r["source_id"] is not None]
    return {"source_model": src, "tokenizer": tok_dir, "overlap": overlap, "fasttext": fasttext}, pairs


# ---------------------------------------------------------------- the pretrain stage on a small project

SMALL = {
    "steps": 24,
    "batch_size": 8,
    "seq_len": 32,
    "learning_rate": 0.01,
    "warmup_steps": 2,
    "eval_every": 8,
    "save_every": 8,
    "log_every": 4,
    "eval_lines": 40,
    "eval_batch_size": 16,
}


def write_ids(tokenizer, lines: list[str], path: Path) -> None:
    """A pre-tokenised split of `lines` (as the pretokenize stage writes it) at `path`."""
    token_ids.write_lines(path, tokenizer, tokenizer(lines, add_special_tokens=False)["input_ids"])


def write_valid_text(lines: list[str], root: Path, lang: str = "sw") -> None:
    """results/<lang>/corpus/valid.parquet with these lines as its `text` (what the corpus stage writes and
    pretraining's bits per byte reads)."""
    import pyarrow as pa

    from vocabtransfer import io

    io.write_parquet(pa.table({"text": lines}), root / f"results/{lang}/corpus/valid.parquet")


def pretrain_project(root: Path, model, tokenizer, method: str = "focus", **pretrain) -> dict:
    """results/sw/init/<method>/pseed1/model + pre-tokenised splits of real sw text under `root`; returns params."""
    save_dir(model, tokenizer, root / "results" / "sw" / "init" / method / "pseed1" / "model")
    write_ids(tokenizer, text_lines("sw", 300, start=1000), root / "results/sw/pretokenized/train")
    write_ids(tokenizer, text_lines("sw", 60, start=5000), root / "results/sw/pretokenized/valid")
    write_valid_text(text_lines("sw", 60, start=5000), root)
    params = validate_params(
        {
            "languages": ["sw"],
            "source_model": "unused",
            "corpus": {"sources": {"sw": {"path": "unused.txt"}}},
            "init": {"methods": [method]},
            "pretrain": {"methods": [method], **SMALL, **pretrain},
        }
    )
    (root / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    return params


def run_pretrain(params: dict, method: str = "focus", objective: str = "standard", pseed: int = 1):
    """The pretrain stage in-process, in the current directory."""
    return run_stage(
        "pretrain", params, {"lang": "sw", "method": method, "objective": objective, "pseed": str(pseed)}, threads=1
    )


def pretrain_outputs(root: Path, method: str = "focus", objective: str = "standard", pseed: int = 1):
    """(output directory, metrics.parquet, stats.json) of a pretrain run under `root`."""
    out = root / "results" / "sw" / "pretrain" / method / objective / f"pseed{pseed}"
    return out, pq.read_table(out / "metrics.parquet"), json.loads((out / "stats.json").read_text())


TOLERANCE = 1e-5  # absolute, on losses and weights; measured: <= 1.3e-6 (a per-process mean loss: 8e-5)


def assert_same_run(
    a: Path,
    b: Path,
    objective: str,
    weights_a: dict,
    weights_b: dict,
    columns: tuple[str, ...],
    exact: tuple[str, ...] = ("step",),
):
    """Two pretraining runs under `a` and `b` agree: the `exact` metrics columns equal, the `columns` and every
    final weight to TOLERANCE. Returns run a's metrics table."""
    import numpy as np

    (_, ma, _), (_, mb, _) = pretrain_outputs(a, objective=objective), pretrain_outputs(b, objective=objective)
    for column in exact:
        assert ma.column(column).to_pylist() == mb.column(column).to_pylist(), column
    for column in columns:
        np.testing.assert_allclose(
            ma.column(column).to_numpy(), mb.column(column).to_numpy(), rtol=0, atol=TOLERANCE, err_msg=column
        )
    assert weights_a.keys() == weights_b.keys()
    for name in weights_a:
        torch.testing.assert_close(weights_a[name], weights_b[name], rtol=0, atol=TOLERANCE, msg=name)
    return ma


def launch_args(processes: int) -> list[str]:
    """The arguments after `accelerate launch` of `parallel.launch_prefix` (the Snakemake rule's command);
    for one process, which the rule runs without a launcher, one CPU process of `accelerate launch`."""
    if processes <= 1:
        return ["--num_processes", "1", "--cpu", "-m", "vocabtransfer"]
    return launch_prefix(processes).split()[2:]


def launch(root: Path, processes: int, objective: str = "selfish", kill_after: int | None = None) -> subprocess.Popen:
    """`accelerate launch --multi_gpu --num_processes N … -m vocabtransfer pretrain …` in `root` (the command
    the Snakemake rule runs for pretrain.processes = N > 1; one CPU process for N = 1), one thread per process.
    `kill_after`: the run's process group is killed -9 right after checkpoint `kill_after` (tests/killpoint)."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    env.update(kill_env(kill_after))
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        *launch_args(processes),
        "pretrain",
        "--lang",
        "sw",
        "--method",
        "focus",
        "--objective",
        objective,
        "--pseed",
        "1",
        "--params",
        "params.yaml",
        "--threads",
        "1",
    ]
    return subprocess.Popen(
        cmd, cwd=root, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def kill_env(step: int | None) -> dict:
    """The environment that makes a pretraining subprocess kill -9 its process group after checkpoint `step`."""
    if step is None:
        return {}
    return {
        "PYTHONPATH": os.pathsep.join([str(REPO / "tests/killpoint"), str(REPO / "src")]),
        "VOCABTRANSFER_KILL_AFTER_CHECKPOINT": str(step),
    }


def killed(proc: subprocess.Popen) -> None:
    """Wait for a run started with `kill_after` and check that the kill, not the end of training, stopped it."""
    log, _ = proc.communicate(timeout=600)
    assert proc.returncode == -9, (
        f"expected the kill -9 after the checkpoint, got exit {proc.returncode}:\n{log[-4000:]}"
    )


def finish(proc: subprocess.Popen) -> str:
    log, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, log[-4000:]
    return log


# ---------------------------------------------------------------- the end-to-end workflow (Snakemake, DVC)


def run_command(cmd: list[str], cwd: Path, env: dict) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
        )
    return proc.stdout + proc.stderr


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def snakemake_jobs(out: str) -> dict[str, int]:
    """The rule -> count table that `snakemake -n` prints under 'Job stats:'."""
    if "Job stats:" not in out:
        return {}
    table = out.split("Job stats:")[1]
    return {
        m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)\s*$", table, re.M) if m.group(1) != "total"
    }


def setup_workdir(work: Path, params: dict, env: dict) -> None:
    """A checkout-like directory (Snakefile, workflow/, profiles, src/, params.yaml, dvc.yaml) with git and DVC."""
    shutil.copy(REPO / "Snakefile", work)
    shutil.copytree(REPO / "workflow", work / "workflow")
    os.symlink(os.readlink(REPO / "profiles"), work / "profiles")  # the default workflow profile
    # dvc.yaml lists the stage code as dependencies, as in a checkout
    shutil.copytree(REPO / "src", work / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run_command([str(BIN / "vocabtransfer"), "dvc-yaml"], work, env)
    run_command(["git", "init", "-q"], work, env)
    run_command([str(BIN / "dvc"), "init", "-q"], work, env)
    run_command([str(BIN / "dvc"), "config", "core.analytics", "false"], work, env)


# ---------------------------------------------------------------- the report's form

TABLE_WIDTH = 160  # the widest line a report's table may have (report.markdown.WIDTH)


def wide_table_rows(text: str) -> list[str]:
    """The lines of Markdown tables in `text` wider than TABLE_WIDTH characters."""
    return [line for line in text.splitlines() if line.startswith("|") and len(line) > TABLE_WIDTH]


def wording_faults(text: str) -> list[str]:
    """What a report must not say: a count of 1 with a plural noun, `seed(s)`, inline styles GitHub strips."""
    faults = re.findall(r"\b1 (?:pretraining|fine-tuning) seeds\b|\b1 pretraining × 1 fine-tuning seeds\b", text)
    faults += [s for s in ("seed(s)", "<span") if s in text]
    return faults


def run_method(name: str, problem, options: dict | None = None, factorization: dict | None = None):
    """Init method `name` on `problem` as the init stage runs it, with its typed options: here from the
    mappings `options` (params `init.<base>`) and `factorization` (`init.<fact>`) over their defaults,
    checked by the schema as params are (one line naming the key)."""
    from vocabtransfer.init.factorize import FACTORIZATIONS
    from vocabtransfer.init.methods import get_method
    from vocabtransfer.plan.methods import info
    from vocabtransfer.init.methods.variants import FactorizedOptions
    from vocabtransfer.pipeline.config import typed_section

    base, _, fact = name.partition("+")
    opts = typed_section(info(base).options, f"init.{base}", options)
    if fact:
        opts = FactorizedOptions(opts, typed_section(FACTORIZATIONS[fact], f"init.{fact}", factorization))
    return get_method(name)(problem, opts)
