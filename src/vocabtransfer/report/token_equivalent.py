"""What an initialisation is worth in tokens: learning curves at their measured points, the tokens the
baseline needs to reach each method's valid loss, and the tokens each method needs to beat the floors.

Inputs per pretraining run (train.pretrain): `valid_curve.parquet`, every evaluation's valid loss summed
per valid block with the tokens seen; `valid_blocks.parquet`, each block's token count and the target
unigram floor's summed loss on the same tokens. Every run of a language is scored on the same blocks
and masks, so the blocks are paired across runs.

* the evaluations: where the table has a `decayed` column (cool-down branches), the step-0 rows (the
  initialisation) and the `decayed` rows (the end of a learning-rate decay: the loss a run of about that
  length reaches), else every row; ordered by tokens seen. Every run must have as many evaluations (else the
  shortest common prefix, logged); the grid is each evaluation's mean tokens over the runs, and each run is
  read at its own evaluations (no interpolation between runs or budgets);
* a method's curve is the mean over its pretraining seeds;
* a crossing (the tokens a curve needs to reach a loss) is read in *positions*: evaluation i is position
  i, linear in the loss between two evaluations (so linear in log tokens after the first budget b1) and
  extended linearly past both ends (only ever used inside the interval). The point estimate in tokens is 0
  at or before position 0, "≤ b1" between 0 and b1 (never a number inside the first step), linear in log
  tokens between later evaluations, "> run" (infinite) after the last one;
* token-equivalent at a measured budget b: the crossing of the baseline's mean curve with the method's mean
  loss at b. The ratio to b is what the initialisation is worth in the baseline's tokens. Stated at every
  measured budget (with more than 6, those nearest each 10^k and the last);
* the tokens a method needs to reach a floor: the crossing of its mean curve with the floor (`unigram`: the
  add-one unigram of the training split on the same tokens; `uniform`: ln V);
* intervals, as `evaluate.stats.nested_interval`'s, on the position: cluster variance from a bootstrap over
  the C valid blocks (multinomial weights shared by every run of a replicate), the replicates' variance of
  the mean curves' crossing × C/(C − 1), C − 1 degrees of freedom; seed variance from the P pretraining
  seeds paired (seed k of two methods shares its data order): the crossing of baseline seed k's curve with
  method seed k's loss at b (of seed k's curve with the floor), their sample variance / P, P − 1 degrees of
  freedom (0 with one seed); half-width sqrt(t²(C − 1) v_test + t²(P − 1) v_seed) at the confidence level
  divided by the table's rows (Bonferroni). Its ends are then rounded *outward to measured points*: the low
  end down to the evaluation at or before it, the high end up to the one at or after it, so the interval
  holds whatever a monotone curve does between two evaluations; an end before the start is 0, an end
  after the last evaluation is "> run". Positions rather than log tokens: finite at 0 and past the end, so
  a crossing that the mean curve misses still has a variance; the linear extension past the ends is never
  stated, only whether an end passes the last evaluation. `report.te_coverage` measures the coverage.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

log = logging.getLogger(__name__)

STANDARD = "standard"
MAX_BUDGETS = 6  # more measured budgets than this: the rows are those nearest each 10^k, and the last


@dataclass
class RunCurve:
    """One pretraining run: the tokens seen at each evaluation (the first 0) and the valid loss summed per
    block at each (evaluations × blocks); `seed` its pretraining seed."""

    tokens: np.ndarray
    sums: np.ndarray
    seed: int = 0


@dataclass
class Curves:
    """A language's curves: per (method, objective) its runs, by pretraining seed; the blocks' token counts
    and unigram floor sums; the uniform floor (ln V). Every run has the same number of evaluations."""

    runs: dict
    counts: np.ndarray
    unigram: np.ndarray | None
    uniform: float | None

    def grid(self) -> np.ndarray:
        """Each evaluation's mean tokens over the runs (the first 0)."""
        return np.mean([r.tokens for runs in self.runs.values() for r in runs], axis=0)


