"""Which initialisation to pick for this source and language, by one stated rule (`RULE`), and how the pick compares
with the untouched source model. `recommend(lang, settings, baseline)` is the one place the rule lives: the
report's "In brief" (report.brief) and any other caller (an export of the recommended run) ask it.

The rule, over the methods pretrained with the standard objective that are not a baseline (report.baseline):

1. the main measure: bits per byte of the valid text after pretraining where every candidate has it (causal
   models: a measure that does not depend on the tokenizer), else the valid loss after pretraining (nats per
   target token: the candidates share the target tokenizer); the leader has the lowest mean over its pretraining
   seeds;
2. head to head: every pair of candidates on the main measure and on each learned downstream task, paired over
   seeds and clusters as every comparison of the report (`Settings.bootstrap`), Holm over this ranking's own
   family (`RANKING`: never in the headline family);
3. the candidates not detectably worse than the leader on the main measure are tied with it; a learned task breaks
   the tie where one tied method is detectably better on it than every other tied method; else the tie stands
   and is named as a tie (the leader named first, for its lower mean only);
4. the pick against the source: the pick − the source on bits per byte (the source with its own tokenizer) and
   on each learned task (paired by fine-tuning seed), Holm over that family of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from vocabtransfer.evaluate import stats
from vocabtransfer.pipeline import names
from vocabtransfer.report.read import Language, task_order
from vocabtransfer.report.tables import (
    RANKING,
    SOURCE_ROW,
    Family,
    Row,
    Settings,
    _corrected,
    bpb_runs,
    learned,
    loss_runs,
    task_runs,
    zero_like,
)

OBJECTIVE = "standard"
BPB, LOSS = "bits per byte", "valid loss"
RANKING_TITLE = "Ranking after pretraining: head to head"
SOURCE_TITLE = "The pick against the untouched source"
RULE = (
    "the lowest end-of-run bits per byte (causal models; else valid loss) with the standard objective, mean over "
    "pretraining seeds, among the methods that are not a baseline; a method not detectably worse than it (head to "
    "head, Holm over the ranking's comparisons) is tied with it, and a learned downstream task breaks the tie "
    "where one tied method is detectably better on it than the others"
)


@dataclass
class Recommendation:
    """The pick for one language (None where no candidate was pretrained), the runner-up, whether the two tie,
    the reason in words, and the comparisons behind them."""

    lang: str
    pick: str | None
    runner_up: str | None
    tie: bool
    reason: str
    measure: str = LOSS
    tied: tuple[str, ...] = ()  # the candidates tied with the pick on the main measure (the pick first)
    means: dict[str, float] = field(default_factory=dict)  # candidate -> its mean on the main measure
    score: stats.Difference | None = None  # the pick's own main measure with its interval
    task: str | None = None  # the learned task that broke the tie (None: none did)
    ranking: Family | None = None
    source: Family | None = None

    def row(self, family: Family | None, label: str, measure: str) -> Row | None:
        return next((r for r in (family.rows if family else []) if r.label == label and r.measure == measure), None)

    def versus(self, other: str, measure: str | None = None) -> Row | None:
        """The ranking's row between the pick and `other` (its label reads later − earlier in the mean order)."""
        measure = measure or self.measure
        return self.row(self.ranking, f"{other} − {self.pick}", measure) or self.row(
            self.ranking, f"{self.pick} − {other}", measure
        )


def _mean(runs: stats.Runs) -> float:
    """The mean over pretraining seeds of the mean over their fine-tuning seeds (as `stats.spread` weighs them)."""
    per: dict[int, list[float]] = {}
    for (p, _), (num, den) in runs.parts.items():
        per.setdefault(p, []).append(runs.scale * float(num.sum()) / max(float(den.sum()), 1e-300))
    return float(np.mean([np.mean(v) for v in per.values()]))


def _as_keys(fixed: stats.Runs, runs: stats.Runs) -> stats.Runs:
    """`fixed` (the source: no pretraining seed) with the keys of `runs`: each run paired with the source's run of
    the same fine-tuning seed (bits per byte: its only run)."""
    parts = {}
    for p, f in runs.parts:
        key = (0, f) if (0, f) in fixed.parts else min(fixed.parts)
        parts[(p, f)] = fixed.parts[key]
    return stats.Runs(parts, runs.clusters, runs.scale)


def candidates(lang: Language, baselines: Sequence[str]) -> list[str]:
    """The methods pretrained with the standard objective that are not a baseline, in the language's order."""
    return [m for m in lang.methods() if m not in baselines and (m, OBJECTIVE) in {(a, b) for a, b, _ in lang.curves}]


def _measure(lang: Language, methods: list[str]) -> tuple[str, dict[str, stats.Runs]]:
    bits = {m: bpb_runs(lang, m, OBJECTIVE) for m in methods} if lang.bits_per_byte is not None else {}
    if bits and all(r is not None for r in bits.values()):
        return BPB, {m: r for m, r in bits.items() if r is not None}
    loss = {m: loss_runs(lang, m, OBJECTIVE) for m in methods}
    return LOSS, {m: r for m, r in loss.items() if r is not None}


def _learned_tasks(lang: Language, status: dict, methods: list[str]) -> list[str]:
    """The learned tasks every candidate was fine-tuned on, in the report's task order."""
    order = [t for t in task_order() if t in status] + [t for t in status if t not in task_order()]
    return [t for t in order if status[t].learned and all(f"{m}-{OBJECTIVE}" in lang.evals.get(t, {}) for m in methods)]


