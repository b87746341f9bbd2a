"""Run one job of a stage in-process: look the stage up in the stage table (vocabtransfer.plan.stages),
resolve its input and output paths for the wildcards into a `Context`, import the stage's function (`Stage.run`,
a lazy `"module:function"` reference) and call it with the Context (what `vocabtransfer <stage>` does). Also the
params leaves a job reads and their values (`param_values`, Snakemake's params)."""

from __future__ import annotations

import os
from typing import Any, Mapping

from vocabtransfer.pipeline.stage_spec import Context
from vocabtransfer.plan.params_root import Params
from vocabtransfer.plan.stages import STAGES


def make_context(
    name: str,
    given: Params | Mapping[str, Any],
    wildcards: dict[str, str],
    threads: int | None = None,
    device: str = "cpu",
) -> Context[Params]:
    """The job's Context: `given` is the validated params (a Params, or the tree `validate` returned)."""
    stage, params = STAGES[name], Params.of(given)
    if "lang" in wildcards:
        params.check_language(wildcards["lang"])
    return Context(
        stage=stage,
        params=params,
        wildcards=wildcards,
        input=stage.resolve(stage.input_templates(params, wildcards), wildcards),
        output=stage.resolve(stage.outputs, wildcards),
        threads=threads or os.cpu_count() or 1,
        device=device,
        stages=STAGES,
    )


def run_stage(
    name: str,
    params: Params | Mapping[str, Any],
    wildcards: dict[str, str],
    threads: int | None = None,
    device: str = "cpu",
) -> Context[Params]:
    """Run one stage in-process (what `vocabtransfer <stage>` does)."""
    ctx = make_context(name, params, wildcards, threads=threads, device=device)
    with ctx.torch_threads():
        ctx.stage.function()(ctx)
    return ctx


def param_values(given: Params | Mapping[str, Any], name: str, wildcards: dict) -> dict[str, Any]:
    """The params leaves a stage reads and their values (Snakemake's params, which rerun jobs on change)."""
    params = Params.of(given)
    stage = STAGES[name]
    return {leaf: params.leaf(leaf) for leaf in stage.leaves(params, dict(wildcards))}  # walked by name
