"""Downstream tasks: a registry, one module per task (nli, qa, ner).

A task is a `Task` subclass registered with `@register("name")`, its metadata (`metric`, `head`,
`PARTS`, `floor_text`) in its class body; adding a task = one module in this package and its `eval.tasks.<name>`
section (a field of vocabtransfer.plan.task_options.EvalTasks: its options class, and its class by the lazy
reference `TASKS` is built from). A
task knows how to

  1. read its data from a source (`read`: a local file, a URL with sha256, or a
     `datasets.load_dataset` spec) into a list of examples, each with an `id` and a `group`
     (the unit a deterministic train/test split keeps together: an XNLI premise, a SQuAD
     article, a sentence);
  2. turn examples into model features (`features`) and name its transformers head (`head`);
  3. score the fine-tuned model on the test examples (`evaluate`): the metrics in percent,
     per-example arrays in the test examples' order (for the paired comparisons) and the
     counted skips;
  4. score its floor (`floor`): a predictor without a model, from the same training and test
     examples (majority class, the training split's lexicon, a sliding-window span).

`load_splits` reads a language's data spec (`eval.tasks.<task>.data.<lang>`): `train` and
`test` sources, or only `train`, which is then split by a seeded hash of each example's group.

Params `eval` are typed in vocabtransfer.plan.task_options (`EvalParams`, `TaskOptions` and one class per task);
`get_task` turns a mapping (a call from Python) into a task's options over its defaults, validated by the schema
its class makes.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.registry import Registry
from vocabtransfer.pipeline.config import typed_section
from vocabtransfer.pipeline import names
from vocabtransfer.pipeline.paths import data_path
from vocabtransfer.data import download
from vocabtransfer.data.corpus_sources import LOCAL_BUILDERS, _load_dataset, _resolve_data_files
from vocabtransfer.plan.task_options import TaskOptions, task_options_class, task_references

log = logging.getLogger(__name__)


@dataclass
class Source:
    """One opened data source: a local file, or the rows of a `datasets` dataset."""

    key: str  # params key, for messages (e.g. eval.tasks.ner.data.sw.train)
    name: str  # file path or dataset name, for messages
    path: Path | None = None
    rows: Any = None  # a datasets.Dataset (iterable of dicts) when the source is a `dataset` spec
    options: dict = field(default_factory=dict)  # the spec's task-specific keys (token_column, …)


@dataclass
class Splits:
    train: list[dict]
    test: list[dict]
    skipped: dict[str, int] = field(default_factory=dict)  # counted, reported skips
    notes: dict = field(default_factory=dict)  # extra facts for the result JSON (e.g. unseen labels)


@dataclass
class Evaluation:
    metrics: dict[str, float]  # in percent
    examples: dict[str, list]  # per test example, in the test order
    skipped: dict[str, int] = field(default_factory=dict)


class Task:
    """Base class; subclasses fill in the class attributes and the methods below."""

    name: str = ""
    metric: str = ""  # the main metric's name
    head: str = ""  # transformers AutoModelFor… class name
    floor_text: str = ""  # what its floor predicts, in words (the report's note under the task's table)

    def __init__(self, options: TaskOptions):
        self.options = options  # the params section eval.tasks.<name>, typed (e.g. QaOptions)

    def read(self, source: Source) -> tuple[list[dict], dict[str, int]]:
        """Examples of one source and counted skips; a malformed source raises one clear error."""
        raise NotImplementedError

    def labels(self, train: list[dict]) -> list[str] | None:
        """The label names of a classification head (None for QA)."""
        return None

    def prepare(self, splits: Splits, labels: list[str] | None) -> None:
        """Check the test split against the label set (counts go to splits.notes / skipped)."""

    def features(self, examples: list[dict], tokenizer, labels: list[str] | None) -> list[dict]:
        """Training features (dicts of token ids and labels) for the Trainer."""
        raise NotImplementedError

    def collator(self, tokenizer):
        """Pads a batch of features (dynamic padding)."""
        from transformers import (
            DataCollatorWithPadding,
        )  # transformers: the floor and report jobs load the tasks without it

        return DataCollatorWithPadding(tokenizer)

    def evaluate(self, trainer, examples: list[dict], tokenizer, labels: list[str] | None) -> Evaluation:
        """Predict with `trainer.predict` and score."""
        raise NotImplementedError

    def floor(self, splits: Splits) -> dict:
        """The score of the task's floor on the test split ({"name", "value"} in percent, and its per-example
        `examples` in the task's PARTS): a predictor without a model, built from the same training
        examples, that a fine-tuned model has to beat before it has learned the task in any sense a
        reader cares about (the `floor` stage, vocabtransfer.evaluate.task_floor)."""
        raise NotImplementedError

    # the per-example arrays of a result's `examples` and how they make the metric (percent):
    # metric = SCALE · Σ numerator / Σ denominator, with denominator 1 per example when it is None
    PARTS: tuple[str, str | tuple[str, ...] | None, float] = ("score", None, 1.0)

    @classmethod
    def metric_parts(cls, examples: Mapping, where: str = "eval result"):
        """(numerator, denominator, scale) per test example, as float64 arrays (the report's bootstrap
        sums them over resampled clusters)."""
        numerator, denominator, scale = cls.PARTS
        keys = [numerator] + ([denominator] if isinstance(denominator, str) else list(denominator or ()))
        missing = [k for k in keys if k not in examples]
        if missing:
            raise VocabTransferError(
                f"{where}: `examples` lacks {', '.join(missing)} for task {cls.name}; rerun its finetune_eval job"
            )
        num = np.asarray(examples[numerator], dtype=np.float64)
        parts = [np.asarray(examples[k], dtype=np.float64) for k in keys[1:]]
        return num, (sum(parts) if parts else np.ones_like(num)), float(scale)


# every task, by a lazy reference to its class (vocabtransfer.registry): its module is imported the first time
# the task is looked up; its @register line names the class
TASKS: Registry[type[Task]] = Registry(
    "task",
    lazy=task_references(),  # every section of eval.tasks names its Task class (plan/task_options.py: EvalTasks)
    check=lambda cls: None if isinstance(cls, type) and issubclass(cls, Task) else "a task is a Task subclass",
)


def register(name: str) -> Callable[[type[Task]], type[Task]]:
    """`@register("name")` on a Task subclass: its name, in TASKS (a name registered twice is an error)."""

    def deco(cls: type[Task]) -> type[Task]:
        cls.name = name
        return TASKS.register(name)(cls)

    return deco


def available() -> list[str]:
    return sorted(TASKS)


def task_class(name: str) -> type[Task]:
    return TASKS.get_or_raise(name)


def get_task(name: str, options: TaskOptions | Mapping | None) -> Task:
    """The task with `options`: its typed section (`EvalParams.tasks.<name>`) as it is, or a mapping
    (a call from Python) over the schema's defaults of `eval.tasks.<name>`, validated by the schema."""
    cls = task_class(name)
    if isinstance(options, TaskOptions):
        return cls(options)
    return cls(typed_section(task_options_class(name), f"eval.tasks.{name}", options))


