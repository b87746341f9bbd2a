"""`## Verdict`: a few sentences per language, written from the comparison families (report.comparisons),
never typed. A difference counts as a win or a loss only when its interval excludes zero, it
survives the correction over its family (the headline family, every claim of the report at once; the
frequency buckets: their exploratory table's; a task's floor check: the task's models) and it rests on
enough clusters and more than one run;
one resting on too little says what is missing ("10 clusters: too few to tell"); every other one is
"no detectable difference" (said apart when its interval alone excludes zero but the corrected
p-value does not pass). Every number carries its interval `[lo, hi]` and the seeds behind it;
tasks no model learns are named as such, with their floor's score, and take no part.
"""

from __future__ import annotations

from typing import Sequence

from scipy.stats import norm


from vocabtransfer.report.bpb import BPB_TITLE
from vocabtransfer.report import rivals
from vocabtransfer.report.read import task_order
from vocabtransfer.report.comparisons import INIT_FLOOR, INIT_LOSS, INIT_TITLE
from vocabtransfer.report.tables import (
    CORRECTION_NAME,
    EXPLORATORY,
    NO_DIFFERENCE,
    NOT_AFTER_CORRECTION,
    NOT_LEARNED,
    Family,
    Row,
    Settings,
    correction_text,
    seeds_text,
)
from vocabtransfer.report.markdown import difference_text


def _digits(measure: str) -> int:
    """One decimal for a task's score (percent), three for a loss or bits per byte."""
    return 1 if measure in task_order() else 3


CORRECTED = ("better", "worse", "helps", "costs", NOT_AFTER_CORRECTION)  # labels that rest on the correction


def _seeds(rows: list[Row]) -> str | None:
    """The runs behind every row when they are the same for all (else None: each row says its own)."""
    kinds = {r.runs_text for r in rows if r.diff is not None}
    return kinds.pop() if len(kinds) == 1 else None


def adjusted(row: Row, state: str) -> str:
    """`adjusted p 0.0016` beside a label that rests on the correction (else nothing)."""
    if state not in CORRECTED or row.diff is None or row.diff.adjusted_p is None:
        return ""
    return f"adjusted p {row.diff.adjusted_p:.2g}"


def _listing(rows: list[Row], per_row: bool, state: str) -> list[str]:
    """`label +0.59 [+0.40, +0.77]` per row, with its seeds when the rows differ in them and its adjusted p
    when its label rests on the correction."""
    out = []
    for r in rows:
        notes = [n for n in (r.runs_text if per_row else "", adjusted(r, state)) if n]
        out.append(
            f"{r.label} {difference_text(r.diff, _digits(r.measure))}" + (f" ({'; '.join(notes)})" if notes else "")
        )
    return out


def detectable(diffs: list, settings: Settings, comparisons: int) -> float:
    """The smallest difference the design behind `diffs` detects: the widest half-width of their intervals,
    scaled from the confidence level to the Bonferroni level over the `comparisons` of their correction family
    (the strictest step of Holm's correction), as a normal interval widens."""

    scale = norm.ppf(1 - settings.alpha / (2 * max(1, comparisons))) / norm.ppf(1 - settings.alpha / 2)
    return max((d.high - d.low) / 2 for d in diffs) * scale


def detectable_text(diffs: list, settings: Settings, comparisons: int, digits: int, unit: str = "") -> str:
    """`smallest difference this design detects: ±0.052` (in the measure's unit)."""
    return f"smallest difference this design detects: ±{detectable(diffs, settings, comparisons):.{digits}f}{unit}"


def family_sentence(family: Family, measure: str, settings: Settings, what: str) -> str | None:
    """One sentence on the rows of `family` that measure `measure`."""
    rows = [r for r in family.rows if r.measure == measure and r.diff is not None]
    if not rows:
        return None
    shared = _seeds(rows)
    parts = []
    states = [r.status(settings) for r in rows]
    too_few = list(dict.fromkeys(state for state in states if state.endswith("too few to tell")))
    comparisons = family.comparisons  # the correction's family: the headline family's, else the whole table
    for name in ("better", "worse", NOT_AFTER_CORRECTION, NO_DIFFERENCE, *too_few):
        group = [r for r, state in zip(rows, states) if state == name]
        if group:
            power = (
                ""
                if name not in (NOT_AFTER_CORRECTION, NO_DIFFERENCE)
                else f" ({detectable_text([r.diff for r in group], settings, comparisons, _digits(measure))})"
            )
            parts.append(f"{name}: " + "; ".join(_listing(group, shared is None, name)) + power)
    return f"**{what}**" + (f" ({shared})" if shared else "") + ": " + ". ".join(parts) + "."


