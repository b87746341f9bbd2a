"""The comparisons that answer the study's question, each a difference with its nested
interval (vocabtransfer.evaluate.stats), grouped in families that are corrected together:

1. which tasks are learned at all (`tables.learned`): every model against the task's floor
   (vocabtransfer.evaluate.task_floor; one family per task); a task where no model is above it after the correction
   is "not learned at these sizes" and takes no further part (never ranked, bolded or used in the verdict);
2. right after initialisation (init_eval, before any training): every pair of methods and every method minus
   the unigram floor, on the valid loss paired over the same valid blocks and masked tokens (one family);
   one initialisation per method, so its intervals hold the valid blocks' variance only (†);
3. every method minus the baseline (report.baseline; of a list, the stronger in the language:
   report.baseline_choice), per objective (`init` too): the valid loss after pretraining (one family) and each
   learned task (one family per task); a weaker listed baseline is a row like any method, and the table says so;
4. every other objective (selfish, distill) minus standard for every method: the valid loss, bits per byte and
   each learned task (one family per objective), and apart, exploratory, the loss of every token-frequency
   bucket (one family per objective: `objective_buckets`);
5. bits per UTF-8 byte (report.bpb): every init-only and pretrained causal model, the source with its own
   tokenizer and the floors (predictors without a model), every method minus the baseline with the same
   objective (one family) and every model minus the best floor (one family), nested over valid lines
   (the clusters) and pretraining seeds.

A difference resting on fewer test clusters than `report.min_clusters`, or on a single run (one
pretraining and one fine-tuning seed: every compared model's training depends on its seed, so the
variation between seeds is unknown), gets no "better"/"worse" word: its status says what is missing
("10 clusters: too few to tell").

Families 2 to 4 are built here and put in the report's order (`families`), from report.tables' parts (the
runs of each measure, `Row`, `Family`, the correction); 1 is `tables.learned`, 5 report.bpb.

Each family is corrected over its own rows when built; the report (report.build) then corrects the rows of
every family but the exploratory ones (the buckets) together, over all languages: the headline family
(`tables.correct_headline`). Step 1 stays a gate corrected per task: it decides which tasks are compared.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from vocabtransfer.evaluate import stats
from vocabtransfer.pipeline import names
from vocabtransfer.report.baseline_choice import BaselineChoice
from vocabtransfer.report.read import Language
from vocabtransfer.report.tables import (
    EXPLORATORY,
    Family,
    Row,
    Settings,
    _corrected,
    _objectives,
    bpb_runs,
    bucket_runs,
    groups,
    loss_runs,
    task_runs,
    tasks,
)


INIT_TITLE = "Right after initialisation: valid loss"  # the family's title (the verdict finds it by it)
UNIGRAM_FLOOR = "floor:unigram-target"  # init_eval's row of the unigram floor on the methods' predicted tokens
INIT_LOSS, INIT_FLOOR = "loss at init", "loss at init (floor)"  # the family's measures: between methods, vs the floor


def init_runs(lang: Language, method: str) -> stats.Runs | None:
    """init_eval's loss of `method` (or of the floor row) per valid block: one run, no seed level."""
    row = next((r for r in lang.init_eval or () if r["method"] == method), None)
    if row is None or row.get("block_loss") is None or not len(row["block_loss"]):
        return None  # an init_eval.parquet written before the blocks were kept
    num, den = np.asarray(row["block_loss"], float), np.asarray(row["block_tokens"], float)
    return stats.Runs({(0, 0): (num, den)}, tuple(range(len(num))))


