"""Token frequencies and the loss per frequency bucket: the counts of a pre-tokenised train split (with the
special tokens the model sees around every line), each token id's frequency rank, the buckets of ranks
(`equal_types` or `log`, the types never seen in train a bucket of their own), and a model's held-out loss
summed per block and bucket with its rows per bucket and per (block, bucket) cell. token_frequency_loss
groups its losses by them; gradient_scenarios ranks its tokens by the same counts.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

import torch

from vocabtransfer.data.token_ids import TokenIds
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.model import lm_loss
from vocabtransfer.model.lmdata import Kind, special_tokens_around

SCHEMES = ("equal_types", "log")


def read_ids(path: str | Path, tokenizer) -> TokenIds:
    """A pre-tokenised split, mapped; it must have been written with `tokenizer`."""
    return TokenIds(path, tokenizer)


def token_counts(ids: TokenIds, tokenizer, kind: Kind) -> np.ndarray:
    """Occurrences of every token id (len(tokenizer)) in pre-tokenised lines, with the special tokens
    the model sees around each line (`pack_ids`'s prefix and suffix, and the eos that closes a line
    of a causal model); counted chunk by chunk."""
    vocab = len(tokenizer)
    counts = np.zeros(vocab, dtype=np.int64)
    for chunk in ids.chunks():
        if chunk.size and int(chunk.max()) >= vocab:
            raise VocabTransferError(
                f"{ids.path}: token id {int(chunk.max())} is outside the tokenizer's {vocab} ids; "
                "the pre-tokenised split and the model's tokenizer do not match, rerun pretokenize"
            )
        counts += np.bincount(chunk, minlength=vocab)
    prefix, suffix = special_tokens_around(tokenizer)
    extra = prefix + suffix
    if kind == "causal" and tokenizer.eos_token_id is not None and (not suffix or suffix[-1] != tokenizer.eos_token_id):
        extra.append(tokenizer.eos_token_id)
    for token in extra:
        counts[token] += len(ids)
    return counts


def frequency_ranks(counts: np.ndarray) -> np.ndarray:
    """Rank of every token id: 0 = most frequent, ties broken by the smaller id."""
    order = np.lexsort((np.arange(len(counts)), -counts))
    ranks = np.empty(len(counts), dtype=np.int64)
    ranks[order] = np.arange(len(counts))
    return ranks


def bucket_edges(n_seen: int, n_buckets: int, scheme: str) -> np.ndarray:
    """Strictly increasing rank edges 0 = e_0 < … < e_k = n_seen: bucket i holds ranks e_i..e_{i+1}-1."""
    if scheme not in SCHEMES:
        raise VocabTransferError(f"token_frequency_loss.scheme: {scheme!r} is not one of {', '.join(SCHEMES)}")
    if n_seen == 0:
        return np.array([0], dtype=np.int64)
    if scheme == "equal_types":
        edges = np.rint(np.linspace(0, n_seen, n_buckets + 1))
    else:
        edges = np.floor(np.geomspace(1, n_seen + 1, n_buckets + 1)) - 1
    edges = np.unique(edges.astype(np.int64))
    edges[0], edges[-1] = 0, n_seen
    return np.unique(edges)


def frequency_buckets(counts: np.ndarray, n_buckets: int, scheme: str):
    """(bucket of every token id, [(rank_lo, rank_hi, n_types)] per bucket). Seen types fill buckets
    0..k-1 by `scheme`; types never seen (count 0) form bucket k, after the rarest seen bucket."""
    ranks = frequency_ranks(counts)
    n_seen = int((counts > 0).sum())
    edges = bucket_edges(n_seen, n_buckets, scheme)
    k = len(edges) - 1
    bucket = np.where(ranks < n_seen, np.searchsorted(edges, ranks, side="right") - 1, k)
    spans = [(int(edges[i]), int(edges[i + 1]) - 1, int(edges[i + 1] - edges[i])) for i in range(k)]
    if n_seen < len(counts):
        spans.append((n_seen, len(counts) - 1, len(counts) - n_seen))
    return bucket.astype(np.int64), spans


def bucket_losses(model, batches: list[dict], kind: Kind, bucket: np.ndarray, n_buckets: int):
    """(summed standard cross-entropy, number of target tokens), each (blocks, buckets), over fixed
    batches: block = the row of the packed held-out block a predicted token belongs to (each token's
    loss from the hidden states through the fused head, `lm_loss.token_losses`)."""
    sums, counts = [], []
    model.eval()
    with torch.inference_mode():
        for batch in batches:
            labels = batch["labels"][:, 1:] if kind == "causal" else batch["labels"]
            rows = (labels != -100).nonzero()[:, 0].numpy()
            losses, targets = lm_loss.token_losses(model, batch, kind, objective="standard")
            loss = losses.double().cpu().numpy()
            cell = rows * n_buckets + bucket[targets.cpu().numpy()]
            size = labels.shape[0] * n_buckets
            sums.append(np.bincount(cell, weights=loss, minlength=size).reshape(-1, n_buckets))
            counts.append(np.bincount(cell, minlength=size).reshape(-1, n_buckets))
    return np.concatenate(sums), np.concatenate(counts).astype(np.int64)


def rows_for(lang: str, method: str, objective: str, pseed: int, spans, sums, counts) -> list[dict]:
    """One row per bucket: the mean loss over every held-out block (sums and counts are per bucket)."""
    return [
        {
            "lang": lang,
            "method": method,
            "objective": objective,
            "pseed": pseed,
            "bucket": i,
            "rank_lo": lo,
            "rank_hi": hi,
            "n_types": n,
            "n_tokens": int(counts[i]),
            "loss": float(sums[i] / counts[i]) if counts[i] else math.nan,
        }
        for i, (lo, hi, n) in enumerate(spans)
    ]


def block_rows(method: str, objective: str, pseed: int, sums: np.ndarray, counts: np.ndarray) -> dict[str, list]:
    """Columns of token_frequency_loss.BLOCKS_SCHEMA for the non-empty (block, bucket) cells of one model."""
    block, bucket = np.nonzero(counts)
    return {
        "method": [method] * len(block),
        "objective": [objective] * len(block),
        "pseed": [pseed] * len(block),
        "bucket": bucket.tolist(),
        "block": block.tolist(),
        "loss_sum": sums[block, bucket].tolist(),
        "n_tokens": counts[block, bucket].tolist(),
    }
