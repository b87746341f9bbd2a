"""Family 5 of report.comparisons: bits per UTF-8 byte of every causal model, of the source with its own
tokenizer and of the floors (predictors without a model, vocabtransfer.evaluate.bpb_floor), per valid line.

Every model gets its bits per byte with its interval (B = the model, A = zero), its tokenizer's bytes per
token, its difference from the baseline (report.baseline; of a list, the stronger in the language:
report.baseline_choice) with the same objective (one family, corrected together), its difference
from the best (lowest) floor, paired line by line (another family) and the share of the source's advantage
over that floor it keeps, (floor − method) / (floor − source), from the means over pretraining seeds:
one share per model, from one definition. Where the source does not beat the best floor it has nothing
to keep on this language and no share is given.

A method without random rows (`init.availability.seeded` is false: `mean`) has one initialisation: its
`init` row says so instead of a seed count, and against the floor (no seeds either) its interval holds the
test set's variance only, which is all the variance there is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from vocabtransfer.evaluate import score_terms, stats
from vocabtransfer.model.line_scores import bytes_per_token
from vocabtransfer.plan import availability
from vocabtransfer.pipeline import names
from vocabtransfer.report.baseline_choice import BaselineChoice
from vocabtransfer.report.read import OBJECTIVE_ORDER, Language
from vocabtransfer.report.tables import SOURCE_ROW, Family, Row, Settings, _corrected, bpb_runs, seeds_text, zero_like
from vocabtransfer.report.markdown import difference_text

BPB_TITLE = "Bits per byte: method − "  # + the baseline: `Bits per byte: method − random`
FLOOR_TITLE = "Bits per byte: model − best floor"
ONE_INIT = "1 initialisation"


@dataclass
class BpbRow:
    """One model (or floor, method `floor`) in the bits-per-byte table: its bits per byte with interval, its
    tokenizer's bytes per token, the share kept (NaN where undefined), its differences from the baseline with the
    same objective and from the best floor (None where there is none), and what its runs are."""

    method: str
    objective: str
    score: stats.Difference | None
    bytes_per_token: float
    share_kept: float = math.nan
    vs_baseline: Row | None = None
    vs_floor: Row | None = None
    runs: str = ""  # `1 initialisation` for a deterministic method's init row; else from the score's seeds


@dataclass
class BpbTable:
    rows: list[BpbRow]
    family: Family  # the − baseline rows, corrected together
    n_lines: int
    target_bytes_per_token: float
    source_bytes_per_token: float
    reason: str | None = None  # why no model has bits (masked LMs keep their per-token loss)
    floors: list[BpbRow] = field(default_factory=list)
    floor_family: Family | None = None  # the − best floor rows, corrected together
    best: score_terms.Best | None = None
    source: BpbRow | None = None

    @property
    def nothing_to_keep(self) -> bool:
        """The source does not beat the best floor: no share is given."""
        if self.best is None or self.source is None or self.source.score is None:
            return False
        return score_terms.nothing_to_keep(self.best.bits_per_byte, self.source.score.diff)


def deterministic(method: str, objective: str) -> bool:
    """An initialisation without random rows: every pretraining seed starts from the same one."""
    return objective == names.INIT and method not in (SOURCE_ROW, score_terms.FLOOR) and not availability.seeded(method)


def _one(runs: stats.Runs) -> stats.Runs:
    """The first run alone (a deterministic initialisation repeated for every pretraining seed)."""
    key = min(runs.parts)
    return stats.Runs({(1, 0): runs.parts[key]}, runs.clusters, runs.scale)


def _against(fixed: stats.Runs, runs: stats.Runs) -> stats.Runs:
    """A predictor without seeds as runs with the keys of `runs`: B minus it pairs each run with it."""
    parts = fixed.parts[min(fixed.parts)]
    return stats.Runs({key: parts for key in runs.parts}, runs.clusters, runs.scale)


def _first_model(df):
    """(bytes, tokens) per line of the first model in `df` (every model of one tokenizer counts the same)."""
    if not len(df):
        return np.zeros(0), np.zeros(0)
    first = df.iloc[0]
    g = df[
        (df["method"] == first["method"]) & (df["objective"] == first["objective"]) & (df["pseed"] == first["pseed"])
    ]
    return g["n_bytes"].to_numpy(), g["n_tokens"].to_numpy()


def _bytes_per_token(df, method: str, objective: str) -> float:
    g = df[(df["method"] == method) & (df["objective"] == objective)]
    return bytes_per_token(g["n_bytes"], g["n_tokens"])


def _floors(lang: Language, settings: Settings) -> tuple[list[BpbRow], dict[str, stats.Runs]]:
    """The floors' rows (in score_terms.NAMES order) and their per-line runs, by name."""
    df = lang.bits_per_byte
    rows, runs = [], {}
    present = set(df.loc[df["method"] == score_terms.FLOOR, "objective"])
    for name in [n for n in score_terms.NAMES if n in present] + sorted(present - set(score_terms.NAMES)):
        r = bpb_runs(lang, score_terms.FLOOR, name)
        if r is None:
            continue
        runs[name] = r
        rows.append(
            BpbRow(
                score_terms.FLOOR,
                name,
                settings.bootstrap(zero_like(r), r),
                _bytes_per_token(df, score_terms.FLOOR, name),
                runs="no model",
            )
        )
    return rows, runs


