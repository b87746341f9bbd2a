"""The recommendation's rule (report.recommend) on hand-checkable data: the lowest end-of-run bits per byte among the
methods that are not a baseline, a tie where the runner-up is not detectably worse (Holm over the ranking's own
family), a tie broken by a learned task, the pick against the untouched source, and "In brief" written from them
with numbers and intervals and no p-value."""

from __future__ import annotations

import re

import numpy as np
import pytest

from vocabtransfer.evaluate import stats
from vocabtransfer.report import brief, comparisons, recommend, tables
from vocabtransfer.report.baseline_choice import stronger_baseline
from vocabtransfer.report.bpb import bits_per_byte_table

from report_language import BPB, LOSS, N, PSEEDS, SETTINGS, bpb_by_hand, language, with_methods


def test_the_pick_has_the_lowest_bits_per_byte_and_the_runner_up_is_detectably_worse():
    lang = with_methods({"omp": 2.9})  # focus 2.5, omp 0.4 bits per byte behind
    rec = recommend.recommend(lang, SETTINGS, ("random", "mean"), status={})
    assert (rec.pick, rec.runner_up, rec.tie, rec.measure) == ("focus", "omp", False, "bits per byte")
    assert set(rec.means) == {"focus", "omp"}  # the baselines are never candidates
    bits = {m: bpb_by_hand(lang, m) for m in ("focus", "omp")}
    assert rec.means["focus"] == pytest.approx(np.mean(list(bits["focus"].values())))
    row = rec.versus("omp")
    assert row.label == "omp − focus" and row.status(SETTINGS) == "worse"
    assert row.diff.diff == pytest.approx(np.mean([bits["omp"][p] - bits["focus"][p] for p in PSEEDS]))
    assert rec.ranking.kind == tables.RANKING  # its own family: Holm over its rows only
    raw = [r.diff.p_value for r in rec.ranking.rows]
    assert [r.diff.adjusted_p for r in rec.ranking.rows] == pytest.approx(stats.correct(raw, "holm"))
    # the pick against the source: paired line by line, its seeds only
    vs = rec.row(rec.source, "focus − source", "bits per byte")
    assert vs.diff.diff == pytest.approx(np.mean(list(bits["focus"].values())) - 1.5)
    assert vs.diff.n_pseeds == 3 and vs.diff.n_clusters == N and vs.status(SETTINGS) == "worse"


def test_a_runner_up_not_detectably_worse_is_a_tie_named_as_such():
    lang = with_methods({"omp": BPB["focus"] + 0.002})
    rec = recommend.recommend(lang, SETTINGS, ("random", "mean"), status={})
    assert rec.tie and set(rec.tied) == {"focus", "omp"} and rec.pick == min(rec.means, key=rec.means.get)
    said = brief.pick_sentence(rec, SETTINGS)
    assert f"**sw: {rec.pick} and {rec.runner_up} tie** on bits per byte" in said
    assert "no detectable difference" in said and "named first for its lower mean only" in said


def diff(d: float, half: float, p: float) -> stats.Difference:
    return stats.Difference(d, d - half, d + half, p, 3, 1, 100, adjusted_p=p)


def test_a_learned_task_breaks_a_tie_only_where_one_method_is_detectably_better():
    ranking = tables.Family(
        "r",
        "",
        [
            tables.Row("omp − focus", "bits per byte", diff(0.001, 0.01, 0.8), lower_is_better=True),
            tables.Row("omp − focus", "qa", diff(4.0, 2.0, 0.001)),  # omp 4 points better on qa
        ],
    )
    assert recommend._tie_break(["focus", "omp"], ["focus", "omp"], ranking, ["qa"], SETTINGS) == ("omp", "qa")
    ranking.rows[1] = tables.Row("omp − focus", "qa", diff(1.0, 2.0, 0.4))
    assert recommend._tie_break(["focus", "omp"], ["focus", "omp"], ranking, ["qa"], SETTINGS) == (None, None)


def test_in_brief_states_the_pick_the_source_and_the_baseline_with_intervals_and_no_p_value():
    lang = with_methods({"omp": 2.9})
    choice = stronger_baseline(lang, ("random", "mean"))
    families = comparisons.families(lang, SETTINGS, {}, (), choice) + [
        bits_per_byte_table(lang, SETTINGS, choice).family
    ]
    rec = recommend.recommend(lang, SETTINGS, ("random", "mean"), status={})
    said = brief.sentences(rec, families, {}, SETTINGS)
    assert len(said) == 3
    row = rec.versus("omp")
    assert (
        said[0].startswith("**sw: pick focus** (the lowest bits per byte, the runner-up detectably worse): focus ")
        and "bits per byte after pretraining" in said[0]
    )
    assert (
        f"omp − focus +{row.diff.diff:.3f} [+{row.diff.low:.3f}, +{row.diff.high:.3f}]: omp detectably worse" in said[0]
    )
    assert said[1].startswith("Against the untouched source model: in bits per byte, focus − source +")
    assert said[2].startswith("Against the baseline (mean) after pretraining: focus − mean (standard) -")
    assert "detectably better (lower)" in said[2]
    text = "\n".join(brief.section({"sw": said}, {"sw": "results/report/figures/sw_worth.png"}))
    assert text.startswith("## In brief") and not re.search(r"\bp\b|p-value", text)  # no p-value
    assert "![sw: what each initialisation is worth in the baseline's tokens](report/figures/sw_worth.png)" in text
    assert recommend.RULE in text


def test_no_candidate_is_no_pick():
    lang = language()  # random, mean and focus: only focus is not a baseline
    assert recommend.recommend(lang, SETTINGS, ("random", "mean", "focus"), status={}).pick is None
    only = recommend.recommend(lang, SETTINGS, ("random", "mean"), status={})
    assert (only.pick, only.runner_up, only.tie) == ("focus", None, False) and LOSS["focus"] == 0.0
