"""The method − baseline comparisons subtract the stronger of report.baseline (report.baseline_choice), name it in
their titles and the verdict's words, show the weaker listed baseline as a row and say so, and stay in the
headline family that Holm corrects together."""

from __future__ import annotations

import numpy as np
import pytest

from vocabtransfer.evaluate import stats
from vocabtransfer.report import comparisons, tables, verdict
from vocabtransfer.report.baseline_choice import stronger_baseline
from vocabtransfer.report.bpb import bits_per_byte_table

from report_language import BPB, PSEEDS, SETTINGS, bpb_by_hand, language, loss_by_hand


def test_the_comparisons_subtract_the_stronger_baseline_and_show_the_weaker_as_a_row():
    lang = language()
    choice = stronger_baseline(lang, ("random", "mean"))
    assert choice.method == "mean" and choice.weaker == ("random",)
    families = {f.title: f for f in comparisons.families(lang, SETTINGS, {}, (), choice)}
    valid = families["Valid loss after pretraining: method − mean"]
    assert "Valid loss after pretraining: method − random" not in families
    assert valid.baseline == "mean" and valid.weaker == ("random",)
    rows = {r.label: r for r in valid.rows}
    assert list(rows) == ["random − mean (standard)", "focus − mean (standard)"]
    mean, focus, random = (loss_by_hand(lang, m) for m in ("mean", "focus", "random"))
    assert rows["focus − mean (standard)"].diff.diff == pytest.approx(np.mean([focus[p] - mean[p] for p in PSEEDS]))
    assert rows["random − mean (standard)"].diff.diff == pytest.approx(np.mean([random[p] - mean[p] for p in PSEEDS]))
    assert rows["focus − mean (standard)"].status(SETTINGS) == "better"  # 0.5 lower, blocks' noise 0.02
    assert rows["random − mean (standard)"].status(SETTINGS) == "worse"
    assert "random, the weaker of report.baseline (random, mean), is compared with mean as a row too" in (
        valid.description
    )

    table = bits_per_byte_table(lang, SETTINGS, choice)
    assert table.family.title == "Bits per byte: method − mean" and table.family.baseline == "mean"
    by_method = {r.method: r for r in table.rows}
    assert by_method["mean"].vs_baseline is None  # the baseline is not compared with itself
    bits = {m: bpb_by_hand(lang, m) for m in BPB}
    for m in ("random", "focus"):
        row = by_method[m].vs_baseline
        assert row.label == f"{m} − mean (standard)"
        assert row.diff.diff == pytest.approx(np.mean([bits[m][p] - bits["mean"][p] for p in PSEEDS]))

    # the verdict names the baseline and which row is the weaker one
    bullets = "\n".join(verdict.language_verdict("sw", list(families.values()) + [table.family], {}, SETTINGS))
    assert "**Valid loss after pretraining, method − mean (negative is better)**" in bullets
    assert "**Bits per byte of the valid text, method − mean (negative is better)**" in bullets
    assert "(random: the weaker listed baseline, random − mean above)." in bullets
    assert "method − random" not in bullets


def test_holm_corrects_the_baseline_rows_with_the_headline_family():
    lang = language()
    choice = stronger_baseline(lang, ("random", "mean"))
    families = comparisons.families(lang, SETTINGS, {}, (), choice)
    bpb = bits_per_byte_table(lang, SETTINGS, choice)
    headline = families + [f for f in (bpb.family, bpb.floor_family) if f is not None and f.rows]
    rows = [r for f in headline for r in f.rows if r.diff is not None]
    raw = [r.diff.p_value for r in rows]
    n = tables.correct_headline(headline, SETTINGS)
    assert n == len(rows) == 4  # 2 valid-loss rows and 2 bits-per-byte rows (no floors in these data)
    for row, adjusted in zip(rows, stats.correct(raw, "holm")):
        assert row.diff.adjusted_p == pytest.approx(adjusted)
    assert all(f.headline == n for f in headline)


def test_a_single_baseline_reads_as_before():
    lang = language()
    titles = [f.title for f in comparisons.families(lang, SETTINGS, {}, (), "random")]
    assert titles == ["Valid loss after pretraining: method − random"]
    family = comparisons.families(lang, SETTINGS, {}, (), "random")[0]
    assert [r.label for r in family.rows] == ["mean − random (standard)", "focus − random (standard)"]
    assert "weaker" not in family.description and family.weaker == ()
    # random listed first but mean stronger: the list's order does not decide, the final loss does
    assert stronger_baseline(lang, ("random", "mean")).method == stronger_baseline(lang, ("mean", "random")).method