def evaluations(table) -> tuple[np.ndarray, np.ndarray]:
    """A valid_curve table's evaluations, ordered by tokens: (tokens, evaluations × blocks of summed loss);
    with a `decayed` column only the step-0 rows and the decayed ones (one evaluation per (step, decayed))."""
    keys = ["step"]
    if "decayed" in table:
        table = table[(table["step"] == 0) | table["decayed"].fillna(False).astype(bool)]
        keys = ["step", "decayed"]
    wide = table.pivot_table(index=keys, columns="block", values="loss_sum", aggfunc="first").sort_index(axis=1)
    tokens = table.groupby(keys)["tokens_seen"].first().loc[wide.index].to_numpy(float)
    steps = np.asarray(wide.index.get_level_values("step"), dtype=float)
    order = np.lexsort((steps, tokens))
    return tokens[order], wide.to_numpy(float)[order]


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
        tokens, sums = evaluations(table)
        if tokens[0] != 0 or len(tokens) < 2:
            continue  # no evaluation at the start, or nothing after it: not a curve from the initialisation
        runs.setdefault((m, o), []).append(RunCurve(tokens, sums, int(s)))
        counts = blocks.sort_values("block")["n_tokens"].to_numpy(float)
        if "unigram_sum" in blocks:
            unigram = blocks.sort_values("block")["unigram_sum"].to_numpy(float)
        uniform = (lang.runs.get((m, o, s)) or {}).get("uniform_valid_loss", uniform)
    if not runs:
        return None
    assert counts is not None  # set with every run appended
    lengths = {len(r.tokens) for rs in runs.values() for r in rs}
    if len(lengths) > 1:
        n = min(lengths)
        log.warning(
            "%s: pretraining runs have %s evaluations; the curves keep the first %d of each",
            getattr(lang, "lang", "?"),
            "/".join(map(str, sorted(lengths))),
            n,
        )
        runs = {k: [RunCurve(r.tokens[:n], r.sums[:n], r.seed) for r in rs] for k, rs in runs.items()}
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


def position(curve: np.ndarray, target: np.ndarray | float) -> np.ndarray:
    """Per row of `curve` (rows × evaluations), where it first reaches `target` (per row), in positions:
    evaluation i is i, linear in the loss in between; before the start and past the end the first and the
    last step extended linearly (inf where the last step does not go down)."""
    curve = np.atleast_2d(np.asarray(curve, float))
    target = np.broadcast_to(np.asarray(target, float), (len(curve),))
    reached = curve <= target[:, None]
    j = np.where(reached.any(axis=1), reached.argmax(axis=1), curve.shape[1])  # first evaluation there
    j = np.clip(j, 1, curve.shape[1] - 1)  # its step; the first or the last one extended
    rows = np.arange(len(curve))
    before, after = curve[rows, j - 1], curve[rows, j]
    drop = before - after
    with np.errstate(divide="ignore", invalid="ignore"):
        out = (j - 1) + (before - target) / drop
    out = np.where(drop > 0, out, np.where(reached[:, 0], 0.0, np.inf))
    return np.where(reached[:, 0], np.minimum(out, 0.0), out)


def point_tokens(pos: float, grid: np.ndarray) -> tuple[float, bool]:
    """A position in tokens, and whether it is only "at most" that (between 0 and the first budget b1: b1)."""
    last = len(grid) - 1
    if math.isfinite(pos) and abs(pos - round(pos)) < 1e-9:  # at a measured point, up to rounding
        pos = float(round(pos))
    if pos <= 0:
        return 0.0, False
    if pos > last or not math.isfinite(pos):
        return math.inf, False
    hi = math.ceil(pos)
    if hi == 1:
        return float(grid[1]), True
    if pos == hi:
        return float(grid[hi]), False
    frac = pos - (hi - 1)
    return float(math.exp(math.log(grid[hi - 1]) + frac * (math.log(grid[hi]) - math.log(grid[hi - 1])))), False


def rounded(pos: float, grid: np.ndarray, up: bool) -> float:
    """An interval's end in tokens: the measured point at or before `pos` (at or after, `up`); 0 before the
    start, inf past the last evaluation."""
    last = len(grid) - 1
    if math.isnan(pos):
        return math.inf if up else 0.0
    if pos <= 0:
        return 0.0
    if pos > last:
        return math.inf
    return float(grid[math.ceil(pos) if up else math.floor(pos)])


@dataclass
class Estimate:
    """A number of tokens with its interval (inf: more than the run); `upto`: the value is only known to be
    at most `value` (a crossing before the first budget)."""

    value: float
    low: float
    high: float
    upto: bool = False
    position: float = math.nan  # the point in positions (evaluation i is i), before the reading in tokens
    half: float = math.nan  # the half-width in positions, before the ends are rounded out

    def scaled(self, factor: float) -> "Estimate":
        return Estimate(self.value * factor, self.low * factor, self.high * factor, self.upto, self.position, self.half)


