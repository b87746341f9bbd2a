"""Byte tokens as overlap (`overlap.match_bytes`): a Llama-style source (SentencePiece-style BPE with
byte fallback) against a GPT-2-style byte-level BPE target and the reverse, both trained by the tokenizer
stage's `train_tokenizer` on Swahili text; the spellings of each tokenizer family; the stage's counts."""

from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers
from transformers import LlamaConfig, PreTrainedTokenizerFast

from vocabtransfer.data import overlap
from vocabtransfer.app.params import validate_params
from vocabtransfer.model.hub import load_tokenizer
from vocabtransfer.app.runner import run_stage
from vocabtransfer.data.families import Spelling, spelling, token_bytes
from vocabtransfer.data.tokenizer import train_tokenizer

from helpers import (
    SOURCE_TOKENS,
    UNIGRAM_TOKENS,
    gpt2_seed,
    llama_seed,
    text_lines,
    unigram_from_tokens,
    wordpiece_from_tokens,
)

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
HIGH_BYTES = range(0x80, 0x100)  # never a whole UTF-8 character on their own


@pytest.fixture(scope="module")
def llama():
    """1000 tokens on Swahili text: <unk> <s> </s>, the 256 pieces <0x00>…<0xFF>, then the merges."""
    return train_tokenizer(llama_seed(), [text_lines("sw", 2000)], vocab_size=1000)


@pytest.fixture(scope="module")
def gpt2():
    """1000 tokens on Swahili text: <|endoftext|>, GPT-2's 256-character byte alphabet, then the merges."""
    return train_tokenizer(gpt2_seed(), [text_lines("sw", 2000)], vocab_size=1000)


def matches(table) -> dict[str, str]:
    return {r["target_token"]: r["source_token"] for r in table.to_pylist() if r["match"] == overlap.EXACT}


def test_byte_fallback_spellings_of_each_family(llama, gpt2):
    """Each family's vocabulary strings map to the bytes they stand for, word-start space included."""
    assert spelling(llama) == Spelling("metaspace", "▁", True)
    assert spelling(gpt2) == Spelling("byte_level", "Ġ", False)
    assert spelling(load_tokenizer(MINILM)) == Spelling("wordpiece", "##", False)
    # Llama-2's own tokenizer.json writes ▁ with a normalizer, not a Metaspace pre-tokenizer
    hf_llama = Tokenizer(models.BPE({"<unk>": 0, "<0x41>": 1, "▁a": 2}, [], unk_token="<unk>", byte_fallback=True))
    hf_llama.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    hf_llama.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    how = spelling(PreTrainedTokenizerFast(tokenizer_object=hf_llama, unk_token="<unk>"))
    assert how == Spelling("metaspace", "▁", True)
    assert token_bytes("<0xC3>", how) == b"\xc3" and token_bytes("<0x41>", how) == b"A"
    assert token_bytes("▁the", how) == b" the" and token_bytes("▁▁", how) == b"  "
    byte_level = spelling(gpt2)
    assert token_bytes("Ġthe", byte_level) == b" the" and token_bytes("Ã", byte_level) == b"\xc3"
    assert token_bytes("Ċ", byte_level) == b"\n" and token_bytes("Ã©", byte_level) == "é".encode()
    assert token_bytes("<|endoftext|>", byte_level) == b"<|endoftext|>"
    assert token_bytes("ĠâĢ", byte_level) == b" \xe2\x80"  # the first two bytes of "’"
    assert token_bytes("habari", spelling(load_tokenizer(MINILM))) is None  # WordPiece strings are text


