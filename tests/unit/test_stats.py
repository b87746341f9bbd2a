"""The nested, clustered, paired interval and the multiple-comparison correction
(vocabtransfer.evaluate.stats), on constructed cases with known answers (its coverage: test_coverage.py)."""

from __future__ import annotations


import numpy as np
import pytest
from scipy import stats as scipy_stats

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.evaluate import stats


def nli_result(scores, clusters=None) -> dict:
    n = len(scores)
    examples = {
        "ids": [f"ex{i}" for i in range(n)],
        "score": list(map(int, scores)),
        "clusters": list(clusters) if clusters is not None else [f"c{i}" for i in range(n)],
    }
    return {"examples": examples}


def runs(task: str, results: dict) -> stats.Runs:
    return stats.Runs.from_results(task, results)


def test_one_level_matches_the_paired_t_interval():
    """One pretraining seed, one fine-tuning seed, one example per cluster: the cluster bootstrap's
    variance (times n / (n − 1)) is the paired differences' variance of the mean, so the interval is the
    paired t interval that scipy.stats.ttest_rel computes independently (to the Monte-Carlo error of
    20,000 resamples), and so is the p-value."""
    rng = np.random.default_rng(0)
    n = 300
    a = rng.integers(0, 2, n)
    b = np.where(rng.random(n) < 0.2, 1, a)
    d = stats.nested_interval(
        runs("nli", {(1, 1): nli_result(a)}), runs("nli", {(1, 1): nli_result(b)}), resamples=20000, seed=1
    )
    ref = scipy_stats.ttest_rel(100 * b, 100 * a)
    ci = ref.confidence_interval(0.95)
    assert d.diff == pytest.approx(100 * (b.mean() - a.mean()))
    assert d.low == pytest.approx(ci.low, abs=0.02 * (ci.high - ci.low))
    assert d.high == pytest.approx(ci.high, abs=0.02 * (ci.high - ci.low))
    assert d.p_value == pytest.approx(ref.pvalue, rel=0.2)
    assert (d.n_pseeds, d.n_fseeds, d.n_clusters) == (1, 1, n) and d.single_run
    assert d.excludes_zero and d.p_value < 0.001


def test_seed_level_is_the_one_sample_t_interval_over_seeds():
    """Three pretraining seeds whose differences are 1, 2 and 3 points on every cluster: the test set
    adds no variance, and the interval and p-value are the one-sample t test's over the three seeds
    (t(2) = 4.30, not the 1.96 a bootstrap over three values would take)."""
    n = 50
    zero = {"examples": {"ids": [str(i) for i in range(n)], "score": [0.0] * n, "clusters": [str(i) for i in range(n)]}}
    A = runs("qa", {(k, 1): zero for k in (1, 2, 3)})
    B = runs("qa", {(k, 1): {"examples": {**zero["examples"], "score": [float(k)] * n}} for k in (1, 2, 3)})
    d = stats.nested_interval(A, B, resamples=1000, seed=0)
    ref = scipy_stats.ttest_1samp([1.0, 2.0, 3.0], 0.0)
    ci = ref.confidence_interval(0.95)
    assert (d.diff, d.n_pseeds, d.n_fseeds) == (pytest.approx(2.0), 3, 1) and not d.single_run
    assert (d.low, d.high) == (pytest.approx(ci.low), pytest.approx(ci.high))
    assert d.p_value == pytest.approx(ref.pvalue)
    # the interval reaches zero exactly at the p-value's level
    s = stats.spread(A, B, resamples=1000, seed=0)
    assert s.half_width(1 - d.p_value) == pytest.approx(abs(d.diff))


def test_identical_seeds_give_the_cluster_only_interval():
    """When every pretraining and fine-tuning seed gives the same scores, resampling the seeds changes
    nothing: the interval is exactly the cluster-only one (the cluster draws have their own stream)."""
    rng = np.random.default_rng(3)
    n = 120
    clusters = [f"premise{i // 3}" for i in range(n)]  # XNLI: three hypotheses per premise
    a, b = rng.integers(0, 2, n), rng.integers(0, 2, n)
    one = stats.nested_interval(
        runs("nli", {(1, 1): nli_result(a, clusters)}),
        runs("nli", {(1, 1): nli_result(b, clusters)}),
        resamples=2000,
        seed=9,
    )
    keys = [(p, f) for p in (1, 2, 3) for f in (1, 2)]
    many = stats.nested_interval(
        runs("nli", {k: nli_result(a, clusters) for k in keys}),
        runs("nli", {k: nli_result(b, clusters) for k in keys}),
        resamples=2000,
        seed=9,
    )
    assert (many.diff, many.low, many.high) == (
        pytest.approx(one.diff),
        pytest.approx(one.low),
        pytest.approx(one.high),
    )
    assert (many.n_pseeds, many.n_fseeds, many.n_clusters) == (3, 2, 40)


def test_clusters_widen_the_interval():
    """Perfectly correlated examples within a cluster (a premise right or wrong for all its hypotheses)
    carry the information of one example each: resampling clusters gives a wider interval than
    treating the examples as independent."""
    rng = np.random.default_rng(5)
    per_premise = rng.integers(0, 2, 40)
    a = np.zeros(120, dtype=int)
    b = np.repeat(per_premise, 3)
    clusters = [f"p{i // 3}" for i in range(120)]
    clustered = stats.nested_interval(
        runs("nli", {(1, 1): nli_result(a, clusters)}),
        runs("nli", {(1, 1): nli_result(b, clusters)}),
        resamples=4000,
        seed=1,
    )
    flat = stats.nested_interval(
        runs("nli", {(1, 1): nli_result(a)}), runs("nli", {(1, 1): nli_result(b)}), resamples=4000, seed=1
    )
    assert clustered.diff == flat.diff
    assert (clustered.high - clustered.low) > 1.5 * (flat.high - flat.low)


