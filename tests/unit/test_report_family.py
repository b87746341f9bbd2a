"""The report's correction families, by hand: the claims of every language are one headline family, corrected
together (`tables.correct_headline`), the exploratory frequency buckets a family of their own, and the tables
and the verdict say which family and how many comparisons.

Four omp − focus claims over two languages, raw p 0.0115 and 0.533 (sw), 0.0150 and 0.0325 (de). Holm over the
four at once: sorted 0.0115, 0.0150, 0.0325, 0.533 times 4, 3, 2, 1 = 0.046, 0.045, 0.065, 0.533, made monotone:
0.046, 0.046, 0.065, 0.533. Per table (today's correction before this family) they would be 0.023, 0.533 and
0.030, 0.0325: de's omp − focus would read better; over the four it does not survive.
"""

from __future__ import annotations

import pytest

from vocabtransfer.evaluate.stats import Difference
from vocabtransfer.report import harness_table, markdown, tables, verdict
from vocabtransfer.report.tables import EXPLORATORY, Family, Row, Settings

HOLM = Settings(resamples=2000, confidence=0.95, correction="holm", seed=0, min_clusters=30)
BH = Settings(resamples=2000, confidence=0.95, correction="bh", seed=0, min_clusters=30)


def diff(p: float, d: float = -0.1, width: float = 0.09) -> Difference:
    """A difference with raw p `p`; its interval excludes zero where p < 0.05 (as the report's do)."""
    half = abs(d) - 0.01 if p < 0.05 else abs(d) + width
    return Difference(d, d - half, d + half, p, n_pseeds=3, n_fseeds=0, n_clusters=40)


def study() -> dict[str, list[Family]]:
    """sw and de: a head-to-head table of two omp − focus claims each; sw an exploratory bucket table too."""
    sw = Family(
        "Head to head: omp − focus",
        "",
        [
            Row("omp − focus (standard)", "valid loss", diff(0.0115, +0.066), lower_is_better=True),
            Row("omp − focus (selfish)", "valid loss", diff(0.533, +0.028), lower_is_better=True),
        ],
    )
    de = Family(
        "Head to head: omp − focus",
        "",
        [
            Row("omp − focus (standard)", "valid loss", diff(0.0150, +0.041), lower_is_better=True),
            Row("omp − focus (selfish)", "valid loss", diff(0.0325, -0.100), lower_is_better=True),
        ],
    )
    buckets = Family(
        "Selfish − standard by token frequency (exploratory)",
        "",
        [
            Row("focus", "b0 (ranks 0–9)", diff(0.01, +0.3), lower_is_better=True),
            Row("focus", "b1 (ranks 10–19)", diff(0.02, -0.5), lower_is_better=True),
        ],
        objective="selfish",
        kind=EXPLORATORY,
    )
    for family in (sw, de, buckets):  # as built: each table corrected over its own rows
        tables._corrected(family.rows, HOLM)
    return {"sw": [sw, buckets], "de": [de]}


def adjusted(families: list[Family]) -> list[float]:
    return [r.diff.adjusted_p for f in families for r in f.rows]