def test_byte_fallback_source_against_byte_level_target(llama, gpt2):
    """GPT-2-style target, Llama-style source: every byte 0x80-0xFF, which byte-level BPE spells with one
    character (Ã = 0xC3) and byte fallback as <0xC3>, is an exact match; Ċ (0x0A) matches <0x0A> (the source
    has no newline piece); words match across the ▁ / Ġ markers; an ASCII byte matches the source's
    character piece (the highest id of equal forms wins: A, not <0x41>)."""
    assert len(llama) == len(gpt2) == 1000
    assert llama.convert_ids_to_tokens(list(range(3, 259))) == [f"<0x{b:02X}>" for b in range(256)]
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    assert set(alphabet) <= set(gpt2.get_vocab())
    found = matches(overlap.compute_overlap(gpt2, llama, match_bytes=True))
    assert found["Ã"] == "<0xC3>" and found["Ċ"] == "<0x0A>" and found["Ā"] == "<0x00>"
    assert found["Ġya"] == "▁ya" and found["Ġkwa"] == "▁kwa" and found["Ġ"] == "▁" and found["A"] == "A"
    high = {token_bytes(t, spelling(gpt2))[0]: t for t in alphabet if token_bytes(t, spelling(gpt2))[0] >= 0x80}
    assert sorted(high) == list(HIGH_BYTES)
    assert all(found[high[b]] == f"<0x{b:02X}>" for b in HIGH_BYTES)
    # deepfocus's forms (match_bytes=False): byte tokens decode to "�" and match nothing; words still match
    plain = matches(overlap.compute_overlap(gpt2, llama))
    assert "Ã" not in plain and "Ċ" not in plain and plain["Ġya"] == "▁ya"
    assert len(found) - len(plain) >= 128
    # the byte tokens: the 128 high bytes of the target (no merge here is part of a character), 256 pieces
    table = overlap.compute_overlap(gpt2, llama, match_bytes=True)
    assert overlap.byte_counts(table, gpt2, llama) == {"target": 128, "source": 256, "matched": 128}


def test_byte_fallback_target_against_byte_level_source(llama, gpt2):
    """The reverse: every one of the 256 byte pieces of a Llama-style target finds its byte in the
    byte-level source: <0xC3> -> Ã, <0x0A> -> Ċ, <0x20> -> Ġ (a space byte), <0x41> -> A."""
    table = overlap.compute_overlap(llama, gpt2, match_bytes=True)
    found = matches(table)
    assert found["<0xC3>"] == "Ã" and found["<0x0A>"] == "Ċ" and found["<0x20>"] == "Ġ" and found["<0x41>"] == "A"
    assert found["▁ya"] == "Ġya" and found["▁"] == "Ġ"
    assert all(f"<0x{b:02X}>" in found for b in range(256))
    assert overlap.byte_counts(table, llama, gpt2) == {"target": 256, "source": 128, "matched": 256}
    assert "<0xC3>" not in matches(overlap.compute_overlap(llama, gpt2))  # deepfocus's forms


def test_byte_fallback_overlap_stage_counts_byte_tokens(tmp_path, monkeypatch, llama, gpt2):
    """The stage reads overlap.match_bytes (default true) and writes the byte-token counts to stats.json."""
    monkeypatch.chdir(tmp_path)
    llama.save_pretrained("source")
    LlamaConfig(vocab_size=len(llama)).save_pretrained("source")
    gpt2.save_pretrained("results/sw/tokenizer")
    for match_bytes in (True, False):
        params = validate_params(
            {
                "languages": ["sw"],
                "source_model": str(tmp_path / "source"),
                "corpus": {"sources": {"sw": {"path": "sw.txt"}}},
                **({} if match_bytes else {"overlap": {"match_bytes": False}}),
            }
        )
        run_stage("source_model", params, {})
        run_stage("overlap", params, {"lang": "sw"})
        stats = json.loads((tmp_path / "results/sw/overlap/stats.json").read_text())
        assert stats["options"]["match_bytes"] is match_bytes
        assert stats["byte_tokens"] == {"target": 128, "source": 256, "matched": 128 if match_bytes else 0}


def test_byte_fallback_piece_against_wordpiece_characters():
    """WordPiece spells text: with match_bytes the piece <0x41> (byte fallback) is the continuation "##A",
    not the WordPiece string "##<0x41>" that deepfocus's forms pair it with."""
    target, source = unigram_from_tokens(UNIGRAM_TOKENS), wordpiece_from_tokens(SOURCE_TOKENS)
    assert matches(overlap.compute_overlap(target, source, match_bytes=True))["<0x41>"] == "##A"
    assert matches(overlap.compute_overlap(target, source))["<0x41>"] == "##<0x41>"
    table = overlap.compute_overlap(target, source, match_bytes=True)
    assert overlap.byte_counts(table, target, source) == {"target": 1, "source": 0, "matched": 1}
