"""WECHSEL on tiny fastText models trained on slices of the real en/sw text and dictionary."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from vocabtransfer.errors import VocabTransferError
from helpers import run_method
from vocabtransfer.init.methods.registry import TransferProblem
from vocabtransfer.init.methods import wechsel as wechsel_module
from vocabtransfer.init.methods.wechsel import nearest_sources, procrustes, read_dictionary

SPECIALS = ["[UNK]", "[CLS]", "[SEP]"]
NO_NGRAMS = "ǂ"  # one character: with minn=4 it has no n-gram, and it never occurs in the text


def wordlevel(words: list[str]) -> PreTrainedTokenizerFast:
    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(SPECIALS + words)}, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]")


def lines(path, n):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in itertools.islice(f, n)]


@pytest.fixture(scope="module")
def fasttext_models(tmp_path_factory, shared_data):
    """Word-level fastText (dim 16, one thread, fixed seed) on 4000 lines of English and Swahili."""
    from vocabtransfer.data.fasttext_models import WordFasttextSettings, train_word_fasttext

    out = tmp_path_factory.mktemp("wechsel")
    settings = dict(dim=16, epochs=5, min_count=3, maxn=5)
    en = train_word_fasttext(
        lines(shared_data / "pretrain_text" / "en.txt", 4000),
        out / "en.bin",
        WordFasttextSettings(minn=3, **settings),
        seed=1,
        threads=1,
    )
    sw = train_word_fasttext(
        lines(shared_data / "pretrain_text" / "sw.txt", 4000),
        out / "sw.bin",
        WordFasttextSettings(minn=4, **settings),
        seed=1,
        threads=1,
    )
    dictionary = out / "swahili.txt"
    dictionary.write_text(
        "\n".join(lines(shared_data / "wechsel_dicts" / "swahili.txt", 2500)) + "\n", encoding="utf-8"
    )
    return {"dir": out, "en": en, "sw": sw, "dictionary": dictionary}


def frequent_words(ft, n, skip=0):
    """The model's most frequent alphabetic lower-case words (fastText lists words by frequency)."""
    words = [w for w in ft.get_words() if w.isalpha() and w.islower()]
    return words[skip : skip + n]


def make_problem(source_tok, target_tok, resources, seed=0, overlap=()):
    emb = torch.randn(len(source_tok), 8, generator=torch.Generator().manual_seed(5))
    s, t = source_tok.get_vocab(), target_tok.get_vocab()
    return TransferProblem(
        source_embeddings=emb,
        source_tokenizer=source_tok,
        target_tokenizer=target_tok,
        overlap_target_ids=np.array([t[w] for w in overlap], dtype=np.int64),
        overlap_source_ids=np.array([s[w] for w in overlap], dtype=np.int64),
        seed=seed,
        lang="sw",
        resources={k: str(v) for k, v in resources.items()},
    )


@pytest.fixture(scope="module")
def en_sw(fasttext_models):
    m = fasttext_models
    source = wordlevel(frequent_words(m["en"], 300))
    target = wordlevel(frequent_words(m["sw"], 300) + ["the", NO_NGRAMS])  # "the": also a source token
    resources = {
        "source_fasttext": m["dir"] / "en.bin",
        "target_fasttext": m["dir"] / "sw.bin",
        "dictionary": m["dictionary"],
    }
    problem = make_problem(source, target, resources)
    return problem, run_method("wechsel", problem)


def test_procrustes_recovers_a_rotation():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 6))
    rotation, _ = np.linalg.qr(rng.normal(size=(6, 6)))
    w = procrustes(x, x @ rotation)
    np.testing.assert_allclose(w, rotation, atol=1e-10)
    np.testing.assert_allclose(w @ w.T, np.eye(6), atol=1e-10)


