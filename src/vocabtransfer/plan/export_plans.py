"""Stage `export`'s planning: its params (`ExportParams`), which runs a language can export (`candidates`), the
refusals before any job (`check`) and its inputs (the report's inputs of the language that the export reads, the
source's stats and the valid split). The stage's code is vocabtransfer.report.export."""

from __future__ import annotations

from typing import Mapping

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.pipeline import names, paths
from vocabtransfer.pipeline.stage_spec import Stage
from vocabtransfer.plan.params_root import Params
from vocabtransfer.plan import availability, report_plans
from vocabtransfer.plan.report_params import GGUF_BY_NAME
from vocabtransfer.plan.source_kind import kind


def candidates(params: Params, lang: str) -> list[str]:
    """The model names of `lang`'s pretraining runs."""
    return [
        names.model_name(m, o, s)
        for m, o, s in availability.pretrain_runs(params, lang)
        if availability.method_reason(params, lang, m) is None
    ]


def check(params: Params, wc: dict) -> str | None:
    """The job planner's word on one export job: None when it runs, why not when the language has no pretraining
    run; one line refusing an `export.model` that is no run of the language, or GGUF asked for an encoder."""
    opts = params.export
    runs = candidates(params, wc["lang"])
    if not runs:
        return "no pretraining run to export (pretrain.methods or pretrain.pairs name none for this language)"
    if opts.model is not None and opts.model not in runs:
        raise VocabTransferError(
            f"export.model: {opts.model!r} is no pretraining run of {wc['lang']} (its runs: {', '.join(runs)}); "
            "name one of them, or null for the recommended run"
        )
    if opts.gguf in GGUF_BY_NAME and kind(params.source_model) == "masked":
        raise VocabTransferError(
            f"export.gguf: {opts.gguf} asks for a GGUF file, but the source {params.source_model} is an encoder "
            "(a masked LM) and GGUF holds decoders for llama.cpp; set export.gguf: none (or auto)"
        )
    return None


READS = ("pretrain_", "eval_", "floor_", "bits_per_byte_")  # the report inputs an export reads


def inputs(params: Params, wc: dict[str, str], stages: Mapping[str, Stage]) -> dict[str, str]:
    """The language's pretraining runs (the recommendation reads them all), its downstream results and bits per
    byte (the card), its valid split (the GGUF check) and the source's stats (its licence)."""
    plan = report_plans.plan(params, stages)
    plan.languages = [wc["lang"]]
    out = {k: v for k, v in report_plans.inputs(plan).items() if k.startswith(READS)}
    return {
        **out,
        "base_stats": paths.SOURCE_BASE_STATS,
        "valid": paths.fill(paths.CORPUS_VALID, lang=wc["lang"]),
    }
