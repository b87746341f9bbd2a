"""Statistics of the study: the nested, clustered, paired interval of a difference between two models,
and the correction for multiple comparisons.

Every score the report compares is a ratio of sums over test *clusters* (the units that share
information: an XNLI premise with its hypotheses, a QA article with its questions, a NER sentence,
a held-out block of the valid split for a loss):

* nli: 100 · Σ correct / Σ examples;  qa: Σ F1 / Σ questions;
* ner: 200 · Σ tp / (Σ predicted + Σ gold entities) (micro F1, 0 without entities);
* loss: Σ token losses / Σ tokens.

So a run (one pretraining seed, one fine-tuning seed) is a pair of per-cluster vectors
(numerator, denominator) (`Runs`), and a resampled test set is a vector of cluster weights.

The interval of metric(B) − metric(A) (`nested_interval`) adds the variance of two sources, each
estimated at its own level, and takes a t quantile for each:

1. pair the runs: the pretraining seeds both models have and, within each, the fine-tuning seeds
   both have (pretraining seed k of two methods shares its data order; fine-tuning seed s its head
   initialisation and data order); both models must be scored on the same clusters;
2. the point estimate is the mean over pretraining seeds of the mean over their fine-tuning seeds of
   metric(B) − metric(A) on the full test set;
3. test-set variance: a cluster bootstrap of that same mean. Per resample, C clusters are drawn with
   replacement out of C (multinomial weights) and shared by every run of both models (the test set is
   one sample, crossed with the seeds); v_test is the variance of the R resampled means times
   C / (C − 1), the bootstrap's own shrinkage undone; its degrees of freedom are C − 1;
4. seed variance: the sample variance (ddof = 1) of the per-pretraining-seed means, divided by the
   number P of pretraining seeds (the usual nested-design estimate: it holds the variation between
   fine-tuning seeds within a pretraining seed too), with P − 1 degrees of freedom; with a single
   pretraining seed, the same over the F fine-tuning seeds; with a single run it is unknown and left
   at 0 (the report then words no difference: `Difference.single_run`);
5. the half-width is sqrt(t²(C − 1) · v_test + t²(df_seed) · v_seed), t the (1 + confidence)/2
   quantile of Student's t: each variance is widened by the quantile of its own degrees of freedom, so
   three seeds weigh with t(2) = 4.30 rather than 1.96;
6. the two-sided p-value is the 1 − confidence at which that interval just reaches zero (solved for;
   1 when the difference is 0), so "the interval excludes zero" and "p < 1 − confidence" agree.

Why not resample the seeds as well: a percentile bootstrap that draws 3 pretraining seeds with
replacement out of 3 sees at most 3 distinct values and understates their variance by a third before
it takes a normal-like quantile; the simulation in vocabtransfer.evaluate.coverage measured 72–88 %
coverage for its 95 % interval at the study's sizes where the seeds matter, and 94.7–98.4 % for this
one everywhere (docs/evaluation.md).

With one pretraining and one fine-tuning seed this is the cluster bootstrap's variance with a t(C − 1)
interval; when every seed gives the same scores, step 4 adds nothing and the interval is the
cluster-only one.

`correct` adjusts the p-values of one table (a family of comparisons) by Holm's step-down method
(family-wise error) or Benjamini–Hochberg (false discovery rate, `scipy.stats.false_discovery_control`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Mapping, Sequence

import numpy as np
from scipy import stats
from scipy.optimize import brentq
from scipy.stats import false_discovery_control

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.evaluate.tasks import task_class

CORRECTIONS = ("holm", "bh")


def check_confidence(confidence: float, key: str = "report.confidence") -> None:
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0 < confidence < 1:
        raise VocabTransferError(f"{key}: {confidence!r} is not a coverage in (0, 1); use e.g. 0.95")


# 1. runs as per-cluster sums ---------------------------------------------------------------------


def example_parts(task: str, examples: Mapping, where: str = "eval result") -> tuple[np.ndarray, np.ndarray, float]:
    """(numerator, denominator, scale) per test example of a task's metric (the task declares them:
    `Task.PARTS`, vocabtransfer.evaluate.tasks)."""
    return task_class(task).metric_parts(examples, where)


def cluster_sums(values: np.ndarray, clusters: Sequence, order: Sequence) -> np.ndarray:
    """Per-example values summed per cluster, in the cluster order `order`."""
    index = {c: i for i, c in enumerate(order)}
    return np.bincount([index[c] for c in clusters], weights=values, minlength=len(order))


@dataclass
class Runs:
    """One model's runs on one test set: (pretraining seed, fine-tuning seed) -> per-cluster
    (numerator, denominator); metric = scale · Σ numerator / Σ denominator (0 when Σ denominator is 0)."""

    parts: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]
    clusters: tuple
    scale: float = 1.0

    @classmethod
    def from_results(cls, task: str, results: Mapping[tuple[int, int], Mapping], where: str = "eval results") -> "Runs":
        """From finetune_eval result dicts keyed by (pseed, seed)."""
        parts: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        order: tuple = ()  # the cluster order of the first run (set with `ids` in the first pass)
        ids: list | None = None
        scale = 1.0
        for key, result in sorted(results.items()):
            examples = result["examples"]
            if "clusters" not in examples:
                raise VocabTransferError(
                    f"{where} {key}: `examples.clusters` (the cluster key of each test example) is "
                    "missing; rerun the finetune_eval jobs with this version"
                )
            if ids is None:
                ids, order = list(examples["ids"]), tuple(dict.fromkeys(examples["clusters"]))
            elif list(examples["ids"]) != ids:
                raise VocabTransferError(
                    f"{where} {key}: scored on other test examples than the first run "
                    "(`examples.ids` differ); rerun the finetune_eval jobs"
                )
            num, den, scale = example_parts(task, examples, where)
            parts[key] = (
                cluster_sums(num, examples["clusters"], order),
                cluster_sums(den, examples["clusters"], order),
            )
        if not parts:
            raise VocabTransferError(f"{where}: no runs")
        return cls(parts, order, scale)

    def fixed(self, task: str, examples: Mapping, where: str) -> "Runs":
        """A predictor without seeds (a task's floor) scored on the same test examples, as runs with this
        model's keys: B minus it pairs every run of B with the same fixed scores."""
        num, den, scale = example_parts(task, examples, where)
        clusters = examples.get("clusters")
        if clusters is None or len(clusters) != len(num):
            raise VocabTransferError(f"{where}: `examples.clusters` is missing or not one per example; rerun its job")
        if tuple(dict.fromkeys(clusters)) != self.clusters:
            raise VocabTransferError(
                f"{where}: scored on other test clusters than the models; rerun it with the "
                "same params as the finetune_eval jobs"
            )
        sums = (cluster_sums(num, clusters, self.clusters), cluster_sums(den, clusters, self.clusters))
        return Runs({key: sums for key in self.parts}, self.clusters, scale)

    def metric(self, key: tuple[int, int]) -> float:
        num, den = self.parts[key]
        return float(self.scale * num.sum() / den.sum()) if den.sum() > 0 else 0.0


@dataclass(frozen=True)
class Difference:
    """B minus A with its interval, p-value and the design behind it."""

    diff: float
    low: float
    high: float
    p_value: float
    n_pseeds: int  # 0: no pretraining level (the source model)
    n_fseeds: int  # fine-tuning seeds per pretraining seed (the smallest count; 0: no fine-tuning level)
    n_clusters: int
    adjusted_p: float | None = None  # after the correction over its table's family

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    @property
    def single_run(self) -> bool:
        """One pretraining and one fine-tuning run behind it: the variation between seeds is unknown."""
        return max(self.n_pseeds, 1) * max(self.n_fseeds, 1) == 1

    def survives(self, alpha: float) -> bool:
        """Adjusted p-value below alpha (the unadjusted one when no correction was applied)."""
        p = self.p_value if self.adjusted_p is None else self.adjusted_p
        return p < alpha and self.excludes_zero


def _paired_keys(a: Runs, b: Runs) -> dict[int, list[int]]:
    shared = set(a.parts) & set(b.parts)
    out: dict[int, list[int]] = {}
    for p, f in sorted(shared):
        out.setdefault(p, []).append(f)
    return out


def _half_width(quantile: float, v_test: float, df_test: int, v_seed: float, df_seed: int) -> float:
    """Step 5: sqrt(t²(df_test) · v_test + t²(df_seed) · v_seed) at the two-sided `quantile`."""

    seed_part = stats.t.ppf(quantile, df_seed) ** 2 * v_seed if v_seed > 0 else 0.0
    return math.sqrt(stats.t.ppf(quantile, df_test) ** 2 * v_test + seed_part)


def _p_value(point: float, v_test: float, df_test: int, v_seed: float, df_seed: int) -> float:
    """Step 6: the alpha whose (1 − alpha) interval just reaches zero."""

    if point == 0 or not math.isfinite(point):
        return 1.0
    if v_test + v_seed <= 0:
        return 0.0

    def gap(alpha: float) -> float:
        return _half_width(1 - alpha / 2, v_test, df_test, v_seed, df_seed) - abs(point)

    tiny = 1e-15
    if gap(tiny) < 0:
        return tiny
    if gap(1.0 - tiny) > 0:
        return 1.0
    return float(brentq(gap, tiny, 1.0 - tiny, xtol=1e-15, rtol=1e-10))


@dataclass(frozen=True)
class Spread:
    """The point estimate of B − A and its two variances with their degrees of freedom (steps 2–4)."""

    point: float
    v_test: float
    df_test: int
    v_seed: float
    df_seed: int
    n_pseeds: int
    n_fseeds: int
    n_clusters: int

    def half_width(self, confidence: float) -> float:
        return _half_width((1 + confidence) / 2, self.v_test, self.df_test, self.v_seed, self.df_seed)


def spread(a: Runs, b: Runs, *, resamples: int = 1000, seed: int = 0) -> Spread | None:
    """Steps 1–4 of the module docstring; None when the two models share no run."""
    if int(resamples) < 2:
        raise VocabTransferError(f"report.bootstrap_resamples: {resamples} must be 2 or more")
    if a.clusters != b.clusters:
        raise VocabTransferError("the two models were scored on different test clusters; rerun both evaluations")
    paired = _paired_keys(a, b)  # 1.
    if not paired:
        return None
    runs = [(p, f) for p, fs in paired.items() for f in fs]
    n_clusters, R = len(a.clusters), int(resamples)
    # each run's weight in the mean over pretraining seeds of the mean over their fine-tuning seeds
    weights = np.array([1.0 / (len(paired) * len(paired[p])) for p, _ in runs])

    def metrics(runs_of: Runs, w: np.ndarray) -> np.ndarray:  # (resamples, runs)
        num = np.stack([runs_of.parts[k][0] for k in runs], axis=1)
        den = np.stack([runs_of.parts[k][1] for k in runs], axis=1)
        top, bottom = w @ num, w @ den
        return runs_of.scale * np.divide(top, bottom, out=np.zeros_like(top), where=bottom > 0)

    ones = np.ones((1, n_clusters))
    full = (metrics(b, ones) - metrics(a, ones))[0]
    point = float(full @ weights)  # 2.
    # 3. the cluster bootstrap of the point estimate, clusters shared by every run and both models
    rng = np.random.default_rng(seed)
    drawn = rng.integers(0, n_clusters, size=(R, n_clusters)) + n_clusters * np.arange(R)[:, None]
    W = np.bincount(drawn.ravel(), minlength=R * n_clusters).reshape(R, n_clusters).astype(np.float64)
    boot = (metrics(b, W) - metrics(a, W)) @ weights
    df_test = max(n_clusters - 1, 1)
    v_test = float(boot.var(ddof=1)) * n_clusters / df_test
    # 4. the seed level: pretraining seeds, else the fine-tuning seeds of the one pretraining seed
    column = {key: i for i, key in enumerate(runs)}
    if len(paired) > 1:
        level = [np.mean([full[column[(p, f)]] for f in fs]) for p, fs in paired.items()]
    else:
        p, fs = next(iter(paired.items()))
        level = [full[column[(p, f)]] for f in fs]
    v_seed, df_seed = (float(np.var(level, ddof=1)) / len(level), len(level) - 1) if len(level) > 1 else (0.0, 1)
    no_finetuning = all(f == 0 for fs in paired.values() for f in fs)  # a loss: no fine-tuning level
    no_pretraining = list(paired) == [0]  # the source model, or a floor: no pretraining level
    return Spread(
        point,
        v_test,
        df_test,
        v_seed,
        df_seed,
        n_pseeds=0 if no_pretraining else len(paired),
        n_fseeds=0 if no_finetuning else min(len(fs) for fs in paired.values()),
        n_clusters=n_clusters,
    )


def nested_interval(
    a: Runs, b: Runs, *, resamples: int = 1000, seed: int = 0, confidence: float = 0.95
) -> Difference | None:
    """metric(B) − metric(A) with its interval and p-value (module docstring, steps 1–6); None when the
    two share no run."""
    check_confidence(confidence)
    s = spread(a, b, resamples=resamples, seed=seed)
    if s is None:
        return None
    half = s.half_width(confidence)  # 5.
    p_value = _p_value(s.point, s.v_test, s.df_test, s.v_seed, s.df_seed)  # 6.
    return Difference(
        diff=s.point,
        low=s.point - half,
        high=s.point + half,
        p_value=p_value,
        n_pseeds=s.n_pseeds,
        n_fseeds=s.n_fseeds,
        n_clusters=s.n_clusters,
    )


# multiple comparisons -------------------------------------------------------------------------


def correct(p_values: Sequence[float], method: str = "holm") -> list[float]:
    """Adjusted p-values of one family: Holm's step-down (family-wise) or Benjamini–Hochberg (`bh`)."""
    p = np.asarray(p_values, dtype=np.float64)
    if method not in CORRECTIONS:
        raise VocabTransferError(f"report.correction: {method!r} is not one of {', '.join(CORRECTIONS)}")
    if p.size == 0:
        return []
    if method == "bh":
        return false_discovery_control(p, method="bh").tolist()
    order = np.argsort(p, kind="stable")
    stepped = np.maximum.accumulate((p.size - np.arange(p.size)) * p[order])
    out = np.empty_like(p)
    out[order] = np.minimum(stepped, 1.0)
    return out.tolist()


def corrected(diffs: Sequence[Difference | None], method: str = "holm") -> list[Difference | None]:
    """The family's differences with `adjusted_p` set (None entries stay None)."""
    present = [d for d in diffs if d is not None]
    adjusted = iter(correct([d.p_value for d in present], method))

    return [None if d is None else replace(d, adjusted_p=next(adjusted)) for d in diffs]
