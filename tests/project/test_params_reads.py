"""A stage's jobs read only the params it declares: every stage's planning (inputs, data files, reason to skip,
parts left out, code, launcher, threads) runs, for every job of the shipped configs, on a recording params root,
and each section or leaf it reads must lie within what the stage declares: `Stage.reads` (its rerun keys) or
`Stage.plans_with` (what decides which jobs run and what they read)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from vocabtransfer.app.dag import shipped_params
from vocabtransfer.pipeline.stage_spec import Stage
from vocabtransfer.pipeline.typed import key_of
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.plan.params_root import InitParams, Params, node_class
from vocabtransfer.plan.stages import STAGES

ROOT = Path(__file__).resolve().parents[2]


class Recording:
    """A view of a typed params root (or of one of its sections, at `path`) that adds to `log` the dotted name of
    every leaf read through it; a section's method reads the whole section, one marked `named_child` (a task's or a
    method's options by name) the subsection it returns."""

    def __init__(self, target: Any, path: str, log: set[str]):
        self._target, self._path, self._log = target, path, log

    def _name(self, attr: str) -> str:
        """The params key of attribute `attr` (a field's `key`, e.g. `from` for `from_`)."""
        if dataclasses.is_dataclass(self._target):
            attr = next((key_of(f) for f in dataclasses.fields(self._target) if f.name == attr), attr)
        return f"{self._path}.{attr}" if self._path else attr

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._target, attr)
        if callable(value) and not isinstance(value, type):
            under = getattr(value, "named_child", None)
            if under is not None:
                prefix = self._name(under) if under else self._path
                return lambda name: self._wrap(value(name), f"{prefix}.{name}")
            self._log.add(self._path or attr)  # a method of the section (of the root: by its name) reads it whole
            return value
        return self._wrap(value, self._name(attr))

    def _wrap(self, value: Any, name: str) -> Any:
        if dataclasses.is_dataclass(value) or isinstance(value, InitParams):
            return Recording(value, name, self._log)
        self._log.add(name)
        return value


def planning_reads(stage: Stage, params: Params, wildcards: dict) -> set[str]:
    """The params one job's planning reads: every per-job property of the stage, on a recording root."""
    log: set[str] = set()
    rec: Any = Recording(params, "", log)
    stage.input_templates(rec, wildcards)
    stage.why_skipped(rec, wildcards)
    stage.left_out(rec, wildcards)
    stage.data_files(rec, wildcards)
    stage.code_modules(rec, wildcards)
    stage.launch(rec)
    stage.one_thread(rec)
    stage.read_names(rec, wildcards)
    return log


def undeclared(stage: Stage, params: Params, wildcards: dict) -> list[str]:
    """The reads of one job's planning that lie within no section or leaf the stage declares."""
    declared = stage.read_names(params, wildcards) + [n.format(**wildcards) for n in stage.plans_with]
    return sorted(
        read
        for read in planning_reads(stage, params, wildcards)
        if not any(read == d or read.startswith(f"{d}.") for d in declared)
    )


@pytest.fixture(scope="module")
def configs() -> list[Params]:
    return shipped_params(ROOT)


def test_every_job_reads_only_what_its_stage_declares(configs, shared_data, monkeypatch):
    monkeypatch.setenv("VOCABTRANSFER_DATA", str(shared_data))  # the data present decide which jobs run
    faults, jobs = {}, 0
    for params in configs:
        for stage in STAGES.values():
            for lang in params.languages if "lang" in stage.wildcards else (None,):
                for wildcards in stage.jobs(params, lang):
                    jobs += 1
                    if missing := undeclared(stage, params, wildcards):
                        faults.setdefault(stage.name, set()).update(missing)
    assert jobs > 1000 and {name: sorted(reads) for name, reads in faults.items()} == {}


def test_a_read_left_undeclared_is_found(configs, shared_data, monkeypatch):
    """Without `source_head` in its reads, the source_head job's data file (source_head.text) is an undeclared read."""
    monkeypatch.setenv("VOCABTRANSFER_DATA", str(shared_data))
    stage = dataclasses.replace(STAGES["source_head"], reads=("seed", "source_model"))
    assert undeclared(stage, configs[0], {}) == ["source_head.text"]
    assert undeclared(STAGES["source_head"], configs[0], {}) == []


def test_the_recording_root_records_leaves_and_named_subsections(configs):
    log: set[str] = set()
    rec: Any = Recording(configs[0], "", log)
    assert rec.pretrain.precision == configs[0].pretrain.precision
    assert rec.init.options("omp").k == configs[0].init.omp.k
    assert rec.eval.task("qa").enabled is configs[0].eval.tasks.qa.enabled
    rec.eval.task_sections()
    assert log == {"pretrain.precision", "init.omp.k", "eval.tasks.qa.enabled", "eval"}


def test_every_declared_name_is_a_section_or_leaf_of_the_typed_root():
    example = {"lang": "sw", "task": "qa", "method": "omp", "objective": "selfish", "pseed": "1"}
    for stage in STAGES.values():
        for name in (stage.reads if isinstance(stage.reads, tuple) else ()) + stage.plans_with:
            node_class(name.format(**example))  # an error for a name the root does not have
    with pytest.raises(VocabTransferError, match="no section or leaf of the typed params root"):
        node_class("pretrain.learning_rates")
