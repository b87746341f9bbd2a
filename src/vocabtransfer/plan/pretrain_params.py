"""The pretrain stage's params, typed: `PretrainParams` (with `SelfishOptions`, `DistillOptions`), params
`pretrain` as the stage reads them once at its entry (fields and types as in the schema, which holds the
defaults), and the distill objective's metrics columns. Its checkpoints are `train.checkpoints`; its
transformers `Trainer` and callback are `train.objective_trainer`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from vocabtransfer.pipeline.typed import option, subsection
from vocabtransfer.plan.objectives import MARGIN_OBJECTIVES, OBJECTIVE_NAMES, TEACHER_OBJECTIVES


@dataclass(frozen=True)
class SelfishOptions:
    margin: float = option(2.0, "logits below logit[target] − margin leave the softmax", exclusiveMinimum=0)


@dataclass(frozen=True)
class DistillOptions:
    """the distill objective (causal sources): the frozen source model with its own tokenizer is the teacher; both
    tokenizations of each text are cut into the shortest byte spans where both have a token boundary (chunks), and
    the student's chunk probabilities are matched to the teacher's"""

    temperature: float = option(
        100.0,
        "τ: a chunk's probability is exp(log p_chunk / τ) on both sides (τ > 1 flattens the long chunks' tiny "
        "probabilities; 100 is tokenkit's binarization_temp, under which the chunk term's gradient is no longer "
        "bounded by the teacher's tiny chunk probability)",
        exclusiveMinimum=0,
    )
    alpha: float = option(
        0.5,
        "the loss is alpha × the chunk distillation loss + (1 − alpha) × the standard cross-entropy of the target "
        "tokens",
        minimum=0,
        maximum=1,
    )
    teacher: Literal["cached", "on_the_fly"] = option(
        "cached",
        "cached: the teacher's chunk log-likelihoods of every training block the run visits are computed once, at "
        "the job's start (then the teacher leaves memory and a step costs about what a standard one does); "
        "on_the_fly: the teacher runs beside the student at every step",
    )
    chunks: Literal["exact", "unbiased"] = option(
        "unbiased",
        "exact: every byte offset where both tokenizations have a token end closes a chunk; unbiased: only those "
        "where the pair of tokens ending there is unbiased (tokenkit's get_unbiased_alignments: neither tokenizer "
        "can put a token across that end with more than bias_threshold unigram probability where the other cannot; "
        "docs/objectives.md), else the chunk runs on to the next such end",
    )
    bias_threshold: float = option(
        0.0001,
        "unbiased chunks: the largest bias (the unigram probability of the continuations only one tokenizer can "
        "put across a chunk end) a kept chunk end may have; tokenkit's tokenizer_pair_bias_threshold "
        "(configs/cross_tokenizer_distill.yaml)",
        minimum=0,
    )


@dataclass(frozen=True)
class CooldownOptions:
    """the warm-up–stable–decay schedule (`pretrain.schedule: wsd`) and its cool-down branches: the learning rate
    rises over warmup_steps, stays at its peak, and decays to 0 over the last `fraction` of the run; at each
    log-spaced token budget b below the run's length, a branch forks from the stable run at (1 − fraction) b and
    decays over the rest, so its end is what a run of about b tokens reaches (Hägele et al. 2024, "Scaling laws and
    compute-optimal training beyond fixed training durations"; MiniCPM's WSD). Read only with schedule wsd"""

    fraction: float = option(
        0.2,
        "the share of a run (and of each branch's budget) spent decaying the learning rate to 0 (Hägele et al. "
        "2024: 20 % of a run's steps matches a cosine schedule tuned to that length)",
        exclusiveMinimum=0,
        maximum=0.5,
    )
    shape: Literal["linear", "1-sqrt", "cosine"] = option(
        "1-sqrt",
        "the decay's shape from the peak to 0: 1-sqrt (lr × (1 − sqrt(progress)), the best of Hägele et al.'s "
        "cool-downs), linear or cosine (transformers' warmup_stable_decay schedule)",
    )
    per_decade: int = option(
        2,
        "budgets a decade of target tokens for the branches: 2 gives 1 and 3 × 10^k (the log_tokens grid), n "
        "gives 10^(j / n) rounded to two significant digits; only budgets whose fork comes after the warm-up and "
        "before the run's own decay get a branch; 0: no branches, the run's own end only",
        minimum=0,
        maximum=10,
    )


@dataclass(frozen=True)
class TuneOptions:
    """each method × objective at its own peak learning rate: a `pretrain_tune` job per language, method and
    objective trains pretraining seed 1 for `steps` optimiser steps (a wsd run of that length, decayed at its end,
    no branches) at each of `learning_rates` and scores the DEV split (corpus.dev_fraction > 0: lines never
    trained on and never scored by the report); every pretraining seed of that method × objective then trains at
    the learning rate with the lowest dev loss (ties: the smaller rate); a pick at the grid's edge extends the grid
    beyond it (`extend`)"""

    learning_rates: tuple[float, ...] = option(
        [],
        "peak learning rates tried per method × objective; empty: every run trains at pretrain.learning_rate",
        items={"type": "number", "exclusiveMinimum": 0},
        uniqueItems=True,
    )
    steps: int = option(
        40,
        "optimiser steps of each tuning run (the short budget; it must hold the warm-up and the decay)",
        minimum=1,
    )
    dev_lines: int = option(
        300, "dev-split lines scored (the dev loss: blocks of seq_len ids, as the valid loss)", minimum=1
    )
    extend: int = option(
        2,
        "when the pick is the smallest or largest rate tried, one more rate beyond it (at the ratio of the two "
        "rates nearest that edge) is tried, up to this many times; a pick still at an edge is marked in "
        "tuning.json and the report (0: the grid as written)",
        minimum=0,
    )


@dataclass(frozen=True)
class PretrainParams:
    """continued pretraining of initialised models (transformers Trainer, AdamW); one job per language × method ×
    objective × pretraining seed"""

    methods: tuple[str, ...] = option(
        ["random", "fvt", "focus"],
        "init methods whose models are pretrained (each must be in init.methods); when the key is not set, the "
        "default's methods that init.methods lists",
        uniqueItems=True,
        items={"type": "string", "pattern": "^(<methods>)(\\+(<factorizations>))?$"},
        rerun=False,
    )
    objectives: tuple[str, ...] = option(
        ["standard", "selfish"],
        "standard: cross-entropy; selfish: cross-entropy without the logits more than selfish.margin below the "
        "target's; distill: the source model, reading the same text through its own tokenizer, teaches by matching "
        "chunk likelihoods, alpha × that + (1 − alpha) × cross-entropy (causal sources only; see "
        "pretrain.distill); alm: distill's chunk term alone (alpha = 1, whatever pretrain.distill.alpha says)",
        uniqueItems=True,
        choices=OBJECTIVE_NAMES,
        rerun=False,
    )
    pairs: tuple[str, ...] | None = option(
        None,
        "the runs as `<method>-<objective>` pairs (each method in pretrain.methods, each objective in "
        "pretrain.objectives), when not every method needs every objective, e.g. [random-standard, focus-standard, "
        "focus-selfish]; null: every pretrain.methods × pretrain.objectives pair",
        uniqueItems=True,
        items={"type": "string", "pattern": f"^(<methods>)(\\+(<factorizations>))?-({'|'.join(OBJECTIVE_NAMES)})$"},
        rerun=False,
    )
    seeds: int = option(
        1,
        "pretraining seeds per method × objective (1..n): seed k changes the order of the training blocks and the "
        "random rows of the initialisation (seed + 1000 (k - 1); k = 1 is `seed`); the report's intervals resample "
        "them",
        minimum=1,
        rerun=False,
    )
    steps: int = option(200, "optimiser steps (unless pretrain.passes is set)", minimum=1)
    passes: float | None = option(
        None,
        "passes over the training split's blocks instead of a number of steps: the run takes ceil(passes × train "
        "blocks / (processes × batch_size × gradient_accumulation_steps)) optimiser steps, so that 1 is one full "
        "pass whatever the language's corpus size; null: pretrain.steps",
        exclusiveMinimum=0,
    )
    language_passes: dict[str, float] = option(
        {},
        "passes over the named languages' training blocks instead of pretrain.passes (e.g. {de: 1} where the "
        "second language of a study runs shorter than the first); languages not named take pretrain.passes",
        additionalProperties={"type": "number", "exclusiveMinimum": 0},
    )
    batch_size: int = option(8, "blocks per device and micro-batch", minimum=1)
    gradient_accumulation_steps: int = option(1, "micro-batches per optimiser step", minimum=1)
    processes: int = option(
        1,
        "data-parallel processes (DDP) of a pretrain job: the Snakemake rule launches it with `accelerate launch "
        "--num_processes N` and the SLURM profile asks for N GPUs; the batch per step is processes × batch_size × "
        "gradient_accumulation_steps; at most the GPUs present (CPU cores without CUDA)",
        minimum=1,
    )
    seq_len: int = option(64, "tokens per packed block", minimum=8)
    learning_rate: float = option(
        0.0001, "AdamW peak learning rate (unless pretrain.tune.learning_rates picks one per run)", exclusiveMinimum=0
    )
    schedule: Literal["linear", "constant_with_warmup", "wsd"] = option(
        "linear",
        "learning-rate schedule after the warm-up: linear (decay to 0 at the run's end), constant_with_warmup, or "
        "wsd (warm-up, stable, then a decay over the last pretrain.cooldown.fraction of the run, with cool-down "
        "branches at log-spaced token budgets: curves whose every point is what a run of that length reaches)",
    )
    warmup_steps: int = option(20, "linear learning-rate warm-up steps", minimum=0)
    weight_decay: float = option(0.01, "AdamW weight decay", minimum=0)
    max_grad_norm: float = option(1.0, "gradient clipping (0 = off)", minimum=0)
    precision: Literal["auto", "fp32", "bf16"] = option(
        "auto",
        "auto: bf16 mixed precision (fp32 master weights) on a GPU that supports it and on a CPU with "
        "native bf16 products (amx_bf16 or avx512_bf16), else fp32; fp32: the numbers of fp32 runs, bit for bit",
    )
    eval_every: int = option(50, "valid loss every N steps (and at the end), with eval_schedule: steps", minimum=1)
    eval_schedule: Literal["steps", "log_tokens"] = option(
        "steps",
        "when the valid loss is computed: steps: every eval_every steps; log_tokens: at the first step whose target "
        "tokens seen reach each of 1 000, 3 000, 10 000, 30 000, … past the warm-up's positions (two budgets a "
        "decade: curves on a log axis of tokens, none inside the warm-up); both at step 0 and at the end",
    )
    eval_lines: int = option(500, "valid-split lines scored", minimum=1)
    bits_per_byte: bool = option(
        True,
        "causal models: at every evaluation also bits per UTF-8 byte of the first eval_lines valid lines, each line "
        "scored alone in windows of seq_len (as token_frequency_loss scores its lines): metrics column "
        "valid_bits_per_byte, comparable across tokenizers",
    )
    eval_batch_size: int = option(32, "blocks per batch of the valid loss", minimum=1)
    log_every: int = option(10, "train loss, learning rate and tokens/s every N steps", minimum=1)
    save_every: int = option(
        50, "resumable checkpoint every N steps (a multiple of log_every keeps resumed metrics identical)", minimum=1
    )
    keep_checkpoints: bool = option(False, "keep checkpoints/ after a successful run", rerun=False)
    cooldown: CooldownOptions = subsection(CooldownOptions, schedule="wsd")
    tune: TuneOptions = subsection(TuneOptions)
    # read by the objectives that use the margin (selfish), and by every teacher objective (distill, alm)
    selfish: SelfishOptions = subsection(SelfishOptions, objective=MARGIN_OBJECTIVES)
    distill: DistillOptions = subsection(DistillOptions, objective=TEACHER_OBJECTIVES)
    factorized: bool = option(
        False, "train <m>+svd / <m>+snmf / ofa / snmf models in low-rank form (coordinates @ primitives)"
    )
    train_primitives: bool = option(True, "with factorized, train the shared primitives too (else frozen)")
    embeddings_only_steps: int = option(
        0,
        "the first N optimiser steps train only the input embeddings and the LM head (its output embeddings and "
        "bias), the body frozen and bitwise unchanged; then the whole model trains (the embeddings-first warm-up "
        "of language adaptation)",
        minimum=0,
    )
    gradient_checkpointing: bool = option(
        False,
        "activation checkpointing through the model's own gradient_checkpointing_enable (non-reentrant): each "
        "layer's activations are recomputed in the backward pass instead of stored; the same losses, less memory, "
        "about a third more compute",
        rerun=False,
    )
    sharding: Literal["none", "fsdp"] = option(
        "none",
        "none: each process holds a full replica (DDP when processes > 1); fsdp: torch FSDP2 (fully_shard) over "
        "the processes, each decoder/encoder layer a unit and the embeddings and head in the root unit, bf16 mixed "
        "precision on a GPU, checkpoints saved sharded with torch distributed checkpoint (docs/scale.md)",
    )


# distill's metrics columns (pretrain_outputs.DISTILL_METRICS_SCHEMA): each term's gradient norm and the whole step's
DISTILL_COLUMNS = ("grad_norm_distill", "grad_norm_lm", "grad_norm_total")
