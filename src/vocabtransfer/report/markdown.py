"""The report's Markdown: its tables and sections (the set-up's is report.study_setup). Numbers come from
report.tables and report.comparisons; nothing here computes a statistic."""

from __future__ import annotations

import math
import os
from pathlib import Path

from tabulate import tabulate


from vocabtransfer.pipeline import paths
from vocabtransfer.report.read import OBJECTIVE_ORDER, Language, task_order
from vocabtransfer.plan.report_plans import Plan
from vocabtransfer.evaluate.score_terms import FLOOR, seed_means
from vocabtransfer.report.tables import CORRECTION_NAME, NOT_LEARNED, Family, Settings, finite, seeds_text
from vocabtransfer.evaluate.tasks import TASKS, available
from vocabtransfer.report.figures import seed_curves


def fmt(x, digits: int = 3) -> str:
    return f"{float(x):.{digits}f}" if finite(x) else "–"


def difference_text(d, digits: int = 3, sign: bool = True) -> str:
    """A difference and its interval, `+0.59 [+0.40, +0.77]` (`sign` False: `25.6 [21.0, 30.2]`, a score); "–"
    when there is none. The one form every table and verdict writes an interval in."""
    if d is None or not finite(d.diff):
        return "–"
    f = f"{'+' if sign else ''}.{digits}f"
    return f"{d.diff:{f}} [{d.low:{f}}, {d.high:{f}}]"


def grey(text: str) -> str:
    """A value of a task no model learns: shown, marked, never ranked (italics: GitHub's Markdown strips
    inline styles such as a colour)."""
    return f"_{text}_"


WIDTH = 160  # the widest line a table may have; a wider one is split into tables of fewer columns


def md_table(headers: list[str], rows: list[list[str]], keys: int = 1) -> str:
    """A GitHub table; when a line would be wider than WIDTH, several tables, each repeating the first `keys`
    columns (what a row is) with as many of the others as fit."""

    def render(cols: list[int]) -> str:
        return tabulate(
            [[r[c] for c in cols] for r in rows],
            headers=[headers[c] for c in cols],
            tablefmt="github",
            disable_numparse=True,
        )

    def width(cols: list[int]) -> int:
        return max(len(line) for line in render(cols).splitlines())

    everything = list(range(len(headers)))
    if width(everything) <= WIDTH:
        return render(everything)
    head = everything[:keys]
    groups: list[list[int]] = [[]]
    for c in everything[keys:]:
        if groups[-1] and width(head + groups[-1] + [c]) > WIDTH:
            groups.append([])
        groups[-1].append(c)
    return "\n\n".join(render(head + g) for g in groups)


def bold_best(values: list[float | None], texts: list[str], higher: bool) -> list[str]:
    present = [v for v in values if v is not None and finite(v)]
    if not present:
        return texts
    best = max(present) if higher else min(present)
    return [f"**{t}**" if finite(v) and v == best else t for v, t in zip(values, texts)]


def _rel(target: str) -> str:
    """A link from report.md to a path relative to the root."""
    return Path(os.path.relpath(target, Path(paths.REPORT).parent)).as_posix()


