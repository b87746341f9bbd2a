"""The set-up of one pretrain run (steps 1 to 3 of `pretrain.run`): its model, tokenizer and blocks
(`load_data`), the checkpoint it resumes from (`resume_point`), and what the Trainer gets: the factorised
embeddings, precision, the embedding warm-up's parameters, the `TrainingArguments`, sharding, the run's
samples and, for distill, the teacher's cached chunk log-likelihoods (`prepare_training`)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import TrainingArguments


from vocabtransfer import io
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.model import modeling, precision
from vocabtransfer.train import cooldown, sharding
from vocabtransfer.train.batches import StepBlocks, read_ids
from vocabtransfer.model.hub import load_tokenizer
from vocabtransfer.model.lmdata import Kind, lm_batches
from vocabtransfer.train.packing import PackedBlocks
from vocabtransfer.train.checkpoints import (
    PARAMS_FILE,
    check_checkpoint,
    check_resume_params,
    complete_checkpoints,
    model_fingerprint,
)
from vocabtransfer.plan.pretrain_params import PretrainParams
from vocabtransfer.train import distill, lowrank
from vocabtransfer.pipeline.stage_spec import Context

log = logging.getLogger("vocabtransfer.train.pretrain")  # the stage's log


@dataclass
class RunData:
    """What step 1 of `pretrain.run` loads: the model, its tokenizer and blocks; for distill the frozen teacher."""

    model: Any
    kind: Kind
    tokenizer: Any
    blocks: Any  # PackedBlocks, or distill.PairBlocks
    valid_blocks: list
    eval_batches: list
    teacher: Any = None
    teacher_tok: Any = None


def load_data(
    ctx: Context, opts: PretrainParams, model_dir: Path, teacher_dir: Path | None, valid_ids: Path | None = None
) -> RunData:
    """Step 1 of `pretrain.run`: the model and tokenizer, the training blocks (distill: beside the teacher's
    tokenization of their text) and the fixed evaluation batches of the valid split (`valid_ids`: another
    pre-tokenised split scored instead, the dev split of `pretrain_tune`)."""

    model, kind = modeling.load_source_model(model_dir, dtype=torch.float32)
    tokenizer = load_tokenizer(model_dir)
    vocab = min(len(tokenizer), model.get_input_embeddings().weight.shape[0])
    teacher = teacher_tok = None
    train = read_ids(Path(ctx.input["train"]), tokenizer, vocab)
    blocks: PackedBlocks | distill.PairBlocks
    if teacher_dir is None:
        blocks = PackedBlocks(train, tokenizer, opts.seq_len, kind=kind)
    else:  # distill: the frozen source model and its tokenization of the same blocks' text
        teacher, _ = modeling.load_source_model(teacher_dir, "causal", dtype=torch.float32)
        teacher_tok = load_tokenizer(teacher_dir)
        blocks = distill.PairBlocks(train, tokenizer, teacher_tok, opts.seq_len)
        log.info("distill: teacher %s (%s), %d training blocks", teacher_dir, type(teacher).__name__, len(blocks))
    valid = read_ids(Path(valid_ids or ctx.input["valid"]), tokenizer, vocab)
    valid_blocks = list(PackedBlocks(valid, tokenizer, opts.seq_len, kind=kind, lines=opts.eval_lines))
    if not len(blocks) or not valid_blocks:
        raise VocabTransferError(
            f"{ctx.input['train']}: no training or valid blocks ({len(blocks)} / "
            f"{len(valid_blocks)}); the corpus is empty, rerun corpus and pretokenize"
        )
    eval_batches = lm_batches(tokenizer, valid_blocks, kind, opts.eval_batch_size, ctx.seed + 1)
    return RunData(model, kind, tokenizer, blocks, valid_blocks, eval_batches, teacher, teacher_tok)


def resume_point(
    ctx: Context,
    checkpoints: Path,
    model_dir: Path,
    teacher_dir: Path | None,
    pseed: int,
    rerun_leaves: list[str],
    learning_rate: float | None = None,
):
    """Step 2 of `pretrain.run`: the last complete checkpoint, whose params (`rerun_leaves`, the pretraining seed,
    the input models, the peak `learning_rate` the run trains at) must be these (else None, the incomplete ones
    removed); the first process writes the params beside the checkpoints."""
    expected = {leaf: ctx.params.leaf(leaf) for leaf in rerun_leaves}  # walked by name: the rerun keys
    expected["pseed"] = pseed
    if learning_rate is not None:
        expected["peak_learning_rate"] = learning_rate
    expected["input:init_model_sha256"] = model_fingerprint(model_dir)
    if teacher_dir is not None:
        expected["input:source_model_sha256"] = model_fingerprint(teacher_dir)
    resume, first_process = None, int(os.environ.get("RANK", "0")) == 0
    done = complete_checkpoints(checkpoints)
    if done and (checkpoints / PARAMS_FILE).is_file():
        check_resume_params(checkpoints, expected)
        resume = done[-1]
        check_checkpoint(resume[1])
        log.info("resuming from %s (step %d)", resume[1], resume[0])
    elif checkpoints.exists() and first_process:
        shutil.rmtree(checkpoints)  # only incomplete checkpoints: start afresh
    if first_process:  # one process prepares the directory; the others meet it at the process group's start
        checkpoints.mkdir(parents=True, exist_ok=True)
        with io.atomic_output(checkpoints / PARAMS_FILE) as tmp:
            tmp.write_text(json.dumps(expected, indent=1, sort_keys=True, default=str), encoding="utf-8")
    return resume


def factorised(model, opts: PretrainParams, init_dir: Path):
    """`pretrain.factorized`: the model's embeddings in their low-rank form where the init wrote one;
    returns the original embeddings to put back after training (None when not factorised)."""

    original = None
    if opts.factorized and (init_dir / "coordinates.safetensors").is_file():
        original = lowrank.factorize_model(model, init_dir, opts.train_primitives)
        log.info(
            "training in factorised form: coordinates %s, primitives %s (%s)",
            tuple(model.get_input_embeddings().coordinates.shape),
            tuple(model.get_input_embeddings().primitives.shape),
            "trainable" if opts.train_primitives else "frozen",
        )
    elif opts.factorized:
        log.info("pretrain.factorized: %s has no coordinates/primitives; training its full embeddings", init_dir)
    return original


def embedding_params(model) -> set[int]:
    """The ids of the parameters the embedding-only warm-up trains: input and output embeddings, output bias."""
    embedding_params = {
        id(p)
        for mod in (model.get_input_embeddings(), model.get_output_embeddings())
        if mod is not None
        for p in mod.parameters()
    }
    bias = modeling.output_bias(model)
    if bias is not None:
        embedding_params.add(id(bias))
    return embedding_params


def training_arguments(
    opts: PretrainParams,
    checkpoints: Path,
    seed: int,
    *,
    bf16: bool,
    use_cpu: bool,
    fused_adamw: bool = False,
    decay: int | None = None,
    save: bool = True,
):
    # AdamW: `fused_adamw` (bf16 runs, not sharded) takes torch's fused kernel, one pass over each parameter's
    # state, several times faster on a CPU than the per-tensor loop that fp32 runs keep (their numbers unchanged)
    """The transformers `TrainingArguments` of a run (creating them starts the process group). wsd: transformers'
    warmup_stable_decay schedule decaying over the last `decay` steps (default: the run's own,
    ceil(cooldown.fraction × steps)). `save: False` (a cool-down branch) writes no checkpoint."""

    schedule: dict = {"lr_scheduler_type": opts.schedule}
    if opts.schedule == "wsd":
        steps = cooldown.decay_steps(opts.steps, opts.cooldown.fraction) if decay is None else decay
        schedule = {
            "lr_scheduler_type": "warmup_stable_decay",
            "lr_scheduler_kwargs": cooldown.scheduler_kwargs(steps, opts.cooldown.shape),
        }

    return TrainingArguments(
        output_dir=str(checkpoints),
        max_steps=opts.steps,
        per_device_train_batch_size=opts.batch_size,
        gradient_accumulation_steps=opts.gradient_accumulation_steps,
        learning_rate=opts.learning_rate,
        weight_decay=opts.weight_decay,
        **schedule,
        warmup_steps=opts.warmup_steps,
        max_grad_norm=opts.max_grad_norm,
        optim="adamw_torch_fused" if fused_adamw else "adamw_torch",
        logging_steps=opts.log_every,
        save_strategy="steps" if save else "no",
        save_steps=opts.save_every,
        save_total_limit=2,
        eval_strategy="no",
        report_to=[],
        seed=seed,
        data_seed=seed,
        bf16=bf16,
        use_cpu=use_cpu,
        remove_unused_columns=False,
        include_num_input_tokens_seen="non_padding",
        dataloader_num_workers=0,
        disable_tqdm=True,
        save_only_model=False,
        activation_checkpointing=opts.gradient_checkpointing,  # the model's own, non-reentrant
        # DDP, body frozen for the warm-up: its parameters unused (the default, but not with checkpointing)
        ddp_find_unused_parameters=True if opts.embeddings_only_steps else None,
    )


@dataclass
class Training:
    """What step 3 of `pretrain.run` sets up: the Trainer's arguments, precision, the run's samples, the warm-up's
    parameters; for distill with a cached teacher, the seconds the cache took."""

    args: Any
    bf16: bool
    sharded: bool
    dataset: StepBlocks
    embedding_params: set[int]
    teacher_seconds: float | None = None
    precision: str = ""  # the precision's line in the log (model.precision.Choice.reason)


def prepare_training(
    ctx: Context,
    opts: PretrainParams,
    data: RunData,
    checkpoints: Path,
    seed: int,
    teacher_dir: Path | None,
    *,
    decay: int | None = None,
    save: bool = True,
) -> Training:
    """Step 3 of `pretrain.run` after the factorised form: precision, the warm-up's parameters, the Trainer's
    arguments, sharding, the run's samples and, for distill, unbiased chunks and the cached teacher."""

    use_cpu = ctx.device == "cpu"
    choice = precision.resolve(opts.precision, use_cpu=use_cpu)
    log.info("precision: %s", choice.reason)
    bf16 = choice.bf16
    warmup_params = embedding_params(data.model)
    sharded = opts.sharding == "fsdp"
    # the Trainer's bf16 flag (autocast around the model's forward) only for a sharded model, whose FSDP policy
    # gathers bf16 parameters; otherwise ObjectiveTrainer autocasts the training loss alone (fp32 valid loss)
    args = training_arguments(
        opts,
        checkpoints,
        seed,
        bf16=bf16 and sharded,
        use_cpu=use_cpu,
        fused_adamw=bf16 and not sharded,
        decay=decay,
        save=save,
    )
    if sharded:  # the process group exists once the TrainingArguments do
        data.model = sharding.shard_model(data.model, args.device, bf16)
        if data.teacher is not None and bf16:
            data.teacher = data.teacher.to(torch.bfloat16)  # the teacher unsharded, in bf16
    length = opts.steps * opts.batch_size * opts.gradient_accumulation_steps * args.world_size
    training = Training(
        args, bf16, sharded, StepBlocks(data.blocks, length, seed), warmup_params, precision=choice.reason
    )
    if teacher_dir is not None and opts.distill.chunks == "unbiased":  # before any pair block is built
        data.blocks.unbiased(training.dataset.visited(), opts.distill.bias_threshold)
    if data.teacher is not None and opts.distill.teacher == "cached":
        training.teacher_seconds = cache_teacher(data, opts, training.dataset, use_cpu=use_cpu)
    log.info(
        "pretrain %s/%s/%s pseed %s (seed %d): %s LM, %d train blocks of ≤%d ids, %d valid blocks; %d steps × %d × %d "
        "(accumulation) × %d process(es), peak learning rate %g; %s",
        ctx.lang,
        ctx.method,
        ctx.wildcards["objective"],
        ctx.wildcards.get("pseed", "1"),
        seed,
        data.kind,
        len(data.blocks),
        opts.seq_len,
        len(data.valid_blocks),
        opts.steps,
        opts.batch_size,
        opts.gradient_accumulation_steps,
        args.world_size,
        opts.learning_rate,
        "bf16" if bf16 else "fp32",
    )
    return training


def cache_teacher(data: RunData, opts: PretrainParams, dataset: StepBlocks, *, use_cpu: bool) -> float | None:
    """distill with `pretrain.distill.teacher: cached`: the teacher's chunk log-likelihoods of every block
    the run visits, once; then it leaves memory (`data.teacher` None). Returns the seconds it took."""

    device = "cuda" if not use_cpu and torch.cuda.is_available() else "cpu"
    tick = time.perf_counter()
    distill.cache_teacher(
        data.teacher.to(device).eval(),
        data.blocks,
        dataset.visited(),
        pad_id=teacher_pad(data.teacher_tok),
        batch_size=opts.eval_batch_size,
        device="cpu",
    )
    seconds = time.perf_counter() - tick
    log.info(
        "distill: the teacher's chunk log-likelihoods of %d blocks cached in %.1f s", len(dataset.visited()), seconds
    )
    data.teacher = None
    return seconds


def teacher_pad(teacher_tok) -> int:
    """The id that pads the teacher's side of a batch: its pad token, else its end of sequence, else 0."""
    return (
        0
        if teacher_tok is None
        else next((i for i in (teacher_tok.pad_token_id, teacher_tok.eos_token_id) if i is not None), 0)
    )
