"""Bits of text lines under a causal LM, line by line: the scoring behind bits per byte.

The definition (each line alone, its context, windows of `seq_len`, bytes) is `evaluate.bits_per_byte`'s
docstring; this module holds the scoring itself, below the phases, so that pretraining can score its valid
lines at every evaluation as init_eval and token_frequency_loss score them (`score_lines`).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

import torch

from vocabtransfer import io
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.model import lm_loss
from vocabtransfer.model.line_scores import LineScores
from vocabtransfer.model.lmdata import Kind, special_tokens_around

LN2 = math.log(2.0)


def context_ids(tokenizer) -> list[int]:
    """Step 1: the ids before a line's own tokens: the tokenizer's prefix (BOS), else [EOS], else []."""
    prefix, _ = special_tokens_around(tokenizer)
    if prefix:
        return prefix
    return [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []


def windows(seq_len: int, n_context: int, n_ids: int) -> list[tuple[int, int, int]]:
    """Step 3: (begin, end, first scored position) of each window over the sequence context + ids;
    the window's input is positions begin..end−1 and it scores positions first..end−1. Every position
    from max(n_context, 1) on is scored exactly once."""
    if seq_len < 2:
        raise VocabTransferError(f"seq_len {seq_len}: bits per byte needs windows of at least 2 tokens")
    total, stride = n_context + n_ids, max(1, seq_len // 2)
    keep = seq_len - stride
    out, begin, scored = [], 0, max(n_context, 1)
    while scored < total:
        end = min(begin + seq_len, total)
        out.append((begin, end, scored))
        scored, begin = end, max(0, min(end - keep, total - seq_len))  # the last window: as much context as fits
    return out


def valid_lines(path: str | Path, max_lines: int) -> list[str]:
    """The first `max_lines` non-empty lines of a corpus split's `text` column, stripped (the corpus stage
    wrote them so: the same lines as the first rows of the pre-tokenised split); what init_eval and
    token_frequency_loss score."""
    text = io.read_parquet(path, ["text"]).column("text").to_pylist()
    return [s.strip() for s in text if s and s.strip()][:max_lines]


def line_counts(tokenizer, lines: list[str]) -> tuple[list[list[int]], np.ndarray, np.ndarray]:
    """(each line's own ids, UTF-8 bytes per line, tokens per line)."""
    ids = tokenizer(list(lines), add_special_tokens=False)["input_ids"] if lines else []
    n_bytes = np.array([len(s.encode("utf-8")) for s in lines], dtype=np.int64)
    return ids, n_bytes, np.array([len(x) for x in ids], dtype=np.int64)


def score_lines(
    model, tokenizer, lines: list[str], *, seq_len: int, batch_size: int, kind: Kind = "causal"
) -> LineScores:
    """Steps 1–4 for every line (module docstring). A masked LM is not scored: its bits are NaN
    (`MASKED_REASON`); its bytes and tokens are counted all the same."""
    ids, n_bytes, n_tokens = line_counts(tokenizer, lines)
    context = context_ids(tokenizer)
    bits = np.zeros(len(lines), dtype=np.float64)
    n_scored = np.zeros(len(lines), dtype=np.int64)
    if kind != "causal":
        return LineScores(np.full(len(lines), math.nan), n_bytes, n_tokens, n_scored)
    # every window of every line: (line, input ids, labels); sorted by length so batches pad little
    rows = []
    for i, own in enumerate(ids):
        seq = context + list(own)
        for begin, end, first in windows(seq_len, len(context), len(own)):
            labels = [-100] * (first - begin) + seq[first:end]
            rows.append((i, seq[begin:end], labels))
            n_scored[i] += end - first
    rows.sort(key=lambda r: -len(r[1]))  # stable: equal lengths keep line order
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    was_training = model.training
    model.eval()
    # no_grad, not inference_mode: pretraining scores its valid lines with the model it trains (an FSDP2-sharded
    # model's gathered parameters must stay usable by training)
    with torch.no_grad():
        for k in range(0, len(rows), batch_size):
            chunk = rows[k : k + batch_size]
            width = len(chunk[0][1])
            input_ids = torch.full((len(chunk), width), pad, dtype=torch.long)
            labels = torch.full((len(chunk), width), -100, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for j, (_, x, y) in enumerate(chunk):
                input_ids[j, : len(x)] = torch.tensor(x)
                labels[j, : len(y)] = torch.tensor(y)
                mask[j, : len(x)] = 1
            batch = {"input_ids": input_ids, "attention_mask": mask, "labels": labels}
            row_of = (labels[:, 1:] != -100).nonzero()[:, 0].numpy()  # the order token_losses returns
            losses, _ = lm_loss.token_losses(model, batch, "causal", objective="standard")
            line_of = np.array([r[0] for r in chunk], dtype=np.int64)[row_of]
            bits += np.bincount(line_of, weights=losses.double().cpu().numpy() / LN2, minlength=len(lines))
    model.train(was_training)
    return LineScores(bits, n_bytes, n_tokens, n_scored)
