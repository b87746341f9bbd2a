"""Bad inputs through the command line: `vocabtransfer <stage>` on a missing, empty, truncated or
corrupted input (or bad params) exits non-zero with exactly one error line that names the file or
params key, prints no traceback, and leaves nothing at the output paths (no temporary leftovers).

One small, valid set of artefacts (tiny corpus, tokenizer, pretokenised text, fastText vectors,
overlap, a tiny source model) is built once in-process; each case copies it, breaks one thing and
runs one stage through the CLI. The counts are printed at the end of the run (tests/conftest.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from conftest import BAD_INPUTS

from vocabtransfer import io
from vocabtransfer.pipeline import paths
from vocabtransfer.app.params import validate_params
from vocabtransfer.app.runner import run_stage

pytestmark = pytest.mark.slow

PARAMS = {
    "languages": ["sw"],
    "seed": 3,
    "source_model": "sentence-transformers/all-MiniLM-L6-v2",
    "corpus": {"sources": {"sw": {"path": "sw.txt"}}, "valid_fraction": 0.1},
    "tokenizer": {"vocab_size": 300, "min_frequency": 2},
    "fasttext": {"dim": 8, "epochs": 1, "min_count": 2},
    "init": {"methods": ["focus", "ofa"], "ofa": {"keep_dim": 16}},
    "pretrain": {"methods": ["focus"], "objectives": ["standard"], "steps": 1},
}


@pytest.fixture(scope="module")
def good(tmp_path_factory, shared_data):
    """A work directory with valid artefacts up to overlap, plus a tiny source model."""
    from transformers import BertConfig, BertForMaskedLM

    from vocabtransfer.model.hub import load_tokenizer, resolve_model_path

    root = tmp_path_factory.mktemp("good")
    data = root / "data"
    data.mkdir()
    with (shared_data / "pretrain_text" / "sw.txt").open(encoding="utf-8") as f:
        (data / "sw.txt").write_text("".join(next(f) for _ in range(600)), encoding="utf-8")
    params = validate_params(PARAMS)
    with pytest.MonkeyPatch.context() as mp:  # nothing of this set-up outlives the fixture
        mp.setenv("VOCABTRANSFER_DATA", str(data))
        mp.chdir(root)
        run_stage("source_model", params, {}, threads=1)
        for stage in ("corpus", "tokenizer", "pretokenize", "fasttext"):
            run_stage(stage, params, {"lang": "sw"}, threads=1)
        # a tiny source model with MiniLM's tokenizer (random weights), where source_head writes it
        source_tok = load_tokenizer(resolve_model_path(params["source_model"]))
        torch.manual_seed(0)
        model = BertForMaskedLM(
            BertConfig(
                vocab_size=len(source_tok),
                hidden_size=32,
                num_hidden_layers=1,
                num_attention_heads=2,
                intermediate_size=32,
                max_position_embeddings=64,
            )
        )
        model.save_pretrained(root / paths.SOURCE_MODEL)
        source_tok.save_pretrained(root / paths.SOURCE_MODEL)
        run_stage("overlap", params, {"lang": "sw"}, threads=1)
        run_stage("init", params, {"lang": "sw", "method": "focus", "pseed": "1"}, threads=1)  # what pretrain reads
    (root / "params.yaml").write_text(yaml.safe_dump(PARAMS, sort_keys=False))
    return root


def _copy(good: Path, dest: Path) -> Path:
    shutil.copytree(good, dest, symlinks=True)
    return dest


def _outputs(stage: str, wildcards: dict) -> list[Path]:
    from vocabtransfer.plan.stages import STAGES

    return [Path(paths.fill(t, **wildcards)) for t in STAGES[stage].outputs.values()]


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _zero(path: Path) -> None:
    path.write_bytes(b"")


def _garbage(path: Path) -> None:
    path.write_bytes(b"this is not what the file should hold\n" * 10)


def _nan_embeddings(path: Path) -> None:
    t = io.load_tensors(path)
    t["embeddings"][5, 0] = float("nan")
    io.save_tensors(t, path)


def _empty_overlap(path: Path) -> None:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    io.write_parquet(table.slice(0, 0), path)


def _params(**changes):
    def edit(work: Path) -> None:
        p = yaml.safe_load((work / "params.yaml").read_text())
        for dotted, value in changes.items():
            node = p
            *head, last = dotted.split(".")
            for key in head:
                node = node.setdefault(key, {})
            node[last] = value
        (work / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))

    return edit


def _on(relative: str, breaker):
    def edit(work: Path) -> None:
        breaker(work / relative)

    return edit


def _checksum_mismatch(work: Path) -> None:
    text = work / "data" / "sw.txt"
    wrong = hashlib.sha256(b"other bytes").hexdigest()
    _params(**{"corpus.sources": {"sw": {"url": text.as_uri(), "sha256": wrong}}})(work)


def _wordlevel_bin(breaker):
    def edit(work: Path) -> None:
        shutil.copy(work / paths.fill(paths.FASTTEXT_BIN, lang="sw"), work / "data" / "words.bin")
        breaker(work / "data" / "words.bin")
        _params(**{"fasttext.mode": "wordlevel", "fasttext.pretrained_path": "words.bin"})(work)

    return edit


def _headless_causal_source(work: Path) -> None:
    """The source model replaced by a bare, untied Llama body (no lm_head in the checkpoint), with
    bits per byte asked for (init_eval.bits_per_byte defaults to true)."""
    from transformers import LlamaConfig, LlamaModel

    source = work / paths.SOURCE_MODEL
    for path in source.glob("model*.safetensors"):
        path.unlink()
    n = json.loads((source / "config.json").read_text())["vocab_size"]
    torch.manual_seed(0)
    LlamaModel(
        LlamaConfig(
            vocab_size=n,
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            intermediate_size=16,
            max_position_embeddings=64,
            tie_word_embeddings=False,
        )
    ).save_pretrained(source)
    _params(**{"source_head.text": "sw.txt"})(work)


def _special_clash(work: Path) -> None:
    """The target tokenizer gains a special token that MiniLM's vocabulary has as an ordinary word."""
    from transformers import AutoTokenizer

    path = work / paths.fill(paths.TOKENIZER, lang="sw")
    tok = AutoTokenizer.from_pretrained(path)
    tok.add_special_tokens({"additional_special_tokens": ["hello"]})
    tok.save_pretrained(path)