@pytest.mark.parametrize("query_block, key_chunk, k", [(7, 5, 3), (7, 5, 9), (64, 1000, 4), (1, 2, 1)])
def test_nearest_sources_blocks_and_chunks_give_the_dense_top_k(monkeypatch, query_block, key_chunk, k):
    """Queries in blocks, keys in chunks (each chunk's own top k, then the block's): the same ids and
    similarities as one dense top k over the allowed keys, also when k exceeds a chunk (k = 9 > 5)."""
    g = torch.Generator().manual_seed(3)
    queries = torch.nn.functional.normalize(torch.randn(30, 6, generator=g), dim=1)
    keys = torch.nn.functional.normalize(torch.randn(41, 6, generator=g), dim=1)
    allowed = torch.rand(41, generator=g) > 0.3
    monkeypatch.setattr(wechsel_module, "QUERY_BLOCK", query_block)
    monkeypatch.setattr(wechsel_module, "KEY_CHUNK", key_chunk)
    ids, weights, sims = nearest_sources(queries, keys, allowed, k, temperature=0.1)
    dense = queries @ keys.T
    dense[:, ~allowed] = -torch.inf
    want_sims, want_ids = dense.topk(k, dim=1)
    assert torch.equal(ids, want_ids)
    assert torch.allclose(sims, want_sims)
    assert bool(allowed[ids].all())
    assert torch.allclose(weights, torch.softmax(want_sims / 0.1, dim=1))


def test_read_dictionary_keeps_single_word_pairs(tmp_path):
    path = tmp_path / "d.txt"
    path.write_text("dog\tmbwa\npaternal uncle\tami\n\ndog\tmbwa\none two three\ncat paka\n", encoding="utf-8")
    pairs, stats = read_dictionary(path)
    assert pairs == [("dog", "mbwa"), ("cat", "paka")]
    assert stats == {"dictionary_pairs": 2, "dictionary_multiword_skipped": 1, "dictionary_malformed_lines": 1}


def test_rows_are_softmax_weighted_convex_combinations(en_sw):
    problem, result = en_sw
    emb, out, stats = problem.source_embeddings, result.embeddings, result.stats
    w = result.extra["align_matrix"].double()
    assert w.shape == (16, 16)
    assert torch.allclose(w @ w.T, torch.eye(16, dtype=torch.float64), atol=1e-5)  # orthogonal

    ids, weights = result.extra["neighbor_ids"], result.extra["neighbor_weights"]
    combined = ids[:, 0] >= 0
    assert int(combined.sum()) == stats["combined"] == 301
    ids, weights = ids[combined], weights[combined]
    assert ids.shape[1] == 10 and (weights >= 0).all()
    assert torch.allclose(weights.sum(1), torch.ones(len(weights)), atol=1e-5)
    assert (weights[:, :-1] >= weights[:, 1:]).all()  # best neighbour first
    assert all(len(set(row)) == 10 for row in ids.tolist()) and (ids >= 3).all()  # no specials
    expected = torch.einsum("nk,nkd->nd", weights, emb[ids])
    assert torch.allclose(out[combined], expected, atol=1e-5)
    lo, hi = emb[3:].min(0).values, emb[3:].max(0).values
    assert ((out[combined] >= lo - 1e-5) & (out[combined] <= hi + 1e-5)).all()  # inside the hull's box

    for tok in SPECIALS:  # copied by string
        assert torch.equal(
            out[problem.target_tokenizer.get_vocab()[tok]], emb[problem.source_tokenizer.get_vocab()[tok]]
        )
    # a token without any fastText n-gram keeps the seeded random row, with its reason
    no_vec = problem.target_tokenizer.get_vocab()[NO_NGRAMS]
    assert torch.equal(out[no_vec], run_method("random", problem).embeddings[no_vec])
    assert stats["reasons"]["random"] == {"target fastText gives no vector (no known n-grams)": 1}
    assert stats["copied"] + stats["combined"] + stats["random"] + stats["mean"] == problem.target_size
    assert stats["pairs_used"] > 100 and stats["dictionary_multiword_skipped"] > 0


