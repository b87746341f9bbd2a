"""The params sections of the analyses, each a frozen dataclass read from the typed root (`params.init_eval`, …):
`init_eval` (InitEvalParams), `token_frequency_loss` (TokenFrequencyLossParams), `gradient_scenarios`
(GradientScenariosParams) and `lm_eval` (LmEvalParams). Their planners are eval_plans' and harness_plans'."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from vocabtransfer.pipeline.typed import option


@dataclass(frozen=True)
class InitEvalParams:
    """evaluation right after initialisation, no training"""

    max_lines: int = option(500, "held-out target lines scored", minimum=1)
    seq_len: int = option(128, "tokens per packed block", minimum=8)
    batch_size: int = option(16, "blocks per batch", minimum=1)
    retrieval_sentences: int = option(500, "XNLI premises for parallel-sentence retrieval (0 = skip)", minimum=0)
    xnli: str = option("xnli/dev-{lang}.tsv", "XNLI dev file per language, {lang} filled in")
    source_lang: str = option("en", "language of the source model's text")
    bits_per_byte: bool = option(
        True,
        "bits per UTF-8 byte of the valid lines for every causal model and for the source model with its own "
        "tokenizer, with the bytes per token of both tokenizers and the share of the source's advantage over "
        "random a method keeps (docs/evaluation.md#bits-per-byte); masked LMs keep their per-token loss; a causal "
        "source without its LM head is refused while this is true",
    )


@dataclass(frozen=True)
class TokenFrequencyLossParams:
    """held-out loss per train-frequency bucket, and bits per byte, of every pretrained and init-only model"""

    buckets: int = option(10, "buckets of the token types seen in train (types never seen get one more)", minimum=1)
    scheme: Literal["equal_types", "log"] = option(
        "equal_types", "equal_types: equal type count per bucket; log: log-spaced rank edges", type="string"
    )
    max_lines: int = option(2000, "valid lines scored", minimum=1)
    seq_len: int = option(128, "tokens per packed held-out block", minimum=8)
    batch_size: int = option(16, "blocks per batch", minimum=1)
    bits_per_byte: bool = option(
        True,
        "bits per UTF-8 byte of the same max_lines valid lines, per line, for every pretrained causal model, the "
        "initialisation it started from, the initialised model (pseed 1) of every other init method, and the "
        "source model with its own tokenizer (results/L/bits_per_byte.parquet, what the report's bits-per-byte "
        "table resamples); lines longer than seq_len are scored in windows; a causal source without its LM head is "
        "refused while this is true",
    )


@dataclass(frozen=True)
class GradientScenariosParams:
    """gradient reaching each token's embedding (input / output target / output non-target)"""

    batches: int = option(16, "seeded sample of training batches", minimum=1)
    batch_size: int = option(8, "training blocks per batch", minimum=1)
    seq_len: int = option(128, "tokens per block", minimum=8)
    plot_bins: int = option(30, "log-spaced rank bins that smooth the plot", minimum=2)


@dataclass(frozen=True)
class LmEvalParams:
    """zero-shot evaluation of every causal model (the source, each initialised and each pretrained model) by
    EleutherAI's lm-evaluation-harness (lm_eval stage, docs/evaluation.md); no job while tasks is empty"""

    tasks: tuple[str, ...] = option(
        [],
        "harness tasks: a task name, in which `{lang}` becomes each language (the offline tasks shipped with "
        "vocabtransfer: local_xnli_{lang} for sw and de, local_tydiqa_sw, local_xquad_de), or `<lang>:<task>` for "
        "one language only (`sw:belebele_swh_Latn`; a catalogue task needs its dataset from the hub); a name the "
        "harness does not know is refused before any job (validate, snakemake -n) with the closest names it knows",
        items={"type": "string", "pattern": "^([a-z]{2,3}:)?[^:]+$"},
    )
    num_fewshot: int = option(
        0,
        "examples shown before each item (0: zero-shot), drawn from the task's few-shot split with the params seed",
        minimum=0,
    )
    limit: int | None = option(
        None, "the first N items of each task (null: every item); a small limit keeps a CPU run short", minimum=1
    )
    batch_size: int = option(8, "requests per forward pass of the harness's HF model class", minimum=1)
    precision: Literal["fp32", "bf16"] = option(
        "fp32",
        "the precision each model is scored in: fp32, or bf16 (the harness's forward passes under torch.autocast, "
        "the weights fp32, the log-softmax fp32; about twice as fast where the hardware multiplies bf16 natively; "
        "benchmarks/README.md#bf16-scoring measured what it changes); every model of a study is scored alike",
    )
    include_path: str | None = option(
        None,
        "a folder of your own harness task YAMLs (the harness's include_path; relative to the working directory, "
        "the repository root), whose tasks lm_eval.tasks then names like the shipped ones; every file in it is a "
        "dependency of the lm_eval jobs (docs/evaluation.md#adding-a-zero-shot-task); null: the shipped tasks and "
        "the harness's catalogue only",
    )
    models: tuple[str, ...] | None = option(
        None,
        "the models judged, in eval.models' grammar (`source`, `init`, `pretrained`, `<method>-<objective>` for "
        "every pretraining seed of it, a full model name), e.g. [source, pretrained] for the final models only; "
        "null: every model (the source, each initialised and each pretrained one)",
        items={"type": "string"},
        rerun=False,
    )
