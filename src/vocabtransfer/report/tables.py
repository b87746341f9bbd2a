"""The parts every comparison of the report is made of: params `report` and the `Settings` they give, one
comparison (`Row`: B − A, its interval and its status) and a `Family` of them corrected together, the runs
each measure is compared on (task scores, the valid loss, the loss of a frequency bucket, bits per valid
line) and whether a task is learned at all (the families' step 1: every model against the task's floor).
The families themselves, and the rules they follow, are report.comparisons'.

The correction's families (`correct_headline`): every comparison the verdict states as a claim is in one
*headline family* per report (every language together), corrected at once; a table of exploratory breakdowns
(the frequency buckets) is corrected over its own rows, apart from it; each task's floor check (is it learned
at all) is a gate corrected over the task's models before the headline (tasks not learned never enter it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from vocabtransfer.evaluate import stats
from vocabtransfer.plan import availability
from vocabtransfer.pipeline import names
from vocabtransfer.report.read import OBJECTIVE_ORDER, Language, task_order
from vocabtransfer.plan.report_params import ReportParams


@dataclass(frozen=True)
class Settings:
    """How the comparisons are made and worded: params `report` and the study's `seed`."""

    resamples: int
    confidence: float
    correction: str
    seed: int
    min_clusters: int

    @classmethod
    def of(cls, report: ReportParams, seed: int) -> "Settings":
        return cls(report.bootstrap_resamples, report.confidence, report.correction, seed, report.min_clusters)

    @property
    def alpha(self) -> float:
        return 1.0 - self.confidence

    def bootstrap(self, a: stats.Runs, b: stats.Runs) -> stats.Difference | None:
        return stats.nested_interval(a, b, resamples=self.resamples, seed=self.seed, confidence=self.confidence)

    def paired(self, a: stats.Runs, b: stats.Runs) -> stats.Difference:
        """`bootstrap` where A has B's keys (zero_like(b), a floor as `Runs.fixed` of b): every run pairs."""
        d = self.bootstrap(a, b)
        assert d is not None  # None only when the two share no run
        return d

    def too_few(self, d: stats.Difference | None, seedless: bool = False) -> str | None:
        """What is missing for a difference to be worded: `10 clusters: too few to tell`, `1 seed: …` (not
        for a `seedless` one: a deterministic model against a floor has no seed that could vary)."""
        if d is None:
            return None
        if d.n_clusters < self.min_clusters:
            return f"{d.n_clusters} clusters: {TOO_FEW}"
        if d.single_run and not seedless:
            return f"1 seed: {TOO_FEW}"
        return None


NO_DIFFERENCE = "no detectable difference"
NOT_AFTER_CORRECTION = "interval excludes zero, but not after the correction"
TOO_FEW = "too few to tell"


@dataclass
class Row:
    """One comparison: `label` (what is compared), `measure` (on what) and B − A."""

    label: str
    measure: str
    diff: stats.Difference | None
    lower_is_better: bool = False
    note: str = ""
    runs: str = ""  # what the difference rests on when its seeds do not say it (`1 initialisation against …`)
    seedless: bool = False  # both sides are without seeds (a deterministic initialisation against a floor)

    @property
    def runs_text(self) -> str:
        return self.runs or seeds_text(self.diff)

    @property
    def test_set_only(self) -> bool:
        """No seed variance behind the difference: its interval and p hold the test set's variance only."""
        return self.diff is not None and (self.seedless or self.diff.single_run)

    def better(self, settings: Settings) -> bool | None:
        """Whether B is detectably better than A after the correction (None: no detectable difference, or
        too few clusters or seeds to tell)."""
        if self.diff is None or not self.diff.survives(settings.alpha) or settings.too_few(self.diff, self.seedless):
            return None
        return (self.diff.diff < 0) == self.lower_is_better

    def status(self, settings: Settings, better: str = "better", worse: str = "worse") -> str:
        """What is missing (`10 clusters: too few to tell`) where the difference rests on too few clusters
        or seeds; else `better` / `worse` where it survives the correction; NOT_AFTER_CORRECTION where only
        the uncorrected interval excludes zero; else NO_DIFFERENCE."""
        few = settings.too_few(self.diff, self.seedless)
        if few:
            return few
        verdict = self.better(settings)
        if verdict is not None:
            return better if verdict else worse
        return NOT_AFTER_CORRECTION if self.diff is not None and self.diff.excludes_zero else NO_DIFFERENCE


CORRECTION_NAME = {"holm": "Holm", "bh": "Benjamini–Hochberg"}
HEADLINE, EXPLORATORY = "headline", "exploratory"  # the correction family a table's rows join (`Family.kind`)
RANKING = "ranking"  # the recommendation's head-to-head tables (report.recommend): Holm over each table's own rows