def _ids_of_another_tokenizer(work: Path) -> None:
    """The train split re-written with the source tokenizer's ids of the same text."""
    from vocabtransfer.data import token_ids
    from vocabtransfer.model.hub import load_tokenizer

    source = load_tokenizer(work / paths.SOURCE_MODEL)
    lines = (work / "data" / "sw.txt").read_text(encoding="utf-8").splitlines()[:50]
    split = work / paths.fill(paths.PRETOK_TRAIN, lang="sw")
    shutil.rmtree(split)
    token_ids.write_lines(split, source, source(lines, add_special_tokens=False)["input_ids"])


SW = {"lang": "sw"}
REBUILT = "is stage %s's output: delete it"  # a torn artefact: the stage that rebuilds it, and what to delete
PRETRAIN = {**SW, "method": "focus", "objective": "standard", "pseed": "1"}
PRETOK = paths.fill(paths.PRETOK_TRAIN, lang="sw")
FT_EMB = paths.fill(paths.FASTTEXT_EMB, lang="sw")
OVERLAP = paths.fill(paths.OVERLAP, lang="sw")
CORPUS = paths.fill(paths.CORPUS_TRAIN, lang="sw")
# (case, stage, wildcards, how to break the inputs, words the one error line must contain, or a list of
# such lists: one error line each, as for a config with several problems)
CASES = [
    ("corpus text missing", "corpus", SW, lambda w: (w / "data" / "sw.txt").unlink(), ["sw.txt"]),
    ("corpus text empty", "corpus", SW, lambda w: (w / "data" / "sw.txt").write_text(""), ["sw.txt"]),
    ("url source checksum mismatch", "corpus", SW, _checksum_mismatch, ["sha256"]),
    ("params type error", "corpus", SW, _params(**{"tokenizer.vocab_size": "big"}), ["tokenizer.vocab_size"]),
    ("params unknown key", "corpus", SW, _params(**{"corpus.nope": 1}), ["corpus", "nope"]),
    (
        "params misspelled key",
        "corpus",
        SW,
        _params(**{"fasttext.epoch": 1}),
        ["fasttext: unknown key(s) 'epoch'; allowed keys:", "did you mean 'epochs'?"],
    ),
    (
        "params unknown init method",
        "corpus",
        SW,
        _params(**{"init.methods": ["focus", "focsu"]}),
        ["init.methods: 'focsu'", "did you mean 'focus'?", "allowed: random, overlap,"],
    ),
    (
        "params unknown task",
        "corpus",
        SW,
        _params(**{"eval.tasks": {"nlii": {}}}),
        ["eval.tasks", "did you mean 'nli'?", "ner, nli, qa"],
    ),
    (
        "params with two problems, one line each",
        "corpus",
        SW,
        _params(**{"fasttext.epoch": 1, "tokenizer.vocab_size": "big"}),
        [["fasttext: unknown key(s) 'epoch'"], ["tokenizer.vocab_size: 'big'"]],
    ),
    (
        "relative GGUF path",
        "corpus",
        SW,
        _params(source_model="models/absent.gguf"),
        ["source_model", "models/absent.gguf", "resolves against the working directory", "not $VOCABTRANSFER_DATA"],
    ),
    (
        "corpus parquet missing",
        "tokenizer",
        SW,
        lambda w: (w / CORPUS).unlink(),
        ["train.parquet", "does not exist yet", "run that stage first (`vocabtransfer corpus --lang sw`)"],
    ),
    (
        "an upstream stage not run yet",
        "pretrain",
        PRETRAIN,
        lambda w: shutil.rmtree(w / "results/sw/init/focus/pseed1"),
        [
            "results/sw/init/focus/pseed1 does not exist yet",
            "`vocabtransfer init --lang sw --method focus --pseed 1`",
            "snakemake --cores 2 results/sw/init/focus/pseed1",
        ],
    ),
    ("corpus parquet truncated", "tokenizer", SW, _on(CORPUS, _truncate), ["train.parquet", REBUILT % "corpus"]),
    ("corpus parquet zero-length", "tokenizer", SW, _on(CORPUS, _zero), ["train.parquet", REBUILT % "corpus"]),
    ("corpus parquet corrupted", "tokenizer", SW, _on(CORPUS, _garbage), ["train.parquet", REBUILT % "corpus"]),
    (
        "tokenizer.json corrupted",
        "pretokenize",
        SW,
        _on(paths.fill(paths.TOKENIZER, lang="sw") + "/tokenizer.json", _garbage),
        ["tokenizer", REBUILT % "tokenizer"],
    ),
    (
        "tokenizer.json zero-length",
        "pretokenize",
        SW,
        _on(paths.fill(paths.TOKENIZER, lang="sw") + "/tokenizer.json", _zero),
        ["results/sw/tokenizer", REBUILT % "tokenizer", "rm -r results/sw/tokenizer)"],
    ),
    (
        "pretokenised text empty",
        "fasttext",
        SW,
        lambda w: (w / paths.fill(paths.PRETOK_TEXT, lang="sw")).write_text(""),
        ["train.tokens.txt"],
    ),
    (
        "pretokenised ids truncated",
        "pretrain",
        PRETRAIN,
        _on(PRETOK + "/ids.npy", _truncate),
        ["results/sw/pretokenized/train/ids.npy", "truncated", "rerun the pretokenize stage", REBUILT % "pretokenize"],
    ),
    (
        "pretokenised offsets corrupted",
        "pretrain",
        PRETRAIN,
        _on(PRETOK + "/offsets.npy", _garbage),
        ["results/sw/pretokenized/train/offsets.npy", "rerun the pretokenize stage"],
    ),
    (
        "pretokenised header corrupted",
        "pretrain",
        PRETRAIN,
        _on(PRETOK + "/meta.json", _garbage),
        ["results/sw/pretokenized/train/meta.json", "rerun the pretokenize stage"],
    ),
    (
        "pretokenised ids of another tokenizer",
        "pretrain",
        PRETRAIN,
        _ids_of_another_tokenizer,
        ["results/sw/pretokenized/train", "another tokenizer", "rerun the pretokenize stage"],
    ),
    ("pretrained fastText .bin truncated", "fasttext", SW, _wordlevel_bin(_truncate), ["words.bin"]),
    ("pretrained fastText .bin corrupted", "fasttext", SW, _wordlevel_bin(_garbage), ["words.bin"]),
    (
        "target special token is an ordinary source token",
        "overlap",
        SW,
        _special_clash,
        ["results/sw/tokenizer", "special token 'hello'", "ordinary token of the source", "retrain it"],
    ),
    (
        "fastText embeddings missing",
        "init",
        {**SW, "method": "focus", "pseed": "1"},
        lambda w: (w / FT_EMB).unlink(),
        ["embeddings.safetensors"],
    ),
    (
        "fastText embeddings truncated",
        "init",
        {**SW, "method": "focus", "pseed": "1"},
        _on(FT_EMB, _truncate),
        ["embeddings.safetensors", REBUILT % "fasttext"],
    ),
    (
        "initialised model's weights truncated",
        "pretrain",
        PRETRAIN,
        _on(paths.fill(paths.INIT_DIR, lang="sw", method="focus", pseed=1) + "/model/model.safetensors", _truncate),
        ["results/sw/init/focus/pseed1", "cannot load", REBUILT % "init", "rm -r results/sw/init/focus/pseed1)"],
    ),
    (
        "NaN in fastText embeddings",
        "init",
        {**SW, "method": "focus", "pseed": "1"},
        _on(FT_EMB, _nan_embeddings),
        ["embeddings.safetensors", "NaN"],
    ),
    (
        "overlap parquet corrupted",
        "init",
        {**SW, "method": "focus", "pseed": "1"},
        _on(OVERLAP, _garbage),
        ["overlap.parquet", REBUILT % "overlap"],
    ),
    (
        "empty overlap",
        "init",
        {**SW, "method": "ofa", "pseed": "1"},
        _on(OVERLAP, _empty_overlap),
        ["shares no tokens"],
    ),
    (
        "omp k above the overlap",
        "init",
        {**SW, "method": "omp", "pseed": "1"},
        _params(**{"init.methods": ["focus", "ofa", "omp"], "init.omp.k": 100_000}),
        ["init.omp.k=100000", "at most"],
    ),
    (
        "source model weights corrupted",
        "init",
        {**SW, "method": "focus", "pseed": "1"},
        _on(paths.SOURCE_MODEL + "/model.safetensors", _garbage),
        ["results/source/model", "cannot load", REBUILT % "source_head"],
    ),
    (
        "source without LM head, bits per byte asked",
        "init_eval",
        SW,
        _headless_causal_source,
        ["results/source/model/model.safetensors", "no LM head", "init_eval.bits_per_byte: false"],
    ),
]


