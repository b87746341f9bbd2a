"""Every job of the shipped configs, as its process would start, without running it: its Context built from the
validated params (`runner.make_context`), every path resolved, its function importable, its rerun keys readable,
and every input either another job's output or a file of the data folder. A wiring error (an input no stage
writes, a template with a wildcard the job does not have, a run reference to nothing) fails here in seconds rather
than in the shared workflow run."""

from __future__ import annotations

from pathlib import Path

import pytest

from vocabtransfer.app.dag import shipped_params
from vocabtransfer.app.runner import make_context
from vocabtransfer.pipeline import paths
from vocabtransfer.plan.params_root import Params
from vocabtransfer.plan.stages import STAGES

ROOT = Path(__file__).resolve().parents[2]


def every_job(params: Params):
    """(stage name, wildcards) of every job params plan."""
    for stage in STAGES.values():
        for lang in params.languages if "lang" in stage.wildcards else (None,):
            for wildcards in stage.jobs(params, lang):
                yield stage.name, wildcards


@pytest.fixture(scope="module")
def configs(shared_data) -> list[Params]:
    return shipped_params(ROOT)


def wiring_faults(params: Params) -> tuple[int, list[str]]:
    """(the jobs, what is wrong with them): each job's Context built as its process builds it, its paths, function
    and rerun keys, and each input another job's output or a data file."""
    data = paths.data_path(".").resolve()
    contexts = [make_context(name, params, wildcards, threads=1) for name, wildcards in every_job(params)]
    written = {str(path) for ctx in contexts for path in ctx.output.values()}
    faults = []
    for ctx in contexts:
        job = f"{ctx.stage.name} {ctx.wildcards}"
        if set(ctx.output) != set(ctx.stage.outputs):
            faults.append(f"{job}: outputs {sorted(ctx.output)}")
        for key, path in {**ctx.input, **ctx.output}.items():
            if "{" in str(path):
                faults.append(f"{job}: {key} = {path} has a wildcard the job does not fill")
        for key, path in ctx.input.items():
            if str(path) not in written and not Path(path).resolve().is_relative_to(data):
                faults.append(f"{job}: input {key} = {path} is no job's output and no data file")
        if not callable(ctx.stage.function()):
            faults.append(f"{job}: {ctx.stage.run} is not a function")
        ctx.leaf_values()  # the rerun keys, every one read from the params (an unknown one raises)
    return len(contexts), faults


def test_every_job_of_the_shipped_configs_builds_its_context_and_reads_only_what_jobs_write(
    configs, shared_data, monkeypatch
):
    monkeypatch.setenv("VOCABTRANSFER_DATA", str(shared_data))  # the data present decide which jobs run
    counts = [wiring_faults(params) for params in configs]
    assert sum(n for n, _ in counts) > 1000 and [f for _, faults in counts for f in faults] == []


def test_an_input_no_job_writes_is_found(configs, shared_data, monkeypatch):
    """A stage reading an artefact no stage writes (a typo in a path template) is a fault, one per job."""
    import dataclasses

    monkeypatch.setenv("VOCABTRANSFER_DATA", str(shared_data))
    broken = dataclasses.replace(
        STAGES["overlap"], inputs={**STAGES["overlap"].inputs, "tokenizer": "results/{lang}/tokenizr"}
    )
    monkeypatch.setitem(STAGES, "overlap", broken)
    _, faults = wiring_faults(configs[0])
    assert faults == [
        f"overlap {{'lang': '{lang}'}}: input tokenizer = results/{lang}/tokenizr is no job's output and no data file"
        for lang in ("sw", "de")
    ]