def bits_per_byte_table(
    lang: Language, settings: Settings, baseline: BaselineChoice | str = "random"
) -> BpbTable | None:
    """The module docstring's table and its two families (the models − `baseline`, the stronger of
    report.baseline: `baseline_choice.stronger_baseline`); None without bits-per-byte rows."""
    df = lang.bits_per_byte
    if df is None or not len(df):
        return None
    n_lines = int(df["line"].max()) + 1
    is_source, is_floor = df["method"] == SOURCE_ROW, df["method"] == score_terms.FLOOR
    target_bpt = bytes_per_token(*_first_model(df[~is_source & ~is_floor]))
    source_bpt = bytes_per_token(*_first_model(df[is_source]))
    family = _baseline_family(baseline)
    base_name = str(family.baseline)
    if df.loc[~is_source & ~is_floor, "bits"].isna().all():
        return BpbTable([], family, n_lines, target_bpt, source_bpt, reason=score_terms.MASKED_REASON)
    floors, floor_runs = _floors(lang, settings)
    best = score_terms.best({r.objective: r.score.diff for r in floors if r.score is not None})
    floor_family = Family(
        FLOOR_TITLE,
        "Negative: the model needs fewer bits per byte than the best floor"
        + (f" ({best.label}, {best.bits_per_byte:.3f})" if best else "")
        + " (better).",
    )
    source = bpb_runs(lang, SOURCE_ROW, SOURCE_ROW)
    source_row = BpbRow(
        SOURCE_ROW,
        SOURCE_ROW,
        settings.bootstrap(zero_like(source), source) if source else None,
        source_bpt,
        runs="one model",
    )
    rows = [source_row]
    present = set(df.loc[~is_source & ~is_floor, "objective"])
    objectives = [o for o in OBJECTIVE_ORDER if o in present] + sorted(present - set(OBJECTIVE_ORDER))
    models = df.loc[~is_source & ~is_floor, "method"]
    methods = list(dict.fromkeys([base_name] + [m for m in models if m != base_name]))
    for objective in objectives:
        base = bpb_runs(lang, base_name, objective)
        for method in methods:
            runs = bpb_runs(lang, method, objective)
            if runs is None:
                continue
            rows.append(
                _model_row(
                    (method, base_name),
                    objective,
                    runs,
                    base,
                    settings,
                    family,
                    floor_family,
                    floor_runs.get(best.name) if best else None,
                )
            )
            rows[-1].bytes_per_token = _bytes_per_token(df, method, objective)
    _corrected(family.rows, settings)  # in place: the rows see the adjusted p-values
    _corrected(floor_family.rows, settings)
    table = BpbTable(
        rows,
        family,
        n_lines,
        target_bpt,
        source_bpt,
        floors=floors,
        floor_family=floor_family if floor_family.rows else None,
        best=best,
        source=source_row,
    )
    if best is not None and source_row.score is not None:
        for r in rows[1:]:
            assert r.score is not None  # a model row's own score: zero_like pairs with every run
            r.share_kept = score_terms.share_kept(best.bits_per_byte, r.score.diff, source_row.score.diff)
    return table


def _baseline_family(baseline: BaselineChoice | str) -> Family:
    """The empty family of the − baseline rows: its title and description name the baseline and, where one is,
    the weaker listed baseline among its rows."""
    choice = BaselineChoice(baseline, (baseline,)) if isinstance(baseline, str) else baseline
    note = choice.weaker_note()
    return Family(
        BPB_TITLE + choice.method,
        f"Negative: the method needs fewer bits per byte of the valid text than {choice.method} (better)."
        + (f" {note}" if note else ""),
        baseline=choice.method,
        weaker=choice.weaker,
    )


