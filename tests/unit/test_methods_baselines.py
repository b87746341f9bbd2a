"""random / overlap / mean / fvt on tiny hand-made tokenizers and embeddings with checkable rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from vocabtransfer.errors import VocabTransferError
from helpers import run_method
from vocabtransfer.init.methods.registry import TransferProblem
from vocabtransfer.init.methods.baselines import token_surfaces, tokenizer_markers
from vocabtransfer.init.methods.fvt import split_with_source

# --------------------------------------------------------------------------- tiny tokenizers


def wordpiece(tokens: list[str], **special) -> PreTrainedTokenizerFast:
    tk = Tokenizer(models.WordPiece({t: i for i, t in enumerate(tokens)}, unk_token="[UNK]"))
    tk.normalizer = normalizers.BertNormalizer(lowercase=True)
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tk.decoder = decoders.WordPiece()
    return PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", **special)


def wordlevel(tokens: list[str], **special) -> PreTrainedTokenizerFast:
    tk = Tokenizer(models.WordLevel({t: i for i, t in enumerate(tokens)}, unk_token=tokens[0]))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tk, unk_token=tokens[0], **special)


def bytelevel(tokens: list[str]) -> PreTrainedTokenizerFast:
    tk = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges=[]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", cls_token="<s>")


def metaspace(pieces: list[tuple[str, float]], **special) -> PreTrainedTokenizerFast:
    tk = Tokenizer(models.Unigram(pieces, unk_id=0))
    tk.pre_tokenizer = pre_tokenizers.Metaspace()
    tk.decoder = decoders.Metaspace()
    return PreTrainedTokenizerFast(tokenizer_object=tk, unk_token=pieces[0][0], **special)


@pytest.fixture(scope="module")
def minilm_tokenizer():
    from vocabtransfer.model.hub import load_tokenizer

    return load_tokenizer("sentence-transformers/all-MiniLM-L6-v2")


SOURCE_TOKENS = ["[UNK]", "[CLS]", "[SEP]", "hab", "##ari", "ya", "ari", "##hab"]
SOURCE = wordpiece(SOURCE_TOKENS, cls_token="[CLS]", sep_token="[SEP]")
# 8 source rows of 4 dims, easy to average by hand
E = torch.tensor(
    [[0.0, 0, 0, 0], [1, 1, 1, 1], [2, 2, 2, 2], [4, 0, 0, 0], [0, 8, 0, 0], [0, 0, 2, 0], [0, 0, 0, 6], [2, 2, 2, 2]]
)
ID = {t: i for i, t in enumerate(SOURCE_TOKENS)}

TARGET_TOKENS = ["[CLS]", "[SEP]", "[UNK]", "[PAD]", "ya", "habari", "##ari", "##yahab", "zz"]
TARGET = wordpiece(TARGET_TOKENS, cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]")
TID = {t: i for i, t in enumerate(TARGET_TOKENS)}


def problem(source=SOURCE, target=TARGET, emb=E, overlap=(("ya", "ya"),), seed=0, **kw) -> TransferProblem:
    s_vocab, t_vocab = source.get_vocab(), target.get_vocab()
    return TransferProblem(
        source_embeddings=emb,
        source_tokenizer=source,
        target_tokenizer=target,
        overlap_target_ids=np.array([t_vocab[t] for t, _ in overlap], dtype=np.int64),
        overlap_source_ids=np.array([s_vocab[s] for _, s in overlap], dtype=np.int64),
        seed=seed,
        **kw,
    )


def run(method: str, p: TransferProblem):
    result = run_method(method, p)
    stats = result.stats
    assert result.embeddings.shape == (p.target_size, p.source_embeddings.shape[1])
    assert result.embeddings.dtype == torch.float32
    assert sum(stats[k] for k in ("copied", "combined", "random", "mean")) == p.target_size
    assert sum(sum(r.values()) for r in stats["reasons"].values()) == p.target_size
    return result.embeddings, stats


# --------------------------------------------------------------------------- random / overlap / mean


def large_problem(seed=0):
    """200 source rows with per-dimension means 0..15 and stds 0.5..2; 3000 target tokens."""
    gen = torch.Generator().manual_seed(123)
    emb = torch.randn(200, 16, generator=gen) * torch.linspace(0.5, 2.0, 16) + torch.arange(16.0)
    source = wordlevel(
        ["[UNK]", "[CLS]", "[SEP]"] + [f"s{i}" for i in range(197)], cls_token="[CLS]", sep_token="[SEP]"
    )
    target = wordlevel(
        ["[UNK]", "[CLS]", "[SEP]"] + [f"t{i}" for i in range(2997)], cls_token="[CLS]", sep_token="[SEP]"
    )
    return problem(source, target, emb, overlap=(("[CLS]", "[CLS]"),), seed=seed)


def test_random_rows_follow_source_statistics_and_copy_specials():
    p = large_problem()
    out, stats = run("random", p)
    emb = p.source_embeddings
    for tok in ("[UNK]", "[CLS]", "[SEP]"):
        assert torch.equal(out[p.target_tokenizer.get_vocab()[tok]], emb[p.source_tokenizer.get_vocab()[tok]])
    rest = out[3:]
    mean, std = emb.mean(0), emb.std(0, correction=0)
    assert torch.allclose(rest.mean(0), mean, atol=4 * float(std.max()) / 2997**0.5)
    assert torch.allclose(rest.std(0), std, rtol=0.08)
    assert stats["copied"] == 3 and stats["random"] == 2997
    assert stats["reasons"]["copied"] == {"special token (same string)": 3}


def test_same_seed_is_byte_identical_and_seed_matters():
    for method in ("random", "overlap", "fvt"):
        a, _ = run(method, large_problem(seed=7))
        b, _ = run(method, large_problem(seed=7))
        c, _ = run(method, large_problem(seed=8))
        assert a.numpy().tobytes() == b.numpy().tobytes(), method
        assert not torch.equal(a, c), method


def test_overlap_copies_overlap_and_specials_rest_is_the_random_draw():
    p = problem()
    out, stats = run("overlap", p)
    rnd, _ = run("random", p)
    assert torch.equal(out[TID["ya"]], E[ID["ya"]])
    assert torch.equal(out[TID["[CLS]"]], E[ID["[CLS]"]]) and torch.equal(out[TID["[UNK]"]], E[ID["[UNK]"]])
    for tok in ("habari", "##ari", "zz", "[PAD]"):  # not shared: the same seeded row as `random`
        assert torch.equal(out[TID[tok]], rnd[TID[tok]])
    assert stats["copied"] == 4 and stats["random"] == 5
    assert stats["reasons"]["copied"] == {"overlap": 1, "special token (same string)": 3}
    # [PAD] exists only in the target: an explicit fallback, listed with its reason
    assert stats["reasons"]["random"]["special token without a source counterpart"] == 1
    assert stats["examples"]["special token without a source counterpart"] == ["[PAD]"]


def test_mean_rows_are_the_source_mean():
    out, stats = run("mean", problem())
    assert torch.equal(out[TID["ya"]], E[ID["ya"]])
    for tok in ("habari", "##ari", "##yahab", "zz", "[PAD]"):
        assert torch.allclose(out[TID[tok]], torch.tensor([1.125, 1.625, 0.875, 1.375]))  # E.mean(0)
    assert stats["mean"] == 5 and stats["copied"] == 4


def test_special_tokens_match_by_role_when_strings_differ():
    target = wordlevel(["<unk>", "<s>", "</s>", "habari"], cls_token="<s>", sep_token="</s>")
    out, stats = run("overlap", problem(target=target, overlap=()))
    assert torch.equal(out[1], E[ID["[CLS]"]]) and torch.equal(out[2], E[ID["[SEP]"]])
    assert torch.equal(out[0], E[ID["[UNK]"]])
    assert stats["reasons"]["copied"] == {
        "special token (same role cls_token)": 1,
        "special token (same role sep_token)": 1,
        "special token (same role unk_token)": 1,
    }


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(overlap_target_ids=np.array([4, 5]), overlap_source_ids=np.array([5])), "2 target ids but 1 source ids"),
        (
            dict(overlap_target_ids=np.array([99]), overlap_source_ids=np.array([5])),
            "target_id 99 is outside the target tokenizer's vocabulary",
        ),
        (
            dict(overlap_target_ids=np.array([4]), overlap_source_ids=np.array([50])),
            "source_id 50 is outside the source model's vocabulary",
        ),
        (dict(overlap_target_ids=np.array([4, 4]), overlap_source_ids=np.array([5, 5])), "more than once"),
    ],
)
def test_bad_overlap_is_one_clear_error(bad, message):
    p = problem()
    for key, value in bad.items():
        setattr(p, key, value)
    with pytest.raises(VocabTransferError, match=message) as err:
        run_method("overlap", p)
    assert "\n" not in str(err.value) and "rerun the overlap stage" in str(err.value)


def test_too_few_source_rows_is_an_error():
    with pytest.raises(VocabTransferError, match="5 rows but the source tokenizer has 8"):
        run_method("mean", problem(emb=E[:5]))


# --------------------------------------------------------------------------- fvt


def test_fvt_rows_are_means_of_the_source_pieces():
    out, stats = run("fvt", problem())
    assert torch.equal(out[TID["ya"]], E[ID["ya"]])  # overlap copied
    # "habari" starts a word: hab + ##ari
    assert torch.allclose(out[TID["habari"]], (E[ID["hab"]] + E[ID["##ari"]]) / 2)
    assert torch.allclose(out[TID["habari"]], torch.tensor([2.0, 4.0, 0.0, 0.0]))
    # "##ari" continues a word: ##ari (not the word-initial "ari")
    assert torch.equal(out[TID["##ari"]], E[ID["##ari"]])
    # "##yahab": inside a word the source has no "##ya" -> [UNK] only -> explicit random fallback
    rnd, _ = run("random", problem())
    assert torch.equal(out[TID["##yahab"]], rnd[TID["##yahab"]])
    assert torch.equal(out[TID["zz"]], rnd[TID["zz"]])
    assert stats["combined"] == 2 and stats["copied"] == 4 and stats["random"] == 3
    assert stats["reasons"]["random"] == {
        "source tokenizer gives only the unknown token": 2,
        "special token without a source counterpart": 1,
    }
    assert sorted(stats["examples"]["source tokenizer gives only the unknown token"]) == ["##yahab", "zz"]
    assert stats["mean_pieces"] == 1.5


def test_fvt_word_start_vs_continuation_with_the_real_source_tokenizer(minilm_tokenizer):
    src = minilm_tokenizer
    emb = torch.randn(len(src), 6, generator=torch.Generator().manual_seed(0))
    target = wordpiece(["[UNK]", "[CLS]", "[SEP]", "habari", "##gens", "gens"], cls_token="[CLS]", sep_token="[SEP]")
    out, _ = run("fvt", problem(src, target, emb, overlap=()))
    v = src.get_vocab()
    assert src.tokenize("habari") == ["ha", "##bari"]
    assert torch.allclose(out[3], (emb[v["ha"]] + emb[v["##bari"]]) / 2)
    assert torch.equal(out[4], emb[v["##gens"]])  # a continuation: the source's own "##gens"
    assert src.tokenize("gens") == ["gen", "##s"]  # ... while the word "gens" is gen + ##s
    assert torch.allclose(out[5], (emb[v["gen"]] + emb[v["##s"]]) / 2)


@pytest.mark.parametrize(
    "make, start, cont",
    [
        (lambda: wordpiece(["[UNK]", "habari", "##ari"]), "habari", "##ari"),
        (lambda: bytelevel(["<unk>", "<s>", "Ġhabari", "ari"]), "Ġhabari", "ari"),
        (lambda: metaspace([("<unk>", 0.0), ("▁habari", -1.0), ("ari", -1.0)]), "▁habari", "ari"),
    ],
)
def test_token_surfaces_respect_word_markers(make, start, cont):
    tok = make()
    texts, word_start = token_surfaces(tok)
    v = tok.get_vocab()
    assert (texts[v[start]], bool(word_start[v[start]])) == ("habari", True)
    assert (texts[v[cont]], bool(word_start[v[cont]])) == ("ari", False)
    assert texts[v[tok.unk_token]] is None  # special tokens have no surface text
    out, _ = run("fvt", problem(target=tok, overlap=()))
    assert torch.allclose(out[v[start]], (E[ID["hab"]] + E[ID["##ari"]]) / 2)
    assert torch.equal(out[v[cont]], E[ID["##ari"]])


def test_bytelevel_surface_decodes_bytes():
    tok = bytelevel(["<unk>", "<s>", "Ġcaf\u00c3\u00a9", "\u00c3"])  # " café", and half of "é"
    texts, word_start = token_surfaces(tok)
    assert tokenizer_markers(tok).kind == "bytelevel"
    assert (texts[2], bool(word_start[2])) == ("café", True)
    assert texts[3] is None  # a partial UTF-8 byte has no text
    _, stats = run("fvt", problem(target=tok, overlap=()))
    assert stats["reasons"]["random"]["no surface text (partial UTF-8 bytes)"] == 1


def test_fvt_with_a_sentencepiece_source_splits_continuations_without_the_marker():
    source = metaspace(
        [
            ("<unk>", 0.0),
            ("▁hab", -1.0),
            ("ari", -1.0),
            ("▁ari", -1.0),
            ("▁", -3.0),
            ("a", -5.0),
            ("r", -5.0),
            ("i", -5.0),
            ("h", -5.0),
            ("b", -5.0),
        ]
    )
    emb = torch.arange(40, dtype=torch.float32).reshape(10, 4)
    target = wordpiece(["[UNK]", "habari", "##ari"])
    pieces, rows = split_with_source(source, ["habari", "ari"], np.array([True, False]))
    assert source.convert_ids_to_tokens(pieces.tolist()) == ["▁hab", "ari", "ari"] and rows.tolist() == [0, 0, 1]
    out, _ = run("fvt", problem(source, target, emb, overlap=()))
    assert torch.allclose(out[1], (emb[1] + emb[2]) / 2)
    assert torch.equal(out[2], emb[2])  # "ari", not "▁ari"