@dataclass
class Family:
    title: str
    description: str
    rows: list[Row] = field(default_factory=list)
    objective: str | None = None  # an objective − standard family: the objective
    kind: str = HEADLINE  # HEADLINE: its rows are claims, corrected with the report's headline family; EXPLORATORY
    headline: int | None = None  # the comparisons of the headline family its rows were corrected over (None: not yet)
    baseline: str | None = None  # a method − baseline family: the baseline its rows subtract
    weaker: tuple[str, ...] = ()  # ... and the weaker listed baselines among its rows (report.baseline_choice)

    @property
    def comparisons(self) -> int:
        """How many comparisons its rows' p-values are adjusted over: the headline family's once
        `correct_headline` has run, else this table's."""
        return self.headline if self.headline is not None else sum(r.diff is not None for r in self.rows)

    def correction_text(self, settings: Settings) -> str:
        """`Holm over the 46 comparisons of the headline family`; `exploratory: Holm over this table's 9
        comparisons, apart from the headline family`; `Holm over this table's 3 comparisons`."""
        return correction_text(settings, self.comparisons, self.kind, self.headline is not None)


def correction_text(settings: Settings, n: int, kind: str = HEADLINE, joint: bool = True) -> str:
    """The correction a table's rows got, in words (`Family.correction_text`)."""
    name = CORRECTION_NAME[settings.correction]
    if kind == EXPLORATORY:
        return f"exploratory: {name} over this table's {plural(n, 'comparison')}, apart from the headline family"
    if kind == RANKING:
        return f"{name} over this table's {plural(n, 'comparison')}, its own family, apart from the headline family"
    if joint:
        return f"{name} over the {plural(n, 'comparison')} of the headline family"
    return f"{name} over this table's {plural(n, 'comparison')}"


def _corrected(rows: list[Row], settings: Settings) -> list[Row]:
    for row, diff in zip(rows, stats.corrected([r.diff for r in rows], settings.correction)):
        row.diff = diff
    return rows


def correct_headline(families: Sequence[Family], settings: Settings, rows: Sequence[Row] = ()) -> int:
    """The second pass of the report: the rows of every HEADLINE family of `families` (every language's) and
    `rows` (claims kept outside a Family: the zero-shot model − source rows of learned tasks) corrected
    together, their adjusted p replacing each table's own; each family learns the headline's size (an
    EXPLORATORY family keeps its own correction). Returns that size, the headline family's N."""
    members: dict[int, Row] = {}
    for row in [r for f in families if f.kind == HEADLINE for r in f.rows] + list(rows):
        if row.diff is not None:
            members.setdefault(id(row), row)  # a row shown in two places is one comparison
    n = len(_corrected(list(members.values()), settings))
    for family in families:
        if family.kind == HEADLINE:
            family.headline = n
    return n


# runs -------------------------------------------------------------------------------------------


def task_runs(lang: Language, task: str, group: str) -> stats.Runs:
    return stats.Runs.from_results(task, lang.evals[task][group], where=f"{lang.lang} {task} {group}")


def zero_like(runs: stats.Runs) -> stats.Runs:
    """A model that scores 0 everywhere: B minus it is B's own score with its interval."""
    return stats.Runs(
        {k: (np.zeros_like(n), np.ones_like(d)) for k, (n, d) in runs.parts.items()}, runs.clusters, runs.scale
    )


def loss_runs(lang: Language, method: str, objective: str) -> stats.Runs | None:
    """The final valid loss of every pretraining seed of a run, per held-out block."""
    parts = {
        (s, 0): (df["loss_sum"].to_numpy(float), df["n_tokens"].to_numpy(float))
        for (m, o, s), df in lang.blocks.items()
        if m == method and o == objective
    }
    if not parts:
        return None
    sizes = {len(n) for n, _ in parts.values()}
    if len(sizes) != 1:
        return None  # runs scored on different valid blocks cannot be paired
    return stats.Runs(parts, tuple(range(sizes.pop())))


def bucket_runs(lang: Language, method: str, objective: str, bucket: int) -> stats.Runs | None:
    """The held-out loss of one frequency bucket, per block, for every pretraining seed."""
    df = lang.token_blocks
    if df is None or not len(df):
        return None
    n_blocks = int(df["block"].max()) + 1
    sub = df[(df["method"] == method) & (df["objective"] == objective) & (df["bucket"] == bucket)]
    parts = {}
    for pseed, g in sub.groupby("pseed"):
        num, den = np.zeros(n_blocks), np.zeros(n_blocks)
        num[g["block"].to_numpy()] = g["loss_sum"].to_numpy(float)
        den[g["block"].to_numpy()] = g["n_tokens"].to_numpy(float)
        parts[(int(pseed), 0)] = (num, den)
    return stats.Runs(parts, tuple(range(n_blocks))) if parts else None


def groups(lang: Language, task: str) -> list[str]:
    """The task's model groups in display order: source, then by method and objective."""

    def key(group: str) -> tuple:
        if group == names.SOURCE:
            return (-1, 0, group)
        method, _, objective = group.rpartition("-")
        order = lang.methods()
        return (
            order.index(method) if method in order else len(order),
            OBJECTIVE_ORDER.index(objective) if objective in OBJECTIVE_ORDER else 9,
            group,
        )

    return sorted(lang.evals.get(task, {}), key=key)


