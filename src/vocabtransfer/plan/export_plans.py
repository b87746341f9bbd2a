"""Stage `export`'s planning: its params (`ExportParams`), which runs a language can export (`candidates`), the
refusals before any job (`check`) and its inputs (the report's inputs of the language that the export reads, the
source's stats and the valid split). The stage's code is vocabtransfer.report.export."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Mapping

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.pipeline import names, paths
from vocabtransfer.pipeline.stage_spec import Stage
from vocabtransfer.pipeline.typed import Params, option
from vocabtransfer.plan import availability, report_plans
from vocabtransfer.plan.source_kind import kind

GGUF_BY_NAME = ("source", "f32", "f16", "bf16")
MODEL_NAME = r"^.+-[a-z]+-pseed[1-9][0-9]*$"


@dataclass(frozen=True)
class ExportParams:
    """the exported model of each language (results/<lang>/export): a Hugging Face folder with its model card, and
    a GGUF file for a decoder source"""

    model: str | None = option(
        None,
        "the run to export, <method>-<objective>-pseed<k> (e.g. focus-standard-pseed1), a pretraining run of each "
        "language; null: the recommended run (the method the report's In brief picks, report/recommend.py, with the "
        "standard objective, and its pretraining seed with the median final valid loss)",
        pattern=MODEL_NAME,
    )
    gguf: Literal["auto", "none", "source", "f32", "f16", "bf16"] = option(
        "auto",
        "a GGUF file of the model and its tokenizer beside the folder: auto (for a decoder source GGUF export covers: "
        "llama, gemma3, gpt2; in the source weights' dtype), none, or asked for: source (its dtype), f32, f16, bf16 "
        "(refused for an encoder source)",
    )
    base_model: str | None = option(
        None,
        "the Hub id of the source for the model card's base_model (e.g. google/gemma-3-270m); null: source_model where "
        "it is a Hub id (or hf://owner/name/file.gguf), else the source's own card's",
        pattern=r"^[A-Za-z0-9][\w.-]*/[\w.-]+$",
    )
    check_lines: int = option(
        200,
        "valid lines the GGUF file is read back on by transformers (identical token ids, log-likelihoods)",
        minimum=0,
    )


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
    opts = params.section("export", ExportParams)
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