def test_same_seed_is_byte_identical(en_sw):
    problem, result = en_sw
    again = run_method("wechsel", problem)
    assert again.embeddings.numpy().tobytes() == result.embeddings.numpy().tobytes()


def test_identity_setup_maps_shared_words_to_themselves(fasttext_models, tmp_path):
    """The same fastText model on both sides and an identity dictionary: W is the identity, and a
    word in both vocabularies has itself as the top neighbour."""
    m = fasttext_models
    words = frequent_words(m["en"], 400)
    dictionary = tmp_path / "identity.txt"
    dictionary.write_text("".join(f"{w}\t{w}\n" for w in words[:200]), encoding="utf-8")
    source = wordlevel(words[:300])
    shared = words[100:250]
    target = wordlevel(shared[::-1] + words[300:400])  # other ids, plus 100 words only in the target
    en = m["dir"] / "en.bin"
    problem = make_problem(source, target, {"source_fasttext": en, "target_fasttext": en, "dictionary": dictionary})
    result = run_method("wechsel", problem)
    assert torch.allclose(result.extra["align_matrix"], torch.eye(16), atol=1e-4)
    assert result.stats["aligned_pair_cosine_mean"] == pytest.approx(1.0, abs=1e-4)
    s_vocab, t_vocab = source.get_vocab(), target.get_vocab()
    top = result.extra["neighbor_ids"][:, 0]
    assert [top[t_vocab[w]].item() for w in shared] == [s_vocab[w] for w in shared]
    assert all(top[t_vocab[w]].item() >= 3 for w in words[300:400])


def test_copy_overlap_option_and_overlap_default(en_sw):
    problem, result = en_sw
    word = "the"
    s_id, t_id = problem.source_tokenizer.get_vocab()[word], problem.target_tokenizer.get_vocab()[word]
    problem = make_problem(problem.source_tokenizer, problem.target_tokenizer, problem.resources, overlap=[word])
    out = run_method("wechsel", problem, {"copy_overlap": True})
    assert torch.equal(out.embeddings[t_id], problem.source_embeddings[s_id])
    assert out.stats["reasons"]["copied"]["overlap"] == 1
    assert result.stats["reasons"]["copied"] == {"special token (same string)": 3}  # default: specials only


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(drop="source_fasttext"), "no source_fasttext given"),
        (dict(dictionary="missing.txt"), "missing.txt: bilingual dictionary not found"),
        (
            dict(drop="dictionary", options={"dictionaries": {"de": "german.txt"}}),
            "init.wechsel.dictionaries: no bilingual dictionary for language 'sw'",
        ),
        (dict(options={"neighbors": 0}), "init.wechsel.neighbors: 0 is less than the minimum of 1"),
        (dict(options={"temperature": -1}), "init.wechsel.temperature: -1 is less than or equal to the minimum of 0"),
    ],
)
def test_bad_inputs_are_one_line_errors(en_sw, tmp_path, change, message):
    problem, _ = en_sw
    resources = dict(problem.resources)
    resources.pop(change.get("drop"), None)
    if "dictionary" in change:
        resources["dictionary"] = str(tmp_path / change["dictionary"])
    p = make_problem(problem.source_tokenizer, problem.target_tokenizer, resources)
    with pytest.raises(VocabTransferError, match=message) as err:
        run_method("wechsel", p, change.get("options"))
    assert "\n" not in str(err.value)


def test_dictionary_from_options_resolves_against_the_data_root(en_sw, fasttext_models, data_root):
    problem, result = en_sw
    (data_root / "dicts").mkdir()
    (data_root / "dicts" / "sw.txt").write_bytes(fasttext_models["dictionary"].read_bytes())
    resources = {k: v for k, v in problem.resources.items() if k != "dictionary"}
    p = make_problem(problem.source_tokenizer, problem.target_tokenizer, resources)
    assert torch.equal(run_method("wechsel", p, {"dictionaries": {"sw": "dicts/sw.txt"}}).embeddings, result.embeddings)
