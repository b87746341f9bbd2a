"""The report's lm-evaluation-harness tables (the lm_eval stage, vocabtransfer.evaluate.harness): per
language and harness task, every model's zero-shot score with its interval, its difference from the
source, and its margin over the task's floor; a task no model is detectably above its floor on is "not
learned at these sizes".

Every interval is the paired cluster bootstrap of vocabtransfer.evaluate.stats (`nested_interval`) over
the items all models were scored on (the harness's per-item samples): items that share a passage (a QA
context, an XNLI premise) form one cluster and are resampled together; a catalogue task's items are
each their own cluster. A zero-shot score has no fine-tuning seed, and each model is one pretraining
seed, so the interval holds the test-set variance only: it says how sure the items make the
difference for these models, not across pretraining seeds.

The floor is a predictor without a model scored on the same items: for a multiple-choice task the
majority class of the scored items (beside the chance level, one over the choices); for a generative
task the empty answer (0: exact match and F1 need the answer's words).

Whether a task is learned (every model against its floor) is corrected over the task's models: a gate. The
model − source differences of a learned task are claims of the report's headline family (`claims`, corrected
with every other claim by report.build); a task not learned keeps them corrected over its models, greyed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.evaluate import stats
from vocabtransfer.report.tables import (
    CORRECTION_NAME,
    LEARNED,
    NO_DIFFERENCE,
    NOT_AFTER_CORRECTION,
    NOT_LEARNED,
    Row,
    Settings,
    correction_text,
    plural,
    zero_like,
)
from vocabtransfer.report.markdown import difference_text, grey, md_table

PRIMARY = ("f1", "acc", "acc_norm", "exact_match")  # the metric a task is compared on, the first it has
SOURCE = "source"


@dataclass
class HarnessScore:
    model: str
    score: stats.Difference  # the model's score (B = the model, A = zero) and its interval
    vs_source: stats.Difference | None  # model − source (None for the source itself, or without it)
    over_floor: stats.Difference


@dataclass
class HarnessTask:
    task: str
    metric: str
    floor_name: str
    floor_value: float
    chance: float | None
    n_items: int
    n_clusters: int
    state: str
    scores: list[HarnessScore]
    correction: str = field(default="")  # the correction of the − source column, in words

    @property
    def learned(self) -> bool:
        return self.state == LEARNED


def primary_metric(samples) -> str:
    metrics = list(dict.fromkeys(samples["metric"]))
    return next((m for m in PRIMARY if m in metrics), metrics[0])


def _items(samples, task: str, metric: str, where: str):
    rows = samples[(samples["task"] == task) & (samples["metric"] == metric)].sort_values("doc_id")
    if rows["doc_id"].duplicated().any():
        raise VocabTransferError(f"{where}: item ids repeat in {task} {metric}; rerun its lm_eval job")
    return rows


def _runs(values: np.ndarray, clusters: list[str], order: tuple, scale: float = 100.0) -> stats.Runs:
    num = stats.cluster_sums(values.astype(np.float64), clusters, order)
    den = stats.cluster_sums(np.ones(len(values)), clusters, order)
    return stats.Runs({(1, 1): (num, den)}, order, scale)


def floor_values(rows) -> tuple[str, np.ndarray, float | None]:
    """(the floor's name, its per-item value, the chance level or None) on these items."""
    lls = rows["loglikelihoods"].tolist()
    if len(lls) and all(len(x) > 0 for x in lls):
        majority, _ = Counter(rows["target"]).most_common(1)[0]
        chance = float(np.mean([1.0 / len(x) for x in lls]))
        return f"majority class ({majority})", (rows["target"] == majority).to_numpy(np.float64), chance
    return "empty answer", np.zeros(len(rows)), None


def detectably_above(d: stats.Difference | None, settings: Settings) -> bool:
    """Above the floor by its (corrected) interval, on enough clusters (no seeds to ask for: zero-shot)."""
    return d is not None and d.diff > 0 and d.survives(settings.alpha) and d.n_clusters >= settings.min_clusters


def task_table(task: str, by_model: dict, settings: Settings, lang: str) -> HarnessTask:
    """One task's table from each model's samples (DataFrames of samples.parquet), paired item by item."""
    first = by_model.get(SOURCE, next(iter(by_model.values())))
    metric = primary_metric(first[first["task"] == task])
    ref = _items(first, task, metric, f"{lang} lm_eval")
    clusters, order = ref["cluster"].tolist(), tuple(dict.fromkeys(ref["cluster"]))
    runs = {}
    for model, samples in by_model.items():
        rows = _items(samples, task, metric, f"{lang} lm_eval {model}")
        if rows["doc_id"].tolist() != ref["doc_id"].tolist():
            raise VocabTransferError(
                f"{lang} lm_eval {model}: {task} was scored on other items than the other "
                "models; rerun the lm_eval jobs with the same lm_eval.limit"
            )
        runs[model] = _runs(rows["value"].to_numpy(), clusters, order)
    name, floor, chance = floor_values(ref)
    floor_runs = _runs(floor, clusters, order)
    scores = [
        HarnessScore(
            model,
            settings.paired(zero_like(r), r),
            settings.bootstrap(runs[SOURCE], r) if SOURCE in runs and model != SOURCE else None,
            settings.paired(floor_runs, r),
        )
        for model, r in runs.items()
    ]
    for s, d in zip(scores, stats.corrected([s.over_floor for s in scores], settings.correction)):
        assert d is not None  # corrected keeps every difference it is given
        s.over_floor = d
    vs = [s for s in scores if s.vs_source is not None]
    for s, d in zip(vs, stats.corrected([s.vs_source for s in vs], settings.correction)):
        s.vs_source = d
    state = LEARNED if any(detectably_above(s.over_floor, settings) for s in scores) else NOT_LEARNED
    own = f"{CORRECTION_NAME[settings.correction]} over this task's {plural(len(vs), 'model')}"
    return HarnessTask(
        task,
        metric,
        name,
        100.0 * float(floor.mean()),
        None if chance is None else 100.0 * chance,
        len(ref),
        len(order),
        state,
        scores,
        own,
    )


def claims(found: list[HarnessTask]) -> list[tuple[HarnessScore, Row]]:
    """The model − source differences of every learned task, each with a `Row` of it: claims of the report's
    headline family (report.build corrects the rows with it, then `adopt` writes their adjusted p back)."""
    return [
        (s, Row(s.model, t.task, s.vs_source)) for t in found if t.learned for s in t.scores if s.vs_source is not None
    ]


def adopt(found: list[HarnessTask], rows: list[tuple[HarnessScore, Row]], settings: Settings, headline: int) -> None:
    """The headline family's adjusted p of each `claims` row back into its score; the learned tasks say so."""
    for score, row in rows:
        score.vs_source = row.diff
    for t in found:
        if t.learned:
            t.correction = correction_text(settings, headline)


def tables(results: dict, settings: Settings, lang: str) -> list[HarnessTask]:
    """Per harness task: its table over the models with samples (`results`: model -> (scores.json,
    samples DataFrame); a model that was not run is left out)."""
    by_model = {m: samples for m, (scores, samples) in results.items() if not scores.get("not_run")}
    tasks = list(dict.fromkeys(t for samples in by_model.values() for t in samples["task"]))
    return [task_table(t, {m: s for m, s in by_model.items() if t in set(s["task"])}, settings, lang) for t in tasks]


def verdict_word(d: stats.Difference | None, settings: Settings) -> str:
    if d is None:
        return "–"
    if d.n_clusters < settings.min_clusters:
        return f"{d.n_clusters} clusters: too few to tell"
    if d.survives(settings.alpha):
        return "better" if d.diff > 0 else "worse"
    return NOT_AFTER_CORRECTION if d.excludes_zero else NO_DIFFERENCE


def section(
    lang: str, results: dict, settings: Settings, found: list[HarnessTask] | None = None
) -> tuple[list[str], dict, list[str]]:
    """`### Zero-shot (lm-evaluation-harness)` for one language, its entry of results/report/metrics.json
    (task -> metric, floor, learned and every model's score in percent) and its verdict bullets; `found`: the
    tables of `results` already computed (and corrected with the headline family), else computed here."""
    if not results:
        return [], {}, []
    lines = ["### Zero-shot (lm-evaluation-harness)", ""]
    skipped = {m: s["not_run"] for m, (s, _) in results.items() if s.get("not_run")}
    found = tables(results, settings, lang) if found is None else found
    for t in found:
        chance = f", chance {t.chance:.1f}" if t.chance is not None else ""
        lines += [
            f"#### {t.task} ({t.metric})" + ("" if t.learned else f" — {t.state}"),
            "",
            f"{t.n_items} items in {t.n_clusters} clusters; floor: {t.floor_name} {t.floor_value:.1f}{chance}.",
            "",
        ]
        rows = []
        for s in t.scores:
            cells = [
                difference_text(s.score, 1, sign=False),
                difference_text(s.over_floor, 1),
                difference_text(s.vs_source, 1),
                verdict_word(s.vs_source, settings) if s.vs_source is not None else "–",
            ]
            rows.append([s.model] + (cells if t.learned else [grey(c) for c in cells]))
        lines += [
            md_table(
                ["model", "score [interval]", "over the floor [interval]", "− source [interval]", "vs source"], rows
            ),
            "",
        ]
        lines += [
            (
                "Learned: some model is above the floor by its interval after the correction over the task's "
                f"models; − source: adjusted p by {t.correction}."
                if t.learned
                else "Not learned at these sizes: no model is above the floor by its interval after "
                "the correction, so the scores are greyed and not ranked."
            ),
            "",
        ]
    for model, reason in skipped.items():
        lines += [f"_{model}: not run ({reason})._", ""]
    metrics = {
        t.task: {
            "metric": t.metric,
            "floor": round(t.floor_value, 4),
            "learned": t.learned,
            "scores": {s.model: round(s.score.diff, 4) for s in t.scores},
        }
        for t in found
    }
    return lines, metrics, [verdict_bullet(t, settings) for t in found]


def verdict_bullet(t: HarnessTask, settings: Settings) -> str:
    """One verdict sentence on a harness task: not learned (with the best model over the floor), or each
    model − source grouped by its wording."""
    floor = f"floor: {t.floor_name}, {t.floor_value:.1f}"
    if not t.learned:
        best = max(t.scores, key=lambda s: s.over_floor.diff)
        p = best.over_floor.adjusted_p  # "not learned" can rest on the correction over the task's models
        n = len(t.scores)
        return (
            f"**{t.task} (zero-shot {t.metric}): {t.state}**: no model is above its floor ({floor}) by its "
            f"interval after the correction over its {n} model{'s' if n != 1 else ''} (best: {best.model} "
            f"{difference_text(best.over_floor, 1)} points over it, "
            + (f"adjusted p {p:.2g}, " if p is not None else "")
            + f"{t.n_clusters} clusters; items only, no seeds)."
        )
    groups: dict[str, list[str]] = {}
    for s in (s for s in t.scores if s.vs_source is not None):
        word = verdict_word(s.vs_source, settings)
        groups.setdefault(word, []).append(f"{s.model} {difference_text(s.vs_source, 1)}")
    parts = [f"{word}: " + "; ".join(groups[word]) for word in sorted(groups, key=lambda w: (w != "better", w))]
    return (
        f"**{t.task} (zero-shot {t.metric}, model − source, points; {floor}; items only, no seeds; "
        f"{t.correction})**: " + (". ".join(parts) if parts else "only the source was scored") + "."
    )
