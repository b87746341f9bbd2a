"""Statistics over downstream results: mean ± standard deviation over seeds, and the paired
bootstrap interval of the difference between two models on the same test examples.

The per-example data come from the eval JSONs (`examples`, see vocabtransfer.evaluate.finetune_eval):

* nli: `score` is 0/1 (correct); the metric is accuracy in percent, 100 · mean(score);
* qa: `score` is the per-question F1 in percent; the metric is mean(score);
* ner: `tp`, `n_pred`, `n_gold` are entity counts per sentence; the metric is the micro F1 in
  percent, 200 · Σtp / (Σn_pred + Σn_gold) (0 when there are no entities at all).

Paired bootstrap (`paired_bootstrap`), for model B against model A (the baseline):

1. for every seed both models were evaluated with, check that they scored the same test
   examples in the same order (the `ids`);
2. draw one index matrix of `resamples` × n example indices with replacement from
   `numpy.random.default_rng(seed)`; the same matrix is used for both models (the resampled test
   set is shared: the comparison is paired) and for every seed with n test examples;
3. per seed and resample, the metric of B minus the metric of A on the resampled test set;
4. average these differences over the seeds within each resample, so every resample gives one
   seed-averaged difference;
5. the interval is the (1 - confidence)/2 and (1 + confidence)/2 quantiles of those averages;
   the point estimate is the seed-averaged difference on the full test set.

The interval measures how much the difference depends on which test examples were drawn; the
spread over fine-tuning seeds shows in the ± standard deviation beside each mean.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from vocabtransfer.errors import VocabTransferError

SCORE_SCALE = {"nli": 100.0, "qa": 1.0}  # per-example `score` -> percent
COUNT_TASKS = ("ner",)


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof = 1; 0 for a single value)."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return math.nan, math.nan
    return float(x.mean()), float(x.std(ddof=1)) if x.size > 1 else 0.0


def _arrays(task: str, examples: dict) -> dict[str, np.ndarray]:
    keys = ("tp", "n_pred", "n_gold") if task in COUNT_TASKS else ("score",)
    missing = [k for k in keys if k not in examples]
    if missing:
        raise VocabTransferError(f"eval result for task {task}: `examples` lacks {', '.join(missing)}; "
                                 "rerun its finetune_eval job")
    return {k: np.asarray(examples[k], dtype=np.float64) for k in keys}


def metric(task: str, examples: dict, index: np.ndarray | None = None) -> np.ndarray | float:
    """The task metric (percent) on the test examples, or on every row of an index matrix
    (resamples × n) at once."""
    arrays = _arrays(task, examples)
    if index is not None:
        arrays = {k: v[index] for k, v in arrays.items()}  # (resamples, n)
    if task in COUNT_TASKS:
        tp, denom = arrays["tp"].sum(axis=-1), arrays["n_pred"].sum(axis=-1) + arrays["n_gold"].sum(axis=-1)
        out = np.divide(200.0 * tp, denom, out=np.zeros_like(np.asarray(denom, dtype=np.float64)),
                        where=np.asarray(denom) > 0)
    elif task in SCORE_SCALE:
        out = SCORE_SCALE[task] * arrays["score"].mean(axis=-1)
    else:
        raise VocabTransferError(f"task {task!r}: no per-example metric known; known: "
                                 f"{', '.join(list(SCORE_SCALE) + list(COUNT_TASKS))}")
    return float(out) if index is None else out


def resample_index(n: int, resamples: int, seed: int) -> np.ndarray:
    """`resamples` × n indices into n test examples, drawn with replacement."""
    return np.random.default_rng(seed).integers(0, n, size=(resamples, n))


@dataclass(frozen=True)
class Difference:
    """B minus A, averaged over `seeds`, with its bootstrap interval."""

    diff: float
    low: float
    high: float
    seeds: tuple[int, ...]
    n_examples: int

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0


def paired_bootstrap(task: str, a: dict[int, dict], b: dict[int, dict], *, resamples: int = 1000,
                     seed: int = 0, confidence: float = 0.95) -> Difference | None:
    """Paired bootstrap of metric(B) - metric(A) over the seeds both have (see the module docstring).

    `a` and `b` map a seed to that run's `examples` dict; None when they share no seed."""
    seeds = tuple(sorted(set(a) & set(b)))
    if not seeds:
        return None
    point, boot, sizes = [], [], []
    for s in seeds:
        ex_a, ex_b = a[s], b[s]
        if list(ex_a.get("ids", [])) != list(ex_b.get("ids", [])):
            raise VocabTransferError(f"task {task}, seed {s}: the two models were scored on different test "
                                     "examples (`examples.ids` differ); rerun both finetune_eval jobs")
        n = len(ex_a["ids"])
        if n == 0:
            raise VocabTransferError(f"task {task}, seed {s}: no test examples in the eval result")
        index = resample_index(n, resamples, seed)
        point.append(metric(task, ex_b) - metric(task, ex_a))
        boot.append(metric(task, ex_b, index) - metric(task, ex_a, index))
        sizes.append(n)
    averaged = np.mean(np.stack(boot), axis=0)  # (resamples,)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(averaged, [tail, 1.0 - tail])
    return Difference(diff=float(np.mean(point)), low=float(low), high=float(high), seeds=seeds,
                      n_examples=int(max(sizes)))
