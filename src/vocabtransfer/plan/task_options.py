"""The params section `eval`, typed: `EvalParams`, whose `tasks` is an `EvalTasks` of one frozen dataclass
per task section (`NliOptions`, `QaOptions`, `NerOptions`, over the common `TaskOptions`), each also naming its
task's class (the task registry's built-ins, `task_references`: `EvalTasks` is the one list of them). Each field
holds its default, description and bounds (`typed.option`); the schema's `eval` is generated from them
(vocabtransfer.app.params). finetune_eval and floor both read it: a stage builds `EvalParams` once at its
entry (`ctx.params.eval`) and hands a task its section (`Task.options`).
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, fields
from typing import Literal

from vocabtransfer.pipeline.typed import named_child, option, subsection


# the schema of one task data source (`eval.tasks.<task>.data.<lang>.train` / `.test`): a local file, a URL
# with its sha256, or a datasets spec, with the CoNLL columns of a NER file
TASK_SOURCE = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "path": {"type": "string", "description": "local file, relative to $VOCABTRANSFER_DATA"},
        "url": {
            "type": "string",
            "pattern": "^(https?|file)://",
            "description": "file to download, verified like a corpus URL",
        },
        "sha256": {
            "type": "string",
            "pattern": "^[0-9a-f]{64}$",
            "description": "checksum of the file at url",
        },
        "dataset": {
            "type": "object",
            "additionalProperties": False,
            "required": ["path"],
            "properties": {
                "path": {
                    "type": "string",
                    "description": "hub id or builder name (json, csv, parquet)",
                },
                "name": {
                    "type": ["string", "null"],
                    "default": None,
                    "description": "dataset configuration (e.g. sw)",
                },
                "split": {"type": "string", "default": "train", "description": "split to read"},
                "data_files": {
                    "type": ["string", "array", "object", "null"],
                    "default": None,
                    "description": "files of a builder dataset",
                },
                "revision": {
                    "type": ["string", "null"],
                    "default": None,
                    "description": "commit or tag that pins the dataset",
                },
            },
        },
        "token_column": {
            "type": "integer",
            "minimum": 0,
            "description": "ner: column of the token (CoNLL file)",
        },
        "tag_column": {
            "type": "integer",
            "minimum": 0,
            "description": "ner: column of the BIO tag (CoNLL file)",
        },
        "comment": {
            "type": "string",
            "minLength": 1,
            "description": "ner: prefix of comment lines to ignore",
        },
    },
    "oneOf": [{"required": ["path"]}, {"required": ["url", "sha256"]}, {"required": ["dataset"]}],
}


@dataclass(frozen=True)
class TaskOptions:
    """the options every downstream task has (params `eval.tasks.<task>`)"""

    enabled: bool = option(True, "false gives the task no jobs")
    data: dict[str, dict | None] = option(
        {},
        "per language: `train` and optionally `test`, each a local `path` (relative to $VOCABTRANSFER_DATA), a "
        "`url` with `sha256`, or a `dataset` (datasets.load_dataset spec with `revision`); without `test` the "
        "train source is split by `test_fraction`. A language without an entry has no job for the task; an "
        "overlay's `<lang>: null` removes params.yaml's entry.",
        propertyNames={"$ref": "#/$defs/lang"},
        additionalProperties={
            "type": ["object", "null"],
            "additionalProperties": False,
            "required": ["train"],
            "properties": {
                "train": TASK_SOURCE,
                "test": TASK_SOURCE,
            },
        },
        per_language=True,
    )
    test_fraction: float = option(
        0.2,
        "share of groups (premises, articles, sentences) held out as test when a language has only one source; "
        "seeded by `seed`",
        exclusiveMinimum=0,
        exclusiveMaximum=1,
    )
    max_train: int = option(500, "training examples kept (seeded choice; 0 = all)", minimum=0)
    max_test: int = option(
        300, "test examples kept (seeded choice, the same for every model and seed; 0 = all)", minimum=0
    )
    epochs: float = option(1, "training epochs (fractions allowed)", exclusiveMinimum=0)
    learning_rate: float = option(0.0001, "AdamW peak learning rate", exclusiveMinimum=0)
    batch_size: int = option(16, "training batch", minimum=1)
    eval_batch_size: int = option(64, "prediction batch", minimum=1)
    max_length: int = option(128, "tokens per input (QA: per window)", minimum=16)
    warmup_ratio: float = option(0.1, "share of the training steps with linear warm-up", minimum=0, exclusiveMaximum=1)
    weight_decay: float = option(0.01, "AdamW weight decay", minimum=0)


@dataclass(frozen=True)
class NliOptions(TaskOptions):
    """natural language inference, XNLI format (premise, hypothesis, label); metric accuracy"""


@dataclass(frozen=True)
class QaOptions(TaskOptions):
    """extractive question answering, SQuAD format; metrics exact match and F1 (SQuAD v1.1)"""

    doc_stride: int = option(64, "tokens shared by consecutive windows of a long context", minimum=0)
    cluster: Literal["article", "context"] = option(
        "article", "the unit the report's bootstrap resamples: the article (title) or the context of each question"
    )
    max_answer_length: int = option(30, "longest predicted answer in tokens", minimum=1)
    n_best: int = option(20, "best start and end logits tried per window", minimum=1)


@dataclass(frozen=True)
class NerOptions(TaskOptions):
    """named-entity recognition, CoNLL BIO; metric entity-level F1 (seqeval)"""

    strict: bool = option(False, "seqeval strict IOB2 mode instead of the default conlleval mode")


# the built-in tasks, one field each: its section's options class, and its `Task` class by a lazy reference (`task=`),
# the task registry's entry (vocabtransfer.evaluate.tasks.TASKS, `task_references`); no docstring: the schema's
# `eval.tasks` has no description
@dataclass(frozen=True)
class EvalTasks:
    nli: NliOptions = subsection(NliOptions, task="vocabtransfer.evaluate.tasks.nli:NLI")
    qa: QaOptions = subsection(QaOptions, task="vocabtransfer.evaluate.tasks.qa:QA")
    ner: NerOptions = subsection(NerOptions, task="vocabtransfer.evaluate.tasks.ner:NER")


@dataclass(frozen=True)
class EvalParams:
    """downstream evaluation (finetune_eval stage): fine-tune every model on every task with n seeds"""

    seeds: int = option(
        1,
        "seeds per task × model (1..n); a seed changes the head initialisation and the data order, not the split",
        minimum=1,
    )
    models: tuple[str, ...] = option(
        ["pretrained", "source"],
        "models to evaluate: kinds `pretrained` (every pretrain method × objective × pretraining seed), `init` "
        "(the initialisation each pretrained run starts from), `source` (the source model with its own tokenizer), "
        "and/or model names (`focus-selfish-pseed2`, `wechsel-init-pseed1`) or names without the pretraining seed "
        "(`focus-selfish`: every pretraining seed of it)",
        minItems=1,
        uniqueItems=True,
        items={"type": "string", "pattern": "^[A-Za-z0-9_+]+(-[A-Za-z0-9_]+)?(-pseed[1-9][0-9]*)?$"},
    )
    precision: Literal["auto", "fp32", "bf16"] = option(
        "auto",
        "fine-tuning precision, as pretrain.precision: auto is bf16 mixed precision on a GPU that supports it "
        "and on a CPU with native bf16 products (amx_bf16 or avx512_bf16), else fp32; the fine-tuned model is "
        "scored in test_precision either way",
    )
    test_precision: Literal["fp32", "bf16"] = option(
        "fp32",
        "the precision the test split is scored in: fp32, or bf16 (the products under torch.autocast, the weights "
        "fp32; about twice as fast where the hardware multiplies bf16 natively; benchmarks/README.md#bf16-scoring "
        "measured what it changes); every model of a study is scored alike",
    )
    tasks: EvalTasks = subsection(EvalTasks)

    def task_sections(self) -> dict[str, TaskOptions]:
        """{task: its options} of every task under `eval.tasks`, in declaration order."""
        return {f.name: getattr(self.tasks, f.name) for f in fields(self.tasks)}

    @named_child("tasks")
    def task(self, name: str) -> TaskOptions:
        """The options of task `name` (`eval.tasks.<name>`), for a task named at run time (a job's wildcard)."""
        return getattr(self.tasks, name)


def task_options_class(name: str) -> type[TaskOptions]:
    """The dataclass of the params section `eval.tasks.<name>`."""
    return typing.get_type_hints(EvalTasks)[name]


def task_references() -> dict[str, str]:
    """{task: its `Task` class, `"module:class"`} of every section of `eval.tasks`, in their order: the built-ins of
    the task registry (vocabtransfer.evaluate.tasks.TASKS), so that `EvalTasks` is the one list of them."""
    return {f.name: f.metadata["task"] for f in fields(EvalTasks)}