# --- data sources -----------------------------------------------------------------------------

# the keys of a data source that say where its rows are (and pin them); the others are its reader's options
LOCATION_KEYS = frozenset({"path", "url", "sha256", "dataset"})


def open_source(spec: dict, key: str) -> Source:
    """A local file (relative to $VOCABTRANSFER_DATA), a verified download, or a loaded dataset."""
    options = {k: v for k, v in spec.items() if k not in LOCATION_KEYS}
    if "path" in spec:
        path = data_path(spec["path"])
        if not path.is_file():
            raise VocabTransferError(
                f"{path}: data file not found ({key}.path = {spec['path']!r}; relative paths "
                "resolve against $VOCABTRANSFER_DATA); fix the path or set VOCABTRANSFER_DATA"
            )
        return Source(key, str(path), path=path, options=options)
    if "url" in spec:
        fetched = download.fetch(spec["url"], spec["sha256"])
        return Source(key, f"{spec['url']} ({fetched.path})", path=fetched.path, options=options)
    if "dataset" in spec:
        ds_spec = {"split": "train", **spec["dataset"]}
        ds_spec.pop("streaming", None)
        ds_path: str = ds_spec.pop("path")
        if ds_path in LOCAL_BUILDERS:
            ds_spec["data_files"] = _resolve_data_files(ds_spec.get("data_files"))
        elif data_path(ds_path).exists():
            ds_path = str(data_path(ds_path))
        rows = _load_dataset(ds_path, f"{key}.dataset", **{k: v for k, v in ds_spec.items() if v is not None})
        name = (
            f"dataset {ds_path}" + (f" ({ds_spec['name']})" if ds_spec.get("name") else "") + f" [{ds_spec['split']}]"
        )
        return Source(key, name, rows=rows, options=options)
    raise VocabTransferError(f"{key}: needs one of `path`, `url` with `sha256`, or `dataset`")


