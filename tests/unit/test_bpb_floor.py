"""Floors for bits per byte (evaluate/bpb_floor.py): unigram and uniform predictors without a model, on
hand-checkable lines, and the share kept measured from the best floor."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from helpers import bpe_tokenizer, text_lines, wordpiece_from_tokens, write_ids
from vocabtransfer import io
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.evaluate import bits_per_byte, bpb_floor

VOCAB = ["[UNK]", "[PAD]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c"]  # V = 8
TRAIN = ["a b a", "c a"]  # a: 3, b: 1, c: 1 of N = 5 tokens
VALID = ["b a", "a c c"]  # 3 and 5 UTF-8 bytes


@pytest.fixture
def tok():
    return wordpiece_from_tokens(VOCAB)


def train_split(tmp_path, tok):
    ids, text = tmp_path / "train", tmp_path / "train.parquet"
    write_ids(tok, TRAIN, ids)
    io.write_parquet(pa.table({"text": TRAIN}), text)
    return ids, text


def test_the_unigram_floor_is_the_add_one_smoothed_count_by_hand(tmp_path, tok):
    """p(t) = (c_t + 1) / (N + V) = 4/13 for a, 2/13 for b and c. Without BOS or EOS the first token of a line has
    nothing to be predicted from, so (as for a model) it is not scored: line 1 scores `a`, line 2 `c c`."""
    ids, text = train_split(tmp_path, tok)
    counts = bpb_floor.target_counts(ids, tok)
    assert counts.tolist() == [0, 0, 0, 0, 0, 3, 1, 1]
    assert bpb_floor.source_counts(tok, text).tolist() == counts.tolist()  # the same text, streamed
    got = bpb_floor.unigram_scores(counts, tok, VALID)
    assert got.bits.tolist() == pytest.approx([math.log2(13 / 4), 2 * math.log2(13 / 2)])
    assert got.n_bytes.tolist() == [3, 5] and got.n_tokens.tolist() == [2, 3] and got.n_scored.tolist() == [1, 2]
    assert got.bits_per_byte == pytest.approx((math.log2(13 / 4) + 2 * math.log2(13 / 2)) / 8)
    # with an end-of-sequence token before every line (a packed block's), every own token is scored
    tok.eos_token = "[SEP]"
    got = bpb_floor.unigram_scores(counts, tok, VALID)
    assert got.bits.tolist() == pytest.approx(
        [math.log2(13 / 2) + math.log2(13 / 4), math.log2(13 / 4) + 2 * math.log2(13 / 2)]
    )


def test_the_uniform_floor_is_log2_v_per_scored_token(tok):
    tok.eos_token = "[SEP]"
    got = bpb_floor.uniform_scores(tok, VALID)
    assert got.bits_per_byte == pytest.approx(math.log2(8) * 5 / 8)  # log2 V × tokens / bytes
    sw = bpe_tokenizer("sw", 280)  # BOS before every line: every token scored
    lines = text_lines("sw", 20)
    got = bpb_floor.uniform_scores(sw, lines)
    _, n_bytes, n_tokens = bits_per_byte.line_counts(sw, lines)
    assert got.bits_per_byte == pytest.approx(math.log2(len(sw)) * n_tokens.sum() / n_bytes.sum())


def test_the_floors_score_exactly_the_tokens_a_model_is_scored_on(tmp_path):
    """Per line, a floor scores as many tokens as `bits_per_byte.score_lines` scores for a model."""
    from helpers import tiny_llama

    sw = bpe_tokenizer("sw", 280)
    lines = text_lines("sw", 12, start=500)
    model = tiny_llama(len(sw)).eval()
    want = bits_per_byte.score_lines(model, sw, lines, seq_len=16, batch_size=4)  # windows: long lines too
    ids = tmp_path / "train"
    write_ids(sw, text_lines("sw", 200), ids)
    got = bpb_floor.unigram_scores(bpb_floor.target_counts(ids, sw), sw, lines)
    assert got.n_scored.tolist() == want.n_scored.tolist() and got.n_bytes.tolist() == want.n_bytes.tolist()


def test_share_kept_is_measured_from_the_best_floor_and_a_source_below_it_has_nothing_to_keep():
    best = bpb_floor.best({"unigram-target": 3.0, "uniform": 2.7, "unigram-source": math.nan})
    assert (best.name, best.bits_per_byte, best.label) == ("uniform", 2.7, "uniform, target vocabulary")
    assert bits_per_byte.share_kept(best.bits_per_byte, 2.2, 1.7) == pytest.approx(0.5)
    # the Gemma study's sw numbers: the source (2.875) does not beat a floor of 2.71, so it has nothing to keep
    assert bits_per_byte.nothing_to_keep(2.71, 2.875) and math.isnan(bits_per_byte.share_kept(2.71, 2.903, 2.875))
    assert bpb_floor.best({}) is None


def test_counts_refuse_a_text_of_another_tokenizer(tmp_path, tok):
    ids = tmp_path / "train"
    write_ids(tok, TRAIN, ids)
    with pytest.raises(VocabTransferError, match="written with another tokenizer"):
        bpb_floor.target_counts(ids, bpe_tokenizer("sw", 280))
    with pytest.raises(VocabTransferError, match="unigram floor: 3 counts for a tokenizer of 8 ids"):
        bpb_floor.unigram_scores(counts=np.zeros(3), tokenizer=tok, lines=VALID)
