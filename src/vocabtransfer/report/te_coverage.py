"""How often the token-equivalent's interval (report.token_equivalent) covers the truth: a simulation at the
studies' design.

Each synthetic study has a baseline B and a method M, 3 pretraining seeds each, C valid blocks of 400–1,600
tokens, evaluated at a design's budgets (0, then the cool-down branch ends). The mean curves are power laws

    B(t) = floor + A · (t + t0)^(−α),    M(t) = B(t + head): the method has a head start of `head` tokens,

(floor 3 nats, α 0.5, t0 a fifth of the first budget, A such that B(0) = 10 nats); `head` 0 is "no
advantage". Run k of model X on block c at evaluation i (t_i > 0) has the loss

    X(t_i) + u_c + v_{X,c} + a_{X,k} + e_{X,k,i} + w_{X,k,c,i}

with u_c the block's difficulty shared by every run (sd 0.3 nats; the block's unigram floor moves with it),
v_{X,c} the model's own block effect (sd 0.05), a_{X,k} the pretraining seed's effect (sd `seed_sd`; seed k
of B and M share half its variance, as they share the data order), e the seed's wobble at each evaluation
(sd `seed_sd` / 2) and w a per-block noise (sd 0.05); at t = 0 only the block terms. The unigram floor of
block c is 5 nats + u_c + N(0, 0.1), for the method's and the baseline's floor crossings.

The truth is read off the noise-free mean curves at the measured points with the report's rule
(`token_equivalent.position`): the token-equivalent at each measured budget, and each model's crossing of
the 5-nat floor. An interval covers it when the truth, in tokens, lies within its ends (both measured
points, 0 or "> run"); a truth inside the first step is any count strictly between 0 and b1. The intervals
are each at `confidence` (no Bonferroni: the report divides the level by its table's rows on top).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from vocabtransfer.report import token_equivalent as te

SEEDS = 3
BASE, METHOD = ("random", te.STANDARD), ("focus", te.STANDARD)
FLOOR, UNIGRAM, ALPHA, START = 3.0, 5.0, 0.5, 10.0


@dataclass(frozen=True)
class Design:
    name: str
    budgets: tuple[float, ...]  # the measured points, the first 0


@dataclass(frozen=True)
class Scenario:
    name: str
    head: float  # the method's head start, in first budgets
    seed_sd: float


DESIGNS = (
    Design("MiniLM-like", (0.0, 1e5, 3e5, 1e6, 2.6e6)),
    Design("Gemma-like", (0.0, 1e4, 3e4, 5.3e4)),
)
SCENARIOS = (
    Scenario("head start 2 b1, seed sd 0.01", 2.0, 0.01),
    Scenario("head start 2 b1, seed sd 0.05", 2.0, 0.05),
    Scenario("no advantage, seed sd 0.05", 0.0, 0.05),
    Scenario("stress: head start 2 b1, seed sd 0.3", 2.0, 0.3),
)
BLOCKS = (70, 200)


def mean_curve(design: Design, head: float) -> np.ndarray:
    """A model's noise-free mean loss at the design's budgets (head 0: the baseline)."""
    t = np.asarray(design.budgets)
    t0 = design.budgets[1] / 5
    amplitude = (START - FLOOR) * t0**ALPHA
    return FLOOR + amplitude * (t + head * design.budgets[1] + t0) ** (-ALPHA)


def synthetic_study(
    rng: np.random.Generator, design: Design, scenario: Scenario, blocks: int
) -> tuple[te.Curves, dict]:
    """The two models' runs as the report reads them, and the truths in positions: ("te", i) at budget i,
    ("floor", key) to the unigram floor."""
    counts = rng.integers(400, 1601, blocks).astype(float)
    u = rng.normal(0.0, 0.3, blocks)
    unigram = counts * (UNIGRAM + u + rng.normal(0.0, 0.1, blocks))
    shared = rng.normal(0.0, scenario.seed_sd * math.sqrt(0.5), SEEDS)
    n_eval, trained = len(design.budgets), np.asarray(design.budgets) > 0
    runs: dict = {}
    for key, head in ((BASE, 0.0), (METHOD, scenario.head)):
        curve = mean_curve(design, head)
        own = rng.normal(0.0, 0.05, blocks)
        for k in range(SEEDS):
            seed = shared[k] + rng.normal(0.0, scenario.seed_sd * math.sqrt(0.5))
            wobble = rng.normal(0.0, scenario.seed_sd / 2, n_eval)
            level = curve + trained * (seed + wobble)  # evaluations
            loss = level[:, None] + (u + own)[None, :] + rng.normal(0.0, 0.05, (n_eval, blocks))
            runs.setdefault(key, []).append(te.RunCurve(np.asarray(design.budgets), loss * counts, k + 1))
    base, method = mean_curve(design, 0.0), mean_curve(design, scenario.head)
    truth: dict = {("te", i): float(te.position(base[None, :], method[i])[0]) for i in range(1, n_eval)}
    for key, curve in ((BASE, base), (METHOD, method)):
        truth[("floor", key)] = float(te.position(curve[None, :], UNIGRAM)[0])
    return te.Curves(runs, counts, unigram, None), truth


def _tokens(pos: float, grid: np.ndarray) -> float:
    """A true position in tokens: the report's reading, and strictly inside the first step for one there."""
    if 0 < pos < 1:
        return pos * float(grid[1])
    return te.point_tokens(pos, grid)[0]