def objective_sentences(family: Family | None, settings: Settings, bucket_family: Family | None = None) -> list[str]:
    """Per method: where an objective (selfish, distill) helps and costs against standard, on the valid
    loss and the tasks (`family`, claims of the headline family) and, exploratory, on the frequency buckets
    (`bucket_family`, corrected over its own table)."""
    first = family or bucket_family
    if first is None:
        return []
    objective = first.title.split(" − ")[0].lower()
    out = []
    main_rows = family.rows if family else []
    bucket_rows = bucket_family.rows if bucket_family else []
    for method in dict.fromkeys(r.label for r in main_rows + bucket_rows):
        other = [r for r in main_rows if r.label == method and r.diff is not None]
        buckets = [r for r in bucket_rows if r.label == method and r.diff is not None]
        parts = []
        for r in other:
            verdict = r.status(settings, "helps", "costs")
            notes = "; ".join(n for n in (verdict, adjusted(r, verdict), r.runs_text) if n)
            parts.append(f"{r.measure} {difference_text(r.diff, _digits(r.measure))} ({notes})")
        states = [r.status(settings, "helps", "costs") for r in buckets]
        helps = [r for r, state in zip(buckets, states) if state == "helps"]
        costs = [r for r, state in zip(buckets, states) if state == "costs"]
        if buckets:

            def names(rs):
                return ", ".join(
                    f"{r.measure.split(' ')[0]} {difference_text(r.diff, 3)} ({adjusted(r, 'helps')})" for r in rs
                )

            assert bucket_family is not None  # buckets come from it
            parts.append(
                f"by token frequency ({bucket_family.correction_text(settings)}; "
                f"{_seeds(buckets) or 'seeds as in the table'}): "
                + (("lower loss (helps) in " + names(helps)) if helps else "no bucket with a detectably lower loss")
            )
            if costs:
                parts.append("higher loss (costs) in " + names(costs))
            uncorrected = states.count(NOT_AFTER_CORRECTION)
            few = [state for state in states if state.endswith("too few to tell")]
            flat = len(buckets) - len(helps) - len(costs) - len(few)
            if flat:
                parts.append(
                    f"no detectable difference in {flat} of {len(buckets)} frequency buckets"
                    + (
                        f" ({uncorrected} of them with an interval excluding zero before the correction)"
                        if uncorrected
                        else ""
                    )
                )
            for state in dict.fromkeys(few):
                parts.append(f"{state} in {few.count(state)} of {len(buckets)} frequency buckets")
        if parts:
            out.append(f"**{objective} − standard, {method}**: " + "; ".join(parts) + ".")
    return out


def head_to_head_sentences(family: Family, settings: Settings) -> list[str]:
    """The bits-per-byte and valid-loss sentences of a `rivals` family (`omp − focus`)."""
    pair = family.title.split(": ", 1)[1]
    out = [
        family_sentence(family, measure, settings, f"{what}, {pair} (negative is better)")
        for measure, what in (
            ("bits per byte", "Bits per byte of the valid text"),
            ("valid loss", "Valid loss after pretraining"),
        )
    ]
    return [s for s in out if s]


def learned_sentence(task: str, st, floor: str, settings: Settings) -> str:
    """`**qa: learned**`: the models better than the task's floor by their interval after the correction over
    the task's models, each with its margin, its seeds and its adjusted p."""
    above = [s for s in st.scores if Row(s.group, task, s.over_floor).better(settings)]
    listed = "; ".join(
        f"{s.group} {difference_text(s.over_floor, 1)} ({seeds_text(s.over_floor)}"
        + (f"; adjusted p {s.over_floor.adjusted_p:.2g}" if s.over_floor.adjusted_p is not None else "")
        + ")"
        for s in above
    )
    return (
        f"**{task}: learned**: better than its floor ({floor}) by the interval after the correction, in points: "
        f"{listed}; {len(st.scores) - len(above)} of {len(st.scores)} models are not."
    )


def _with_weaker(sentence: str, family: Family) -> str:
    """`sentence` saying which of its rows is a weaker listed baseline (`Family.weaker`), where one is."""
    if not family.weaker:
        return sentence
    rows = ", ".join(f"{m} − {family.baseline}" for m in family.weaker)
    weaker = " and ".join(family.weaker)
    return (
        f"{sentence[:-1]} ({weaker}: the weaker listed baseline{'s' if len(family.weaker) > 1 else ''}, {rows} above)."
    )


def _family_bullets(families: list[Family], settings: Settings) -> list[str]:
    """The bullets of the families that open a language's verdict: right after initialisation, the valid loss
    and bits per byte against the baseline (`Family.baseline`), head to head."""
    bullets = []
    for family in families:
        if family.title == INIT_TITLE:
            bullets += [
                s
                for s in (
                    family_sentence(
                        family,
                        INIT_LOSS,
                        settings,
                        "Right after initialisation, valid loss, later − earlier "
                        "method of init.methods (negative is better)",
                    ),
                    family_sentence(
                        family,
                        INIT_FLOOR,
                        settings,
                        "Right after initialisation against the unigram floor (negative: the model uses the context)",
                    ),
                )
                if s
            ]
        elif family.title.startswith("Valid loss"):
            s = family_sentence(
                family,
                "valid loss",
                settings,
                f"Valid loss after pretraining, method − {family.baseline} (negative is better)",
            )
            bullets += [_with_weaker(s, family)] if s else []
        elif family.title.startswith(BPB_TITLE):
            s = family_sentence(
                family,
                "bits per byte",
                settings,
                f"Bits per byte of the valid text, method − {family.baseline} (negative is better)",
            )
            bullets += [_with_weaker(s, family)] if s else []
        elif family.title.startswith(rivals.TITLE):
            bullets += head_to_head_sentences(family, settings)
    return bullets


