"""The params sections of the report phase, read from the typed root: `report` (ReportParams) and `export`
(ExportParams). Their planners are report_plans' and export_plans'."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from vocabtransfer.pipeline.typed import option


GGUF_BY_NAME = ("source", "f32", "f16", "bf16")
MODEL_NAME = r"^.+-[a-z]+-pseed[1-9][0-9]*$"


@dataclass(frozen=True)
class ReportParams:
    """the study's report (results/report.md)"""

    bootstrap_resamples: int = option(
        10000,
        "resamples of the cluster bootstrap that estimates each difference's test-set variance "
        "(docs/evaluation.md); a few thousand make its Monte-Carlo error negligible",
        minimum=2,
    )
    confidence: float = option(0.95, "coverage of each difference's interval", exclusiveMinimum=0, exclusiveMaximum=1)
    min_clusters: int = option(
        30,
        "the fewest test clusters (XNLI premises, QA articles or contexts, NER sentences, held-out blocks) a "
        "difference may rest on to be called better or worse; below it the verdict says 'N clusters: too few to "
        "tell'",
        minimum=1,
    )
    correction: Literal["holm", "bh"] = option(
        "holm",
        "multiple comparisons: holm (family-wise error, Holm's step-down) or bh (false discovery rate, "
        "Benjamini–Hochberg), over the report's headline family (every comparison the verdict states as a claim, "
        "all languages together) and apart over each exploratory table (the frequency buckets) and each task's "
        "floor check",
    )
    baseline: str | tuple[str, ...] = option(
        "random",
        "the init method whose tokens the token-equivalent counts: the tokens it needs to reach each other method's "
        "valid loss at each budget (pretrained with the same objective, else with standard); where two methods or "
        "more are pretrained, each baseline must be one of them (else refused before any job). A list ([random, "
        "mean]): in each language "
        "the stronger of them, the one with the lower final valid loss with the standard objective "
        "(report/baseline_choice.py, a conservative choice the report states); every method − baseline comparison "
        "subtracts the same one, the weaker listed baseline being one of its rows",
        type=["string", "array"],
        items={"type": "string", "minLength": 1},
        minItems=1,
        uniqueItems=True,
        minLength=1,
    )

    def __post_init__(self) -> None:
        if isinstance(self.baseline, list):  # a list read from params: a tuple, as other array fields
            object.__setattr__(self, "baseline", tuple(self.baseline))


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