def init_section(lang: Language, share: bool = True) -> list[str]:
    """The loss, retrieval and bits per byte of every initialisation, the source's and the floors' (the
    share kept only with `share`: where the bits-per-byte table gives it, it is printed there alone)."""
    lines = ["### Right after initialisation", ""]
    if not lang.init_eval:
        return lines + [f"_No init_eval results ({paths.fill(paths.INIT_EVAL, lang=lang.lang)} missing)._", ""]
    rows = [r for r in lang.init_eval if r["method"] != "source" and r.get("kind") != FLOOR]
    ref = [r for r in lang.init_eval if r["method"] == "source"]
    floors = [r for r in lang.init_eval if r.get("kind") == FLOOR]
    cols = [
        ("loss", "loss", False, 3),
        ("calibrated_loss", "calibrated loss", False, 3),
        ("temperature", "temperature", None, 2),
        ("retrieval_en2xx", "retrieval en→xx", True, 3),
        ("retrieval_xx2en", "retrieval xx→en", True, 3),
    ]
    cols = [c for c in cols if any(finite(r.get(c[0])) for r in lang.init_eval)]  # retrieval: encoders only
    has_bits = any(finite(r.get("bits_per_byte")) for r in lang.init_eval)
    if has_bits and share:  # causal models (init_eval.bits_per_byte): the measure that does not depend on the tokenizer
        cols += [("bits_per_byte", "bits per byte", False, 3), ("share_kept", "share kept", True, 2)]
    if not share:  # the bits-per-byte table has them (one source bits per byte in the report): no floor rows here
        floors = []
    if any(finite(r.get("bytes_per_token")) for r in lang.init_eval):
        cols.append(("bytes_per_token", "bytes per token", None, 2))
    ln_v = uniform_loss(lang) if cols and cols[0][0] == "loss" else None
    table = [[r["method"]] for r in rows]
    for key, _, higher, digits in cols:
        texts = [fmt(r.get(key), digits) for r in rows]
        if higher is not None:
            texts = bold_best([r.get(key) for r in rows], texts, higher)
        for row, text in zip(table, texts):
            row.append(text)
        if key == "loss" and ln_v is not None:  # beside each method's loss: how far above the uniform guess
            for row, r in zip(table, rows):
                row.append(fmt(r["loss"] - ln_v, 3) if finite(r.get("loss")) else "–")
    extra = ["–"] if ln_v is not None else []  # the rows below have no target-vocabulary loss above ln V
    for r in ref:
        table.append(["source (own tokenizer)"] + _cells(r, cols, extra))
    for r in floors:  # `floor:unigram-target` (evaluate.bpb_floor.NAMES)
        table.append([r["method"].replace(":", ": ")] + _cells(r, cols, extra))
    if ln_v is not None:
        table.append(
            [f"uniform guess (ln V, V = {vocab_size(lang):,})", fmt(ln_v, 3), "0.000"] + ["–"] * (len(cols) - 1)
        )
    headers = [c[1] for c in cols]
    if ln_v is not None:
        headers.insert(1, "loss − ln V")
    lines.append(md_table(["method"] + headers, table))
    lines += [
        "",
        _init_note(lang, has_bits, share, [r["method"].split(":", 1)[1] for r in floors], ln_v),
        "",
        f"![{lang.lang}: right after initialisation]({_rel(paths.fill(paths.INIT_EVAL_PLOT, lang=lang.lang))})",
        "",
    ]
    return lines


def _cells(r: dict, cols, extra: list[str]) -> list[str]:
    """A reference row's cells: its loss, the `extra` cell beside it (no loss − ln V), the other columns."""
    texts = [fmt(r.get(key), digits) for key, _, _, digits in cols]
    return texts[:1] + extra + texts[1:]


def vocab_size(lang: Language) -> int | None:
    """The target vocabulary's size V (the tokenizer stage's stats), None without them."""
    t = lang.tokenizer or {}
    v = t.get("vocab_size_reached", t.get("vocab_size"))
    return int(v) if v else None


def uniform_loss(lang: Language) -> float | None:
    """ln V, the loss of the uniform guess over the target vocabulary, in nats per token (what a model with
    no information starts at), None where V is unknown."""
    v = vocab_size(lang)
    return math.log(v) if v else None


FLOOR_NOTES = {
    "unigram-target": "the add-one unigram of the target tokenizer's ids on the train split",
    "unigram-source": "the same with the source tokenizer",
    "uniform": "the uniform guess over the target vocabulary",
}


