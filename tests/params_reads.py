"""The recording params root of tests/project/test_params_reads.py, shared with the tests of a stage whose jobs no
shipped config plans (tests/stage/test_transplant.py): `planning_reads` lists the params one job's planning reads,
`undeclared` those outside what its stage declares."""

from __future__ import annotations

import dataclasses
from typing import Any

from vocabtransfer.pipeline.stage_spec import Stage
from vocabtransfer.pipeline.typed import key_of
from vocabtransfer.plan.params_root import InitParams, Params


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