def tasks(lang: Language) -> list[str]:
    order = task_order()
    return [t for t in order if t in lang.evals] + sorted(t for t in lang.evals if t not in order)


def _objectives(lang: Language) -> list[str]:
    return [o for o in OBJECTIVE_ORDER if any(ob == o for _, ob, _ in lang.curves)]


# is a task learned? ---------------------------------------------------------------------------

LEARNED, NOT_LEARNED = "learned", "not learned at these sizes"


@dataclass
class Score:
    """One model group on one task: its mean score with interval, and its margin over the task's floor."""

    group: str
    score: stats.Difference  # B = the model, A = zero: its score and interval
    over_floor: stats.Difference


@dataclass
class TaskStatus:
    """Whether a task is learned: `LEARNED` when some group is detectably above the floor (a worded
    "better"), `NOT_LEARNED` when none is above it by its interval, else what is missing to tell
    (`10 clusters: too few to tell`)."""

    state: str
    scores: list[Score]
    floor: dict  # floor.json: name, value, …

    @property
    def learned(self) -> bool:
        return self.state == LEARNED


def learned(lang: Language, settings: Settings) -> dict[str, TaskStatus]:
    """task -> its TaskStatus: every group's margin over the floor, corrected over the task's groups.
    A task without its floor result is left out (the report lists the missing file)."""
    out = {}
    for task in tasks(lang):
        floor = lang.floors.get(task)
        if floor is None:
            continue
        scores = []
        for group in groups(lang, task):
            runs = task_runs(lang, task, group)
            floor_runs = runs.fixed(task, floor["examples"], f"{lang.lang} {task} floor")
            scores.append(Score(group, settings.paired(zero_like(runs), runs), settings.paired(floor_runs, runs)))
        for s, d in zip(scores, stats.corrected([s.over_floor for s in scores], settings.correction)):
            assert d is not None  # corrected keeps every difference it is given
            s.over_floor = d
        rows = [Row(s.group, task, s.over_floor) for s in scores]
        if any(r.better(settings) for r in rows):
            state = LEARNED
        else:
            # above the floor by its interval, but resting on too few clusters or seeds to say so
            few = [
                settings.too_few(s.over_floor)
                for s in scores
                if s.over_floor.survives(settings.alpha) and s.over_floor.diff > 0
            ]
            state = next((f for f in few if f), NOT_LEARNED)
        out[task] = TaskStatus(state, scores, floor)
    return out


# bits per byte ---------------------------------------------------------------------------------

SOURCE_ROW = "source"  # method and objective of the source model's rows in bits_per_byte.parquet


def _per_line(g, n_lines: int, column: str) -> np.ndarray:
    out = np.zeros(n_lines)
    out[g["line"].to_numpy()] = g[column].to_numpy(float)
    return out


def bpb_runs(lang: Language, method: str, objective: str) -> stats.Runs | None:
    """Bits and UTF-8 bytes per valid line (the clusters) of every pretraining seed of a model (the source:
    pseed 0); None without rows or without bits (a masked LM). A method without random rows has one
    initialisation (pseed 1) shared by all its pretraining seeds: its `init` runs repeat it for each (for
    each initialisation seed of the table when the method is not pretrained: it is paired with every
    random initialisation)."""
    df = lang.bits_per_byte
    if df is None or not len(df):
        return None
    n_lines = int(df["line"].max()) + 1
    sub = df[(df["method"] == method) & (df["objective"] == objective)]
    if not len(sub) or sub["bits"].isna().any():
        return None
    per = {int(p): (_per_line(g, n_lines, "bits"), _per_line(g, n_lines, "n_bytes")) for p, g in sub.groupby("pseed")}
    if objective == names.INIT:
        pseeds = sorted(
            {int(p) for p in df.loc[(df["method"] == method) & (df["objective"] != names.INIT), "pseed"]}
            or {int(p) for p in df.loc[df["objective"] == names.INIT, "pseed"]}
        )
        shared = {
            p: per[availability.init_pseed(method, p)] for p in pseeds if availability.init_pseed(method, p) in per
        }
        per = shared or per
    return stats.Runs({(p, 0): parts for p, parts in per.items()}, tuple(range(n_lines)))


def plural(n: int, word: str) -> str:
    """`1 fine-tuning seed`, `3 fine-tuning seeds`."""
    return f"{n} {word}" + ("" if n == 1 else "s")


def seeds_text(d: stats.Difference | None) -> str:
    """`3 pretraining × 2 fine-tuning seeds`, `1 fine-tuning seed`: the seeds behind a difference."""
    if d is None:
        return "–"
    levels = [(n, name) for n, name in ((d.n_pseeds, "pretraining"), (d.n_fseeds, "fine-tuning")) if n]
    if not levels:
        return "one model"
    noun = "seed" if all(n == 1 for n, _ in levels) else "seeds"
    return " × ".join(f"{n} {name}" for n, name in levels) + f" {noun}"


def finite(x) -> bool:
    return x is not None and isinstance(x, (int, float, np.floating, np.integer)) and math.isfinite(float(x))