def check_held_out(train: list[dict], test: list[dict], key: str, task: str) -> None:
    """Refuse a test split whose every example is also a training example (by its content, not its id: NLI and NER
    number their examples by line), e.g. a copy of the training file, reordered or cut. `test_fraction` cannot do
    that: it holds whole groups out of `train` (`split_by_group`)."""
    seen = {_content(ex) for ex in train}
    if test and all(_content(ex) in seen for ex in test):
        raise VocabTransferError(
            f"{key}.test: every test example is also a training example ({key}.train), so the model would be tested "
            f"on its training data; give a held-out test source, or remove `test` so that "
            f"eval.tasks.{task}.test_fraction holds part of the training source out"
        )


def _content(example: dict) -> str:
    """An example's content: everything but the numbering and the split and bootstrap units."""
    return json.dumps({k: v for k, v in example.items() if k not in ("id", "group", "cluster")}, sort_keys=True)


def require_columns(source: Source, row: dict, columns: tuple[str, ...]) -> None:
    missing = [c for c in columns if c not in row]
    if missing:
        raise VocabTransferError(
            f"{source.name}: missing column(s) {', '.join(missing)} (has {', '.join(row)}) "
            f"({source.key}); point the spec at a dataset with these columns"
        )


TASK_DIGEST = 8  # bytes of an example's seeded hash (names.seeded_digest)


def unit_hash(text: str, seed: int) -> float:
    """A seeded hash of a string mapped to [0, 1): decides the split and the subsample."""
    return names.unit_value(names.seeded_digest(text, seed, TASK_DIGEST))


def split_by_group(examples: list[dict], test_fraction: float, seed: int) -> tuple[list[dict], list[dict]]:
    """Deterministic train/test split: an example goes to test when the seeded hash of its group is
    below `test_fraction`, so examples of one group (premise, article) never straddle the split."""
    train: list[dict] = []
    test: list[dict] = []
    for ex in examples:
        (test if unit_hash(str(ex["group"]), seed) < test_fraction else train).append(ex)
    return train, test


def subsample(examples: list[dict], n: int, seed: int, salt: str) -> list[dict]:
    """At most `n` examples (0 = all), chosen by a seeded hash of their ids, kept in their original
    order: the same for every model and eval seed."""
    if not n or len(examples) <= n:
        return examples
    ranked = sorted(range(len(examples)), key=lambda i: unit_hash(f"{salt}:{examples[i]['id']}", seed))
    return [examples[i] for i in sorted(ranked[:n])]


def _merge_counts(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return out


def load_splits(task: Task, spec: Mapping, key: str, *, seed: int) -> Splits:
    """Read a language's data spec into train and test examples, capped at max_train / max_test."""
    train, skipped = task.read(open_source(spec["train"], f"{key}.train"))
    if "test" in spec:
        test, skipped_test = task.read(open_source(spec["test"], f"{key}.test"))
        skipped = _merge_counts(skipped, skipped_test)
        check_held_out(train, test, key, task.name)
    else:
        train, test = split_by_group(train, task.options.test_fraction, seed)
    for split, rows in (("train", train), ("test", test)):
        if not rows:
            raise VocabTransferError(
                f"{key}: the {split} split is empty (after reading and splitting); "
                f"check the data or eval.tasks.{task.name}.test_fraction"
            )
    ids = [ex["id"] for ex in test]
    if len(set(ids)) != len(ids):
        raise VocabTransferError(f"{key}: test example ids are not unique; the per-example results could not be paired")
    train = subsample(train, task.options.max_train, seed, "train")
    test = subsample(test, task.options.max_test, seed, "test")
    return Splits(train=train, test=test, skipped=skipped)


def test_clusters(test: list[dict], task: str) -> list[str]:
    """The cluster key of every test example (what the report resamples together)."""
    missing = [ex.get("id") for ex in test if ex.get("cluster") in (None, "")]
    if missing:
        raise VocabTransferError(
            f"eval task {task}: test example {missing[0]!r} has no cluster key (premise, "
            f"article or sentence); check the task's data columns (eval.tasks.{task}.data)"
        )
    return [str(ex["cluster"]) for ex in test]
