"""`## In brief`, the report's opening: per language at most three sentences, each written from a comparison
(report.recommend's ranking and the pick against the source; the headline family's pick − baseline row) with its
number and interval, never a p-value: which initialisation to pick and why (its rule, report.recommend.RULE), how
the pick compares with the untouched source, and what it is worth over the baseline. Beside it, per language, the
figure of what each method is worth in the baseline's tokens against the budget (figures.plot_worth)."""

from __future__ import annotations

from vocabtransfer.report.markdown import _rel, difference_text
from vocabtransfer.report.read import task_order
from vocabtransfer.report.recommend import BPB, LOSS, OBJECTIVE, RULE, Recommendation
from vocabtransfer.report.tables import Family, Row, Settings

TITLE = "## In brief"


def _digits(measure: str) -> int:
    return 1 if measure in task_order() else 3


def _said(row: Row, settings: Settings, first: str, second: str) -> str:
    """`first − second +0.021 [+0.010, +0.032]: first detectably worse` (the row reads first − second)."""
    state = row.status(settings)
    lower = row.lower_is_better
    word = {
        "better": f"{first} detectably better ({'lower' if lower else 'higher'})",
        "worse": f"{first} detectably worse ({'higher' if lower else 'lower'})",
    }.get(state, state)
    return f"{row.label} {difference_text(row.diff, _digits(row.measure))}: {word}"


def pick_sentence(rec: Recommendation, settings: Settings) -> str:
    """Which method to pick and why, with its main measure and the runner-up's difference from it."""
    if rec.pick is None:
        return f"**{rec.lang}: no pick**: {rec.reason}."
    score = f"{rec.pick} {difference_text(rec.score, 3, sign=False)} {rec.measure} after pretraining"
    versus = rec.versus(rec.runner_up) if rec.runner_up else None
    parts = [score] + ([_said(versus, settings, *versus.label.split(" − "))] if versus and versus.diff else [])
    if rec.task and rec.runner_up:
        on_task = rec.versus(rec.runner_up, rec.task)
        parts += [f"on {rec.task}, " + _said(on_task, settings, *on_task.label.split(" − "))] if on_task else []
    if rec.tie:
        others = ", ".join(rec.tied[1:])
        head = f"**{rec.lang}: {rec.pick} and {others} tie** on {rec.measure}"
        return f"{head} ({'; '.join(parts)}); {rec.pick} is named first for its lower mean only."
    return f"**{rec.lang}: pick {rec.pick}** ({rec.reason}): {'; '.join(parts)}."


def source_sentence(rec: Recommendation, status: dict, settings: Settings) -> str | None:
    """The pick against the untouched source: each learned task's scores and difference, and bits per byte."""
    if rec.pick is None:
        return None
    rows = [r for r in (rec.source.rows if rec.source else []) if r.diff is not None]
    if not rows:
        why = "no learned downstream task" + (
            " and no bits per byte (a masked LM: its loss is per token of another tokenizer)"
            if rec.measure == LOSS
            else ""
        )
        return f"No comparison of {rec.pick} with the untouched source: {why}."
    parts = []
    for r in rows:
        if r.measure == BPB:
            parts.append(f"in bits per byte, {_said(r, settings, rec.pick, 'source')}")
            continue
        scores = {s.group: s.score for s in status[r.measure].scores}
        own, src = scores.get(f"{rec.pick}-{OBJECTIVE}"), scores.get("source")
        parts.append(
            f"on {r.measure} (learned) {rec.pick} scores {difference_text(own, 1, sign=False)}, the source "
            f"{difference_text(src, 1, sign=False)}, {_said(r, settings, rec.pick, 'source')}"
        )
    return f"Against the untouched source model: {'; '.join(parts)}."


def baseline_sentence(rec: Recommendation, families: list[Family], settings: Settings) -> str | None:
    """The pick − the baseline after pretraining on the main measure, from the headline family's row."""
    for family in families:
        if family.baseline is None or rec.pick is None:
            continue
        row = next(
            (
                r
                for r in family.rows
                if r.label == f"{rec.pick} − {family.baseline} ({OBJECTIVE})" and r.measure == rec.measure
            ),
            None,
        )
        if row is not None and row.diff is not None:
            said = _said(row, settings, rec.pick, family.baseline)
            return f"Against the baseline ({family.baseline}) after pretraining: {said}."
    return None


def sentences(rec: Recommendation, families: list[Family], status: dict, settings: Settings) -> list[str]:
    """At most three sentences for one language: the pick, the source, the baseline."""
    out = [pick_sentence(rec, settings), source_sentence(rec, status, settings)]
    out.append(baseline_sentence(rec, families, settings))
    return [s for s in out if s]


def section(per_language: dict[str, list[str]], figures: dict[str, str]) -> list[str]:
    """`## In brief`: every language's sentences, each language's worth figure, and the rule."""
    lines = [TITLE, ""]
    for said in per_language.values():
        lines += [f"- {s}" for s in said]
    lines += [
        "",
        f"_The rule (report/recommend.py): {RULE}. Intervals: as in every table below; the head-to-head rows are in "
        "each language's *Ranking after pretraining* table, corrected over their own family._",
        "",
    ]
    for lang, path in figures.items():
        lines += [f"![{lang}: what each initialisation is worth in the baseline's tokens]({_rel(path)})", ""]
    return lines