def _ranking(lang, settings, runs: dict, measure: str, order: list[str], tasks: list[str]) -> Family:
    """Every pair of candidates (later − earlier in `order`) on the main measure and each learned task."""
    rows = []
    for i, a in enumerate(order):
        for b in order[i + 1 :]:
            rows.append(Row(f"{b} − {a}", measure, settings.bootstrap(runs[a], runs[b]), lower_is_better=True))
            for t in tasks:
                ga, gb = (task_runs(lang, t, f"{m}-{OBJECTIVE}") for m in (a, b))
                rows.append(Row(f"{b} − {a}", t, settings.bootstrap(ga, gb)))
    return Family(
        RANKING_TITLE,
        f"Every pair of the methods that are not a baseline ({OBJECTIVE} objective), the later in the order of "
        f"their mean {measure} minus the earlier, paired on the same clusters and seeds: on {measure} positive = "
        "the earlier better; on a task positive = the later better. The recommendation's rule reads this table "
        f"(report/recommend.py: {RULE}).",
        _corrected(rows, settings),
        kind=RANKING,
    )


def _versus_source(lang, settings, pick: str, runs: stats.Runs, measure: str, tasks: list[str]) -> Family | None:
    rows = []
    source = bpb_runs(lang, SOURCE_ROW, SOURCE_ROW) if measure == BPB else None
    if source is not None:
        d = settings.bootstrap(_as_keys(source, runs), runs)
        rows.append(Row(f"{pick} − source", BPB, d, lower_is_better=True))
    for t in tasks:
        if names.SOURCE in lang.evals.get(t, {}):
            own = task_runs(lang, t, f"{pick}-{OBJECTIVE}")
            rows.append(
                Row(f"{pick} − source", t, settings.bootstrap(_as_keys(task_runs(lang, t, names.SOURCE), own), own))
            )
    if not rows:
        return None
    return Family(
        SOURCE_TITLE,
        f"The pick ({pick}, {OBJECTIVE} objective) minus the untouched source model (bits per byte: the source "
        "with its own tokenizer on the same text, paired line by line; a task: paired by fine-tuning seed). "
        "Negative bits per byte / positive points: the pick better.",
        _corrected(rows, settings),
        kind=RANKING,
    )


def _tie_break(rec_order: list[str], tied: list[str], ranking: Family, tasks: list[str], settings) -> tuple:
    """(the tied method detectably better than every other tied one on a learned task, that task), else
    (None, None)."""
    for t in tasks:
        for c in tied:
            wins = 0
            for o in (x for x in tied if x != c):
                a, b = sorted((c, o), key=rec_order.index)
                row = next(r for r in ranking.rows if r.label == f"{b} − {a}" and r.measure == t)
                wins += row.status(settings) == ("better" if b == c else "worse")
            if wins == len(tied) - 1:
                return c, t
    return None, None


def recommend(
    lang: Language, settings: Settings, baseline: str | Sequence[str] = "random", status: dict | None = None
) -> Recommendation:
    """The module docstring's rule for `lang`; `baseline`: report.baseline (every listed method is left out of the
    candidates); `status`: the tasks' `tables.learned` (computed where not given)."""
    baselines = (baseline,) if isinstance(baseline, str) else tuple(baseline)
    methods = candidates(lang, baselines)
    measure, runs = _measure(lang, methods)
    methods = [m for m in methods if m in runs]
    if not methods:
        return Recommendation(lang.lang, None, None, False, "no method other than a baseline was pretrained")
    means = {m: _mean(runs[m]) for m in methods}
    order = sorted(methods, key=lambda m: (means[m], methods.index(m)))
    status = learned(lang, settings) if status is None else status
    tasks = _learned_tasks(lang, status, methods)
    ranking = _ranking(lang, settings, runs, measure, order, tasks)
    leader = order[0]
    tied = [leader] + [
        m
        for m in order[1:]
        if next(r for r in ranking.rows if r.label == f"{m} − {leader}" and r.measure == measure).status(settings)
        != "worse"
    ]
    pick, task = (leader, None) if len(tied) == 1 else _tie_break(order, tied, ranking, tasks, settings)
    tie = pick is None
    pick = pick or leader
    others = [m for m in (tied if len(tied) > 1 else order) if m != pick]
    runner_up = others[0] if others else None
    if runner_up is None:
        reason = f"the only method pretrained besides the baseline ({', '.join(baselines)})"
    elif tie:
        reason = f"tied on {measure} with {', '.join(others)}" + (
            f", and no tie-break on {', '.join(tasks)}" if tasks else ""
        )
    elif task:
        reason = f"tied on {measure} with {', '.join(others)}; detectably better on {task}"
    else:
        reason = f"the lowest {measure}, the runner-up detectably worse"
    own = runs[pick]
    return Recommendation(
        lang.lang,
        pick,
        runner_up,
        tie,
        reason,
        measure,
        tuple([pick] + [m for m in tied if m != pick]) if len(tied) > 1 else (pick,),
        means,
        settings.bootstrap(zero_like(own), own),
        task,
        ranking,
        _versus_source(lang, settings, pick, own, measure, tasks),
    )
