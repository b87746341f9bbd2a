"""A pipeline stage and what its code gets: `Stage` (wildcards, path templates, params leaves, code,
resources, availability — one row of the stage table in vocabtransfer.pipeline.stages) and
`Context` (the validated params, wildcards and resolved paths of one job). This module imports no
stage: the stages import it, and the table imports the stages (one way)."""

from __future__ import annotations

import contextlib
import importlib
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from vocabtransfer.pipeline import config
from vocabtransfer.pipeline import paths


def launch_prefix(processes: int) -> str:
    """The command that runs `<prefix> pretrain --lang … ` with `processes` data-parallel processes."""
    if processes <= 1:
        return "vocabtransfer"
    return (f"accelerate launch --multi_gpu --num_processes {processes} --num_machines 1 --main_process_port 0 "
            "--mixed_precision no --dynamo_backend no -m vocabtransfer")


@contextlib.contextmanager
def torch_threads(n: int):
    """Run the block with `n` intra-op torch threads, then restore the setting (the one place a stage's
    torch threads are set: `runner.run_stage`, for the stages that compute with torch)."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(max(1, int(n)))
    try:
        yield
    finally:
        torch.set_num_threads(previous)


@dataclass(frozen=True)
class Stage:
    name: str
    func: str  # "module:function", called with a Context
    help: str
    wildcards: tuple[str, ...] = ("lang",)
    inputs: dict[str, str] | Callable[[dict, dict], dict[str, str]] = field(default_factory=dict)  # or (params, wildcards) -> dict
    outputs: dict[str, str] = field(default_factory=dict)
    directories: frozenset[str] = frozenset()  # output names that are directories
    params: tuple[str, ...] = ()  # dotted params leaves; may contain {lang}
    extra_params: Callable[[dict, dict], list[str]] | None = None  # (params, wildcards) -> more leaves
    # the stage's entry modules under src/vocabtransfer, or (params, wildcards) -> them; DVC reruns the
    # stage when one of them or any vocabtransfer module they import changes (`code_for`)
    code: tuple[str, ...] | Callable[[dict, dict], tuple[str, ...]] = ()
    parallel: bool = False  # uses all the cores it is given
    one_thread_if: str | None = None  # a params leaf: while it is true the job gets one thread (reproducibility)
    processes: str | None = None  # a params leaf: the job's data-parallel processes (one GPU each on a cluster)
    gpu: bool = False  # benefits from a GPU (SLURM profile asks for one)
    # the values of the wildcards other than `lang` that params ask for, e.g. init: one
    # {"method": m} per `init.methods` entry; dvc.yaml gets one (lang-matrix) stage per entry
    expand: Callable[[dict], list[dict[str, str]]] | None = None
    # DVC: output names that are metrics files (`metrics:` with cache: false, for `dvc metrics show/diff`),
    # and params -> top-level plot definitions over the stage's outputs ({plot id: DVC plot properties})
    metrics: frozenset[str] = frozenset()
    plots: Callable[[dict], dict[str, dict]] | None = None
    # (params, wildcards) -> None when the job runs, else why params or the data present rule it out
    # (availability.py); such a job is in neither `snakemake` nor dvc.yaml, and the run says why
    available: Callable[[dict, dict], str | None] | None = None
    # (params, wildcards) -> {part: reason} for parts of a running job left out (e.g. retrieval)
    partial: Callable[[dict, dict], dict[str, str]] | None = None
    # (params, wildcards) -> {key: path}: the local data files the job reads, resolved through
    # $VOCABTRANSFER_DATA; Snakemake inputs and DVC deps, so an edited data file reruns the job
    data: Callable[[dict, dict], dict[str, str]] | None = None

    def launch(self, params: dict) -> str:
        """The command the job starts with: `vocabtransfer`, or accelerate's launcher for N > 1
        data-parallel processes (`processes`)."""
        return launch_prefix(int(config.get(params, self.processes)) if self.processes else 1)

    def skip_reason(self, params: dict, wildcards: dict) -> str | None:
        """None when params and the data present give this job, else the reason they do not."""
        return self.available(params, wildcards) if self.available else None

    def data_files(self, params: dict, wildcards: dict) -> dict[str, str]:
        """The local data files this job reads (`data`), as path strings."""
        return {k: str(v) for k, v in self.data(params, wildcards).items()} if self.data else {}

    def combinations(self, params: dict) -> list[dict[str, str]]:
        """The non-`lang` wildcard values params ask for (one empty dict when there are none)."""
        return self.expand(params) if self.expand else [{}]

    def leaves(self, params: dict, wildcards: dict) -> list[str]:
        """The concrete params leaves this stage reads for these wildcards."""
        out = [leaf.format(**wildcards) for leaf in self.params]
        if self.extra_params:
            out += self.extra_params(params, wildcards)
        return out

    def code_for(self, params: dict, wildcards: dict) -> tuple[str, ...]:
        """The stage's code dependencies for these wildcards (paths relative to src/vocabtransfer):
        its entry modules and everything they import (`module_closure`)."""
        entries = self.code(params, wildcards) if callable(self.code) else self.code
        return module_closure(*entries)

    def input_templates(self, params: dict, wildcards: dict) -> dict[str, str]:
        """Input path templates; a stage whose inputs depend on params or wildcards computes them."""
        return self.inputs(params, wildcards) if callable(self.inputs) else dict(self.inputs)

    def resolve(self, templates: dict[str, str], wildcards: dict) -> dict[str, Path]:
        return {k: Path(paths.fill(v, **wildcards)) for k, v in templates.items()}


def _lazy(target: str) -> Callable:
    """`module:function` of vocabtransfer, imported on the first call (the stage table stays cheap to
    import: Snakemake and the CLI load it before any stage runs)."""
    module, _, function = target.partition(":")

    def call(*args):
        return getattr(importlib.import_module(f"vocabtransfer.{module}"), function)(*args)

    return call


def section_leaves(params: dict, section: str) -> list[str]:
    """Every leaf under a params section, e.g. `init.focus` -> [`init.focus.block_size`, …]."""
    node = config.get(params, section)
    if not isinstance(node, dict):
        return [section]
    return [leaf for key in node for leaf in section_leaves(params, f"{section}.{key}")]



PACKAGE = Path(__file__).resolve().parents[1]  # src/vocabtransfer


def _module_file(dotted: str) -> Path | None:
    """src/vocabtransfer/<…>.py (or <…>/__init__.py) of a `vocabtransfer.…` module name, if it exists."""
    parts = dotted.split(".")
    if parts[0] != "vocabtransfer":
        return None
    base = PACKAGE.joinpath(*parts[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


# the stage table and the command line (what they change reaches DVC as params and paths, not as
# code), and the package's lazy exports
NOT_FOLLOWED = ("pipeline/stages.py", "cli.py", "pipeline/dvcgen.py", "__init__.py")


@lru_cache(maxsize=None)
def module_closure(*files: str) -> tuple[str, ...]:
    """These modules (paths relative to src/vocabtransfer) and every vocabtransfer module they import,
    at any depth and inside functions too (read from the source, nothing is imported), sorted.
    Imports of NOT_FOLLOWED modules are not followed."""
    import ast

    todo = [PACKAGE / f for f in files]
    boundary = {PACKAGE / f for f in NOT_FOLLOWED} - set(todo)
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                found = _module_file(name)
                if found is not None and found not in seen and found not in boundary:
                    todo.append(found)
    return tuple(sorted(str(p.relative_to(PACKAGE)) for p in seen))


@dataclass
class Context:
    """What a stage function gets: validated params, its wildcards and resolved paths."""

    stage: Stage
    params: dict
    wildcards: dict[str, str]
    input: dict[str, Path]
    output: dict[str, Path]
    threads: int = 1
    device: str = "cpu"

    @property
    def lang(self) -> str:
        return self.wildcards["lang"]

    @property
    def method(self) -> str:
        return self.wildcards["method"]

    @property
    def seed(self) -> int:
        return int(self.params["seed"])

    def param(self, dotted: str) -> Any:
        return config.get(self.params, dotted)

    def torch_threads(self):
        """A context with this job's torch threads: its --threads, shared by the data-parallel processes
        on this node (LOCAL_WORLD_SIZE); a stage that does not compute with torch (`gpu` false) is left as is."""
        if not self.stage.gpu:
            return contextlib.nullcontext()
        return torch_threads(max(1, self.threads // int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))

    def leaf_values(self) -> dict[str, Any]:
        """The params leaves this job reads and their values."""
        return {leaf: config.get(self.params, leaf) for leaf in self.stage.leaves(self.params, dict(self.wildcards))}
