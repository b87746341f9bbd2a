"""Mean ± std over seeds and the paired bootstrap interval (vocabtransfer.evaluate.stats), on constructed cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vocabtransfer.evaluate import stats as S
from vocabtransfer.errors import VocabTransferError


def nli(scores):
    return {"ids": [f"ex{i}" for i in range(len(scores))], "score": list(scores)}


def binomial_quantile(n: int, p: float, q: float) -> int:
    """Smallest x with P(X <= x) >= q for X ~ Binomial(n, p)."""
    cdf = 0.0
    for x in range(n + 1):
        cdf += math.comb(n, x) * p**x * (1 - p) ** (n - x)
        if cdf >= q:
            return x
    return n


def test_b_beats_a_on_k_of_n_matches_the_binomial():
    """B is right on exactly k examples where A is wrong, equal elsewhere: each resample's difference is
    100 · (draws that hit those k examples) / n, a Binomial(n, k/n) count; the percentile interval must
    sit at the binomial quantiles (within one count, the bootstrap's Monte-Carlo error)."""
    n, k = 200, 30
    rng = np.random.default_rng(0)
    a = rng.integers(0, 2, n)
    losers = np.flatnonzero(a == 0)[:k]
    b = a.copy()
    b[losers] = 1
    d = S.paired_bootstrap("nli", {1: nli(a)}, {1: nli(b)}, resamples=4000, seed=7)
    assert d.diff == pytest.approx(100 * k / n)
    lo = 100 * binomial_quantile(n, k / n, 0.025) / n
    hi = 100 * binomial_quantile(n, k / n, 0.975) / n
    assert abs(d.low - lo) <= 100 / n and abs(d.high - hi) <= 100 / n, (d, lo, hi)
    assert d.excludes_zero and d.seeds == (1,) and d.n_examples == n
    # B worse on the same examples: the interval mirrors
    r = S.paired_bootstrap("nli", {1: nli(b)}, {1: nli(a)}, resamples=4000, seed=7)
    assert (r.diff, r.low, r.high) == pytest.approx((-d.diff, -d.high, -d.low))


def test_identical_models_give_zero_interval():
    scores = np.random.default_rng(1).random(50) * 100
    qa = {"ids": list(range(50)), "score": scores.tolist()}
    d = S.paired_bootstrap("qa", {1: qa, 2: qa}, {1: qa, 2: qa}, resamples=500, seed=3)
    assert (d.diff, d.low, d.high) == (0.0, 0.0, 0.0)
    assert not d.excludes_zero
    ner = {"ids": [0, 1, 2], "tp": [1, 0, 2], "n_pred": [1, 1, 2], "n_gold": [2, 0, 2]}
    d = S.paired_bootstrap("ner", {1: ner}, {1: ner}, resamples=200, seed=3)
    assert (d.diff, d.low, d.high) == (0.0, 0.0, 0.0)


def test_differences_are_averaged_over_seeds_with_shared_resamples():
    """Seed 1: B beats A on k examples; seed 2: B equals A. The same resampled test sets serve every seed,
    so the seed-averaged interval is exactly half the single-seed one."""
    n, k = 80, 12
    a = np.zeros(n, dtype=int)
    b = a.copy()
    b[:k] = 1
    single = S.paired_bootstrap("nli", {1: nli(a)}, {1: nli(b)}, resamples=1000, seed=5)
    both = S.paired_bootstrap("nli", {1: nli(a), 2: nli(a)}, {1: nli(b), 2: nli(a), 3: nli(b)},
                              resamples=1000, seed=5)
    assert both.seeds == (1, 2)  # seed 3 has no baseline run
    assert (both.diff, both.low, both.high) == pytest.approx((single.diff / 2, single.low / 2, single.high / 2))


def test_task_metrics_by_hand():
    # ner micro F1: 200 · (1+0+2) / ((1+1+2) + (2+0+2)) = 75
    ner = {"ids": [0, 1, 2], "tp": [1, 0, 2], "n_pred": [1, 1, 2], "n_gold": [2, 0, 2]}
    assert S.metric("ner", ner) == pytest.approx(75.0)
    assert S.metric("ner", {"ids": [0], "tp": [0], "n_pred": [0], "n_gold": [0]}) == 0.0
    assert S.metric("nli", nli([1, 0, 1, 1])) == pytest.approx(75.0)
    assert S.metric("qa", {"ids": [0, 1], "score": [50.0, 100.0]}) == pytest.approx(75.0)
    # an index matrix: one metric per row
    rows = S.metric("ner", ner, np.array([[0, 0, 0], [1, 1, 1], [2, 2, 2]]))
    assert rows.tolist() == pytest.approx([200 * 3 / 9, 0.0, 100.0])
    assert S.mean_std([60.0, 64.0]) == pytest.approx((62.0, math.sqrt(8)))
    assert S.mean_std([61.0]) == (61.0, 0.0)


def test_different_test_examples_are_an_error():
    with pytest.raises(VocabTransferError, match="different test examples"):
        S.paired_bootstrap("nli", {1: nli([1, 0])}, {1: {"ids": ["x", "y"], "score": [1, 1]}})
