"""Per-line scores and their sums (bits per byte, bytes per token): numpy only, so the report reads them
without loading a model or torch; `line_bits` computes them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LineScores:
    """Per valid line: bits (Σ −log2 p over its scored tokens; NaN for a masked LM), UTF-8 bytes, its own
    tokens and how many of them were scored."""

    bits: np.ndarray
    n_bytes: np.ndarray
    n_tokens: np.ndarray
    n_scored: np.ndarray

    @property
    def bits_per_byte(self) -> float:
        total = int(self.n_bytes.sum())
        return float(self.bits.sum() / total) if total else math.nan

    @property
    def bytes_per_token(self) -> float:
        return bytes_per_token(self.n_bytes, self.n_tokens)


def bytes_per_token(n_bytes, n_tokens) -> float:
    """Σ UTF-8 bytes / Σ tokens over the same lines (NaN without tokens)."""
    tokens = int(np.sum(n_tokens))
    return float(np.sum(n_bytes) / tokens) if tokens else math.nan
