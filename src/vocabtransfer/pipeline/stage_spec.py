"""A pipeline stage and what its code gets: `Stage` (a lazy reference to its function, wildcards, path
templates, params leaves, code, resources, which jobs run — every stage declared in one place, the DAG
vocabtransfer.plan.stages) and `Context` (the validated params, wildcards and resolved paths of one
job). This module imports no stage: the declarations name the stages' functions by reference."""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import inspect
import os
import re
import string
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Generic, Iterator, Mapping, TypeVar

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.registry import resolve
from vocabtransfer.pipeline import paths
from vocabtransfer.pipeline.typed import ParamsTree


def launch_prefix(processes: int) -> str:
    """The command that runs `<prefix> pretrain --lang … ` with `processes` data-parallel processes."""
    if processes <= 1:
        return "vocabtransfer"
    return (
        f"accelerate launch --multi_gpu --num_processes {processes} --num_machines 1 --main_process_port 0 "
        "--mixed_precision no --dynamo_backend no -m vocabtransfer"
    )


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the block with `n` intra-op torch threads, then restore the setting (the one place a stage's
    torch threads are set: `runner.run_stage`, for the stages that compute with torch)."""
    import torch  # torch: heavy, not at CLI start-up

    previous = torch.get_num_threads()
    torch.set_num_threads(max(1, int(n)))
    try:
        yield
    finally:
        torch.set_num_threads(previous)


P = TypeVar("P", bound=ParamsTree)  # the params a job gets: the typed root (vocabtransfer.plan.params_root.Params)
Templates = dict[str, str]  # {name: path template}
Wildcards = dict[str, str]  # {wildcard: value} of one job, e.g. {"lang": "sw", "method": "focus", "pseed": "1"}
# (params, wildcards) -> the value for one job; params is the typed root, which this layer does not know
PerJob = Callable[[Any, dict], Any]


def _per_job(value: object) -> PerJob:
    """A per-job property given as a constant, as the function of (params, wildcards) that returns it."""
    if callable(value):
        return value
    return lambda params, wildcards: value


@dataclass(frozen=True)
class Stage:
    """One pipeline stage, declared with every other in topological order in vocabtransfer.plan.stages
    (its `run` a `"module:function"` reference to the function in the module that holds its code, imported
    when a job runs: `function`).

    A per-job property (`inputs`, `code`, `skip_reason`, `partial`, `data`) is declared as a constant or
    as a function of (params, wildcards) and kept as declared; a method reads it for one job, whichever it
    is: `input_templates`, `code_modules` (the declared entry modules and every module they import),
    `why_skipped`, `left_out`, `data_files`, and `combos` reads `expand`. Which jobs run is `jobs`, the job
    planner."""

    name: str
    # the job, `"package.module:function"`: the function called with its Context (`runner.run_stage`), imported
    # only when a job runs, so that the table (and the CLI, Snakemake) plan without the stages' code
    run: str
    help: str
    wildcards: tuple[str, ...] = ("lang",)
    inputs: Templates | PerJob = field(default_factory=dict)  # input path templates
    outputs: Templates = field(default_factory=dict)
    directories: frozenset[str] = frozenset()  # output names that are directories
    # the params its job reads: names of the typed root's sections and leaves (`pretrain`, `source_head.text`,
    # `eval.tasks.{task}`: `{wildcard}`s filled per job), or a function of (params, wildcards) giving them. Its rerun
    # keys are their leaves (`leaves`: a section's but the `rerun=False` ones, params_root.Params.rerun_leaves), and
    # the job's planning reads no other (tests/project/test_params_reads.py records every read)
    reads: tuple[str, ...] | PerJob = ()
    # the params its planning reads only to decide which jobs run and what they read (init.methods, pretrain.seeds):
    # not rerun keys, as a change there adds or removes jobs or changes their inputs (names as in `reads`)
    plans_with: tuple[str, ...] = ()
    # the stage's entry modules under src/vocabtransfer, declared: the code dependencies of a job are they
    # and every vocabtransfer module they import (`module_closure`), so that DVC and Snakemake rerun a job
    # when one of them changes
    code: tuple[str, ...] | PerJob = ()
    parallel: bool = False  # uses all the cores it is given
    # params -> true while the job gets one thread (reproducibility), e.g. `lambda p: p.fasttext.reproducible`
    one_thread_if: Callable[[Any], bool] | None = None
    # params -> the job's data-parallel processes (one GPU each on a cluster), e.g. `lambda p: p.pretrain.processes`
    processes: Callable[[Any], int] | None = None
    gpu: bool = False  # benefits from a GPU (SLURM profile asks for one)
    # params -> the values of the wildcards other than `lang` that params ask for, e.g. init: one
    # {"method": m, "pseed": k} per initialisation; dvc.yaml gets one (per-language) stage per entry
    expand: Callable[[Any], list[dict[str, str]]] | None = None
    # DVC: output names that are metrics files (`metrics:` with cache: false, for `dvc metrics show/diff`),
    # and params -> top-level plot definitions over the stage's outputs ({plot id: DVC plot properties})
    metrics: frozenset[str] = frozenset()
    plots: Callable[[Any], dict[str, dict]] | None = None
    # None when the job runs, else why params or the data present rule it out (plan/availability.py); such
    # a job is in neither `snakemake` nor dvc.yaml, and the run says why
    skip_reason: PerJob | None = None
    # {part: reason} for parts of a running job left out (e.g. retrieval)
    partial: PerJob | None = None
    # {key: path}: the local data files the job reads, resolved through $VOCABTRANSFER_DATA; Snakemake
    # inputs and DVC deps, so an edited data file reruns the job. Read as path strings.
    data: PerJob | None = None

    def function(self) -> Callable[[Context], None]:
        """The job's function, its module imported (`run`)."""
        return resolve(self.run)

    def input_templates(self, params: ParamsTree, wildcards: Wildcards) -> Templates:
        """The input path templates of one job (`inputs`)."""
        return dict(_per_job(self.inputs)(params, wildcards))

    def code_modules(self, params: ParamsTree, wildcards: Wildcards) -> tuple[str, ...]:
        """The code one job reruns on: the declared entry modules (`code`) and every module they import."""
        return module_closure(*_per_job(self.code)(params, wildcards))

    def why_skipped(self, params: ParamsTree, wildcards: Wildcards) -> str | None:
        """None when the job runs, else why params or the data present rule it out (`skip_reason`)."""
        return _per_job(self.skip_reason)(params, wildcards)

    def left_out(self, params: ParamsTree, wildcards: Wildcards) -> dict[str, str]:
        """{part: reason} for the parts a running job leaves out (`partial`)."""
        return dict(_per_job(self.partial or {})(params, wildcards))

    def data_files(self, params: ParamsTree, wildcards: Wildcards) -> dict[str, str]:
        """{key: path} of the local data files the job reads (`data`), as path strings."""
        return {k: str(v) for k, v in _per_job(self.data or {})(params, wildcards).items()}

    def combos(self, params: ParamsTree) -> list[dict[str, str]]:
        """The values of the wildcards other than `lang` of every job params ask for (`expand`)."""
        return self.expand(params) if self.expand else [{}]

    def candidates(self, params: ParamsTree, lang: str | None = None) -> list[tuple[dict[str, str], str | None]]:
        """Every job params ask for (of `lang` when the stage has a `lang` wildcard), each with None when
        it runs, else why params or the data present rule it out (`skip_reason`)."""
        out = []
        for combo in self.combos(params):
            wildcards = dict(combo)
            if "lang" in self.wildcards:
                if lang is None:
                    raise VocabTransferError(f"stage {self.name}: its jobs are per language; name the language")
                wildcards["lang"] = lang
            out.append((wildcards, self.why_skipped(params, wildcards)))
        return out

    def jobs(self, params: ParamsTree, lang: str | None = None) -> list[dict[str, str]]:
        """The job planner: the wildcards of every job that runs (of `lang` when the stage has a `lang`
        wildcard). Snakemake's targets, dvc.yaml, the report's plan and a job that checks it is one ask it."""
        return [wildcards for wildcards, reason in self.candidates(params, lang) if reason is None]

    def launch(self, params: ParamsTree) -> str:
        """The command the job starts with: `vocabtransfer`, or accelerate's launcher for N > 1
        data-parallel processes (`processes`)."""
        return launch_prefix(self.processes(params) if self.processes else 1)

    def one_thread(self, params: ParamsTree) -> bool:
        """Whether the job runs on one thread whatever it is given (`parallel` false, or `one_thread_if`)."""
        return not self.parallel or bool(self.one_thread_if and self.one_thread_if(params))

    def read_names(self, params: ParamsTree, wildcards: Wildcards) -> list[str]:
        """The names of the params one job reads (`reads`), its wildcards filled in."""
        return [name.format(**wildcards) for name in _per_job(self.reads)(params, wildcards)]

    def leaves(self, params: ParamsTree, wildcards: Wildcards) -> list[str]:
        """The rerun keys of one job: the leaves of the params it reads (`reads`, params_root.Params.rerun_leaves)."""
        return params.rerun_leaves(self.read_names(params, wildcards), wildcards)

    def resolve(self, templates: dict[str, str], wildcards: Wildcards) -> dict[str, Path]:
        return {k: Path(paths.fill(v, **wildcards)) for k, v in templates.items()}


