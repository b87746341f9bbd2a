"""What an initialisation is worth in tokens: learning curves on a common grid of token budgets, the
tokens the baseline needs to reach each method's valid loss, and the tokens each method needs to beat
the floors.

Inputs per pretraining run (train.pretrain): `valid_curve.parquet`, every evaluation's valid loss summed
per valid block with the tokens seen; `valid_blocks.parquet`, each block's token count and the target
unigram floor's summed loss on the same tokens. Every run of a language is scored on the same blocks
and masks, so the blocks are paired across runs.

* the grid: 0, then 1 and 3 × 10^k tokens from 1,000 up to the shortest run's last evaluation, and that
  evaluation; each run's curve is read at the grid's budgets by linear interpolation in log tokens
  (linear in tokens between 0 and the first evaluation);
* a method's curve is the mean over its pretraining seeds;
* token-equivalent at budget b: the tokens the baseline's curve needs to reach the method's loss at b,
  the first crossing, interpolated as above; 0 when the baseline starts there, "more than the run"
  (infinite) when it never gets there. The ratio to b is what the initialisation is worth in the
  baseline's tokens;
* the tokens a method needs to reach a floor: the first crossing of its curve below the floor
  (`unigram`: the add-one unigram of the training split on the same tokens; `uniform`: ln V);
* intervals: a bootstrap that resamples the pretraining seeds of each method and the valid blocks
  (the same blocks for every run of a replicate), percentiles at the confidence level divided by the
  table's rows (Bonferroni); an infinite bound is "more than the run".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from vocabtransfer.train.pretrain import log_token_budgets

STANDARD = "standard"


@dataclass
class RunCurve:
    """One pretraining run: the tokens seen at each evaluation (the first 0) and the valid loss summed per
    block at each (evaluations × blocks)."""

    tokens: np.ndarray
    sums: np.ndarray

    def unchanged(self) -> float:
        """The tokens of the last evaluation whose every block equals the initial one: no update has changed
        the model up to there (under linear warm-up the first optimizer step's learning rate is 0)."""
        same = np.all(self.sums == self.sums[0], axis=1)
        return float(self.tokens[int(np.argmin(same)) - 1]) if not same.all() else float(self.tokens[-1])


@dataclass
class Curves:
    """A language's curves: per (method, objective) its runs, by pretraining seed; the blocks' token counts
    and unigram floor sums; the uniform floor (ln V)."""

    runs: dict
    counts: np.ndarray
    unigram: np.ndarray | None
    uniform: float | None

    def unchanged(self) -> float:
        """The tokens up to which no run's model has changed (`RunCurve.unchanged`, the least over runs)."""
        return min(r.unchanged() for runs in self.runs.values() for r in runs)

    def grid(self) -> np.ndarray:
        end = min(float(r.tokens[-1]) for runs in self.runs.values() for r in runs)
        return np.array([0.0] + [float(b) for b in log_token_budgets(int(end))] + [end])


def read_curves(lang) -> Curves | None:
    """The curves of every run with a valid_curve.parquet (report.read.Language.curve_blocks), or None."""
    runs: dict = {}
    counts: np.ndarray | None = None
    unigram: np.ndarray | None = None
    uniform: float | None = None
    for (m, o, s), table in sorted(lang.curve_blocks.items()):
        blocks = lang.blocks.get((m, o, s))
        if blocks is None or table is None or not len(table):
            continue
        wide = table.pivot(index="step", columns="block", values="loss_sum").sort_index()
        tokens = table.groupby("step")["tokens_seen"].first().loc[wide.index].to_numpy(float)
        if tokens[0] != 0:
            continue  # no evaluation at the start: not a curve from the initialisation
        runs.setdefault((m, o), []).append(RunCurve(tokens, wide.to_numpy(float)))
        counts = blocks.sort_values("block")["n_tokens"].to_numpy(float)
        if "unigram_sum" in blocks:
            unigram = blocks.sort_values("block")["unigram_sum"].to_numpy(float)
        uniform = (lang.runs.get((m, o, s)) or {}).get("uniform_valid_loss", uniform)
    if not runs:
        return None
    assert counts is not None  # set with every run appended
    return Curves(runs, counts, unigram, uniform)


def interpolation(tokens: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """(grid × evaluations) weights reading a curve evaluated at `tokens` at the grid's budgets: linear in
    log tokens, linear in tokens from 0 to the first evaluation after it."""
    out = np.zeros((len(grid), len(tokens)))
    for g, budget in enumerate(grid):
        hi = int(np.searchsorted(tokens, budget, side="left"))
        if hi < len(tokens) and tokens[hi] == budget:
            out[g, hi] = 1.0
            continue
        hi = min(max(hi, 1), len(tokens) - 1)
        lo = hi - 1
        a, b = tokens[lo], tokens[hi]
        frac = (budget - a) / (b - a) if a == 0 else (math.log(budget) - math.log(a)) / (math.log(b) - math.log(a))
        out[g, lo], out[g, hi] = 1.0 - frac, frac
    return out


def crossing(curve: np.ndarray, target: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Per replicate (rows of `curve`, replicates × grid), the tokens at which the curve first reaches
    `target` (per replicate), interpolated as the curves are; 0 where it starts there, inf where it never
    does."""
    reached = curve <= target[:, None]
    first = reached.argmax(axis=1)
    out = np.full(len(curve), np.inf)
    out[reached[:, 0]] = 0.0
    rows = np.nonzero(reached.any(axis=1) & (first > 0))[0]  # reached after the start: interpolate before it
    j = first[rows]
    before, after = curve[rows, j - 1], curve[rows, j]
    same = before == after
    frac = np.where(same, 1.0, (before - target[rows]) / np.where(same, 1.0, before - after))
    a, b = grid[j - 1].astype(float), grid[j].astype(float)
    with np.errstate(divide="ignore"):  # a = 0 (the initialisation): linear in tokens, else linear in log tokens
        logged = np.exp(np.log(np.where(a > 0, a, 1.0)) + frac * (np.log(b) - np.log(np.where(a > 0, a, 1.0))))
    out[rows] = np.where(a == 0, frac * b, logged)
    return out


@dataclass
class Replicates:
    """Bootstrap replicates (row 0: the point estimate, on every seed and block once) of each method's mean
    curve on the grid, and of the unigram floor."""

    grid: np.ndarray
    mean: dict  # (method, objective) -> (replicates + 1) × grid
    per_seed: dict  # (method, objective) -> seeds × grid: each run's curve on the grid (the figure's band)
    seeds: dict  # (method, objective) -> number of pretraining seeds
    unigram: np.ndarray | None  # (replicates + 1,)
    uniform: float | None
    blocks: int
    unchanged: float = 0.0  # Curves.unchanged: budgets up to it read every run's initial loss


def replicate(curves: Curves, resamples: int, seed: int) -> Replicates:
    """Resample the valid blocks (shared by every run of a replicate) and each method's pretraining seeds."""
    rng = np.random.default_rng(seed)
    grid, n_blocks = curves.grid(), len(curves.counts)
    weights = np.vstack(
        [np.ones(n_blocks), rng.multinomial(n_blocks, np.full(n_blocks, 1.0 / n_blocks), size=resamples)]
    )
    tokens = weights @ curves.counts
    mean, seeds, point = {}, {}, {}
    for key, runs in curves.runs.items():
        per_seed = np.stack([(weights @ r.sums.T / tokens[:, None]) @ interpolation(r.tokens, grid).T for r in runs])
        k = len(runs)
        pick = np.vstack([np.arange(k)[None, :], rng.integers(0, k, size=(resamples, k))])
        mean[key] = per_seed[pick, np.arange(resamples + 1)[:, None]].mean(axis=1)
        seeds[key], point[key] = k, per_seed[:, 0]
    unigram = weights @ curves.unigram / tokens if curves.unigram is not None else None
    return Replicates(grid, mean, point, seeds, unigram, curves.uniform, n_blocks, curves.unchanged())


@dataclass
class Estimate:
    """A number of tokens with its interval (inf: more than the run)."""

    value: float
    low: float
    high: float


def estimate(values: np.ndarray, level: float) -> Estimate:
    """Row 0 the point estimate, the others the replicates; percentiles (1 − level) / 2 and (1 + level) / 2."""
    reps = values[1:]
    low, high = np.quantile(reps, [(1 - level) / 2, (1 + level) / 2], method="lower") if len(reps) else (np.nan,) * 2
    return Estimate(float(values[0]), float(low), float(high))


@dataclass
class Equivalent:
    """The baseline's tokens to reach `method`'s loss at `budget`, and their ratio to the budget."""

    method: str
    objective: str
    budget: float
    loss: float
    baseline_loss: float
    tokens: Estimate
    ratio: Estimate


def equivalents(reps: Replicates, baseline: str, confidence: float) -> list[Equivalent]:
    """Every method (not the baseline) against the baseline of its objective (else the baseline's standard
    runs), at each 10^k budget of the grid and its end; intervals Bonferroni-corrected over the rows."""
    budgets = [i for i, b in enumerate(reps.grid) if b > 0 and (math.log10(b).is_integer() or i == len(reps.grid) - 1)]
    pairs = []
    for m, o in reps.mean:
        base = (baseline, o) if (baseline, o) in reps.mean else (baseline, STANDARD)
        if m != baseline and base in reps.mean:
            pairs += [((m, o), base, i) for i in budgets]
    level = 1 - (1 - confidence) / max(1, len(pairs))
    out = []
    for key, base, i in pairs:
        tokens = crossing(reps.mean[base], reps.mean[key][:, i], reps.grid)
        out.append(
            Equivalent(
                key[0],
                key[1],
                float(reps.grid[i]),
                float(reps.mean[key][0, i]),
                float(reps.mean[base][0, i]),
                estimate(tokens, level),
                estimate(tokens / reps.grid[i], level),
            )
        )
    return out


@dataclass
class FloorCrossing:
    """The tokens `method` needs to reach each floor (None: the floor is not known)."""

    method: str
    objective: str
    unigram: Estimate | None
    uniform: Estimate | None


def floor_crossings(reps: Replicates, confidence: float) -> list[FloorCrossing]:
    level = 1 - (1 - confidence) / max(1, 2 * len(reps.mean))
    out = []
    for (m, o), curve in reps.mean.items():
        uni = estimate(crossing(curve, reps.unigram, reps.grid), level) if reps.unigram is not None else None
        flat = (
            estimate(crossing(curve, np.full(len(curve), reps.uniform), reps.grid), level)
            if reps.uniform is not None
            else None
        )
        out.append(FloorCrossing(m, o, uni, flat))
    return out


def bits_crossings(lang, reps: Replicates, source: float, resamples: int, seed: int, confidence: float) -> dict:
    """(method, objective) -> the tokens its mean bits-per-byte curve (causal runs: metrics.parquet's
    valid_bits_per_byte at each evaluation, read at the grid's budgets) needs to reach the source's bits per
    byte `source`, with an interval from resampling the pretraining seeds (the bits are per run, not per
    block); Bonferroni over the methods."""
    rng = np.random.default_rng(seed + 1)
    per_key: dict = {}
    for (m, o, _), table in sorted(lang.curves.items()):
        if "valid_bits_per_byte" not in table:
            continue
        rows = table.dropna(subset=["valid_bits_per_byte"]).sort_values("tokens_seen")
        if len(rows) < 2 or rows["tokens_seen"].iloc[0] != 0 or rows["tokens_seen"].iloc[-1] < reps.grid[-1]:
            continue
        tokens = rows["tokens_seen"].to_numpy(float)
        per_key.setdefault((m, o), []).append(
            interpolation(tokens, reps.grid) @ rows["valid_bits_per_byte"].to_numpy(float)
        )
    level = 1 - (1 - confidence) / max(1, len(per_key))
    out = {}
    for key, curves in per_key.items():
        runs = np.stack(curves)
        pick = np.vstack([np.arange(len(runs))[None, :], rng.integers(0, len(runs), size=(resamples, len(runs)))])
        mean = runs[pick].mean(axis=1)
        out[key] = estimate(crossing(mean, np.full(len(mean), source), reps.grid), level)
    return out