def _init_note(lang: Language, has_bits: bool, share: bool, floors: list[str], ln_v: float | None = None) -> str:
    assert lang.init_eval is not None  # init_section returns before the note without it
    note = (
        "Loss: masked-/causal-LM loss on held-out target text with no training; calibrated: at the "
        "one temperature that minimises it; retrieval: top-1 accuracy on XNLI premises. The source model "
        f"reads the {lang.lang} text with its own tokenizer (its loss: on held-out source text, "
        f"{', '.join(sorted({str(r['lang']) for r in lang.init_eval if r['method'] == 'source'})) or '–'})."
    )
    if ln_v is not None:
        note += (
            f" Loss − ln V: nats per token above the uniform guess over the V target tokens (ln V = {ln_v:.3f}); "
            "a method above 0 starts worse than knowing nothing (over-confident logits)."
        )
    if has_bits and share:
        note += " Bits per byte: bits per UTF-8 byte of the valid lines (pretraining seed 1's initialisation)."
    if floors:
        note += (
            " Floors: predictors without a model on the same tokens ("
            + "; ".join(f"{f}: {FLOOR_NOTES.get(f, f)}" for f in floors)
            + ")."
        )
    if has_bits and share:
        note += (
            " Share kept: (BPB_floor − BPB_method) / (BPB_floor − BPB_source), from the best floor; – where the "
            "source does not beat it (nothing to keep)."
        )
    elif has_bits:
        note += (
            " Bits per byte and the share kept: in the table *Bits per byte* below, the one place the report "
            "scores them (every initialisation and pretrained model, the source and the floors on the same "
            "lines, with intervals)."
        )
    if any(finite(r.get("bytes_per_token")) for r in lang.init_eval):
        note += " Bytes per token: of each model's tokenizer on the valid lines."
    return note + " Best in bold."


def gradient_section(lang: Language) -> list[str]:
    lines = ["### Gradient scenarios", ""]
    if not lang.gradients:
        return lines + ["_No gradient-scenario results for this language._", ""]
    objectives = [o for o in OBJECTIVE_ORDER if any(ob == o for _, ob, _ in lang.gradients)]
    methods = list(dict.fromkeys(m for m, _, _ in lang.gradients))
    rows = []
    for m in methods:
        row = [m]
        for o in objectives:
            runs = [s for mm, oo, s in lang.gradients if (mm, oo) == (m, o)]
            path = (
                paths.fill(paths.GRADIENT_PLOT, lang=lang.lang, method=m, objective=o, pseed=runs[0]) if runs else None
            )
            row.append(f"![{m} {o}]({_rel(path)})" if path else "–")
        rows.append(row)
    lines.append(md_table(["method"] + objectives, rows))
    lines += [
        "",
        "Gradient norms per token against its frequency rank (input embedding, output embedding as "
        "target, output embedding as non-target), at the start and the end of pretraining (pretraining seed 1).",
        "",
    ]
    return lines


def skipped_section(langs: list[Language], p: Plan) -> list[str]:
    lines = ["## What was skipped and why", ""]
    items = []
    for lang in langs:
        for task, reason in sorted(lang.skipped.items()):
            items.append(f"* {lang.lang} / {task}: {reason}")
        if not p.pretrain:
            items.append(f"* {lang.lang}: no continued-pretraining runs configured")
        for path in lang.missing:
            items.append(f"* {lang.lang}: `{path}` missing, its section shows no data")
    return lines + (items or ["Nothing: every configured job has results."]) + [""]


def pretrain_section(lang: Language, figure: str | None) -> list[str]:
    lines = ["### Continued pretraining", ""]
    if not lang.curves:
        return lines + ["_No continued-pretraining results for this language._", ""]
    assert figure is not None  # write_report names the figure wherever there are curves
    lines += [f"![{lang.lang}: valid loss during continued pretraining]({_rel(figure)})", ""]
    curves = seed_curves(lang)
    methods = list(dict.fromkeys(m for m, _ in curves))
    objectives = [o for o in OBJECTIVE_ORDER if any(ob == o for _, ob in curves)]
    table = []
    for m in methods:
        starts = [c["mean"].get(0, math.nan) for (mm, _), c in curves.items() if mm == m]
        row = [m, fmt(starts[0] if starts else math.nan)]
        for o in objectives:
            c = curves.get((m, o))
            if c is None:
                row.append("–")
                continue
            last = c.iloc[-1]
            spread = f" ({fmt(last['low'])}–{fmt(last['high'])}, {int(last['n'])} seeds)" if last["n"] > 1 else ""
            row.append(fmt(last["mean"]) + spread)
        table.append(row)
    lines.append(md_table(["method", "step 0 (pretraining seed 1)"] + [f"{o} (end)" for o in objectives], table))
    lines += [
        "",
        "Valid loss (standard cross-entropy on the valid split) right after initialisation and after "
        "continued pretraining with each objective: the mean over pretraining seeds, with the lowest and "
        "highest seed in brackets. Which differences are real is in the comparison tables.",
        "",
    ]
    return lines


