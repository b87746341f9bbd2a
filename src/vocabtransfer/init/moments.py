"""Per-dimension mean and std of a source embedding matrix (`source_moments`): what `random` draws its rows
around (`methods.baselines.random_matrix`) and what the init stage shrinks them toward (`init.calibrate`), in a
module of its own so that the init stage does not depend on the baselines' code."""

from __future__ import annotations

import torch

MOMENT_BLOCK = 32768  # source rows per float64 block of `source_moments`


def source_moments(source: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-dimension mean and (population) std of the source rows, reduced in float64 so the
    float32 result does not depend on the thread count.

    Two passes over row blocks (the sum, then the squared deviations from the mean): no float64
    copy of the whole matrix, and no per-column Welford loop (torch's `std(0)` takes ~25 s on
    262,144 × 640 where this takes well under one)."""
    n, d = source.shape
    total = torch.zeros(d, dtype=torch.float64, device=source.device)
    for start in range(0, n, MOMENT_BLOCK):
        total += source[start : start + MOMENT_BLOCK].double().sum(0)
    mean = total / max(n, 1)
    sq = torch.zeros_like(total)
    for start in range(0, n, MOMENT_BLOCK):
        dev = source[start : start + MOMENT_BLOCK].double() - mean
        sq += (dev * dev).sum(0)
    return mean.float(), (sq / max(n, 1)).sqrt().float()