def init_family(lang: Language, settings: Settings) -> Family | None:
    """Every pair of initialisations (later in init.methods − earlier) and every method − the unigram floor,
    on the valid loss right after initialisation, paired block by block (module docstring, 2.)."""
    methods = [r["method"] for r in lang.init_eval or () if r["method"] != "source" and r.get("kind") != "floor"]
    runs = {m: r for m in methods if (r := init_runs(lang, m)) is not None}
    if len(runs) < 2:
        return None
    order = list(runs)
    if len({len(r.clusters) for r in runs.values()}) != 1:
        return None  # scored on different blocks (other tokenizers): nothing pairs
    rows = [
        Row(
            f"{b} − {a}",
            INIT_LOSS,
            settings.bootstrap(runs[a], runs[b]),
            lower_is_better=True,
            runs="1 initialisation each (pretraining seed 1's), test-set variance only",
            seedless=True,
        )
        for i, a in enumerate(order)
        for b in order[i + 1 :]
    ]
    floor = init_runs(lang, UNIGRAM_FLOOR)
    if floor is not None and len(floor.clusters) == len(runs[order[0]].clusters):
        rows += [
            Row(
                f"{m} − unigram floor",
                INIT_FLOOR,
                settings.bootstrap(floor, runs[m]),
                lower_is_better=True,
                runs="1 initialisation (pretraining seed 1's) against the floor, test-set variance only",
                seedless=True,
            )
            for m in order
        ]
    return Family(
        INIT_TITLE,
        "Before any training, paired over the same valid blocks and masked tokens. Negative: the "
        "first-named method has the lower loss (better); against the unigram floor (the train split's "
        "unigram on the same tokens), negative: the model uses the context.",
        _corrected(rows, settings),
    )


def _baseline(baseline: BaselineChoice | str) -> BaselineChoice:
    return BaselineChoice(baseline, (baseline,)) if isinstance(baseline, str) else baseline


def methods_vs_baseline(
    lang: Language, settings: Settings, status: dict, baseline: BaselineChoice | str = "random"
) -> list[Family]:
    """The valid loss and every learned task: each method minus the baseline (`baseline_choice`: the stronger of
    report.baseline) with the same objective; a weaker listed baseline is one of the methods, and each table's
    description says so."""
    choice = _baseline(baseline)
    base_name, note = choice.method, (" " + choice.weaker_note() if choice.weaker_note() else "")
    out = []
    rows = []
    pretrained = {(m, o) for m, o, _ in lang.curves}
    for objective in _objectives(lang):
        base = loss_runs(lang, base_name, objective)
        for method in (m for m in lang.methods() if m != base_name):
            if not {(method, objective), (base_name, objective)} <= pretrained:
                continue  # a pair params do not ask for (pretrain.pairs): nothing to compare
            runs = loss_runs(lang, method, objective)
            diff = settings.bootstrap(base, runs) if base is not None and runs is not None else None
            rows.append(
                Row(
                    f"{method} − {base_name} ({objective})",
                    "valid loss",
                    diff,
                    lower_is_better=True,
                    note="" if diff else "no paired runs",
                )
            )
    if rows:
        out.append(
            Family(
                f"Valid loss after pretraining: method − {base_name}",
                f"Negative: the method ends with a lower valid loss than {base_name} (better).{note}",
                _corrected(rows, settings),
                baseline=base_name,
                weaker=choice.weaker,
            )
        )
    for task in tasks(lang):
        if task not in status or not status[task].learned:
            continue
        rows = []
        for group in groups(lang, task):
            method, _, objective = group.rpartition("-")
            base_group = f"{base_name}-{objective}"
            if group == names.SOURCE or method == base_name or base_group not in lang.evals[task]:
                continue
            diff = settings.bootstrap(task_runs(lang, task, base_group), task_runs(lang, task, group))
            rows.append(Row(f"{method} − {base_name} ({objective})", task, diff, note="" if diff else "no paired runs"))
        if rows:
            out.append(
                Family(
                    f"{task}: method − {base_name}",
                    f"Positive: the method scores higher than {base_name} (better).{note}",
                    _corrected(rows, settings),
                    baseline=base_name,
                    weaker=choice.weaker,
                )
            )
    return out