def contract_fault(stage: Any) -> str | None:
    """Why `stage` breaks the stage contract (None: it keeps it): a `Stage` whose `run` names a function
    (`"package.module:function"`, of a module that exists: found, not imported; tests/project/test_registries.py imports
    each and checks that it takes the job's Context alone),
    whose constant inputs and outputs use only its wildcards, whose output directories are outputs, whose
    constant code modules exist, and whose per-job properties are constants or functions of (params, wildcards).
    The registry of stages (vocabtransfer.plan.stages.STAGES) checks every declaration with it."""
    if not isinstance(stage, Stage):
        return "a stage is a vocabtransfer.pipeline.stage_spec.Stage"
    why = reference_fault(stage.run)
    if why:
        return f"its run {stage.run!r}: {why}"
    templates = {**stage.outputs, **(stage.inputs if isinstance(stage.inputs, dict) else {})}
    for key, template in templates.items():
        used = {name for _, name, _, _ in string.Formatter().parse(template) if name}
        if used - set(stage.wildcards):
            return f"{key} ({template}) uses {', '.join(sorted(used - set(stage.wildcards)))}, not a wildcard of it"
    if not stage.directories <= set(stage.outputs):
        return f"directories {', '.join(sorted(stage.directories - set(stage.outputs)))} are no outputs of it"
    for module in stage.code if isinstance(stage.code, tuple) else ():
        if not (PACKAGE / module).is_file():
            return f"its code module {module} does not exist under {PACKAGE}"
    for hook in ("inputs", "code", "skip_reason", "partial", "data", "reads"):
        value = getattr(stage, hook)
        if callable(value) and len(inspect.signature(value).parameters) != 2:
            return f"its {hook} must be a constant or a function of (params, wildcards)"
    return None


