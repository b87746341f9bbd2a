"""`fasttext.oov`: target tokens outside the fastText dictionary get character n-gram vectors
(`subword`) or none (`random`, byte-identical to the stage without the option), and the init
stage counts where each target row came from."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from vocabtransfer.data import fasttext_models, fasttext_vectors
from vocabtransfer import io
from vocabtransfer.pipeline import paths
from vocabtransfer.app.params import validate_params
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.app.runner import run_stage

from helpers import MINILM, save_dir, text_lines, tiny_bert, wordpiece_tokenizer

N_LINES = 1500
FAST = dict(dim=8, epochs=2, min_count=10, threads=1)  # tiny, single-threaded (deterministic)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, shared_data):
    """(target WordPiece tokenizer, its dir, the token-joined sw text as pretokenize writes it).

    1000 pieces learnt on 300 lines, fastText text of 1500 lines: with min_count 10 many pieces are
    rare, so some tokens are in the fastText dictionary and many are not."""
    root = tmp_path_factory.mktemp("oov")
    tok = wordpiece_tokenizer("sw", vocab_size=1000, n_lines=300)
    tok.save_pretrained(root / "tokenizer")
    text = root / "train.tokens.txt"
    text.write_text(
        "".join(" ".join(tok.tokenize(line)) + "\n" for line in text_lines("sw", N_LINES)), encoding="utf-8"
    )
    return tok, root / "tokenizer", text


@pytest.fixture(scope="module")
def token_model(corpus):
    return fasttext_models.train_fasttext(corpus[2], seed=7, **FAST)


def test_subword_rows_are_the_ngram_vectors_of_the_vocabulary_string(corpus, token_model):
    tok = corpus[0]
    emb, mask = fasttext_vectors.token_vectors(token_model, tok, "tokenlevel")
    emb2, mask2, subword = fasttext_vectors.subword_vectors(token_model, tok, emb, mask)
    tokens = tok.convert_ids_to_tokens(list(range(len(tok))))
    special = set(tok.all_special_ids)
    assert 50 < int(mask.sum()) < len(tok) - 50  # a real mix of dictionary and rare tokens
    # dictionary rows (and their mask) are untouched
    assert torch.equal(emb2[mask], emb[mask]) and bool(mask2[mask].all()) and not bool(subword[mask].any())
    # every other non-special token has exactly fastText's get_word_vector of its vocabulary string
    rare = [i for i in range(len(tok)) if not mask[i] and i not in special]
    assert len(rare) > 50
    for i in rare:
        assert np.array_equal(emb2[i].numpy(), token_model.get_word_vector(tokens[i])), tokens[i]
        assert bool(subword[i]) == bool(mask2[i]) == bool(emb2[i].any())
    # most rare pieces get a vector; a few (single letters never seen alone) have only n-grams that
    # training never touched, whose rows fastText left at zero: those stay without a vector (loop above)
    assert len(rare) * 0.9 < int(subword.sum()) <= len(rare)
    # special tokens never occur in text: those outside the dictionary keep no vector
    for i in special:
        if not mask[i]:
            assert not mask2[i] and not subword[i] and not emb2[i].any(), tokens[i]
    assert any(not mask[i] for i in special)  # [PAD] at least: the check above is not empty


class ZeroVectors:
    """A trained fastText model whose n-gram vector of some strings is all zeros (what maxn=0 gives,
    without a second training run)."""

    def __init__(self, ft, zero: set[str]):
        self.ft, self.zero = ft, zero

    def __getattr__(self, name):
        return getattr(self.ft, name)

    def get_word_vector(self, word: str) -> np.ndarray:
        if word in self.zero:
            return np.zeros(self.ft.get_dimension(), dtype=np.float32)
        return self.ft.get_word_vector(word)


def test_all_zero_subword_vectors_stay_without_a_vector(corpus, token_model):
    tok = corpus[0]
    emb, mask = fasttext_vectors.token_vectors(token_model, tok, "tokenlevel")
    rare = [t for t, i in tok.get_vocab().items() if not mask[i] and i not in set(tok.all_special_ids)]
    zero = set(rare[::2])
    emb2, mask2, subword = fasttext_vectors.subword_vectors(ZeroVectors(token_model, zero), tok, emb, mask)
    ids = tok.convert_tokens_to_ids(sorted(zero))
    assert not bool(subword[ids].any()) and not bool(mask2[ids].any()) and not bool(emb2[ids].any())
    kept = tok.convert_tokens_to_ids(sorted(set(rare) - zero))
    assert bool(subword[kept].sum()) and int(subword.sum()) <= len(kept)


def _params(**fasttext) -> dict:
    return validate_params(
        {
            "languages": ["sw"],
            "seed": 7,
            "source_model": MINILM,
            "corpus": {"sources": {"sw": {"path": "pretrain_text/sw.txt"}}},
            "fasttext": {"dim": 8, "epochs": 2, "min_count": 10, **fasttext},
            "init": {"methods": ["focus", "ofa", "focus+svd"], "ofa": {"keep_dim": 16}, "svd": {"keep_dim": 16}},
        }
    )


def _stats(template: str, **wc) -> dict:
    return json.loads(Path(paths.fill(template, **wc)).read_text())


def test_stage_oov_random_is_byte_identical_and_subword_adds_the_rows(stage_dir, corpus, token_model):
    tok = corpus[0]
    emb_path = Path(paths.fill(paths.FASTTEXT_EMB, lang="sw"))
    # what the stage wrote before the option existed: the dictionary rule, two tensors, three metadata keys
    emb, mask = fasttext_vectors.token_vectors(token_model, tok, "tokenlevel")
    io.save_tensors(
        {"embeddings": emb, "mask": mask},
        stage_dir / "before.safetensors",
        metadata={"mode": "tokenlevel", "dim": 8, "seed": 7},
    )

    run_stage("fasttext", _params(), {"lang": "sw"}, threads=1)  # no `oov` key: the default
    default_bytes = emb_path.read_bytes()
    assert default_bytes == (stage_dir / "before.safetensors").read_bytes()
    run_stage("fasttext", _params(oov="random"), {"lang": "sw"}, threads=1)
    assert emb_path.read_bytes() == default_bytes
    stats = _stats(paths.FASTTEXT_STATS, lang="sw")
    assert stats["oov"] == "random" and stats["tokens_from_subwords"] == 0
    assert stats["tokens_from_dictionary"] == stats["tokens_with_vector"] == int(mask.sum())

    run_stage("fasttext", _params(oov="subword"), {"lang": "sw"}, threads=1)
    saved = io.load_tensors(emb_path)
    assert set(saved) == {"embeddings", "mask", "subword"}
    expected = fasttext_vectors.subword_vectors(token_model, tok, emb, mask)
    for name, value in zip(("embeddings", "mask", "subword"), expected):
        assert torch.equal(saved[name], value), name
    assert io.tensor_metadata(emb_path) == {"mode": "tokenlevel", "dim": 8, "seed": 7, "oov": "subword"}
    stats = _stats(paths.FASTTEXT_STATS, lang="sw")
    assert stats["tokens_from_dictionary"] == int(mask.sum())
    assert stats["tokens_from_subwords"] == int(expected[2].sum()) > 0
    assert stats["tokens_with_vector"] == stats["tokens_from_dictionary"] + stats["tokens_from_subwords"]
    assert stats["tokens_with_vector"] + stats["tokens_without_vector"] == stats["vocab_size"] == len(tok)
    assert stats["params"]["fasttext.oov"] == "subword"
    examples = tok.convert_tokens_to_ids(stats["examples_from_subwords"])
    assert len(examples) == 20 and bool(expected[2][examples].all())


def test_stage_bucket_sets_the_ngram_rows_of_the_bin(stage_dir):
    """`fasttext.bucket` reaches fastText: the saved .bin's input matrix has words + bucket rows, and
    the file shrinks with it (fastText's default is 2,000,000 buckets)."""
    sizes = {}
    for bucket in (1000, 2_000_000):
        run_stage("fasttext", _params(bucket=bucket), {"lang": "sw"}, threads=1)
        path = Path(paths.fill(paths.FASTTEXT_BIN, lang="sw"))
        ft = fasttext_models.load_fasttext(path)
        assert ft.get_input_matrix().shape == (len(ft.get_words(on_unicode_error="replace")) + bucket, 8)
        assert _stats(paths.FASTTEXT_STATS, lang="sw")["params"]["fasttext.bucket"] == bucket
        sizes[bucket] = path.stat().st_size
    assert sizes[1000] * 100 < sizes[2_000_000]
    assert _params()["fasttext"]["bucket"] == 2_000_000


def test_oov_values_are_checked_before_any_work():
    with pytest.raises(VocabTransferError, match=r"fasttext\.oov.*'ngram'.*random.*subword") as err:
        _params(oov="ngram")
    assert "\n" not in str(err.value)
    with pytest.raises(VocabTransferError, match="fasttext.oov: subword applies to fasttext.mode tokenlevel only"):
        _params(oov="subword", mode="wordlevel", pretrained_path="cc.sw.300.bin")
    assert _params(mode="wordlevel", pretrained_path="cc.sw.300.bin")["fasttext"]["oov"] == "random"


def test_init_counts_rows_by_origin_and_uses_subword_vectors(stage_dir, corpus, one_thread):
    """focus, ofa and focus+svd combine the subword rows (instead of random ones), and the init
    stats say how many rows came from the overlap, dictionary vectors, subword vectors, or random."""
    from vocabtransfer.model.hub import load_tokenizer, resolve_model_path

    tok = corpus[0]
    source_tok = load_tokenizer(resolve_model_path(MINILM))
    save_dir(tiny_bert(len(source_tok)), source_tok, stage_dir / paths.SOURCE_MODEL)
    run_stage("source_model", _params(), {}, threads=1)
    run_stage("overlap", _params(), {"lang": "sw"}, threads=1)
    rows = {}
    for oov in ("random", "subword"):
        params = _params(oov=oov)
        run_stage("fasttext", params, {"lang": "sw"}, threads=1)
        ft = _stats(paths.FASTTEXT_STATS, lang="sw")
        for method in params["init"]["methods"]:
            run_stage("init", params, {"lang": "sw", "method": method, "pseed": "1"}, threads=1)
            stats = _stats(paths.INIT_DIR + "/stats.json", lang="sw", method=method, pseed=1)
            counts = stats["target_rows"]
            assert sum(counts.values()) == len(tok) == stats["target_vocab"]
            assert counts["overlap"] == stats["overlap"] > 0
            assert stats["auxiliary_subword_vectors"] == ft["tokens_from_subwords"]
            assert (counts["subword"] == 0) == (oov == "random")
            # the method's own counts: rows with a vector were combined, the rest random
            method_stats = stats["method_stats"].get("base", stats["method_stats"])  # focus+svd nests focus's
            combined = method_stats.get("focus_combined", method_stats.get("combined"))
            assert combined == counts["dictionary"] + counts["subword"]
            assert method_stats["random"] == counts["random"]
            assert method_stats["copied"] == counts["overlap"]
            rows[oov, method] = counts
        # overlapping tokens are copied whatever their vector: the rest of the fasttext counts
        assert rows[oov, "focus"]["dictionary"] <= ft["tokens_from_dictionary"]
        assert rows[oov, "focus"]["subword"] <= ft["tokens_from_subwords"]
    for method in ("focus", "ofa", "focus+svd"):
        r, s = rows["random", method], rows["subword", method]
        assert s["overlap"] == r["overlap"] and s["dictionary"] == r["dictionary"]
        assert s["subword"] > 0 and s["random"] == r["random"] - s["subword"]
    assert rows["subword", "focus"]["random"] < rows["random", "focus"]["random"] // 4
