"""Statistics of the study: the nested, clustered, paired bootstrap of a difference between two models,
and the correction for multiple comparisons.

Every score the report compares is a ratio of sums over test *clusters* (the units that share
information: an XNLI premise with its hypotheses, a QA article with its questions, a NER sentence,
a held-out block of the valid split for a loss):

* nli: 100 · Σ correct / Σ examples;  qa: Σ F1 / Σ questions;
* ner: 200 · Σ tp / (Σ predicted + Σ gold entities) (micro F1, 0 without entities);
* loss: Σ token losses / Σ tokens.

So a run (one pretraining seed, one fine-tuning seed) is a pair of per-cluster vectors
(numerator, denominator) (`Runs`), and a resampled test set is a vector of cluster weights.

The nested bootstrap of metric(B) − metric(A) (`nested_bootstrap`), for R resamples:

1. pair the runs: the pretraining seeds both models have and, within each, the fine-tuning seeds
   both have (pretraining seed k of two methods shares its data order; fine-tuning seed s its head
   initialisation and data order); both models must be scored on the same clusters;
2. draw the clusters: per resample, C clusters with replacement out of C (multinomial weights),
   from their own random stream. The test set is one sample shared by every run (the design is
   crossed, not nested), so one draw serves every run of both models in that resample: averaging
   independent draws over runs would understate the test-set uncertainty;
3. draw the pretraining seeds: per resample, P seeds with replacement out of the P paired ones;
4. draw the fine-tuning seeds within each drawn pretraining seed: F_p with replacement out of its F_p;
5. per resample, the difference is the mean over the drawn pretraining seeds of the mean over their
   drawn fine-tuning seeds of metric(B) − metric(A) on the drawn clusters: both models see the same
   draws at every level (paired);
6. the interval is the (1 − confidence)/2 and (1 + confidence)/2 quantiles of the R differences
   (percentile bootstrap); the point estimate is the same mean on the full data without resampling;
   the two-sided p-value is 2 · min(share of differences ≤ 0, share ≥ 0), each share counted as
   (1 + count) / (1 + R).

With one pretraining and one fine-tuning seed this is the ordinary cluster bootstrap (and with
one example per cluster `scipy.stats.bootstrap`'s paired percentile interval); when every seed
gives the same scores, steps 3–4 change nothing and the interval is the cluster-only one.

`correct` adjusts the p-values of one table (a family of comparisons) by Holm's step-down method
(family-wise error) or Benjamini–Hochberg (false discovery rate, `scipy.stats.false_discovery_control`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from vocabtransfer.errors import VocabTransferError

CORRECTIONS = ("holm", "bh")


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof = 1; 0 for a single value)."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return math.nan, math.nan
    return float(x.mean()), float(x.std(ddof=1)) if x.size > 1 else 0.0


def seed_interval(values: Sequence[float], confidence: float = 0.95, what: str = "pretrain.seeds") -> tuple[float, float]:
    """A t interval of the mean over seeds; needs two seeds or more (`what` names the key to raise)."""
    from scipy import stats

    check_confidence(confidence)
    x = np.asarray(values, dtype=np.float64)
    if x.size < 2:
        raise VocabTransferError(f"an interval over seeds needs at least 2 seeds, got {x.size}; set {what} to 2 or more")
    half = stats.t.ppf((1 + confidence) / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size)
    return float(x.mean() - half), float(x.mean() + half)


def check_confidence(confidence: float, key: str = "report.confidence") -> None:
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0 < confidence < 1:
        raise VocabTransferError(f"{key}: {confidence!r} is not a coverage in (0, 1); use e.g. 0.95")


# 1. runs as per-cluster sums ---------------------------------------------------------------------

def example_parts(task: str, examples: Mapping, where: str = "eval result") -> tuple[np.ndarray, np.ndarray, float]:
    """(numerator, denominator, scale) per test example of a task's metric (the task declares them:
    `Task.PARTS`, vocabtransfer.evaluate.tasks)."""
    from vocabtransfer.evaluate.tasks import task_class

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
    def from_results(cls, task: str, results: Mapping[tuple[int, int], Mapping], where: str = "eval results",
                     trivial: bool = False) -> "Runs":
        """From finetune_eval result dicts keyed by (pseed, seed); `trivial` takes the trivial
        predictor's per-example scores (`trivial.examples`) instead of the model's."""
        parts, order, ids, scale = {}, None, None, 1.0
        for key, result in sorted(results.items()):
            examples = result["examples"]
            if "clusters" not in examples:
                raise VocabTransferError(f"{where} {key}: `examples.clusters` (the cluster key of each test example) is "
                                         "missing; rerun the finetune_eval jobs with this version")
            if ids is None:
                ids, order = list(examples["ids"]), tuple(dict.fromkeys(examples["clusters"]))
            elif list(examples["ids"]) != ids:
                raise VocabTransferError(f"{where} {key}: scored on other test examples than the first run "
                                         "(`examples.ids` differ); rerun the finetune_eval jobs")
            source = result.get("trivial", {}).get("examples") if trivial else examples
            if source is None:
                raise VocabTransferError(f"{where} {key}: no per-example trivial scores (`trivial.examples`); "
                                         "rerun the finetune_eval jobs with this version")
            num, den, scale = example_parts(task, source, where)
            parts[key] = (cluster_sums(num, examples["clusters"], order), cluster_sums(den, examples["clusters"], order))
        if not parts:
            raise VocabTransferError(f"{where}: no runs")
        return cls(parts, order, scale)

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


def nested_bootstrap(a: Runs, b: Runs, *, resamples: int = 1000, seed: int = 0,
                     confidence: float = 0.95) -> Difference | None:
    """metric(B) − metric(A) with its nested bootstrap interval (module docstring); None when the two
    share no run."""
    check_confidence(confidence)
    if int(resamples) < 1:
        raise VocabTransferError(f"report.bootstrap_resamples: {resamples} must be 1 or more")
    if a.clusters != b.clusters:
        raise VocabTransferError("the two models were scored on different test clusters; rerun both evaluations")
    paired = _paired_keys(a, b)
    if not paired:
        return None
    runs = [(p, f) for p, fs in paired.items() for f in fs]
    column = {key: i for i, key in enumerate(runs)}
    n_clusters, R = len(a.clusters), int(resamples)
    cluster_rng, seed_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    # 2. cluster weights, shared by every run and both models
    W = cluster_rng.multinomial(n_clusters, np.full(n_clusters, 1.0 / n_clusters), size=R).astype(np.float64)

    def metrics(runs_of: Runs, weights: np.ndarray) -> np.ndarray:  # (R, runs)
        num = np.stack([runs_of.parts[k][0] for k in runs], axis=1)
        den = np.stack([runs_of.parts[k][1] for k in runs], axis=1)
        top, bottom = weights @ num, weights @ den
        return runs_of.scale * np.divide(top, bottom, out=np.zeros_like(top), where=bottom > 0)

    delta = metrics(b, W) - metrics(a, W)  # (R, runs)
    # 3.-4. seed weights: resample pretraining seeds, then fine-tuning seeds within each drawn one
    pseeds = list(paired)
    S = np.zeros((R, len(runs)))
    rows = np.arange(R)
    lookup = {p: np.array([column[(p, f)] for f in fs]) for p, fs in paired.items()}
    for _ in pseeds:  # each of the P draws of a pretraining seed ...
        drawn = seed_rng.integers(0, len(pseeds), size=R)
        for p_index, p in enumerate(pseeds):
            chosen = drawn == p_index
            fs = paired[p]
            for fine in seed_rng.integers(0, len(fs), size=(len(fs), R)):  # ... and its F_p fine-tuning seeds
                np.add.at(S, (rows[chosen], lookup[p][fine][chosen]), 1.0 / (len(pseeds) * len(fs)))
    boot = (S * delta).sum(axis=1)
    # 5. point estimate: the same means without resampling
    full = metrics(b, np.ones((1, n_clusters))) - metrics(a, np.ones((1, n_clusters)))
    point = float(np.mean([np.mean([full[0, column[(p, f)]] for f in fs]) for p, fs in paired.items()]))
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(boot, [tail, 1.0 - tail])
    p_value = min(1.0, 2.0 * min((1 + np.sum(boot <= 0)) / (1 + R), (1 + np.sum(boot >= 0)) / (1 + R)))
    no_finetuning = all(f == 0 for fs in paired.values() for f in fs)  # a loss: no fine-tuning level
    no_pretraining = pseeds == [0]  # the source model: no pretraining level
    return Difference(diff=point, low=float(low), high=float(high), p_value=float(p_value),
                      n_pseeds=0 if no_pretraining else len(pseeds),
                      n_fseeds=0 if no_finetuning else min(len(fs) for fs in paired.values()), n_clusters=n_clusters)


# 3. multiple comparisons -------------------------------------------------------------------------

def correct(p_values: Sequence[float], method: str = "holm") -> list[float]:
    """Adjusted p-values of one family: Holm's step-down (family-wise) or Benjamini–Hochberg (`bh`)."""
    p = np.asarray(p_values, dtype=np.float64)
    if method not in CORRECTIONS:
        raise VocabTransferError(f"report.correction: {method!r} is not one of {', '.join(CORRECTIONS)}")
    if p.size == 0:
        return []
    if method == "bh":
        from scipy.stats import false_discovery_control

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
    from dataclasses import replace

    return [None if d is None else replace(d, adjusted_p=next(adjusted)) for d in diffs]