REFERENCE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")


def reference_fault(reference: Any) -> str | None:
    """Why `reference` is no lazy reference to a function (None: it is one): a `"package.module:function"` string
    whose module exists, found without importing it: a vocabtransfer module by its file (`module_file`, so that
    not even a phase's package is imported), any other by importlib (which imports its parent packages)."""
    if not isinstance(reference, str) or not REFERENCE.fullmatch(reference):
        return "a stage's run is a 'package.module:function' reference"
    module = reference.partition(":")[0]
    if module.split(".")[0] == "vocabtransfer":
        found = module_file(module) is not None
    else:
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
    return None if found else f"no module {module}"


PACKAGE = Path(__file__).resolve().parents[1]  # src/vocabtransfer


def module_file(dotted: str) -> Path | None:
    """src/vocabtransfer/<…>.py (or <…>/__init__.py) of a `vocabtransfer.…` module name, if it exists."""
    parts = dotted.split(".")
    if parts[0] != "vocabtransfer":
        return None
    base = PACKAGE.joinpath(*parts[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


# the stage declarations and the command line (what they change reaches DVC as params, paths and data
# files, not as code), and the package's lazy exports
NOT_FOLLOWED = ("plan/stages.py", "app/cli.py", "app/dvcgen.py", "__init__.py")


@lru_cache(maxsize=None)
def module_closure(*files: str) -> tuple[str, ...]:
    """These modules (paths relative to src/vocabtransfer) and every vocabtransfer module they import,
    at any depth and inside functions too (read from the source, nothing is imported), sorted.
    Imports of NOT_FOLLOWED modules are not followed."""
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
                found = module_file(name)
                if found is not None and found not in seen and found not in boundary:
                    todo.append(found)
    return tuple(sorted(str(p.relative_to(PACKAGE)) for p in seen))


@dataclass
class Context(Generic[P]):
    """What a stage function gets: the validated params (the typed root: `ctx.params.pretrain.precision`), its
    wildcards and resolved paths. The runner gives every job a `Context[vocabtransfer.plan.params_root.Params]`."""

    stage: Stage
    params: P
    wildcards: Wildcards
    input: dict[str, Path]
    output: dict[str, Path]
    threads: int = 1
    device: str = "cpu"
    # the stage table (vocabtransfer.plan.stages.STAGES, set by the runner), for a stage that reads what
    # other stages' jobs wrote: the report asks their job planners
    stages: Mapping[str, Stage] = field(default_factory=dict)

    @property
    def lang(self) -> str:
        return self.wildcards["lang"]

    @property
    def method(self) -> str:
        return self.wildcards["method"]

    @property
    def seed(self) -> int:
        return self.params.seed

    def torch_threads(self) -> contextlib.AbstractContextManager[None]:
        """A context with this job's torch threads: its --threads, shared by the data-parallel processes
        on this node (LOCAL_WORLD_SIZE); a stage that does not compute with torch (`gpu` false) is left as is."""
        if not self.stage.gpu:
            return contextlib.nullcontext()
        return torch_threads(max(1, self.threads // int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))

    def leaf_values(self) -> dict[str, Any]:
        """The rerun keys of this job and their values (walked by name: `Stage.leaves`)."""
        return {leaf: self.params.leaf(leaf) for leaf in self.stage.leaves(self.params, dict(self.wildcards))}