TEST_SET_ONLY = (
    "†: no seed variance behind the row (one run on each side, or a model without seeds against a "
    "floor): its interval and p hold the test set's variance only."
)


def p_text(r) -> str:
    """The p-value of a row, marked † where no seed variance is behind it (TEST_SET_ONLY)."""
    return f"{r.diff.p_value:.3g}" + (" †" if r.test_set_only else "")


def family_section(family: Family, settings: Settings) -> list[str]:
    """A family's table: every row with its interval, p, adjusted p (`Family.correction_text`: over the headline
    family, or this table alone for an exploratory one) and verdict."""
    lines = [f"#### {family.title}", ""]
    rows = []
    for r in family.rows:
        if r.diff is None:
            rows.append([r.label, r.measure, "–", "–", "–", r.note or "no paired runs", "–"])
            continue
        verdict = r.status(settings)
        digits = 1 if r.measure in task_order() else 3  # percent for a task, else a loss or bits per byte
        rows.append(
            [
                r.label,
                r.measure,
                difference_text(r.diff, digits),
                p_text(r),
                f"{r.diff.adjusted_p:.3g}" if r.diff.adjusted_p is not None else "–",
                f"{'✱ ' if r.better(settings) is not None else ''}{verdict}",
                f"{r.runs_text}, {r.diff.n_clusters} clusters",
            ]
        )
    lines.append(
        md_table(
            ["comparison", "measure", "difference [interval]", "p", "adjusted p", "verdict", "runs, clusters"], rows, 2
        )
    )
    lines += [
        "",
        family.description + f" Adjusted p: {family.correction_text(settings)}. ✱: the interval excludes zero, "
        f"the difference survives that correction and rests on at least {settings.min_clusters} clusters "
        "(report.min_clusters) and more than one run (or on a model without seeds against a floor)."
        + (" " + TEST_SET_ONLY if any(r.test_set_only for r in family.rows) else ""),
    ]
    return lines + [""]


def token_frequency_section(lang: Language) -> list[str]:
    lines = ["### Loss by token frequency", ""]
    df = lang.token_frequency
    if df is None or len(df) == 0:
        return lines + [f"_No token-frequency results ({paths.fill(paths.TOKEN_FREQUENCY_LOSS, lang=lang.lang)})._", ""]
    buckets = df.drop_duplicates("bucket").sort_values("bucket")
    headers = ["method", "objective"] + [
        f"b{int(b.bucket)} (ranks {int(b.rank_lo)}–{int(b.rank_hi)})" for b in buckets.itertuples()
    ]
    means = seed_means(df.to_dict("records"))
    keys = list(dict.fromkeys((m, o) for m, o, _ in means))
    keys.sort(
        key=lambda k: (
            lang.methods().index(k[0]) if k[0] in lang.methods() else 99,
            OBJECTIVE_ORDER.index(k[1]) if k[1] in OBJECTIVE_ORDER else 9,
        )
    )
    rows = [[m, o] + [fmt(means.get((m, o, int(b)), (math.nan,))[0], 2) for b in buckets["bucket"]] for m, o in keys]
    lines.append(md_table(headers, rows, keys=2))  # a wide one split: each part says method and objective
    lines += [
        "",
        "Mean cross-entropy on held-out target tokens by the train-frequency bucket of the target token "
        "(b0 = most frequent types), averaged over pretraining seeds; `init` = the initialised model. The "
        "selfish − standard table gives each bucket's difference with its interval.",
        "",
        f"![{lang.lang}: loss by token frequency]({_rel(paths.fill(paths.TOKEN_FREQUENCY_PLOT, lang=lang.lang))})",
        "",
    ]
    return lines


