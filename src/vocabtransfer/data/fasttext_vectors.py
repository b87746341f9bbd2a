"""fastText auxiliary embeddings for the target tokens (the `fasttext` stage): each token's vector from a model.

Two modes, as in FOCUS (konstantinjdobler/focus, `deepfocus`):

- `tokenlevel` (FOCUS's default): train fastText (CBOW) on the pre-tokenised target corpus, whose "words" are target
  tokens. A target token has a vector iff it is in the fastText dictionary and its vector is not all zeros
  (deepfocus' `is_very_rare_token`, inverted).
- `wordlevel` (WECHSEL-style): embed every target token with a pretrained word-level .bin, looking up the token's
  decoded, stripped form; a token has a vector iff it is non-zero.

Out-of-dictionary tokens (`fasttext.oov`, tokenlevel only): with `random` (FOCUS's rule) a token outside the
dictionary has no vector and the methods give it a random row; with `subword` every such token except the target
tokenizer's special tokens gets fastText's character n-gram vector of its vocabulary string (`get_word_vector`),
unless that vector is all zeros (e.g. maxn=0).

Outputs: the fastText .bin, `embeddings.safetensors` with `embeddings` (V x dim float32, row i = target token id i,
zeros where there is no vector) and `mask` (V bool, the token has a vector) and, with oov `subword` only, `subword`
(V bool, the vector came from n-grams), and stats.json.

Training and loading fastText models, and why the same seed gives the same vectors on one thread only:
data.fasttext_models.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from vocabtransfer.data.corpus_lines import sampled_text
from vocabtransfer.data.fasttext_models import load_fasttext, train_fasttext
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.log import progress
from vocabtransfer import io
from vocabtransfer.model.hub import load_tokenizer
from vocabtransfer.pipeline.paths import data_path
from vocabtransfer.pipeline.stage_spec import Context
from vocabtransfer.plan.data_params import FasttextParams, Mode

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------
# token vectors


def token_vectors(ft_model, tokenizer, mode: Mode = "tokenlevel") -> tuple["torch.Tensor", "torch.Tensor"]:
    """The fastText vector of every target token: (V x dim float32, V bool mask), row i = token id i.

    tokenlevel: the vector of the vocabulary string (what the pre-tokenised text holds) if that
    string is a fastText dictionary word; wordlevel: the vector of `tokenizer.decode([i]).strip()`.
    Either way a token whose vector is all zeros has none (mask False, row zero).
    """

    vocab = tokenizer.get_vocab()  # token -> id, added tokens included
    size = max(len(tokenizer), max(vocab.values(), default=-1) + 1)
    emb = np.zeros((size, ft_model.get_dimension()), dtype=np.float32)
    if mode == "tokenlevel":
        words = set(ft_model.get_words(on_unicode_error="replace"))
        lookups = [(i, tok) for tok, i in vocab.items() if tok in words]
    elif mode == "wordlevel":
        ids = sorted(vocab.values())
        forms = tokenizer.batch_decode([[i] for i in ids])  # one call into the Rust decoder
        lookups = [(i, form.strip()) for i, form in zip(ids, forms)]
    else:
        raise VocabTransferError(f"fasttext.mode: {mode!r} is not allowed; allowed values: 'tokenlevel', 'wordlevel'")
    for i, word in progress(lookups, desc=f"fastText {mode} vectors", unit="tok"):
        emb[i] = ft_model.get_word_vector(word)
    mask = np.any(emb != 0, axis=1)  # == deepfocus' `np.absolute(v).sum() != 0`
    return torch.from_numpy(emb), torch.from_numpy(mask)


def subword_vectors(
    ft_model, tokenizer, embeddings: "torch.Tensor", mask: "torch.Tensor"
) -> tuple["torch.Tensor", "torch.Tensor", "torch.Tensor"]:
    """Fill the rows of tokenlevel `token_vectors` that have no vector from character n-grams.

    Every target token with mask False that is not a special token of `tokenizer` (those never
    occur in text) gets `ft_model.get_word_vector(vocabulary string)`; a vector that is all zeros
    (a model trained with maxn=0, or only n-grams that training never touched: fastText 0.9.3
    leaves most rows of its input matrix at zero until trained) stays "no vector".
    Returns new (embeddings, mask, subword): mask = had a vector or got a non-zero subword vector,
    subword (V bool) = the row came from n-grams.
    """

    emb = embeddings.clone().numpy()
    has = mask.numpy().copy()
    special = set(tokenizer.all_special_ids)
    lookups = sorted(
        (i, tok) for tok, i in tokenizer.get_vocab().items() if i < len(has) and not has[i] and i not in special
    )
    for i, tok in progress(lookups, desc="fastText subword vectors", unit="tok"):
        emb[i] = ft_model.get_word_vector(tok)
    subword = np.zeros_like(has)
    if lookups:
        ids = np.fromiter((i for i, _ in lookups), dtype=np.int64, count=len(lookups))
        subword[ids] = np.any(emb[ids] != 0, axis=1)
    return torch.from_numpy(emb), torch.from_numpy(has | subword), torch.from_numpy(subword)


# ---------------------------------------------------------------------------------------------
# the stage


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)  # pretrained .bin files are large (cc.*.300.bin: ~7 GB)
    except OSError:
        shutil.copyfile(src, dst)


def _fasttext_model(ctx: Context, opts: FasttextParams):
    """The fastText model of the stage, saved to its `model` output: trained on the target text (tokenlevel;
    a seeded sample of it with `fasttext.sample_bytes`), or the pretrained word-level .bin, linked.
    Returns (the model, the threads it trained on, the text or .bin its words come from)."""
    out = ctx.output
    if opts.mode == "tokenlevel":
        threads = 1 if opts.reproducible else ctx.threads
        if threads == 1 and ctx.threads > 1:
            log.info(
                "fastText on 1 thread so the vectors (and every init artefact) are byte-identical "
                "between runs; set fasttext.reproducible: false to use all %d threads",
                ctx.threads,
            )
        elif threads > 1:
            log.info(
                "fastText on %d threads: vectors vary slightly between runs (fasttext.reproducible: false)", threads
            )
        with sampled_text(ctx.input["text"], opts.sample_bytes, ctx.seed, Path(out["model"]).parent) as (text, sample):
            if sample["lines_kept"] is not None:
                log.info(
                    "fastText on a seeded sample: %d lines, %d of %d bytes (fasttext.sample_bytes)",
                    sample["lines_kept"],
                    sample["bytes_kept"],
                    sample["bytes"],
                )
            ft = train_fasttext(
                text,
                model=opts.model,
                dim=opts.dim,
                epochs=opts.epochs,
                min_count=opts.min_count,
                neg=opts.neg,
                bucket=opts.bucket,
                seed=ctx.seed,
                threads=threads,
            )
        with io.atomic_output(out["model"]) as tmp:
            ft.save_model(str(tmp))
        return ft, threads, ctx.input["text"]
    pretrained = opts.pretrained_path
    if not pretrained:
        raise VocabTransferError(
            "params.yaml: fasttext.pretrained_path is not set but fasttext.mode is wordlevel; "
            "set it to a word-level fastText .bin (e.g. cc.sw.300.bin) or use mode tokenlevel"
        )
    src = data_path(pretrained)
    if not src.is_file():
        raise VocabTransferError(
            f"params.yaml: fasttext.pretrained_path {pretrained!r}: {src} not found; "
            "fix the path (relative paths resolve against $VOCABTRANSFER_DATA)"
        )
    ft = load_fasttext(src)
    with io.atomic_output(out["model"]) as tmp:
        _link_or_copy(src, tmp)
    return ft, 1, src  # a word-level .bin is loaded, not trained


def _examples(ids: list[int]) -> list[int]:
    """At most 20 of `ids`, spread over the id range."""
    return ids[:: max(1, len(ids) // 20)][:20]


def run(ctx: Context) -> None:
    """Stage `fasttext`: auxiliary embeddings for the target tokens (see the module docstring)."""

    start = time.perf_counter()
    opts = ctx.params.fasttext
    mode, oov = opts.mode, opts.oov  # validate_params allows oov subword with tokenlevel only
    tokenizer = load_tokenizer(ctx.input["tokenizer"])
    out = ctx.output
    ft, threads, words_from = _fasttext_model(ctx, opts)
    train_seconds = time.perf_counter() - start

    emb, mask = token_vectors(ft, tokenizer, mode)
    n_dict = int(mask.sum())
    tensors, metadata, subword = {}, {}, None
    if oov == "subword":
        emb, mask, subword = subword_vectors(ft, tokenizer, emb, mask)
        tensors, metadata = {"subword": subword}, {"oov": oov}
    if not torch.isfinite(emb).all():
        raise VocabTransferError(
            f"{out['model']}: fastText vectors contain NaN/inf; retrain with 1 thread or a lower fastText lr"
        )
    n_with = int(mask.sum())
    words = ft.get_words(on_unicode_error="replace")
    if n_dict == 0:
        raise VocabTransferError(
            f"{words_from}: no target token of {ctx.input['tokenizer']} "
            f"got a fastText vector ({len(words)} fastText words); was the text pre-tokenised with this tokenizer? "
            "rerun pretokenize (or lower fasttext.min_count)"
        )
    if n_with < 0.1 * len(mask):
        log.warning("only %d of %d target tokens have a fastText vector", n_with, len(mask))
    # oov random: exactly the tensors and metadata of a stage without the option (byte-identical file)
    io.save_tensors(
        {"embeddings": emb, "mask": mask, **tensors},
        out["embeddings"],
        metadata={"mode": mode, "dim": emb.shape[1], "seed": ctx.seed, **metadata},
    )

    stats = {
        "mode": mode,
        "vocab_size": len(mask),
        "dim": int(emb.shape[1]),
        "oov": oov,
        "tokens_with_vector": n_with,  # tokens_from_dictionary + tokens_from_subwords
        "tokens_from_dictionary": n_dict,
        "tokens_from_subwords": n_with - n_dict,
        "tokens_without_vector": len(mask) - n_with,
        "coverage": n_with / len(mask),
        "fasttext_words": len(words),
        "examples_without_vector": tokenizer.convert_ids_to_tokens(_examples((~mask).nonzero().flatten().tolist())),
        "examples_from_subwords": tokenizer.convert_ids_to_tokens(
            _examples(subword.nonzero().flatten().tolist() if subword is not None else [])
        ),
        "seconds_model": round(train_seconds, 3),  # train (or load) and save the .bin
        "seconds": round(time.perf_counter() - start, 3),
        "seed": ctx.seed,
        "threads": threads,  # the threads fastText trained on (not the ones the job was given)
        "deterministic": mode == "wordlevel" or threads == 1,
        "params": ctx.leaf_values(),
        "versions": io.versions(),
    }
    io.write_json(stats, out["stats"])
    log.info(
        "fastText %s: %d of %d target tokens have a vector (%.1f%%; %d from the dictionary, %d from subwords) in %.1fs",
        mode,
        n_with,
        len(mask),
        100 * n_with / len(mask),
        n_dict,
        n_with - n_dict,
        stats["seconds"],
    )
