"""Vocabulary overlap: deepfocus's canonical forms, match priority and tie-breaking, the stage."""

from __future__ import annotations

import json
import logging

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from vocabtransfer.data import overlap
from vocabtransfer.app.params import validate_params
from vocabtransfer.model.hub import load_tokenizer
from vocabtransfer.app.runner import run_stage

from helpers import SOURCE_TOKENS, UNIGRAM_TOKENS, bytelevel_from_tokens, unigram_from_tokens, wordpiece_from_tokens

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
BYTELEVEL_TOKENS = ["<|endoftext|>", "Ġhello", "lo", "ĠHELLO", ",", "Ġ123", "Ġzzz", "hello"]


@pytest.fixture(scope="module")
def source():
    return wordpiece_from_tokens(SOURCE_TOKENS)


@pytest.fixture(scope="module")
def minilm():
    return load_tokenizer(MINILM)


@pytest.fixture(scope="module")
def sw_tokenizer(minilm, shared_data):
    lines = (shared_data / "pretrain_text" / "sw.txt").read_text(encoding="utf-8").splitlines()[:3000]
    return minilm.train_new_from_iterator(lines, vocab_size=2000)


def matches(table: pa.Table) -> dict[str, tuple[str, str]]:
    """target token -> (source token, match kind) for the matched rows."""
    return {r["target_token"]: (r["source_token"], r["match"]) for r in table.to_pylist() if r["match"] != "none"}


def deepfocus_matches(target, source, **opts) -> dict[int, tuple[int, str]]:
    from deepfocus.focus import get_overlapping_tokens

    found, _ = get_overlapping_tokens(target, source, **opts)
    return {v.target.id: (v.source[0].id, v.descriptor) for v in found.values()}


def table_matches(table: pa.Table) -> dict[int, tuple[int, str]]:
    return {r["target_id"]: (r["source_id"], r["match"]) for r in table.to_pylist() if r["match"] != "none"}


OPTION_SETS = [
    dict(exact_match_all=True, fuzzy_match_all=False, match_symbols=False),
    dict(exact_match_all=True, fuzzy_match_all=True, match_symbols=True),
    dict(exact_match_all=False, fuzzy_match_all=True, match_symbols=False),
    dict(exact_match_all=False, fuzzy_match_all=False, match_symbols=True),
]


# --------------------------------------------------------------------------- canonical forms


def test_schemes_and_canonical_forms(source):
    uni, byte = unigram_from_tokens(UNIGRAM_TOKENS), bytelevel_from_tokens(BYTELEVEL_TOKENS)
    src = overlap.canonicalize(source)
    assert src.scheme == "wordpiece"
    forms = dict(zip(src.tokens, src.canonical))
    assert forms["hello"] == "▁hello" and forms["##lo"] == "lo" and forms["##<0x41>"] == "<0x41>"
    assert dict(zip(src.tokens, src.fuzzy))["Hello"] == "hello"

    tgt = overlap.canonicalize(uni)
    assert tgt.scheme == "sentencepiece"
    forms = dict(zip(tgt.tokens, tgt.canonical))
    assert forms["▁hello"] == "▁hello" and forms["lo"] == "lo" and forms["▁HELLO"] == "▁HELLO"
    assert forms["<0x41>"] == "<0x41>"  # byte-fallback kept, although it decodes to "A"
    assert uni.decode(uni.convert_tokens_to_ids("<0x41>")) == "A"

    tgt = overlap.canonicalize(byte)
    assert tgt.scheme == "bytelevel"
    forms = dict(zip(tgt.tokens, tgt.canonical))
    assert forms["Ġhello"] == "▁hello" and forms["lo"] == "lo" and forms["ĠHELLO"] == "▁HELLO"
    assert dict(zip(tgt.tokens, tgt.fuzzy))["ĠHELLO"] == "hello"


def test_few_markers_fall_back_to_the_decode_scheme():
    assert overlap.detect_scheme(["▁a"] * 100 + ["##b"] * 100) == "bytelevel"
    assert overlap.detect_scheme(["▁a"] * 101 + ["##b"] * 200) == "sentencepiece"
    assert overlap.detect_scheme(["##b"] * 101) == "wordpiece"