def objective_vs_standard(lang: Language, settings: Settings, status: dict, objective: str) -> Family | None:
    """Per method: `objective` (selfish, distill) minus standard on the valid loss, bits per byte (causal
    models) and every learned task (the frequency buckets: `objective_buckets`)."""
    rows = []
    for method in lang.methods():
        if not {(method, "standard"), (method, objective)} <= {(m, o) for m, o, _ in lang.curves}:
            continue
        std, other = loss_runs(lang, method, "standard"), loss_runs(lang, method, objective)
        if std is not None and other is not None:
            rows.append(Row(method, "valid loss", settings.bootstrap(std, other), lower_is_better=True))
        a, b = bpb_runs(lang, method, "standard"), bpb_runs(lang, method, objective)
        if a is not None and b is not None:  # causal models: the same comparison in bits per byte of the text
            rows.append(Row(method, "bits per byte", settings.bootstrap(a, b), lower_is_better=True))
        for task in tasks(lang):
            ga, gb = f"{method}-standard", f"{method}-{objective}"
            if task in status and status[task].learned and ga in lang.evals[task] and gb in lang.evals[task]:
                rows.append(Row(method, task, settings.bootstrap(task_runs(lang, task, ga), task_runs(lang, task, gb))))
    if not rows:
        return None
    return Family(
        f"{objective.capitalize()} − standard, per method",
        f"Loss rows: negative = {objective} lower (better); task rows: positive = {objective} higher (better).",
        _corrected(rows, settings),
        objective=objective,
    )


BUCKETS_TITLE = "by token frequency (exploratory)"  # `Selfish − standard by token frequency (exploratory)`


def objective_buckets(lang: Language, settings: Settings, objective: str) -> Family | None:
    """Per method and frequency bucket: `objective` minus standard on the held-out loss of the bucket's tokens;
    an exploratory breakdown of the valid loss, corrected over its own rows, never with the headline family."""
    rows = []
    buckets = _bucket_labels(lang)
    for method in lang.methods():
        if not {(method, "standard"), (method, objective)} <= {(m, o) for m, o, _ in lang.curves}:
            continue
        for bucket, label in buckets.items():
            a, b = bucket_runs(lang, method, "standard", bucket), bucket_runs(lang, method, objective, bucket)
            if a is not None and b is not None:
                rows.append(Row(method, label, settings.bootstrap(a, b), lower_is_better=True))
    if not rows:
        return None
    return Family(
        f"{objective.capitalize()} − standard {BUCKETS_TITLE}",
        f"Held-out tokens by train frequency (b0 = most frequent types); negative = {objective} lower (better). "
        "A breakdown of the valid loss.",
        _corrected(rows, settings),
        objective=objective,
        kind=EXPLORATORY,
    )


def _bucket_labels(lang: Language) -> dict[int, str]:
    df = lang.token_frequency
    if df is None or not len(df):
        return {}
    spans = df.drop_duplicates("bucket").sort_values("bucket")
    return {int(b.bucket): f"b{int(b.bucket)} (ranks {int(b.rank_lo)}–{int(b.rank_hi)})" for b in spans.itertuples()}


def families(
    lang: Language,
    settings: Settings,
    status: dict,
    head_to_head: Sequence[Family] = (),
    baseline: BaselineChoice | str = "random",
) -> list[Family]:
    """The report's comparison families in order: right after initialisation, every method − the baseline
    (`baseline_choice.stronger_baseline`), the head-to-head ones (`report.rivals.families`, built on report.tables),
    each objective − standard and its exploratory frequency buckets."""
    init = init_family(lang, settings)
    out = ([init] if init else []) + methods_vs_baseline(lang, settings, status, baseline) + list(head_to_head)
    for objective in (o for o in _objectives(lang) if o not in ("init", "standard")):
        family = objective_vs_standard(lang, settings, status, objective)
        buckets = objective_buckets(lang, settings, objective)
        out += [f for f in (family, buckets) if f]
    return out
