"""The lm_eval stage's planning: params `lm_eval` (LmEvalParams), the harness task names each language gets
(`task_names`), the models judged (`models`), why a job does not run (`skip_reason`: no task for the language, a
masked source, a model the language lacks), the local files a job reads (`data_files`: the offline tasks' data,
the user's task folder), and the checks of `lm_eval.tasks` made before any job (`check_include`, `check_tasks`
against the harness's catalogue, `task_manager`)."""

from __future__ import annotations

import difflib
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.pipeline import paths
from vocabtransfer.plan.params_root import Params
from vocabtransfer.plan import source_kind
from vocabtransfer.plan.finetune_plans import expand_models, model_reason, producible_models

if TYPE_CHECKING:
    from lm_eval.tasks import TaskManager  # lm_eval: optional, heavy; imported where it is used


TASKS_DIR = Path(__file__).resolve().parents[1] / "evaluate" / "harness_tasks"  # the offline task YAMLs shipped


def models(params: Params) -> list[str]:
    """The models `lm_eval.models` names (every model some stage produces when it is null)."""
    entries = params.lm_eval.models
    if entries is None:
        return producible_models(params)
    try:
        return expand_models(params, entries)
    except VocabTransferError as exc:  # the key that names it, not eval.models
        raise VocabTransferError(f"lm_eval.models: {str(exc).removeprefix('eval: ')}") from exc


def task_names(params: Params, lang: str) -> list[str]:
    """The harness task names `lm_eval.tasks` gives `lang` (module docstring), in params order."""
    out: list[str] = []
    for entry in params.lm_eval.tasks:
        only, _, name = entry.rpartition(":")
        name = name.replace("{lang}", lang)
        if only in ("", lang) and name not in out:
            out.append(name)
    return out


def include_folder(params: Params) -> Path | None:
    """The user's task folder (`lm_eval.include_path`), None when not set."""
    folder = params.lm_eval.include_path
    return Path(folder).expanduser() if folder else None


def check_include(params: Params, source: str = "params.yaml") -> None:
    """`lm_eval.include_path`, when set, is a folder with task YAMLs: else one error naming the key and the fix."""
    folder = include_folder(params)
    if folder is None:
        return
    if not folder.is_dir():
        raise VocabTransferError(
            f"{source}: lm_eval.include_path: {folder} is not a folder (relative paths resolve "
            f"against the working directory, {Path.cwd()}); give the folder of your task YAMLs"
        )
    if not any(folder.rglob("*.yaml")):
        raise VocabTransferError(
            f"{source}: lm_eval.include_path: {folder} has no .yaml task file; put your "
            "harness task YAMLs in it (docs/evaluation.md#adding-a-zero-shot-task)"
        )


@lru_cache(maxsize=4)
def task_manager(include: str | None = None) -> TaskManager:
    """The harness's catalogue plus this project's offline task folder and the user's (`include`, when given),
    indexed once per process (seconds)."""
    from lm_eval.tasks import TaskManager  # lm_eval: its task index (seconds), not at CLI start-up

    return TaskManager(include_path=[str(TASKS_DIR)] + ([include] if include else []))


def check_tasks(names: list[str], known: list[str]) -> None:
    """Every name is a task, group or tag the harness knows: else one error naming `lm_eval.tasks` and the
    closest names it does know."""
    unknown = [n for n in names if n not in set(known)]
    if unknown:
        close = {n: difflib.get_close_matches(n, known, n=3, cutoff=0.5) for n in unknown}
        said = "; ".join(f"{n!r} (closest: {', '.join(c) if c else 'none'})" for n, c in close.items())
        raise VocabTransferError(
            f"lm_eval.tasks: the harness knows no task {said}; the offline tasks are {', '.join(sorted(local_tasks()))}"
        )


class _TaskLoader(yaml.SafeLoader):
    """A task YAML's own tags (`!function module.name`) read as plain strings."""


_TaskLoader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))


@lru_cache(maxsize=4)
def local_tasks(include: str | None = None) -> dict[str, list[str]]:
    """The offline tasks shipped in TASKS_DIR -> the data files they read (relative to the data folder), and
    the task, group and tag names of the user's folder `include` -> [] (their files are the jobs'
    dependencies through `data_files`); read once per process (the job planner asks for every job)."""
    out = {}
    for path in sorted(TASKS_DIR.glob("*.yaml")):
        spec = yaml.load(path.read_text(encoding="utf-8"), Loader=_TaskLoader)
        kwargs = spec.get("dataset_kwargs") or {}
        out[spec["task"]] = [kwargs[k] for k in ("file", "train_file") if kwargs.get(k)]
    for path in sorted(Path(include).rglob("*.yaml")) if include else []:
        try:
            spec = yaml.load(path.read_text(encoding="utf-8"), Loader=_TaskLoader)
        except yaml.YAMLError as exc:
            raise VocabTransferError(
                f"{path}: not YAML ({str(exc).splitlines()[0]}); lm_eval.include_path reads "
                "every .yaml file in its folder as a harness task"
            ) from exc
        spec = spec if isinstance(spec, dict) else {}
        tags = spec.get("tag") or []
        for name in [spec.get("task"), spec.get("group"), *([tags] if isinstance(tags, str) else tags)]:
            if isinstance(name, str):
                out.setdefault(name, [])
    return out


def include_key(params: Params) -> str | None:
    """The user's task folder as the key of `task_manager` and `local_tasks` (None when not set)."""
    folder = include_folder(params)
    return str(folder) if folder else None


def skip_reason(params: Params, wildcards: dict) -> str | None:
    """None when the job (lang, model) runs, else why: no task for the language, or a model that does not
    exist there."""
    if not task_names(params, wildcards["lang"]):
        return f"lm_eval.tasks has no task for {wildcards['lang']!r}"
    if source_kind.kind(params.source_model) == "masked":
        return (
            f"the harness scores causal LMs and source_model {params.source_model} is a masked LM: its "
            "models have no likelihood of a text"
        )
    return model_reason(params, wildcards["lang"], wildcards["model"])


def data_files(params: Params, wildcards: dict) -> dict[str, Path]:
    """The local files the job's offline tasks read (a catalogue task's data come from the hub)."""
    shipped = local_tasks()
    files = [f for name in task_names(params, wildcards["lang"]) for f in shipped.get(name, [])]
    out = {f"data_{i}": paths.data_path(f) for i, f in enumerate(files)}  # keys alike across languages
    folder = include_folder(params)
    if folder is not None and folder.is_dir():  # the user's tasks: every file, so that an edit reruns the jobs
        own = sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        out.update({f"task_file_{i}": p for i, p in enumerate(own)})
    return out