def test_four_claims_in_two_languages_are_holm_corrected_together_and_the_buckets_apart():
    langs = study()
    sw, buckets = langs["sw"]
    (de,) = langs["de"]
    # per table, before the headline pass: de's selfish row survives (0.0325 < 0.05)
    assert adjusted([sw, de]) == pytest.approx([0.023, 0.533, 0.030, 0.0325])
    assert de.rows[1].status(HOLM) == "better"
    n = tables.correct_headline([sw, buckets, de], HOLM)
    assert n == 4 and sw.headline == de.headline == 4 and buckets.headline is None
    assert adjusted([sw, de]) == pytest.approx([0.046, 0.533, 0.046, 0.065])
    assert de.rows[1].status(HOLM) == "interval excludes zero, but not after the correction"
    assert sw.rows[0].status(HOLM) == "worse" and de.rows[0].status(HOLM) == "worse"
    # the buckets: Holm over their own 2 rows (0.01 · 2, 0.02 · 1 → 0.02, 0.02), not counted in the 4
    assert adjusted([buckets]) == pytest.approx([0.02, 0.02])
    assert sw.correction_text(HOLM) == "Holm over the 4 comparisons of the headline family"
    assert buckets.correction_text(HOLM) == (
        "exploratory: Holm over this table's 2 comparisons, apart from the headline family"
    )
    # each table and the verdict name the family
    caption = " ".join(markdown.family_section(de, HOLM))
    assert "Adjusted p: Holm over the 4 comparisons of the headline family." in caption
    assert "| 0.0325 | 0.065 | interval excludes zero, but not after the correction |" in " ".join(caption.split())
    assert "exploratory: Holm over this table's 2 comparisons" in " ".join(markdown.family_section(buckets, HOLM))
    said = "\n".join(verdict.section({lang: (families, {}) for lang, families in langs.items()}, HOLM))
    assert "survives the correction (Holm over the 4 comparisons of the headline family: every difference" in said
    de_said = said.split("### de", 1)[1]
    assert "interval excludes zero, but not after the correction: omp − focus (selfish) -0.100" in de_said
    assert "(adjusted p 0.065)" in de_said
    # the smallest detectable difference widens with the headline family, not the table's 2 rows
    assert verdict.detectable([de.rows[1].diff], HOLM, de.comparisons) > verdict.detectable([de.rows[1].diff], HOLM, 2)


def test_benjamini_hochberg_is_honoured_for_both_families():
    langs = study()
    sw, buckets = langs["sw"]
    (de,) = langs["de"]
    tables._corrected(buckets.rows, BH)
    assert tables.correct_headline([sw, buckets, de], BH) == 4
    # BH over 0.0115, 0.0150, 0.0325, 0.533: p · 4 / rank = 0.046, 0.030, 0.0433, 0.533, then the running minimum
    # from the largest: 0.030, 0.030, 0.0433, 0.533
    assert adjusted([sw, de]) == pytest.approx([0.030, 0.533, 0.030, 0.0325 * 4 / 3])
    assert adjusted([buckets]) == pytest.approx([0.02, 0.02])  # 0.01 · 2 / 1, 0.02 · 2 / 2
    assert de.correction_text(BH) == "Benjamini–Hochberg over the 4 comparisons of the headline family"


def test_zero_shot_differences_from_the_source_of_learned_tasks_join_the_headline_family():
    langs = study()
    sw, buckets = langs["sw"]
    (de,) = langs["de"]
    floor = diff(0.001, +20.0)

    def task(state: str, p: float) -> harness_table.HarnessTask:
        scores = [
            harness_table.HarnessScore("source", floor, None, floor),
            harness_table.HarnessScore("focus-standard-pseed1", floor, diff(p, -5.7), floor),
        ]
        own = "Holm over this task's 1 model"  # as harness_table.task_table words its own correction
        return harness_table.HarnessTask("xnli", "acc", "majority", 33.3, 33.3, 600, 200, state, scores, own)

    learned, not_learned = task(tables.LEARNED, 0.004), task(tables.NOT_LEARNED, 0.3)
    claims = harness_table.claims([learned, not_learned])
    assert [row.label for _, row in claims] == ["focus-standard-pseed1"]  # a task not learned makes no claim
    n = tables.correct_headline([sw, buckets, de], HOLM, [row for _, row in claims])
    harness_table.adopt([learned, not_learned], claims, HOLM, n)
    assert n == 5 and sw.headline == 5
    # Holm over 0.004, 0.0115, 0.0150, 0.0325, 0.533: 0.02, 0.046, 0.045 → 0.046, 0.065, 0.533
    assert learned.scores[1].vs_source.adjusted_p == pytest.approx(0.02)
    assert adjusted([sw, de]) == pytest.approx([0.046, 0.533, 0.046, 0.065])
    assert learned.correction == "Holm over the 5 comparisons of the headline family"
    assert not_learned.correction == "Holm over this task's 1 model"  # greyed, no claim: its own correction
    assert "Holm over the 5 comparisons of the headline family)**" in harness_table.verdict_bullet(learned, HOLM)
