"""One made-up report `Language` for the report's unit tests (test_report_baseline.py, test_recommend.py): random,
mean and focus pretrained with the standard objective over three seeds (valid-loss blocks, curves and bits per byte
on every line), with more methods and the source with its own tokenizer on request (`with_methods`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from vocabtransfer.report import read, tables

N, BLOCKS, PSEEDS = 40, 30, (1, 2, 3)
SETTINGS = tables.Settings(500, 0.95, "holm", 42, min_clusters=30)
# after pretraining (standard): per-token valid loss above 6.0, bits per byte; mean ends below random
LOSS = {"random": 1.0, "mean": 0.5, "focus": 0.0}
BPB = {"random": 2.8, "mean": 2.6, "focus": 2.5}
N_BYTES = 60 + np.arange(N) % 9  # each line's UTF-8 bytes


def bpb_rows(method: str, objective: str, pseed: int, per_line, n_tokens: int = 20) -> list[dict]:
    """bits_per_byte.parquet's rows of one run: `per_line` bits per byte on each of the N lines."""
    return [
        {
            "method": method,
            "objective": objective,
            "pseed": pseed,
            "line": line,
            "bits": float(per_line[line] * N_BYTES[line]),
            "n_bytes": int(N_BYTES[line]),
            "n_tokens": n_tokens,
            "n_scored": n_tokens,
        }
        for line in range(N)
    ]


def language() -> read.Language:
    """random, mean and focus at LOSS above 6.0 (each seed's valid-loss blocks and curve) and at BPB bits per byte."""
    rng = np.random.default_rng(0)
    lang = read.Language("sw")
    rows = []
    for method in LOSS:
        for p in PSEEDS:
            sums = 10 * (6.0 + LOSS[method] + 0.02 * rng.standard_normal(BLOCKS))
            lang.blocks[(method, "standard", p)] = pd.DataFrame(
                {"block": range(BLOCKS), "loss_sum": sums, "n_tokens": np.full(BLOCKS, 10)}
            )
            final = 6.0 + LOSS[method]  # the curve's last valid loss: what picks the stronger baseline
            lang.curves[(method, "standard", p)] = pd.DataFrame({"step": [0, 10], "valid_loss": [9.0, final]})
            rows += bpb_rows(method, "standard", p, BPB[method] + 0.01 * p + 0.1 * rng.standard_normal(N))
    lang.bits_per_byte = pd.DataFrame(rows)
    return lang


def with_methods(levels: dict[str, float], source: float | None = 1.5) -> read.Language:
    """`language()` and more methods at these bits per byte (and valid losses 0.1 above focus's); the source with
    its own tokenizer at `source` bits per byte on every line."""
    lang = language()
    rng = np.random.default_rng(7)
    rows = []
    for method, level in levels.items():
        for p in PSEEDS:
            rows += bpb_rows(method, "standard", p, level + 0.01 * p + 0.1 * rng.standard_normal(N))
            lang.blocks[(method, "standard", p)] = lang.blocks[("focus", "standard", p)].assign(
                loss_sum=lambda d: d["loss_sum"] + 1.0
            )
            lang.curves[(method, "standard", p)] = lang.curves[("focus", "standard", p)]
    if source is not None:
        rows += bpb_rows("source", "source", 0, np.full(N, source), n_tokens=25)
    lang.bits_per_byte = pd.concat([lang.bits_per_byte, pd.DataFrame(rows)], ignore_index=True)
    return lang


def loss_by_hand(lang: read.Language, method: str) -> dict[int, float]:
    """pretraining seed -> the method's valid loss per token, from its blocks."""
    return {s: df["loss_sum"].sum() / df["n_tokens"].sum() for (m, _, s), df in lang.blocks.items() if m == method}


def bpb_by_hand(lang: read.Language, method: str) -> dict[int, float]:
    """pretraining seed -> the method's bits per byte over every line."""
    df = lang.bits_per_byte[lang.bits_per_byte["method"] == method]
    return {int(p): g["bits"].sum() / g["n_bytes"].sum() for p, g in df.groupby("pseed")}
