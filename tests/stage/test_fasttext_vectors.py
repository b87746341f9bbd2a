"""fastText auxiliary embeddings: the deepfocus vector rule, row alignment, determinism, errors, the stage."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from vocabtransfer.data import fasttext_models, fasttext_vectors
from vocabtransfer.pipeline import paths
from vocabtransfer.app.params import validate_params
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.io import load_tensors
from vocabtransfer.app.runner import run_stage

N_LINES = 1500
FAST = dict(dim=8, epochs=2, min_count=5, threads=1)  # tiny, single-threaded (deterministic)


@pytest.fixture(scope="module")
def raw_lines(shared_data) -> list[str]:
    with (shared_data / "pretrain_text" / "sw.txt").open(encoding="utf-8") as f:
        return [next(f).rstrip("\n") for _ in range(N_LINES)]


def _word_level_tokenizer(lines: list[str]):
    """A WordLevel fast tokenizer over the slice's words seen at least twice (others -> [UNK]),
    plus a few words absent from the text: some tokens are frequent, some rare, some unseen."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    pre = pre_tokenizers.Whitespace()
    counts = Counter(w for line in lines for w, _ in pre.pre_tokenize_str(line))
    words = sorted(w for w, c in counts.items() if c >= 2) + ["zzqqxx", "Qwertyuiop"]
    vocab = {"[UNK]": 0, "[PAD]": 1, **{w: i + 2 for i, w in enumerate(words)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, raw_lines):
    """(tokenizer, tokenizer dir, token-joined text file) as pretokenize writes them."""
    root = tmp_path_factory.mktemp("corpus")
    tok = _word_level_tokenizer(raw_lines)
    tok.save_pretrained(root / "tokenizer")
    text = root / "train.tokens.txt"
    text.write_text("".join(" ".join(tok.tokenize(line)) + "\n" for line in raw_lines), encoding="utf-8")
    return tok, root / "tokenizer", text


@pytest.fixture(scope="module")
def token_model(corpus):
    return fasttext_models.train_fasttext(corpus[2], seed=7, **FAST)


def _deepfocus_has_vector(ft, token: str) -> bool:
    """deepfocus.focus.is_very_rare_token, negated, verbatim (linear `in` over the word list)."""
    return not (token not in ft or np.absolute(ft[token]).sum() == 0)


def test_tokenlevel_mask_and_rows_follow_the_dictionary_rule(corpus, token_model):
    tok, _, _ = corpus
    emb, mask = fasttext_vectors.token_vectors(token_model, tok, "tokenlevel")
    assert emb.dtype == torch.float32 and mask.dtype == torch.bool
    assert emb.shape == (len(tok), 8) and mask.shape == (len(tok),)
    expected = torch.tensor([_deepfocus_has_vector(token_model, t) for t in tok.convert_ids_to_tokens(range(len(tok)))])
    assert torch.equal(mask, expected)
    # min_count=5 keeps some tokens and drops others (rare words, unseen words, [PAD])
    assert 0 < int(mask.sum()) < len(tok)
    assert not mask[tok.convert_tokens_to_ids("zzqqxx")] and not mask[tok.pad_token_id]
    for i in mask.nonzero().flatten().tolist():  # row i is token i's fastText vector
        assert np.array_equal(emb[i].numpy(), token_model.get_word_vector(tok.convert_ids_to_tokens(i)))
    assert not emb[~mask].any()


def test_same_seed_one_thread_is_identical_and_seed_matters(corpus, token_model):
    tok, _, text = corpus
    emb1, mask1 = fasttext_vectors.token_vectors(token_model, tok, "tokenlevel")
    emb2, mask2 = fasttext_vectors.token_vectors(
        fasttext_models.train_fasttext(text, seed=7, **FAST), tok, "tokenlevel"
    )
    assert torch.equal(emb1, emb2) and torch.equal(mask1, mask2)
    emb3, mask3 = fasttext_vectors.token_vectors(
        fasttext_models.train_fasttext(text, seed=8, **FAST), tok, "tokenlevel"
    )
    assert torch.equal(mask1, mask3) and not torch.equal(emb1, emb3)


_POISONED_TRAINING = """
import sys, numpy as np
from vocabtransfer.data import fasttext_models
text, out, poison = sys.argv[1], sys.argv[2], sys.argv[3] == "poison"
if poison:
    # ~200 MB of freed heap chunks full of 0xff bytes (NaN as float32), kept from being returned to
    # the OS by a live chunk above them: what a long test session or notebook leaves behind.
    junk = [b"\\xff" * 65536 for _ in range(3000)]
    keep = b"\\x01" * 65536
    del junk
ft = fasttext_models.train_fasttext(text, seed=7, dim=8, epochs=2, min_count=5, threads=1)
np.save(out, ft.get_input_matrix()[: len(ft.words)])
"""


def test_training_does_not_depend_on_old_heap_bytes(corpus, tmp_path):
    """fastText leaves most of its input matrix as malloc returns it; on a reused heap that was NaN
    bytes ("Encountered NaN", seen in CI) or silently different vectors. Fresh and poisoned
    processes must give the same vectors."""
    import subprocess
    import sys

    def train(mode):
        out = tmp_path / f"{mode}.npy"
        subprocess.run([sys.executable, "-c", _POISONED_TRAINING, str(corpus[2]), str(out), mode], check=True)
        return np.load(out)

    fresh, poisoned = train("fresh"), train("poison")
    assert np.isfinite(fresh).all() and np.array_equal(fresh, poisoned)


@pytest.fixture(scope="module")
def word_bin(tmp_path_factory, raw_lines):
    """A small word-level .bin (subword n-grams, default bucket), trained from an iterable of lines."""
    out = tmp_path_factory.mktemp("words") / "words.bin"
    fasttext_models.train_word_fasttext(
        iter(raw_lines), out, fasttext_models.WordFasttextSettings(dim=8, epochs=1, min_count=3), seed=1
    )
    return out


def test_train_word_fasttext_saves_a_loadable_model(word_bin, raw_lines):
    ft = fasttext_models.load_fasttext(word_bin)
    words = set(ft.get_words())
    assert ft.get_dimension() == 8 and "na" in words
    assert [p.name for p in word_bin.parent.iterdir()] == ["words.bin"]  # no temporary files left behind
    # from a file, with subword n-grams (minn=3, maxn=6): an unseen word still gets a vector
    text = word_bin.parent / "raw.txt"
    text.write_text("\n".join(raw_lines[:300]) + "\n", encoding="utf-8")
    sub = fasttext_models.train_word_fasttext(
        text, word_bin.parent / "sub.bin", fasttext_models.WordFasttextSettings(dim=8, epochs=1, min_count=2), seed=1
    )
    assert fasttext_models.load_fasttext(word_bin.parent / "sub.bin").get_words() == sub.get_words()
    assert "Kiswahilizzq" not in set(sub.get_words()) and np.abs(sub.get_word_vector("Kiswahilizzq")).sum() > 0


def test_wordlevel_uses_decoded_stripped_forms(word_bin):
    from vocabtransfer.model.hub import load_tokenizer

    tok = load_tokenizer("sentence-transformers/all-MiniLM-L6-v2")
    ft = fasttext_models.load_fasttext(word_bin)
    emb, mask = fasttext_vectors.token_vectors(ft, tok, "wordlevel")
    assert emb.shape == (len(tok), 8)
    # OOV words whose n-grams all hash to untrained, zero bucket rows get no vector
    assert 0 < int(mask.sum()) < len(tok) and not emb[~mask].any()
    ids = [tok.convert_tokens_to_ids(t) for t in ("na", "wa", "##na", "[CLS]", "the")]
    ids += list(range(0, len(tok), 499)) + (~mask).nonzero().flatten()[:20].tolist()
    for i in ids:  # one decode per token, as deepfocus does, must agree with the batch decode
        vec = ft.get_word_vector(tok.decode(i).strip())
        assert np.array_equal(emb[i].numpy(), vec), tok.convert_ids_to_tokens(i)
        assert bool(mask[i]) == bool(np.absolute(vec).sum() != 0)
    assert mask[tok.convert_tokens_to_ids("na")]


@pytest.mark.parametrize("damage", ["garbage", "truncated_header", "truncated_matrix", "empty"])
def test_corrupt_bin_is_a_clear_error(word_bin, tmp_path, damage):
    data = word_bin.read_bytes()
    bad = tmp_path / "model.bin"
    bad.write_bytes(
        {
            "garbage": b"not a fastText model\n" * 10,
            "truncated_header": data[:200],
            "truncated_matrix": data[: len(data) - 100],
            "empty": b"",
        }[damage]
    )
    with pytest.raises(VocabTransferError, match=r"model\.bin: not a complete fastText \.bin"):
        fasttext_models.load_fasttext(bad)
    with pytest.raises(VocabTransferError, match="not found"):
        fasttext_models.load_fasttext(tmp_path / "missing.bin")


def test_empty_or_unusable_text_is_a_clear_error(tmp_path):
    for name, content in [("empty.txt", ""), ("blank.txt", "\n  \n\t\n")]:
        (tmp_path / name).write_text(content)
        with pytest.raises(VocabTransferError, match=rf"{name}: training text is empty"):
            fasttext_models.train_fasttext(tmp_path / name, **FAST)
    (tmp_path / "few.txt").write_text("a b c\n")
    with pytest.raises(VocabTransferError, match=r"few\.txt: fastText training failed .*min_count=5 times"):
        fasttext_models.train_fasttext(tmp_path / "few.txt", **FAST)
    with pytest.raises(VocabTransferError, match="not found"):
        fasttext_models.train_fasttext(tmp_path / "missing.txt", **FAST)


def _params(**fasttext) -> dict:
    return validate_params(
        {
            "languages": ["sw"],
            "seed": 7,
            "source_model": "sentence-transformers/all-MiniLM-L6-v2",
            "corpus": {"sources": {"sw": {"path": "pretrain_text/sw.txt"}}},
            "fasttext": {"dim": 8, "epochs": 2, "min_count": 5, **fasttext},
        }
    )


def test_stage_tokenlevel_end_to_end(stage_dir, corpus, token_model):
    tok = corpus[0]
    # the job is given 2 threads; fasttext.reproducible (default) trains on one, and the stats say so
    run_stage("fasttext", _params(), {"lang": "sw"}, threads=2)
    t = load_tensors(paths.fill(paths.FASTTEXT_EMB, lang="sw"), ["embeddings", "mask"])
    expected_emb, expected_mask = fasttext_vectors.token_vectors(
        token_model, tok, "tokenlevel"
    )  # same seed, one thread
    assert torch.equal(t["embeddings"], expected_emb) and torch.equal(t["mask"], expected_mask)
    saved = fasttext_models.load_fasttext(paths.fill(paths.FASTTEXT_BIN, lang="sw"))
    assert saved.get_words() == token_model.get_words()
    stats = json.loads(Path(paths.fill(paths.FASTTEXT_STATS, lang="sw")).read_text())
    assert stats["vocab_size"] == len(tok) and stats["tokens_with_vector"] == int(expected_mask.sum())
    assert stats["tokens_with_vector"] + stats["tokens_without_vector"] == len(tok)
    assert stats["fasttext_words"] == len(token_model.get_words()) and stats["deterministic"]
    assert stats["threads"] == 1
    assert stats["params"]["fasttext.min_count"] == 5 and "fasttext" in stats["versions"]
    assert not [p for p in stage_dir.rglob(".*tmp-*")]  # atomic writes left no temporaries


def test_stage_wordlevel_end_to_end(stage_dir, corpus, word_bin):
    tok = corpus[0]
    with pytest.raises(VocabTransferError, match="fasttext.pretrained_path is not set"):
        run_stage("fasttext", _params(mode="wordlevel"), {"lang": "sw"}, threads=1)
    with pytest.raises(VocabTransferError, match="fasttext.pretrained_path 'nope.bin'"):
        run_stage("fasttext", _params(mode="wordlevel", pretrained_path="nope.bin"), {"lang": "sw"}, threads=1)
    run_stage("fasttext", _params(mode="wordlevel", pretrained_path=str(word_bin)), {"lang": "sw"}, threads=1)
    assert Path(paths.fill(paths.FASTTEXT_BIN, lang="sw")).read_bytes() == word_bin.read_bytes()
    t = load_tensors(paths.fill(paths.FASTTEXT_EMB, lang="sw"), ["embeddings", "mask"])
    expected_emb, expected_mask = fasttext_vectors.token_vectors(
        fasttext_models.load_fasttext(word_bin), tok, "wordlevel"
    )
    assert torch.equal(t["embeddings"], expected_emb) and torch.equal(t["mask"], expected_mask)
    stats = json.loads(Path(paths.fill(paths.FASTTEXT_STATS, lang="sw")).read_text())
    assert stats["mode"] == "wordlevel" and stats["tokens_with_vector"] == int(expected_mask.sum())
