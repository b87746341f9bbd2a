"""How often the report's interval covers the true difference: a simulation at the study's sizes.

Each synthetic study has two models A and B whose true difference is known (`DELTA`), scored like a
real one: P pretraining seeds, F fine-tuning seeds within each, C test clusters of 1 to 5 examples.
A cluster's mean score for model X, pretraining seed p and fine-tuning seed f is

    μ_X + u_c + v_{X,c} + a_{X,p} + b_{X,p,f} + e_{X,p,f,c}

with u_c shared by both models (it cancels in the paired difference), v_{X,c} the model's own
cluster effect (sd `cluster_sd`), a_{X,p} the pretraining seed's effect (sd `seed_sd`), b_{X,p,f}
the fine-tuning seed's (sd `finetune_sd`) and e a per-example noise of sd 0.3 averaged over the
cluster's examples. The metric is the example-weighted mean, as the tasks' ratios of sums are, and
the truth is μ_B − μ_A: every effect has mean zero over seeds and clusters.

`coverage` draws `sims` such studies, computes the report's interval on each (`stats.spread` and its
half-width: what `stats.nested_interval` returns, without the p-value) and returns the share whose
interval holds the truth; `table` runs every size and scenario the study uses
(`vocabtransfer coverage` prints it as Markdown; docs/evaluation.md holds one run).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vocabtransfer.evaluate import stats

DELTA = 0.5  # the true difference B − A


@dataclass(frozen=True)
class Scenario:
    name: str
    seed_sd: float
    finetune_sd: float
    cluster_sd: float


SCENARIOS = (
    Scenario("seeds dominate", 1.0, 0.3, 0.3),
    Scenario("balanced", 0.5, 0.5, 0.5),
    Scenario("clusters dominate", 0.1, 0.1, 1.0),
)
# the study's sizes: 3 pretraining seeds, 1 or 3 fine-tuning seeds, 10 (de QA) to 300 clusters
PRETRAIN_SEEDS = 3
FINETUNE_SEEDS = (1, 3)
CLUSTERS = (10, 30, 120, 300)


def synthetic_study(
    rng: np.random.Generator, scenario: Scenario, pseeds: int, fseeds: int, clusters: int
) -> tuple[stats.Runs, stats.Runs]:
    """Models A and B (true difference DELTA) as the report's Runs."""
    sizes = rng.integers(1, 6, clusters).astype(np.float64)
    shared = rng.normal(0.0, 1.0, clusters)
    models = []
    for mean in (0.0, DELTA):
        own = rng.normal(0.0, scenario.cluster_sd, clusters)
        parts = {}
        for p in range(1, pseeds + 1):
            seed_effect = rng.normal(0.0, scenario.seed_sd)
            for f in range(1, fseeds + 1):
                run = mean + shared + own + seed_effect + rng.normal(0.0, scenario.finetune_sd)
                run = run + rng.normal(0.0, 0.3, clusters) / np.sqrt(sizes)
                parts[(p, f)] = (run * sizes, sizes.copy())
        models.append(stats.Runs(parts, tuple(range(clusters))))
    return models[0], models[1]


def coverage(
    scenario: Scenario,
    *,
    pseeds: int,
    fseeds: int,
    clusters: int,
    sims: int,
    resamples: int,
    confidence: float = 0.95,
    seed: int = 0,
) -> float:
    """The share of `sims` synthetic studies whose interval holds DELTA."""
    rng = np.random.default_rng(seed)
    hits = 0
    for i in range(sims):
        a, b = synthetic_study(rng, scenario, pseeds, fseeds, clusters)
        s = stats.spread(a, b, resamples=resamples, seed=i)
        assert s is not None  # the two synthetic models share every run
        hits += abs(s.point - DELTA) <= s.half_width(confidence)
    return hits / sims


def table(sims: int = 1000, resamples: int = 2000, confidence: float = 0.95, seed: int = 0) -> list[dict]:
    """Coverage at every size the study uses, for every scenario."""
    rows = []
    for fseeds in FINETUNE_SEEDS:
        for clusters in CLUSTERS:
            for scenario in SCENARIOS:
                rows.append(
                    {
                        "pretraining seeds": PRETRAIN_SEEDS,
                        "fine-tuning seeds": fseeds,
                        "clusters": clusters,
                        "scenario": scenario.name,
                        "coverage": coverage(
                            scenario,
                            pseeds=PRETRAIN_SEEDS,
                            fseeds=fseeds,
                            clusters=clusters,
                            sims=sims,
                            resamples=resamples,
                            confidence=confidence,
                            seed=seed,
                        ),
                    }
                )
    return rows


def markdown(rows: list[dict], confidence: float = 0.95) -> str:
    """One line per size, one column per scenario."""
    names = [s.name for s in SCENARIOS]
    sizes = list(dict.fromkeys((r["pretraining seeds"], r["fine-tuning seeds"], r["clusters"]) for r in rows))
    value = {
        (r["pretraining seeds"], r["fine-tuning seeds"], r["clusters"], r["scenario"]): r["coverage"] for r in rows
    }
    lines = [
        "| pretraining seeds | fine-tuning seeds | clusters | " + " | ".join(names) + " |",
        "|---|---|---|" + "---|" * len(names),
    ]
    for size in sizes:
        lines.append(
            "| "
            + " | ".join(map(str, size))
            + " | "
            + " | ".join(f"{100 * value[(*size, n)]:.1f} %" for n in names)
            + " |"
        )
    return (
        "\n".join(lines)
        + f"\n\nShare of synthetic studies whose {100 * confidence:g} % interval holds the true difference.\n"
    )
