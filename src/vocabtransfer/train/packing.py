"""Blocks of a pre-tokenised split, found from its line offsets with numpy and read on demand.

`PackedBlocks(split, tokenizer, seq_len, kind)` holds the same blocks, in the same order, as
`lmdata.pack_ids(tokenizer, <the split's lines>, seq_len, kind=kind)`, but as one int64 per block (its
first line) instead of Python lists of ids: block b is lines starts[b]..starts[b + 1] - 1, each with
the special tokens the tokenizer adds, cut to `seq_len`, closed by eos for a causal model, and its ids
are read from the split's file when the block is asked for.

Boundaries, vectorised over a window of lines at a time (memory bounded by the window):
1. each line's length in the block, `cost`, from the offsets (special tokens and eos included);
2. with C the window's cumulative costs, a block that starts at line i runs to
   `nxt[i] = searchsorted(C, C[i] + seq_len, "right") - 1` (greedy: whole lines while they fit);
3. the block starts are the orbit of the window's first line under `nxt`, found by pointer doubling
   (log2(window) vectorised steps); the last start, whose block may run past the window, opens the
   next window.
"""

from __future__ import annotations

import numpy as np

from vocabtransfer.data.token_ids import TokenIds
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.model.lmdata import Kind, special_tokens_around

WINDOW = 1 << 18  # lines per window of the boundary search


class PackedBlocks:
    """The blocks of lines 0..lines-1 of a split (all by default); `blocks[b]` is a list of ids,
    `blocks.array(b)` the same as an int64 array."""

    def __init__(self, split: TokenIds, tokenizer, seq_len: int, *, kind: Kind = "masked", lines: int | None = None):
        self.split, self.seq_len = split, seq_len
        self.prefix, self.suffix = special_tokens_around(tokenizer)
        self._around = np.array(self.prefix, np.int64), np.array(self.suffix, np.int64)
        self.room = seq_len - len(self.prefix) - len(self.suffix)
        if self.room < 1:
            raise VocabTransferError(f"seq_len {seq_len} leaves no room for tokens between the special tokens")
        self.eos = tokenizer.eos_token_id if kind == "causal" else None
        self.n_lines = len(split) if lines is None else min(lines, len(split))
        self.starts = self._boundaries()  # block b: lines starts[b]..starts[b + 1] - 1

    def __len__(self) -> int:
        return len(self.starts) - 1

    def __iter__(self):
        return (self[b] for b in range(len(self)))

    def __getitem__(self, b: int) -> list[int]:
        return self.array(b).tolist()

    def lines(self, b: int) -> list[np.ndarray]:
        """The ids of block b's lines as the split holds them (no special tokens, not cut)."""
        a, z = int(self.starts[b]), int(self.starts[b + 1])
        off = self.split.line_offsets(a, z)
        ids = self.split.read(int(off[0]), int(off[-1]))
        rel = (off - off[0]).tolist()
        return [ids[lo:hi] for lo, hi in zip(rel[:-1], rel[1:])]

    def array(self, b: int) -> np.ndarray:
        """Block b's ids, int64: each line with its special tokens, cut to `seq_len`, closed by eos (causal)."""
        prefix, suffix = self._around
        if self.eos is None:
            return np.concatenate(
                [piece for line in self.lines(b) for piece in (prefix, line[: self.room], suffix)], dtype=np.int64
            )
        pieces = []
        for line in self.lines(b):
            kept = np.concatenate([prefix, line[: self.room], suffix], dtype=np.int64)
            if not kept.size or kept[-1] != self.eos:
                kept = np.append(kept[: self.seq_len - 1], self.eos)
            pieces.append(kept)
        return np.concatenate(pieces, dtype=np.int64)

    def item(self, b: int) -> dict:
        """A training sample's fields (`batches.StepBlocks`): block b's ids."""
        return {"input_ids": self.array(b)}

    # 1. the length of every line of a window in its block
    def _costs(self, a: int, b: int) -> np.ndarray:
        off = self.split.line_offsets(a, b)
        n = np.minimum(np.diff(off), self.room)
        cost = n + len(self.prefix) + len(self.suffix)
        if self.eos is None:
            return cost
        if self.suffix:
            last = np.full(n.size, self.suffix[-1])
        else:  # the line's last kept id, or the prefix's last id for an empty line
            ids = self.split.read(int(off[0]), int(off[-1]))  # the window's ids, uint16/uint32, dropped on return
            kept = ids[np.maximum(off[:-1] - off[0] + n - 1, 0)].astype(np.int64) if ids.size else -1
            last = np.where(n > 0, kept, self.prefix[-1] if self.prefix else -1)
        closed = (cost > 0) & (last == self.eos)
        return np.where(closed, cost, np.minimum(cost, self.seq_len - 1) + 1)

    # 2.-3. block starts, window by window
    def _boundaries(self) -> np.ndarray:
        starts, a, window = [], 0, WINDOW
        while a < self.n_lines:
            b = min(a + window, self.n_lines)
            cum = np.zeros(b - a + 1, dtype=np.int64)
            np.cumsum(self._costs(a, b), out=cum[1:])
            nxt = np.searchsorted(cum, cum[:-1] + self.seq_len, side="right") - 1
            orbit = _orbit(nxt, b - a)
            if b == self.n_lines:
                sizes = cum[nxt[orbit]] - cum[orbit]
                starts.append(a + orbit[sizes > 0])  # trailing empty lines make no block
                break
            if len(orbit) == 1:  # one block spans the whole window: widen it
                window *= 2
                continue
            starts.append(a + orbit[:-1])
            a, window = a + int(orbit[-1]), WINDOW
        found = np.concatenate(starts) if starts else np.zeros(0, dtype=np.int64)
        return np.append(found, self.n_lines).astype(np.int64)


def _orbit(nxt: np.ndarray, end: int) -> np.ndarray:
    """0, nxt[0], nxt[nxt[0]], … while below `end` (nxt[i] > i): S_{k+1} = S_k ∪ J_k(S_k), J_{k+1} = J_k∘J_k."""
    jump = np.append(nxt, end)  # `end` maps to itself
    orbit = np.zeros(1, dtype=np.int64)
    while True:
        ahead = jump[orbit]
        ahead = ahead[ahead < end]
        if ahead.size == 0:
            return orbit
        orbit = np.concatenate([orbit, ahead])
        jump = jump[jump]
