"""Floors for bits per byte: predictors without a model, scored on exactly the tokens a model is scored on.

A language model that needs more bits per byte than a predictor without a model has learned less about
the text than token counts do. Three such predictors, each scored per valid line by the definition in
`evaluate.bits_per_byte` (the line's own tokens, special tokens left out; the first token not scored when
the tokenizer gives no context to predict it from, as for a model):

* `unigram-target`: a unigram model of the target tokenizer, fitted on the pre-tokenised train split
  (results/<lang>/pretokenized/train, read chunk by chunk through `data.token_ids.TokenIds`);
* `unigram-source`: a unigram model of the source tokenizer, fitted on the same train text
  (results/<lang>/corpus/train.parquet, encoded batch by batch: memory bounded by one batch and the
  vocabulary's counts), scoring the valid lines as the source model reads them;
* `uniform`: a uniform guess over the target vocabulary, log2 V bits per scored token.

Both unigrams use add-one smoothing over the tokenizer's V ids: p(t) = (c_t + 1) / (N + V), c_t the
count of id t among the N train tokens. The best floor is the one with the fewest bits per byte; the
report compares every model with it (model − best floor, paired line by line) and measures the share
of the source's advantage a method keeps from it (`bits_per_byte.share_kept`).
"""

from __future__ import annotations

import math
from itertools import chain
from pathlib import Path

import numpy as np

from vocabtransfer.data.corpus_lines import iter_text_batches
from vocabtransfer.data.pretokenize import encode_batches, encoder
from vocabtransfer.data.token_ids import counts_of, unigram_counts
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.evaluate.bits_per_byte import LineScores, context_ids, line_counts
from vocabtransfer.evaluate.score_terms import (  # noqa: F401 (what the report reads without torch; read from here too)
    FLOOR,
    NAMES,
    UNIGRAM_ROW,
    best,
)


def target_counts(path: str | Path, tokenizer) -> np.ndarray:
    """Unigram counts of the pre-tokenised train split at `path`, written with `tokenizer` (checked)."""
    return unigram_counts(path, tokenizer)


def source_counts(tokenizer, corpus: str | Path, batch_size: int = 1000) -> np.ndarray:
    """Unigram counts of a corpus split's text encoded with `tokenizer` (no special tokens), streamed."""
    backend = encoder(tokenizer)
    chunks = (
        np.fromiter(chain.from_iterable(e.ids for e in encs), dtype=np.int64)
        for _, encs in encode_batches(backend, iter_text_batches(corpus, batch_size))
    )
    return counts_of(chunks, len(tokenizer), str(corpus))


def scored_ids(tokenizer, lines: list[str]) -> tuple[list[list[int]], np.ndarray, np.ndarray]:
    """(each line's scored ids, UTF-8 bytes per line, own tokens per line): a model scores every own token,
    except the first when the tokenizer gives no context before a line (`bits_per_byte.context_ids`)."""
    ids, n_bytes, n_tokens = line_counts(tokenizer, lines)
    skip = 0 if context_ids(tokenizer) else 1
    return [list(x)[skip:] for x in ids], n_bytes, n_tokens


def unigram_scores(counts: np.ndarray, tokenizer, lines: list[str]) -> LineScores:
    """Bits of every line under the add-one-smoothed unigram of `counts` (one count per id of `tokenizer`)."""
    vocab = len(tokenizer)
    if len(counts) != vocab:
        raise VocabTransferError(f"unigram floor: {len(counts)} counts for a tokenizer of {vocab} ids")
    bits_of = -np.log2((counts + 1.0) / (float(counts.sum()) + vocab))
    scored, n_bytes, n_tokens = scored_ids(tokenizer, lines)
    bits = np.array([float(bits_of[np.asarray(x, dtype=np.int64)].sum()) for x in scored], dtype=np.float64)
    return LineScores(bits, n_bytes, n_tokens, np.array([len(x) for x in scored], dtype=np.int64))


def uniform_scores(tokenizer, lines: list[str]) -> LineScores:
    """log2 V bits for every scored token, V = the tokenizer's ids."""
    scored, n_bytes, n_tokens = scored_ids(tokenizer, lines)
    n_scored = np.array([len(x) for x in scored], dtype=np.int64)
    return LineScores(n_scored * math.log2(len(tokenizer)), n_bytes, n_tokens, n_scored)


def floor_scores(
    target_tokenizer, train_ids: str | Path, source_tokenizer, train_text: str | Path, lines: list[str]
) -> dict[str, LineScores]:
    """name -> the floor's per-line scores on `lines` (NAMES, module docstring)."""
    return {
        "unigram-target": unigram_scores(target_counts(train_ids, target_tokenizer), target_tokenizer, lines),
        "unigram-source": unigram_scores(source_counts(source_tokenizer, train_text), source_tokenizer, lines),
        "uniform": uniform_scores(target_tokenizer, lines),
    }
