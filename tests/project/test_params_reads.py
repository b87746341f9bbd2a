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
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.plan.params_root import Params, node_class
from vocabtransfer.plan.stages import STAGES

from params_reads import Recording, undeclared

ROOT = Path(__file__).resolve().parents[2]


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
