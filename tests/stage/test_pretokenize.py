"""The pretokenize stage: ids and token text agree with the target tokenizer; fertility statistics."""

from __future__ import annotations

import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from vocabtransfer.pipeline import paths
from vocabtransfer.app.params import validate_params
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.model.hub import load_tokenizer
from vocabtransfer.data.pretokenize import TokenStats, flatten, markdown_table, word_ends
from vocabtransfer.data.token_ids import TokenIds
from vocabtransfer.app.runner import run_stage
from vocabtransfer.data.tokenizer import load_target_tokenizer, train_tokenizer

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
EXTRA = [
    "",
    "   ",
    "Habari  za\tasubuhi!",
    "Ŋombe wa Çà ✓ 🙂",
    "X" * 300,
]  # empty, blank, odd spacing, rare chars, long


def _params():
    return validate_params(
        {
            "languages": ["sw"],
            "source_model": MINILM,
            "corpus": {"sources": {"sw": {"path": "pretrain_text/sw.txt"}}},
            "pretokenize": {"batch_size": 64},
        }
    )


@pytest.fixture(scope="module")
def source():
    return load_tokenizer(MINILM)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, source, shared_data):
    """A tiny target tokenizer and corpus under results/sw/, and one run of the stage."""
    root = tmp_path_factory.mktemp("pretok")
    with open(shared_data / "pretrain_text" / "sw.txt", encoding="utf-8") as f:
        lines = [next(f).rstrip("\n") for _ in range(1200)]
    train, valid = lines[:1000] + EXTRA, lines[1000:]
    for name, rows in (("train", train), ("valid", valid)):
        path = root / paths.fill(getattr(paths, f"CORPUS_{name.upper()}"), lang="sw")
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"text": rows}), path)
    target = train_tokenizer(source, [lines[:1000]], vocab_size=400)
    target.save_pretrained(root / paths.fill(paths.TOKENIZER, lang="sw"))
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        for var in ("RAYON_NUM_THREADS", "TOKENIZERS_PARALLELISM"):  # the stage sets them from --threads
            mp.setenv(var, os.environ.get(var, ""))
        run_stage("source_model", _params(), {}, threads=1)
        run_stage("pretokenize", _params(), {"lang": "sw"}, threads=2)
    return {
        "root": root,
        "train": train,
        "valid": valid,
        "target": load_target_tokenizer(root / paths.fill(paths.TOKENIZER, lang="sw")),
    }


def _out(workdir, template):
    return workdir["root"] / paths.fill(template, lang="sw")


@pytest.mark.parametrize("split, template", [("train", paths.PRETOK_TRAIN), ("valid", paths.PRETOK_VALID)])
def test_ids_match_the_target_tokenizer(workdir, split, template):
    target = workdir["target"]
    ids = TokenIds(_out(workdir, template), target)
    assert ids.dtype == np.uint16 and sorted(p.name for p in ids.path.iterdir()) == [
        "ids.npy",
        "meta.json",
        "offsets.npy",
    ]
    rows = list(ids.lines())
    expected = target(workdir[split], add_special_tokens=False)["input_ids"]
    assert rows == expected and len(rows) == len(workdir[split])
    if split == "train":
        assert rows[-len(EXTRA) :][:2] == [[], []]  # empty and blank lines keep their (empty) row
    specials = set(target.all_special_ids) - {target.unk_token_id}
    assert not specials & {i for row in rows for i in row}


def test_text_file_is_token_joined_lines(workdir):
    lines = _out(workdir, paths.PRETOK_TEXT).read_text(encoding="utf-8").split("\n")
    assert lines[-1] == ""  # every line ends with a newline
    target = workdir["target"]
    assert lines[:-1] == [" ".join(target.tokenize(t)) for t in workdir["train"]]
    assert "##" in lines[0]  # WordPiece continuations are kept as they are


def test_stats_compare_source_and_target(workdir, source):
    stats = json.loads(_out(workdir, paths.PRETOK_STATS).read_text())
    target, valid = workdir["target"], workdir["valid"]
    tgt, src = stats["stats"]["valid"]["target"], stats["stats"]["valid"]["source"]
    words = sum(len(t.split()) for t in valid)
    tgt_tokens = sum(map(len, target(valid, add_special_tokens=False)["input_ids"]))
    # MiniLM's tokenizer.json pads and truncates to 128: the counts must not include that
    src_ids = source(valid, add_special_tokens=False)["input_ids"]
    assert tgt["lines"] == src["lines"] == len(valid)
    assert tgt["words"] == src["words"] == words
    assert tgt["tokens"] == tgt_tokens and src["tokens"] == sum(map(len, src_ids))
    assert tgt["fertility"] == pytest.approx(tgt_tokens / words, abs=1e-6)
    assert src["unk_rate"] == pytest.approx(
        sum(i.count(source.unk_token_id) for i in src_ids) / src["tokens"], abs=1e-6
    )
    # a tokenizer trained on Swahili splits Swahili words less than MiniLM's English one
    assert tgt["fertility"] < src["fertility"] and tgt["split_word_share"] < src["split_word_share"]
    assert stats["stats"]["train"]["target"]["lines"] == len(workdir["train"])
    assert stats["target_vocab_size"] == 400 and stats["batch_size"] == 64
    assert stats["ids"]["train"]["lines"] == len(workdir["train"]) and stats["ids"]["valid"]["dtype"] == "uint16"
    assert stats["ids"]["train"]["tokens"] == stats["stats"]["train"]["target"]["tokens"]
    assert stats["table"].splitlines()[0].startswith("| split | tokenizer |")