def downstream_section(lang: Language, status: dict, figure: str | None) -> list[str]:
    lines = ["### Downstream tasks", ""]
    if not status:
        return lines + ["_No downstream results for this language._", ""]
    for task, st in status.items():
        first = next(iter(next(iter(lang.evals[task].values())).values()))
        title = f"#### {task} ({first['metric']})" + ("" if st.learned else f" — {st.state}")
        rows = [[f"floor: {st.floor['name']}", fmt(st.floor["value"], 1), "–", "–"]]
        best = max((s.score.diff for s in st.scores), default=math.nan) if st.learned else math.nan
        for s in st.scores:
            score = f"{difference_text(s.score, 1, sign=False)}"
            margin = difference_text(s.over_floor, 1)
            if not st.learned:
                score, margin = grey(score), grey(margin)
            elif s.score.diff == best:
                score = f"**{score}**"
            rows.append([s.group, score, margin, seeds_text(s.score)])
        lines += [title, "", md_table(["model", "score [interval]", "over the floor [interval]", "seeds"], rows), ""]
        note = f"Floor ({st.floor['name']}, no model: {floor_text(task)}): {fmt(st.floor['value'], 1)}. "
        if st.state == NOT_LEARNED:
            note += (
                "No model's score is above it by its interval after the correction: the task is not learned "
                "at these sizes, so its scores are greyed, never ranked, and left out of the comparisons and "
                "the verdict."
            )
        elif not st.learned:
            note += (
                f"Models above it by their interval rest on too little to say so ({st.state}): whether the task "
                "is learned cannot be told, so its scores are greyed and left out of the comparisons."
            )
        else:
            note += "Best score in bold."
        lines += [note, ""]
    if figure:
        lines += [f"![{lang.lang}: downstream tasks]({_rel(figure)})", ""]
    return lines


def floor_text(task: str) -> str:
    """What the task's floor predicts, in words (its `Task.floor_text`)."""
    available()
    return getattr(TASKS.get(task), "floor_text", "") or "see docs/evaluation.md"


def method_section(settings: Settings) -> list[str]:
    return [
        "## How the intervals are computed",
        "",
        "Each difference B − A is the mean over pretraining seeds of the mean over their fine-tuning seeds, "
        "with an interval that adds two variances (vocabtransfer.evaluate.stats): the test set's, from a "
        "cluster bootstrap (the test clusters — XNLI premise, QA article or context, NER sentence, held-out "
        "block for a loss — drawn with replacement and shared by every run of both models, "
        f"{settings.resamples} resamples), and the seeds', from the spread of the per-pretraining-seed "
        "differences. Each is widened by the Student t quantile of its own degrees of freedom (clusters − 1, "
        "seeds − 1), so that three seeds are not taken for many: a simulation at the study's sizes measured "
        "94.7–98.4 % coverage for the 95 % interval (docs/evaluation.md). The p-values are the levels at which "
        f"the interval reaches zero, adjusted by the {CORRECTION_NAME[settings.correction]} method over one "
        "family for the whole report, the headline family: every comparison the verdict states as a claim, in "
        "every language together (right after initialisation, method − the baseline of report.baseline on the "
        "valid loss, bits per byte and each learned task, head to head, every objective − standard but its "
        "frequency buckets, each model against the best bits-per-byte floor, and the zero-shot model − source "
        "differences of learned tasks); each of those tables says how many comparisons that is. The frequency "
        "buckets are exploratory: each "
        "bucket table is corrected over its own rows, apart from the headline family. Whether a task is learned "
        "(every model against its floor) is a gate corrected over the task's models before the headline: a task "
        "no model is detectably above is left out of it. A difference resting on fewer than "
        f"{settings.min_clusters} clusters (report.min_clusters), or on a single pretraining and fine-tuning "
        "run, is shown but not worded: its verdict says what is missing.",
        "",
    ]