@pytest.mark.parametrize("case,stage,wildcards,breaker,words", CASES, ids=[c[0] for c in CASES])
def test_bad_input_gives_one_clear_error_and_no_output(
    good, tmp_path, monkeypatch, case, stage, wildcards, breaker, words
):
    work = _copy(good, tmp_path / "work")
    monkeypatch.setenv("VOCABTRANSFER_DATA", str(work / "data"))
    monkeypatch.setenv("VOCABTRANSFER_CACHE", str(work / "cache"))
    breaker(work)
    outputs = _outputs(stage, wildcards)
    for out in outputs:  # what the stage would write must not be there beforehand
        target = work / out
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
    before = {p for p in work.rglob("*")}
    args = [f"--{k}={v}" for k, v in wildcards.items()]
    BAD_INPUTS["tried"] += 1
    proc = subprocess.run(
        [sys.executable, "-m", "vocabtransfer", stage, *args, "--params", "params.yaml", "--threads", "1"],
        cwd=work,
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "VOCABTRANSFER_DATA": str(work / "data"),
            "VOCABTRANSFER_CACHE": str(work / "cache"),
            "OMP_NUM_THREADS": "1",
        },
    )
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    lines = words if isinstance(words[0], list) else [words]
    clear = (
        proc.returncode != 0
        and "Traceback" not in proc.stderr
        and len(errors) == len(lines)
        and all(w.lower() in error.lower() for error, ws in zip(errors, lines) for w in ws)
    )
    left = [str(work / out) for out in outputs if (work / out).exists()]
    new = [
        str(p)
        for p in set(work.rglob("*")) - before
        if p.is_file() and "cache" not in p.relative_to(work).parts and not p.name.endswith(".log")
    ]
    BAD_INPUTS["clear"] += clear
    BAD_INPUTS["partial"] += bool(left or new)
    assert clear, f"{case}: rc={proc.returncode}\n{proc.stderr[-3000:]}"
    assert not left and not new, f"{case}: left {left} {new}"