def _model_row(
    pair: tuple[str, str],
    objective: str,
    runs: stats.Runs,
    base: stats.Runs | None,
    settings: Settings,
    family: Family,
    floor_family: Family,
    floor: stats.Runs | None,
) -> BpbRow:
    """One model's row (`pair`: the model's method and the baseline's), its − baseline row added to `family` and
    its − best floor row to `floor_family`."""
    method, base_name = pair
    fixed, base_fixed = deterministic(method, objective), deterministic(base_name, objective)
    own = _one(runs) if fixed else runs
    row = BpbRow(method, objective, settings.bootstrap(zero_like(own), own), math.nan, runs=ONE_INIT if fixed else "")
    if method != base_name and base is not None:  # the baseline not run with this objective: nothing to pair
        diff = settings.bootstrap(base, runs)
        runs_text = ""
        if fixed and diff:
            runs_text = f"{ONE_INIT}, {base_name}: {ONE_INIT if base_fixed else _count(diff)}"
        elif base_fixed and diff:
            runs_text = f"{_count(diff)}, {base_name}: {ONE_INIT}"
        row.vs_baseline = Row(
            f"{method} − {base_name} ({objective})",
            "bits per byte",
            diff,
            lower_is_better=True,
            note="" if diff else "no paired runs",
            runs=runs_text,
        )
        family.rows.append(row.vs_baseline)
    if floor is not None:
        row.vs_floor = Row(
            f"{method} ({objective}) − best floor",
            "bits per byte",
            settings.bootstrap(_against(floor, own), own),
            lower_is_better=True,
            runs=ONE_INIT if fixed else "",
            seedless=fixed,
        )
        floor_family.rows.append(row.vs_floor)
    return row


def _count(d: stats.Difference) -> str:
    """`3 seeds`: how many runs of the baseline a deterministic initialisation is paired with."""
    return seeds_text(d).replace(" pretraining", "")


def share_sentence(table: BpbTable | None, settings: Settings) -> str | None:
    """The verdict's claim on the share kept: only for the models detectably better than the best floor;
    where the source does not beat the floor, that it has nothing to keep."""
    if table is None or table.best is None or table.source is None or table.source.score is None:
        return None
    best, source = table.best, table.source.score.diff
    head = (
        f"**Share of the source's advantage kept**, from the best floor ({best.label}, {best.bits_per_byte:.3f} "
        f"bits per byte; the source with its own tokenizer {source:.3f})"
    )
    if table.nothing_to_keep:
        return (
            f"{head}: none to keep: the source does not beat the floor on this language, so no share is given; "
            f"{against_floor(table, settings)} ({FLOOR_TITLE.lower().split(': ')[1]} below)."
        )
    ahead = [r for r in table.rows if r.vs_floor is not None and r.vs_floor.status(settings) == "better"]
    if not ahead:
        return (
            f"{head}: no model is detectably better than the floor, so no share is worded; "
            f"{against_floor(table, settings)}."
        )
    listed = "; ".join(_ahead_text(r) for r in ahead)
    return f"{head}, for the models detectably better than the floor: {listed}."


def _ahead_text(r: BpbRow) -> str:
    """One model of the share sentence: its share kept and its difference from the best floor."""
    vs = r.vs_floor
    assert vs is not None and vs.diff is not None  # a `better` status has a difference
    return (
        f"{r.method} ({r.objective}) {r.share_kept:.2f} ({difference_text(vs.diff)} "
        "bits per byte "
        f"against the floor, {vs.runs_text}"
        + (", test-set variance only" if vs.test_set_only else "")
        + f", adjusted p {vs.diff.adjusted_p:.2g})"
    )


def against_floor(table: BpbTable, settings: Settings) -> str:
    """How the models stand against the best floor after the correction: `every model (N) is detectably
    worse than the floor`, else `K of N models are detectably worse than the floor, J better, the rest not
    detectably different or too few to tell`."""
    statuses = [r.vs_floor.status(settings) for r in table.rows if r.vs_floor is not None]
    worse, better = statuses.count("worse"), statuses.count("better")
    if statuses and worse == len(statuses):
        return f"every model ({worse}) is detectably worse than the floor after the correction"
    return (
        f"{worse} of {len(statuses)} models are detectably worse than the floor after the correction, {better} "
        "better, the rest not detectably different or too few to tell"
    )
