"""`omp − focus` in the report: paired on the same valid lines and seeds, with an interval, its difference
equal to the one computed by hand from the per-line bits, Holm-corrected over its own family, and worded in
the verdict; absent where omp never ran."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from vocabtransfer.evaluate import stats
from vocabtransfer.report import comparisons, read, rivals, tables, verdict

N = 40  # valid lines (the clusters)
PSEEDS = (1, 2, 3)
BLOCKS = 20
SETTINGS = tables.Settings(2000, 0.95, "holm", 42, min_clusters=30)
# bits per byte: omp 0.5 behind focus right after init, 0.01 behind (no real difference) after pretraining
BPB = {
    ("focus", "init"): 2.9,
    ("omp", "init"): 3.4,
    ("random", "init"): 4.6,
    ("focus", "standard"): 2.5,
    ("omp", "standard"): 2.51,
    ("random", "standard"): 2.8,
}


def language(methods=("random", "focus", "omp")) -> read.Language:
    rng = np.random.default_rng(0)
    n_bytes = 60 + np.arange(N) % 9
    rows = [
        {
            "method": "source",
            "objective": "source",
            "pseed": 0,
            "line": line,
            "bits": 1.5 * int(n_bytes[line]),
            "n_bytes": int(n_bytes[line]),
            "n_tokens": 20,
            "n_scored": 20,
        }
        for line in range(N)
    ]
    lang = read.Language("sw")
    for (method, objective), level in BPB.items():
        if method not in methods:
            continue
        for p in PSEEDS:
            per_line = level + 0.01 * p + 0.2 * rng.standard_normal(N)
            rows += [
                {
                    "method": method,
                    "objective": objective,
                    "pseed": p,
                    "line": line,
                    "bits": float(per_line[line] * n_bytes[line]),
                    "n_bytes": int(n_bytes[line]),
                    "n_tokens": 20,
                    "n_scored": 20,
                }
                for line in range(N)
            ]
            if objective == "standard":  # the valid loss: omp 0.2 above focus per token
                shift = {"random": 1.0, "focus": 0.0, "omp": 0.2}[method]
                sums = 10 * (6.0 + shift + 0.02 * rng.standard_normal(BLOCKS))
                lang.curves[(method, objective, p)] = pd.DataFrame({"step": [0], "valid_loss": [6.0]})
                lang.blocks[(method, objective, p)] = pd.DataFrame(
                    {"block": range(BLOCKS), "loss_sum": sums, "n_tokens": np.full(BLOCKS, 10)}
                )
    lang.bits_per_byte = pd.DataFrame(rows)
    return lang


def by_hand(lang: read.Language, method: str, objective: str) -> dict[int, float]:
    df = lang.bits_per_byte
    sub = df[(df["method"] == method) & (df["objective"] == objective)]
    return {int(p): g["bits"].sum() / g["n_bytes"].sum() for p, g in sub.groupby("pseed")}


def test_omp_minus_focus_is_paired_with_an_interval_and_matches_the_difference_by_hand():
    lang = language()
    family = {f.title: f for f in comparisons.families(lang, SETTINGS, {}, rivals.families(lang, SETTINGS))}[
        "Head to head: omp − focus"
    ]
    rows = {(r.label, r.measure): r for r in family.rows}
    assert list(rows) == [
        ("omp − focus (init)", "bits per byte"),
        ("omp − focus (standard)", "bits per byte"),
        ("omp − focus (standard)", "valid loss"),
    ]
    for objective in ("init", "standard"):
        d = rows[(f"omp − focus ({objective})", "bits per byte")].diff
        omp, focus = by_hand(lang, "omp", objective), by_hand(lang, "focus", objective)
        assert d.diff == pytest.approx(np.mean([omp[p] - focus[p] for p in PSEEDS]))
        assert d.n_pseeds == 3 and d.n_clusters == N and d.low < d.diff < d.high
    init = rows[("omp − focus (init)", "bits per byte")]
    assert init.diff.low > 0 and init.status(SETTINGS) == "worse"  # omp 0.5 bits per byte behind
    assert rows[("omp − focus (standard)", "valid loss")].diff.diff == pytest.approx(0.2, abs=0.02)
    # Holm over this family's 3 rows
    raw = [r.diff.p_value for r in family.rows]
    for r, adjusted in zip(family.rows, stats.correct(raw, "holm")):
        assert r.diff.adjusted_p == pytest.approx(adjusted)
    lines = verdict.language_verdict(
        "sw", comparisons.families(lang, SETTINGS, {}, rivals.families(lang, SETTINGS)), {}, SETTINGS
    )
    said = next(x for x in lines if x.startswith("- **Bits per byte of the valid text, omp − focus"))
    d = init.diff
    assert f"worse: omp − focus (init) {d.diff:+.3f} [{d.low:+.3f}, {d.high:+.3f}]" in said


def test_no_head_to_head_where_omp_never_ran():
    lang = language(methods=("random", "focus"))
    assert rivals.families(lang, SETTINGS) == []
    assert not any(
        f.title.startswith(rivals.TITLE)
        for f in comparisons.families(lang, SETTINGS, {}, rivals.families(lang, SETTINGS))
    )