def half_width(boot: np.ndarray | None, seeds: np.ndarray | None, clusters: int, level: float) -> float:
    """sqrt(t²(C − 1) · v_test + t²(P − 1) · v_seed) at the two-sided `level`: v_test the bootstrap
    replicates' variance × C/(C − 1), v_seed the paired seeds' sample variance / P (module docstring)."""

    q, total = (1 + level) / 2, 0.0
    parts = []
    if boot is not None and len(boot) > 1 and clusters > 1:
        parts.append((boot, clusters - 1, clusters / (clusters - 1)))
    if seeds is not None and len(seeds) > 1:
        parts.append((seeds, len(seeds) - 1, 1.0 / len(seeds)))
    for values, df, scale in parts:
        if not np.all(np.isfinite(values)):
            return math.inf
        var = float(np.var(values, ddof=1)) * scale
        total += float(stats.t.ppf(q, df)) ** 2 * var if var > 0 else 0.0
    return math.sqrt(total)


def interval(pos: np.ndarray, seeds: np.ndarray | None, clusters: int, level: float, grid: np.ndarray) -> Estimate:
    """`pos[0]` the point's position, `pos[1:]` its bootstrap replicates, `seeds` the paired seeds' positions:
    the estimate in tokens with its interval rounded outward to measured points."""
    point = float(pos[0])
    half = half_width(pos[1:] if len(pos) > 1 else None, seeds, clusters, level)
    value, upto = point_tokens(point, grid)
    if math.isfinite(point):
        low = rounded(point - half, grid, up=False)
    else:  # the mean curve's last step does not go down: past the run unless the spread is unbounded
        low = 0.0 if math.isinf(half) else math.inf
    high = rounded(point + half, grid, up=True)
    return Estimate(value, min(low, value), max(high, value), upto, point, half)


@dataclass
class Replicates:
    """Bootstrap replicates over the valid blocks (row 0: every block once) of each method's mean curve at
    the measured points, and of the unigram floor; each run on every block, for the seed variance."""

    grid: np.ndarray
    mean: dict  # (method, objective) -> (replicates + 1) × grid
    per_seed: dict  # (method, objective) -> seeds × grid: each run on every block (the seeds, the figure's band)
    seeds: dict  # (method, objective) -> number of pretraining seeds
    unigram: np.ndarray | None  # (replicates + 1,)
    uniform: float | None
    blocks: int
    pseeds: dict = field(default_factory=dict)  # (method, objective) -> per_seed's pretraining seeds, in order
    run_tokens: dict = field(default_factory=dict)  # (method, objective) -> seeds × grid: each run's own tokens


def replicate(curves: Curves, resamples: int, seed: int) -> Replicates:
    """Resample the valid blocks, the same weights for every run of a replicate."""
    rng = np.random.default_rng(seed)
    grid, n_blocks = curves.grid(), len(curves.counts)
    weights = np.vstack(
        [np.ones(n_blocks), rng.multinomial(n_blocks, np.full(n_blocks, 1.0 / n_blocks), size=resamples)]
    )
    tokens = weights @ curves.counts
    mean, seeds, point, pseeds, run_tokens = {}, {}, {}, {}, {}
    for key, runs in curves.runs.items():
        per_run = np.stack([weights @ r.sums.T / tokens[:, None] for r in runs])  # runs × replicates × grid
        mean[key], point[key] = per_run.mean(axis=0), per_run[:, 0]
        seeds[key], pseeds[key] = len(runs), [r.seed for r in runs]
        run_tokens[key] = np.stack([r.tokens for r in runs])
    unigram = weights @ curves.unigram / tokens if curves.unigram is not None else None
    return Replicates(grid, mean, point, seeds, unigram, curves.uniform, n_blocks, pseeds, run_tokens)


def _paired(reps: Replicates, base: tuple, key: tuple) -> tuple[np.ndarray, np.ndarray]:
    """The rows of `base`'s and `key`'s per_seed that share a pretraining seed, in the same order."""
    shared = [s for s in reps.pseeds.get(base, []) if s in reps.pseeds.get(key, [])]
    return (
        np.array([reps.pseeds[base].index(s) for s in shared], dtype=int),
        np.array([reps.pseeds[key].index(s) for s in shared], dtype=int),
    )


def budget_indices(grid: np.ndarray) -> list[int]:
    """The measured budgets the token-equivalent is stated at: every one after 0, or with more than
    MAX_BUDGETS those nearest (in log tokens) each 10^k within the run, and the last."""
    last = len(grid) - 1
    if last <= MAX_BUDGETS:
        return list(range(1, last + 1))
    logs = np.log10(grid[1:])
    picked = {1 + int(np.argmin(np.abs(logs - k))) for k in range(math.ceil(logs[0]), math.floor(logs[-1]) + 1)}
    return sorted(picked | {last})


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