def test_batched_decode_equals_per_id_decode(source, minilm):
    for tok in (source, unigram_from_tokens(UNIGRAM_TOKENS), bytelevel_from_tokens(BYTELEVEL_TOKENS), minilm):
        ids = sorted(tok.get_vocab().values())
        assert overlap.decode_each(tok, ids) == [tok.decode(i) for i in ids]
    # with transformers' clean-up step on: an added token "x ." decodes to "x." either way
    tok = wordpiece_from_tokens(SOURCE_TOKENS)
    tok.add_tokens(["x ."])
    tok.clean_up_tokenization_spaces = True
    ids = sorted(tok.get_vocab().values())
    assert overlap.decode_each(tok, ids) == [tok.decode(i) for i in ids]
    assert overlap.decode_each(tok, [tok.convert_tokens_to_ids("x .")]) == ["x."]


def test_tie_breaking_equals_construct_vocab_view():
    from deepfocus.vocab_helper import TokenClass, construct_vocab_view

    canonical = ["▁a", "a", "▁A", "a", "b", "▁a", "▁b", "B"]
    vocab = overlap.CanonicalVocab(
        ids=np.arange(len(canonical)),
        tokens=[f"t{i}" for i in range(len(canonical))],
        canonical=canonical,
        fuzzy=[c.replace("▁", "").lower() for c in canonical],
        scheme="sentencepiece",
    )
    classes = {
        t: TokenClass(
            native_form=t,
            id=i,
            canonical_form=c,
            fuzzy_form=f,
            uncased_form=c.lower(),
            no_whitespace_form=c.replace("▁", ""),
            is_beginning_of_word=c.startswith("▁"),
        )
        for t, i, c, f in zip(vocab.tokens, vocab.ids.tolist(), vocab.canonical, vocab.fuzzy)
    }
    for key, forms in (("canonical_form", vocab.canonical), ("fuzzy_form", vocab.fuzzy)):
        expected = {form: entries[0].id for form, entries in construct_vocab_view(classes, key).items()}
        assert {form: int(vocab.ids[p]) for form, p in overlap._pick_first(vocab, forms).items()} == expected
    # the rule in words: the highest id whose canonical form is the key, else the lowest id
    assert overlap._pick_first(vocab, vocab.fuzzy) == {"a": 3, "b": 4}
    assert overlap._pick_first(vocab, vocab.canonical) == {"▁a": 5, "a": 3, "▁A": 2, "b": 4, "▁b": 6, "B": 7}


# --------------------------------------------------------------------------- matching


def test_unigram_target_matches(source):
    target = unigram_from_tokens(UNIGRAM_TOKENS)
    exact = matches(overlap.compute_overlap(target, source))
    assert exact == {
        "▁hello": ("hello", "exact_match"),
        "lo": ("##lo", "exact_match"),
        "▁123": ("123", "exact_match"),
        "<0x41>": ("##<0x41>", "exact_match"),
        "▁world": ("world", "exact_match"),
        "hello": ("##hello", "exact_match"),
    }
    fuzzy = matches(overlap.compute_overlap(target, source, fuzzy_match_all=True))
    assert fuzzy["▁HELLO"] == ("##hello", "fuzzy_match")  # ##hello's canonical form is the fuzzy key
    assert fuzzy[","] == (",", "fuzzy_match")
    assert "▁wow" not in fuzzy and "<unk>" not in fuzzy
    symbols = matches(overlap.compute_overlap(target, source, exact_match_all=False, match_symbols=True))
    assert symbols == {"▁123": ("123", "numerical_symbol"), ",": (",", "numerical_symbol")}
    both = matches(overlap.compute_overlap(target, source, match_symbols=True))
    assert both["▁123"] == ("123", "numerical_symbol") and both["▁hello"] == ("hello", "exact_match")


def test_bytelevel_target_matches(source):
    target = bytelevel_from_tokens(BYTELEVEL_TOKENS)
    table = overlap.compute_overlap(target, source, fuzzy_match_all=True)
    assert matches(table) == {
        "Ġhello": ("hello", "exact_match"),
        "lo": ("##lo", "exact_match"),
        "Ġ123": ("123", "exact_match"),
        "hello": ("##hello", "exact_match"),
        "ĠHELLO": ("##hello", "fuzzy_match"),
        ",": (",", "fuzzy_match"),
    }


def test_table_schema_and_pairs(source):
    target = unigram_from_tokens(UNIGRAM_TOKENS)
    table = overlap.compute_overlap(target, source)
    assert table.schema.equals(overlap.SCHEMA)
    assert table.column("target_id").to_pylist() == list(range(len(UNIGRAM_TOKENS)))
    rows = {r["target_token"]: r for r in table.to_pylist()}
    assert (
        rows["▁wow"]["source_id"] is None and rows["▁wow"]["source_token"] is None and rows["▁wow"]["match"] == "none"
    )
    t, s = overlap.overlap_pairs(table)
    assert t.dtype == np.int64 and s.dtype == np.int64
    assert dict(zip(t.tolist(), s.tolist())) == {3: 5, 4: 6, 7: 11, 9: 13, 10: 7, 11: 8}
    assert overlap.match_counts(table) == {
        "exact_match": 6,
        "fuzzy_match": 0,
        "numerical_symbol": 0,
        "special_role": 0,
        "none": len(UNIGRAM_TOKENS) - 6,
    }


