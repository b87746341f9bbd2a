"""Language-model data: text lines packed into blocks of token ids, and collated batches with labels
(seeded masked-LM masking, or causal labels). Shared by source_head, init_eval, pretrain and the
analyses.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Literal, Sequence

import torch
from transformers import DataCollatorForLanguageModeling

from vocabtransfer.errors import VocabTransferError

if TYPE_CHECKING:
    import numpy as np

Kind = Literal["masked", "causal"]
MLM_PROBABILITY = 0.15


def read_lines(path: str | os.PathLike) -> list[str]:
    """Non-empty, stripped lines of a UTF-8 text file."""
    path = Path(path)
    if not path.is_file():
        raise VocabTransferError(
            f"{path}: text file not found; check the path in params.yaml (relative paths "
            "resolve against $VOCABTRANSFER_DATA)"
        )
    with path.open(encoding="utf-8") as fh:
        return [s for s in (line.strip() for line in fh) if s]


def pack_lines(tokenizer, lines: list[str], seq_len: int, *, kind: Kind = "masked") -> list[list[int]]:
    """Token blocks of at most `seq_len` ids, each a run of whole lines (a line longer than a block is cut).

    Lines are encoded with the tokenizer's special tokens (BERT: `[CLS] … [SEP]`); for causal models an
    end-of-sequence token closes each line when the tokenizer does not add one.
    """
    encoded = tokenizer(lines, add_special_tokens=True, truncation=True, max_length=seq_len)["input_ids"]
    return _pack(encoded, seq_len, tokenizer.eos_token_id if kind == "causal" else None)


def _pack(lines: Iterable[list[int]], seq_len: int, eos: int | None) -> list[list[int]]:
    """Whole lines (ids with their special tokens) packed into blocks of at most `seq_len` ids; with
    `eos`, each line ends with it (the last id replaced when the line is full)."""
    blocks: list[list[int]] = []
    block: list[int] = []
    for ids in lines:
        if eos is not None and (not ids or ids[-1] != eos):
            ids = ids[: seq_len - 1] + [eos]
        if block and len(block) + len(ids) > seq_len:
            blocks.append(block)
            block = []
        block = block + ids
    if block:
        blocks.append(block)
    return blocks


def special_tokens_around(tokenizer) -> tuple[list[int], list[int]]:
    """(prefix, suffix) ids that `tokenizer(text)` adds around a line's own ids (BERT: [CLS] / [SEP];
    XLM-R: <s> / </s>; Llama: <s> / none; GPT-2: none), read off the encoding of a probe text."""
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a", add_special_tokens=True)["input_ids"]
    for start in range(len(full) - len(plain) + 1):
        if full[start : start + len(plain)] == plain:
            return list(full[:start]), list(full[start + len(plain) :])
    raise VocabTransferError(
        f"{tokenizer.name_or_path}: cannot tell which special tokens the tokenizer adds "
        "around a line (its encoding of 'a' with special tokens does not contain the one without)"
    )


def pack_ids(
    tokenizer, sequences: Iterable[Sequence[int] | np.ndarray], seq_len: int, *, kind: Kind = "masked"
) -> list[list[int]]:
    """`pack_lines` for pre-tokenised lines (ids without special tokens, as the pretokenize stage writes them).

    Each line gets the special tokens `tokenizer(text)` adds, is cut to `seq_len` the way
    `truncation=True, max_length=seq_len` cuts it, and lines are packed whole into blocks of at most
    `seq_len` ids; for causal models an end-of-sequence token closes each line. The same lines give
    the same blocks as `pack_lines` on their text.
    """
    prefix, suffix = special_tokens_around(tokenizer)
    room = seq_len - len(prefix) - len(suffix)
    if room < 1:
        raise VocabTransferError(f"seq_len {seq_len} leaves no room for tokens between the special tokens")
    return _pack(
        (prefix + [int(i) for i in line[:room]] + suffix for line in sequences),
        seq_len,
        tokenizer.eos_token_id if kind == "causal" else None,
    )


class LMCollator:
    """Blocks -> padded tensors with labels; masked-LM masking is seeded (same seed, same masks).

    Masked: `DataCollatorForLanguageModeling` (15 % of non-special tokens, 80/10/10). Causal: labels
    are the inputs, padding ignored.
    """

    def __init__(self, tokenizer, kind: Kind, seed: int, mlm_probability: float = MLM_PROBABILITY):
        self.kind = kind
        self.tokenizer = tokenizer
        if kind == "masked":
            if tokenizer.mask_token is None or tokenizer.pad_token is None:
                raise VocabTransferError(
                    f"{tokenizer.name_or_path}: a masked LM needs a tokenizer with mask and "
                    "pad tokens; this one lacks them"
                )
            self.mlm = DataCollatorForLanguageModeling(tokenizer, mlm_probability=mlm_probability, seed=seed)

    def __call__(self, blocks: list[list[int]]) -> dict:
        if self.kind == "masked":
            return dict(self.mlm([{"input_ids": b} for b in blocks]))
        width = max(len(b) for b in blocks)
        pad = self.tokenizer.pad_token_id
        pad = self.tokenizer.eos_token_id if pad is None else pad
        pad = 0 if pad is None else pad
        ids = torch.full((len(blocks), width), pad, dtype=torch.long)
        mask = torch.zeros((len(blocks), width), dtype=torch.long)
        for i, b in enumerate(blocks):
            ids[i, : len(b)] = torch.tensor(b, dtype=torch.long)
            mask[i, : len(b)] = 1
        return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def target_labels(batch: dict, kind: Kind):
    """The labels a batch's predictions are scored against, one row per block: causal models predict the next
    token (labels shifted by one), masked models their masked positions; -100 where nothing is predicted."""
    return batch["labels"][:, 1:] if kind == "causal" else batch["labels"]


def lm_batches(tokenizer, blocks: list[list[int]], kind: Kind, batch_size: int, seed: int) -> list[dict]:
    """All blocks collated into batches in order, with seeded masks (for evaluation)."""
    collate = LMCollator(tokenizer, kind, seed)
    return [collate(blocks[i : i + batch_size]) for i in range(0, len(blocks), batch_size)]