def test_seed_variation_widens_the_interval_and_pairs_by_seed():
    """B beats A by 10 points on pretraining seed 1 and equals it on seed 2: the point estimate is the
    mean over seeds (5), and the variance between the two seeds (one degree of freedom) puts 0 and 10
    inside the interval."""
    n = 200
    a = np.zeros(n, dtype=int)
    b = a.copy()
    b[: n // 10] = 1
    A = runs("nli", {(1, 1): nli_result(a), (2, 1): nli_result(a)})
    B = runs("nli", {(1, 1): nli_result(b), (2, 1): nli_result(a), (3, 1): nli_result(b)})  # seed 3: no partner
    d = stats.nested_interval(A, B, resamples=4000, seed=2)
    assert d.diff == pytest.approx(5.0) and d.n_pseeds == 2
    assert d.low <= 0.0 and d.high >= 10.0


def test_task_metrics_by_hand():
    """ner: micro F1 200 · Σtp / (Σpred + Σgold) = 200 · 3 / 8 = 75; nli: percent correct; qa: mean F1."""
    ner = {
        "examples": {
            "ids": [0, 1, 2],
            "tp": [1, 0, 2],
            "n_pred": [1, 1, 2],
            "n_gold": [2, 0, 2],
            "clusters": ["s0", "s1", "s2"],
        }
    }
    assert runs("ner", {(1, 1): ner}).metric((1, 1)) == pytest.approx(75.0)
    assert runs("nli", {(1, 1): nli_result([1, 0, 1, 1])}).metric((1, 1)) == pytest.approx(75.0)
    qa = {"examples": {"ids": [0, 1], "score": [50.0, 100.0], "clusters": ["t", "t"]}}
    assert runs("qa", {(1, 1): qa}).metric((1, 1)) == pytest.approx(75.0)


def test_floor_scores_and_identical_models():
    """A floor (no seeds) is paired with every run of the model it is compared with."""
    model = runs("nli", {(1, 1): nli_result([1, 1, 0, 1]), (2, 1): nli_result([1, 1, 1, 1])})
    floor = model.fixed(
        "nli",
        {"ids": ["ex0", "ex1", "ex2", "ex3"], "score": [1, 0, 0, 0], "clusters": ["c0", "c1", "c2", "c3"]},
        "floor",
    )
    assert sorted(floor.parts) == [(1, 1), (2, 1)] and floor.metric((2, 1)) == 25.0
    d = stats.nested_interval(floor, model, resamples=500, seed=0)
    assert d.diff == pytest.approx(62.5) and d.n_pseeds == 2
    same = stats.nested_interval(model, model, resamples=500, seed=0)
    assert (same.diff, same.low, same.high) == (0.0, 0.0, 0.0) and not same.excludes_zero and same.p_value == 1.0


def test_holm_and_bh_by_hand():
    """Holm: sorted p times (m - rank), running maximum; BH: scipy's false_discovery_control."""
    p = [0.01, 0.04, 0.03, 0.2]
    assert stats.correct(p, "holm") == pytest.approx([0.04, 0.09, 0.09, 0.2])
    assert stats.correct(p, "bh") == pytest.approx([0.04, 0.0533333, 0.0533333, 0.2], rel=1e-4)
    assert stats.correct([], "holm") == []
    d = stats.Difference(1.0, 0.5, 1.5, 0.01, 3, 1, 40)
    fixed = stats.corrected([d, None, d, d], "holm")
    assert fixed[1] is None and fixed[0].adjusted_p == pytest.approx(0.03)
    assert fixed[0].survives(0.05) and not stats.corrected([d] * 6, "holm")[0].survives(0.05)


@pytest.mark.parametrize("confidence", [0, 1, 1.5, -0.1, True])
def test_confidence_outside_the_unit_interval_is_one_error(confidence):
    A = runs("nli", {(1, 1): nli_result([1, 0])})
    with pytest.raises(VocabTransferError, match="report.confidence"):
        stats.nested_interval(A, A, confidence=confidence)


def test_bad_results_are_one_error():
    no_clusters = {"examples": {"ids": ["a"], "score": [1]}}
    with pytest.raises(VocabTransferError, match="examples.clusters"):
        runs("nli", {(1, 1): no_clusters})
    with pytest.raises(VocabTransferError, match="other test examples"):
        runs(
            "nli",
            {(1, 1): nli_result([1, 0]), (1, 2): {"examples": {**nli_result([1, 0])["examples"], "ids": ["x", "y"]}}},
        )
    model = runs("nli", {(1, 1): nli_result([1, 0])})
    with pytest.raises(VocabTransferError, match="floor: scored on other test clusters"):
        model.fixed("nli", {"ids": ["a", "b"], "score": [1, 0], "clusters": ["x", "y"]}, "floor")
    with pytest.raises(VocabTransferError, match="floor: `examples.clusters` is missing"):
        model.fixed("nli", {"ids": ["a", "b"], "score": [1, 0]}, "floor")
    with pytest.raises(VocabTransferError, match="different test clusters"):
        stats.nested_interval(
            runs("nli", {(1, 1): nli_result([1, 0])}), runs("nli", {(1, 1): nli_result([1, 0], ["x", "x"])})
        )