def _covers(e: te.Estimate, truth: float, grid: np.ndarray) -> bool:
    """The interval, its ends at measured points, holds the truth (a position) in tokens."""
    return e.low <= _tokens(truth, grid) <= e.high


def _covers_raw(e: te.Estimate, truth: float) -> bool:
    """Before rounding: point ± half-width in positions holds the truth's position."""
    if math.isinf(e.half):
        return True
    return abs(e.position - truth) <= e.half if math.isfinite(truth) else math.isinf(e.position)


def coverage(
    design: Design,
    scenario: Scenario,
    *,
    blocks: int,
    sims: int,
    resamples: int,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict:
    """Per quantity (("te", i) at budget i, ("floor", key)), the share of `sims` studies whose interval holds
    the truth; under ("raw", quantity) the same before the ends are rounded out to measured points."""
    rng = np.random.default_rng(seed)
    grid = np.asarray(design.budgets)
    hits: dict = {}
    for s in range(sims):
        curves, truth = synthetic_study(rng, design, scenario, blocks)
        reps = te.replicate(curves, resamples, seed=s)
        assert reps.unigram is not None  # the synthetic blocks have their unigram floor
        got: dict = {("te", i): te.equivalent(reps, METHOD, BASE, i, confidence).tokens for i in range(1, len(grid))}
        for key in (BASE, METHOD):
            got[("floor", key)] = te.floor_estimate(reps, key, reps.unigram, confidence)
        for q, e in got.items():
            hits[q] = hits.get(q, 0) + _covers(e, truth[q], grid)
            hits[("raw", q)] = hits.get(("raw", q), 0) + _covers_raw(e, truth[q])
    return {q: n / sims for q, n in hits.items()}


def table(sims: int = 1000, resamples: int = 1000, confidence: float = 0.95, seed: int = 0) -> list[dict]:
    """Coverage for every design, number of blocks and scenario."""
    rows = []
    for design in DESIGNS:
        for blocks in BLOCKS:
            for scenario in SCENARIOS:
                got = coverage(
                    design, scenario, blocks=blocks, sims=sims, resamples=resamples, confidence=confidence, seed=seed
                )
                rows.append({"design": design.name, "blocks": blocks, "scenario": scenario.name, "coverage": got})
    return rows


def cells(rows: list[dict], raw: bool = False) -> list[float]:
    """Every coverage the table holds (`raw`: before the ends are rounded out)."""
    return [v for r in rows for q, v in r["coverage"].items() if (q[0] == "raw") == raw]


def markdown(rows: list[dict], confidence: float = 0.95, raw: bool = False) -> str:
    """One line per design, blocks and scenario; a column per measured budget's token-equivalent and per
    model's floor crossing (`raw`: the coverage before the ends are rounded out to measured points)."""
    width = max(len(d.budgets) for d in DESIGNS) - 1
    head = [f"b{i}" for i in range(1, width + 1)] + ["random to the floor", "focus to the floor"]
    lines = [
        "| design | blocks | scenario | " + " | ".join(head) + " |",
        "|---|---|---|" + "---|" * len(head),
    ]
    for r in rows:
        got = {q[1] if raw else q: v for q, v in r["coverage"].items() if (q[0] == "raw") == raw}
        values = [got.get(("te", i)) for i in range(1, width + 1)] + [got[("floor", BASE)], got[("floor", METHOD)]]
        lines.append(
            f"| {r['design']} | {r['blocks']} | {r['scenario']} | "
            + " | ".join("–" if v is None else f"{100 * v:.1f} %" for v in values)
            + " |"
        )
    budgets = "; ".join(f"{d.name}: " + ", ".join(f"{b:g}" for b in d.budgets) for d in DESIGNS)
    what = "point ± half-width in positions, before the ends are rounded out," if raw else "interval"
    return (
        "\n".join(lines)
        + f"\n\nShare of synthetic studies whose {100 * confidence:g} % {what} holds the true token-equivalent at "
        f"each measured budget b1, b2, … ({budgets} tokens) and the true tokens to the unigram floor.\n"
    )
