"""The downstream evaluation planned: which models a `model` wildcard names and where each
comes from (`parse_model`, `producible_models`, `expand_models`: `source`, `<method>-init-pseed<k>`,
`<method>-<objective>-pseed<k>`, vocabtransfer.pipeline.names), the models `eval.models` asks for, why a task or
a model has no job for a language, each finetune_eval and floor job's inputs and data files, and a test source
that is its training source (`same_source`, refused before any job)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Iterable, Mapping

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.pipeline import names, paths
from vocabtransfer.pipeline.paths import data_path
from vocabtransfer.plan.params_root import Params
from vocabtransfer.plan import availability


def init_models(params: Params) -> list[str]:
    """`<m>-init-pseed<k>`: the initialisation every pretrained run of method m with seed k starts from."""
    runs = dict.fromkeys((m, availability.init_pseed(m, s)) for m, _, s in availability.pretrain_runs(params))
    return [names.model_name(m, names.INIT, s) for m, s in runs]


def producible_models(params: Params) -> list[str]:
    """Every model name some stage produces."""
    return (
        [names.SOURCE]
        + [names.model_name(m, names.INIT, s) for m, s in availability.init_runs(params)]
        + [names.model_name(m, o, s) for m, o, s in availability.pretrain_runs(params)]
    )


def parse_model(params: Params, model: str) -> dict:
    """`method`, `objective`, `pseed` and the directory template of a model name; a name no stage
    produces is one error."""
    parsed = names.parse_model_name(model) if model == names.SOURCE or "-pseed" in model else None
    if parsed is not None and model in producible_models(params):
        if parsed.method == names.SOURCE:
            return {"method": names.SOURCE, "objective": None, "pseed": None, "input": paths.SOURCE_MODEL, "subdir": ""}
        if parsed.objective == names.INIT:
            template = paths.partial(paths.INIT_DIR, method=parsed.method, pseed=parsed.pseed)
        else:
            template = paths.partial(
                paths.PRETRAIN_DIR, method=parsed.method, objective=parsed.objective, pseed=parsed.pseed
            )
        return {
            "method": parsed.method,
            "objective": parsed.objective,
            "pseed": parsed.pseed,
            "input": template,
            "subdir": "model",
        }
    raise VocabTransferError(
        f"eval: model {model!r} is produced by no stage; use `source`, `<method>-init-pseed<k>` (method in "
        "init.methods) or `<method>-<objective>-pseed<k>` (pretrain.methods × pretrain.objectives × "
        f"1..pretrain.seeds), e.g. {producible_models(params)[-1]!r}"
    )


def _expand_entry(params: Params, entry: str) -> list[str]:
    """The models one `eval.models` entry names: a kind (`pretrained`, `init`, `source`), a model name,
    or a name without its pretraining seed (`focus-standard`: every pretraining seed)."""
    if entry == "pretrained":
        return [names.model_name(m, o, s) for m, o, s in availability.pretrain_runs(params)]
    if entry == "init":
        return init_models(params)
    if entry == names.SOURCE or "-pseed" in entry:
        parse_model(params, entry)  # one clear error for a name no stage produces
        return [entry]
    seeds = [n for n in producible_models(params) if n.rpartition("-pseed")[0] == entry]
    if not seeds:
        parse_model(params, entry)  # raises: the error lists the grammar and an example
    return seeds


def expand_models(params: Params, entries: Iterable[str]) -> list[str]:
    """The models a list of `eval.models`-style entries names (kinds and seedless names expanded, duplicates
    dropped, order kept)."""
    out: list[str] = []
    for entry in entries:
        out += [n for n in _expand_entry(params, entry) if n not in out]
    return out


def eval_models(params: Params) -> list[str]:
    """The models `eval.models` asks for."""
    return expand_models(params, params.eval.models)


def task_reason(params: Params, lang: str, task: str) -> str | None:
    """Why `task` has no job for this language (disabled, or no data), None when it has."""
    section = params.eval.task(task)
    if not section.enabled:
        return f"eval.tasks.{task}.enabled is false"
    if lang not in section.data:
        return f"no data for {lang!r}: eval.tasks.{task}.data has no entry {lang!r}"
    return None


def skipped_tasks(params: Params, lang: str) -> dict[str, str]:
    """Task -> why it has no job for this language."""
    return {task: why for task in params.eval.task_sections() if (why := task_reason(params, lang, task))}


def model_reason(params: Params, lang: str, model: str) -> str | None:
    """Why `model` does not exist for `lang` (its init method cannot run there), None when it does."""
    method = parse_model(params, model)["method"]
    why = None if method == names.SOURCE else availability.method_reason(params, lang, method)
    return f"model {model} does not exist for {lang}: {why}" if why else None


def finetune_skip_reason(params: Params, wildcards: dict) -> str | None:
    """None when the job (lang, task, model, seed) runs, else why the params or data rule it out."""
    return task_reason(params, wildcards["lang"], wildcards["task"]) or model_reason(
        params, wildcards["lang"], wildcards["model"]
    )


def finetune_data_files(params: Params, wildcards: dict) -> dict[str, Path]:
    """The local files of the task's data spec for this language (`<split>` -> path): the job's data
    dependencies. URL and hub sources are pinned by their sha256 / revision params instead."""
    spec = params.eval.task(wildcards["task"]).data.get(wildcards["lang"]) or {}
    return {
        f"data_{split}": paths.data_path(source["path"])
        for split, source in spec.items()
        if isinstance(source, dict) and source.get("path")
    }


def finetune_inputs(params: Params, wildcards: dict) -> dict[str, str]:
    """A finetune_eval job's input: the directory of its model."""
    return {"model": parse_model(params, wildcards["model"])["input"]}


def floor_skip_reason(params: Params, wildcards: dict) -> str | None:
    """Why the task has no floor job for this language (disabled, or no data), None when it has one."""
    return task_reason(params, wildcards["lang"], wildcards["task"])


def floor_tasks(params: Params) -> list[dict[str, str]]:
    """One job per enabled task (per language: `floor_skip_reason` rules out the tasks without data)."""
    return [{"task": t} for t, section in params.eval.task_sections().items() if section.enabled]


def same_source(train: Mapping, test: Mapping) -> str | None:
    """How a language's `test` source is its `train` source, known before any job, or None: the same file (after
    the data root, links and `..` are resolved), a file of the same bytes, the same URL or sha256, or the same
    `datasets` spec. A model tested there is tested on its training data."""
    if "path" in train and "path" in test:
        a, b = data_path(train["path"]), data_path(test["path"])
        if not (a.is_file() and b.is_file()):
            return None  # a missing file has its own error
        if os.path.samefile(a, b):
            return f"the same file ({a})"
        if a.stat().st_size == b.stat().st_size and _file_digest(a) == _file_digest(b):
            return f"a file of the same bytes ({a} and {b})"
        return None
    if "url" in train and "url" in test and (train["url"] == test["url"] or train.get("sha256") == test.get("sha256")):
        return f"the same download ({test['url']}, sha256 {test.get('sha256')})"
    if "dataset" in train and "dataset" in test:
        a_spec, b_spec = ({"split": "train", **spec["dataset"]} for spec in (train, test))
        if {k: v for k, v in a_spec.items() if v is not None} == {k: v for k, v in b_spec.items() if v is not None}:
            return f"the same dataset split ({b_spec['path']} [{b_spec['split']}])"
    return None


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