def test_token_stats_on_a_hand_made_example():
    vocab = {"[UNK]": 0, "ab": 1, "##c": 2, "d": 3, "##e": 4, "é": 5}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    texts = ["ée abc d", "xyz de", ""]
    encs = tok.encode_batch(texts, add_special_tokens=False)
    assert [e.tokens for e in encs] == [["é", "##e", "ab", "##c", "d"], ["[UNK]", "d", "##e"], []]
    stats = TokenStats(unk_id=0)
    stats.update(texts[:2], encs[:2])
    stats.update(texts[2:], encs[2:])
    # 5 words, 8 tokens, 1 unknown; ée, abc and de are split (char offsets: é is 2 bytes in UTF-8)
    assert stats.as_dict() == {
        "lines": 3,
        "words": 5,
        "tokens": 8,
        "unk_tokens": 1,
        "fertility": 1.6,
        "unk_rate": 0.125,
        "split_word_share": 0.6,
    }


def test_token_stats_attach_a_bare_word_marker_to_the_next_word():
    vocab = {"▁": 0, "a": 1, "b": 2, "▁a": 3}
    tok = Tokenizer(models.BPE(vocab, [("▁", "a")]))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    texts = ["a b", " a  a "]
    encs = tok.encode_batch(texts, add_special_tokens=False)
    assert encs[0].tokens == ["▁a", "▁", "b"] and encs[1].tokens == ["▁a", "▁", "▁a", "▁"]
    stats = TokenStats(unk_id=None)
    stats.update(texts, encs)
    # "b" is "▁" + "b"; the second "a" of line 2 is "▁" + "▁a" (the double space); the trailing
    # "▁" belongs to no word but counts as a token
    assert stats.as_dict() == {
        "lines": 2,
        "words": 4,
        "tokens": 7,
        "unk_tokens": 0,
        "fertility": 1.75,
        "unk_rate": 0.0,
        "split_word_share": 0.5,
    }


def test_flatten(workdir):
    target = workdir["target"].backend_tokenizer
    encs = target.encode_batch(["habari za", "", "asubuhi"], add_special_tokens=False)
    lengths, ids, offsets = flatten(encs)
    assert lengths.tolist() == [len(e.ids) for e in encs] and offsets.shape == (ids.size, 2)
    assert ids.tolist() == [i for e in encs for i in e.ids]


def test_markdown_table():
    row = {"lines": 2, "words": 10, "tokens": 15, "fertility": 1.5, "unk_rate": 0.0, "split_word_share": None}
    table = markdown_table([("valid", "target", row)])
    assert table.splitlines()[2] == "| valid | target | 2 | 10 | 15 | 1.500 | 0.0000% | – |"


def test_corrupt_tokenizer_is_one_clear_error(workdir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for var in ("RAYON_NUM_THREADS", "TOKENIZERS_PARALLELISM"):
        monkeypatch.setenv(var, os.environ.get(var, ""))
    for template in (paths.CORPUS_TRAIN, paths.CORPUS_VALID):
        src = workdir["root"] / paths.fill(template, lang="sw")
        dst = tmp_path / paths.fill(template, lang="sw")
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(src.read_bytes())
    tok_dir = tmp_path / paths.fill(paths.TOKENIZER, lang="sw")
    tok_dir.mkdir(parents=True)
    (tok_dir / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "WordPie')
    with pytest.raises(VocabTransferError, match=r"results/sw/tokenizer/tokenizer\.json: corrupt tokenizer file"):
        run_stage("pretokenize", _params(), {"lang": "sw"}, threads=1)
    assert not (tmp_path / paths.fill(paths.PRETOK_STATS, lang="sw")).exists()
    assert not list((tmp_path / "results" / "sw").glob("pretokenized"))


def test_word_ends_are_the_regex_word_ends(shared_data):
    import re

    with open(shared_data / "pretrain_text" / "ar.txt", encoding="utf-8") as f:
        texts = [next(f) for _ in range(500)] + ["", "  a\u00a0b\u3000c \u2028d\t\x1c", "x"]
    for text in texts + ["\n".join(texts)]:
        assert word_ends(text).tolist() == [m.end() for m in re.finditer(r"\S+", text)]