def equivalent(reps: Replicates, key: tuple, base: tuple, i: int, level: float) -> Equivalent:
    """The baseline `base`'s tokens to reach `key`'s mean loss at the grid's budget i, at the two-sided `level`."""
    rb, rk = _paired(reps, base, key)
    seeds = position(reps.per_seed[base][rb], reps.per_seed[key][rk, i]) if len(rb) else None
    tokens = interval(position(reps.mean[base], reps.mean[key][:, i]), seeds, reps.blocks, level, reps.grid)
    budget = float(reps.grid[i])
    return Equivalent(
        key[0],
        key[1],
        budget,
        float(reps.mean[key][0, i]),
        float(reps.mean[base][0, i]),
        tokens,
        tokens.scaled(1.0 / budget),
    )


def equivalents(reps: Replicates, baseline: str, confidence: float) -> list[Equivalent]:
    """Every method (not the baseline) against the baseline of its objective (else the baseline's standard
    runs), at the measured budgets (`budget_indices`); intervals Bonferroni-corrected over the rows."""
    pairs = []
    for m, o in reps.mean:
        base = (baseline, o) if (baseline, o) in reps.mean else (baseline, STANDARD)
        if m != baseline and base in reps.mean:
            pairs += [((m, o), base, i) for i in budget_indices(reps.grid)]
    level = 1 - (1 - confidence) / max(1, len(pairs))
    return [equivalent(reps, key, base, i, level) for key, base, i in pairs]


def floor_estimate(reps: Replicates, key: tuple, floor: np.ndarray, level: float) -> Estimate:
    """The tokens `key`'s mean curve needs to reach `floor` (per replicate), at the two-sided `level`; the seed
    part from each run's crossing of the floor on every block."""
    seeds = position(reps.per_seed[key], floor[0])
    return interval(position(reps.mean[key], floor), seeds, reps.blocks, level, reps.grid)


@dataclass
class FloorCrossing:
    """The tokens `method` needs to reach each floor (None: the floor is not known)."""

    method: str
    objective: str
    unigram: Estimate | None
    uniform: Estimate | None


def floor_crossings(reps: Replicates, confidence: float) -> list[FloorCrossing]:
    """Each method's crossing of the unigram and the uniform floor; Bonferroni over the table's cells."""
    level = 1 - (1 - confidence) / max(1, 2 * len(reps.mean))
    out = []
    for key, curve in reps.mean.items():
        found: list[Estimate | None] = []
        for floor in (reps.unigram, None if reps.uniform is None else np.full(len(curve), reps.uniform)):
            found.append(None if floor is None else floor_estimate(reps, key, floor, level))
        out.append(FloorCrossing(key[0], key[1], found[0], found[1]))
    return out


def bits_crossings(lang, reps: Replicates, source: float, resamples: int, seed: int, confidence: float) -> dict:
    """(method, objective) -> the tokens its mean bits-per-byte curve (causal runs: metrics.parquet's
    valid_bits_per_byte, read at each run's own evaluations of the curves: `Replicates.run_tokens`) needs to
    reach the source's bits per byte `source`, with the seed part of the interval only (the bits are per run,
    not per block: P − 1 degrees of freedom); Bonferroni over the methods. `resamples` and `seed` are unused
    (no bootstrap)."""
    per_key: dict = {}
    for (m, o, s), table in sorted(lang.curves.items()):
        if "valid_bits_per_byte" not in table or (m, o) not in reps.pseeds or s not in reps.pseeds[(m, o)]:
            continue
        rows = table.dropna(subset=["valid_bits_per_byte"])
        ends = getattr(lang, "cooldown", {}).get((m, o, s))
        if ends is not None:  # wsd: the initialisation, then the decayed ends (cooldown.parquet: branches, the run's)
            rows = pd.concat([rows[rows["step"] == 0], ends.dropna(subset=["valid_bits_per_byte"])])
        rows = rows.sort_values("tokens_seen")
        own = reps.run_tokens[(m, o)][reps.pseeds[(m, o)].index(s)]
        if len(rows) < 2 or rows["tokens_seen"].iloc[0] != 0 or rows["tokens_seen"].iloc[-1] < own[-1]:
            continue
        tokens = rows["tokens_seen"].to_numpy(float)
        per_key.setdefault((m, o), []).append(interpolation(tokens, own) @ rows["valid_bits_per_byte"].to_numpy(float))
    level = 1 - (1 - confidence) / max(1, len(per_key))
    out = {}
    for key, curves in per_key.items():
        runs = np.stack(curves)
        point = position(runs.mean(axis=0, keepdims=True), source)
        out[key] = interval(point, position(runs, source), 1, level, reps.grid)
    return out