@pytest.mark.parametrize("make", [unigram_from_tokens, bytelevel_from_tokens], ids=["unigram", "bytelevel"])
def test_hand_made_tokenizers_equal_deepfocus(source, make):
    target = make(UNIGRAM_TOKENS if make is unigram_from_tokens else BYTELEVEL_TOKENS)
    for opts in OPTION_SETS:
        ours = table_matches(overlap.compute_overlap(target, source, **opts))
        assert ours == deepfocus_matches(target, source, **opts), opts


def test_minilm_vs_sw_tokenizer_equals_deepfocus(minilm, sw_tokenizer):
    for opts in OPTION_SETS:
        ours = table_matches(overlap.compute_overlap(sw_tokenizer, minilm, **opts))
        assert ours == deepfocus_matches(sw_tokenizer, minilm, **opts), opts
        if opts["exact_match_all"]:
            assert len(ours) > 300  # [CLS], punctuation, names, numbers, shared subwords
    kinds = overlap.match_counts(
        overlap.compute_overlap(sw_tokenizer, minilm, fuzzy_match_all=True, match_symbols=True)
    )
    assert kinds["exact_match"] and kinds["fuzzy_match"] and kinds["numerical_symbol"]


# --------------------------------------------------------------------------- the stage


def _save_source(source, path: str = "source") -> None:
    """The source tokenizer in a model directory (a config makes it one; overlap reads the tokenizer only)."""
    from transformers import BertConfig

    source.save_pretrained(path)
    BertConfig(vocab_size=len(source)).save_pretrained(path)


def _params(source_model: str, **options) -> dict:
    return validate_params(
        {
            "languages": ["sw"],
            "source_model": source_model,
            "corpus": {"sources": {"sw": {"path": "sw.txt"}}},
            "overlap": options,
        }
    )


def test_stage_writes_table_and_stats(tmp_path, monkeypatch, source):
    monkeypatch.chdir(tmp_path)
    _save_source(source)
    run_stage("source_model", _params(str(tmp_path / "source")), {})
    unigram_from_tokens(UNIGRAM_TOKENS).save_pretrained("results/sw/tokenizer")
    run_stage("overlap", _params(str(tmp_path / "source"), fuzzy_match_all=True), {"lang": "sw"})
    table = pq.read_table("results/sw/overlap/overlap.parquet")
    assert table.schema.equals(overlap.SCHEMA) and table.num_rows == len(UNIGRAM_TOKENS)
    stats = json.loads((tmp_path / "results/sw/overlap/stats.json").read_text())
    assert stats["counts"] == {
        "exact_match": 6,
        "fuzzy_match": 2,
        "numerical_symbol": 0,
        "special_role": 0,
        "none": len(UNIGRAM_TOKENS) - 8,
    }
    assert stats["n_target_tokens"] == len(UNIGRAM_TOKENS) and stats["n_overlapping"] == 8
    assert stats["overlap_share"] == pytest.approx(8 / len(UNIGRAM_TOKENS))
    assert stats["options"]["fuzzy_match_all"] is True and stats["seconds"] >= 0
    assert not list((tmp_path / "results/sw/overlap").glob(".*tmp*"))


def test_stage_warns_on_empty_overlap(tmp_path, monkeypatch, caplog, source):
    monkeypatch.chdir(tmp_path)
    _save_source(source)
    run_stage("source_model", _params(str(tmp_path / "source")), {})
    bytelevel_from_tokens(["Ġzzz", "Ġyyy", "xx"]).save_pretrained("results/sw/tokenizer")
    with caplog.at_level(logging.WARNING, logger="vocabtransfer.data.overlap"):
        run_stage("overlap", _params(str(tmp_path / "source")), {"lang": "sw"})
    assert any("no target token overlaps" in r.message for r in caplog.records)
    stats = json.loads((tmp_path / "results/sw/overlap/stats.json").read_text())
    assert stats["n_overlapping"] == 0 and stats["counts"]["none"] == stats["n_target_tokens"] == 4  # + <|endoftext|>