def language_verdict(
    lang: str,
    families: list[Family],
    status: dict,
    settings: Settings,
    extra: list[str | None] | None = None,
    zero_shot: Sequence[str] = (),
) -> list[str]:
    """The verdict's bullet points for one language; `extra`: the bits-per-byte claims that need more than a
    family (report.bpb.share_sentence), after the bits-per-byte bullet; `zero_shot`: the zero-shot tasks'
    (report.harness_table), last."""
    lines = [f"### {lang}", ""]
    bullets = _family_bullets(families, settings)
    bullets += [s for s in extra or [] if s]
    for task, st in status.items():
        floor = f"{st.floor['name']}, {st.floor['value']:.1f}"
        if not st.learned:
            best = max(st.scores, key=lambda s: s.over_floor.diff)
            head = (
                f"**{task}: not learned at these sizes**: no model is above its floor"
                if st.state == NOT_LEARNED
                else f"**{task}: cannot tell whether it is learned ({st.state})**: the models above its floor"
            )
            bullets.append(
                f"{head} ({floor}) by its interval rest on too little"
                if st.state != NOT_LEARNED
                else head + f" ({floor}) by its interval"
            )
            p = best.over_floor.adjusted_p  # "not learned" rests on the correction over the task's models
            power = detectable_text([s.over_floor for s in st.scores], settings, len(st.scores), 1, " points")
            bullets[-1] += (
                f" (best: {best.group} {difference_text(best.over_floor, 1)} points over it, "
                + (f"adjusted p {p:.2g}, " if p is not None and st.state == NOT_LEARNED else "")
                + f"{seeds_text(best.over_floor)}, {best.over_floor.n_clusters} clusters; {power} over "
                "the floor); its scores are left out of every comparison."
            )
            continue
        bullets.append(learned_sentence(task, st, floor, settings))
        for family in families:
            if family.title.startswith(f"{task}:"):
                s = family_sentence(
                    family,
                    task,
                    settings,
                    f"{task}, method − {family.baseline} (points, positive is better; floor: {floor})",
                )
                bullets += [_with_weaker(s, family)] if s else []
    for objective in dict.fromkeys(f.objective for f in families if f.objective):
        main = next((f for f in families if f.objective == objective and f.kind != EXPLORATORY), None)
        buckets = next((f for f in families if f.objective == objective and f.kind == EXPLORATORY), None)
        bullets += objective_sentences(main, settings, buckets)
    bullets += list(zero_shot)
    if not bullets:
        bullets.append("No comparison could be made: the study has no paired runs for this language.")
    return lines + [f"- {b}" for b in bullets] + [""]


def _family_text(settings: Settings, headline: int | None) -> str:
    """Which family each claim is corrected over, for the verdict's opening."""
    name = CORRECTION_NAME[settings.correction]
    if headline is None:  # families not corrected together (a verdict built without report.build)
        return f"{name} over its table"
    return (
        f"{correction_text(settings, headline)}: every difference this verdict states as a claim, in every "
        "language of the report, adjusted together; the frequency buckets are exploratory, "
        f"{name}-corrected over their own table, and whether a task is learned over the task's models, a gate "
        "before the headline"
    )


def section(
    per_language: dict[str, tuple], settings: Settings, zero_shot: dict[str, list[str]] | None = None
) -> list[str]:
    """`## Verdict`, the report's first section."""
    headline = next(
        (f.headline for families, *_ in per_language.values() for f in families if f.headline is not None), None
    )
    lines = [
        "## Verdict",
        "",
        f"Computed from the tables below: each difference with its {100 * settings.confidence:g} % nested "
        f'interval; "better"/"worse" only where the interval excludes zero, the difference survives the '
        f"correction ({_family_text(settings, headline)}) and it "
        f'rests on at least {settings.min_clusters} test clusters and more than one run; "too few to tell" '
        'where it rests on less; otherwise "no detectable difference", or "interval excludes zero, but not '
        'after the correction"; a label that rests on the correction carries its adjusted p. A task is learned '
        "when some model is detectably above its floor (a predictor without a model); the share of the source's "
        "advantage a causal model keeps is measured from the best bits-per-byte floor and worded only for the "
        "models detectably better than it.",
        "",
    ]
    for lang, (families, status, *extra) in per_language.items():  # (families, status[, extra bullets])
        bullets = extra[0] if extra else None
        lines += language_verdict(lang, families, status, settings, bullets, zero_shot=(zero_shot or {}).get(lang, []))
    return lines
