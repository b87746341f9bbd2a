"""Stage `pretrain`: continued pretraining of an initialised model with the standard, selfish or distill objective.

For `--lang L --method M --objective O --pseed K` (pretraining seed K, 1..`pretrain.seeds`, whose seed
value is `seed + 1000 (K - 1)`, see vocabtransfer.pipeline.names):
1. load `results/L/init/M/pseedK/model` (pseed1 for a method without random rows; masked or causal LM, from its
   config) and its tokenizer; pack the pre-tokenised train split (mapped, `data.token_ids`) into blocks of `seq_len`
   ids (`packing.PackedBlocks`: block boundaries from the line offsets, each block's ids read when it is drawn) and
   check that every id is inside the vocabulary;
2. fixed evaluation batches of the valid split with seeded masks (`modeling.lm_batches`): the same
   tokens and masks at every evaluation, for every method and objective;
3. train with the transformers `Trainer` (AdamW, linear or constant-with-warm-up schedule, gradient
   accumulation, bf16 where the hardware multiplies it natively: `model.precision`) for `steps` optimiser steps (or
   `passes` over the blocks), in `pretrain.processes` DDP processes (`train.parallel`). The loss: hidden states at
   the predicted positions only, through the LM head fused with the objective (`model.heads`,
   `losses.linear_objective_loss`: no logits), the mean over the step's predicted tokens of all micro-batches and
   processes; `pretrain.selfish.margin` for `selfish`. `distill` (causal sources; `train.distill`): the source
   model `results/source/model`, frozen, reads the same lines through its own tokenizer (`distill.PairBlocks`,
   beside the same student blocks, built when drawn) and the loss is `pretrain.distill.alpha` x the
   chunk-likelihood matching loss + (1 - alpha) x the standard one. The valid loss is always the standard
   cross-entropy, by the same path;
4. data order and masks are a function of the pretraining seed and the sample's position in the run
   (a seeded permutation per pass over the blocks, a masking seed per sample), so a run resumed from
   a checkpoint in `checkpoints/L/pretrain/M/O/pseedK/` sees exactly the batches of an uninterrupted one; the
   metrics rows up to a checkpoint are stored in it, and the params it was written with beside it;
5. write `results/L/pretrain/M/O/pseedK/` atomically (train.pretrain_outputs): `model/` (HF directory with the
   tokenizer), `metrics.parquet`, `valid_blocks.parquet` (the final valid loss summed per evaluation block, with
   its token count and the target unigram floor's summed loss on the same tokens: the clusters of the report's
   bootstrap), `valid_curve.parquet` (each evaluation's valid loss summed per block, with the step and the
   tokens seen: the learning curve's clusters), `stats.json` (with the floors `unigram_valid_loss` and
   `uniform_valid_loss`, nats per valid token); then drop the checkpoints unless `pretrain.keep_checkpoints`.

Params: `pretrain` as `PretrainParams` (with `SelfishOptions` and `DistillOptions`, in plan/pretrain_params.py),
read from the typed root at the entry (`ctx.params.pretrain`); a job's rerun keys are its fields' leaves but those
that choose the runs, and the selfish / distill options only for that objective (the stage `reads` the section
`pretrain`: `Stage.leaves`, vocabtransfer.plan.params_root).

Options: `pretrain.factorized` trains `<m>+svd`/`<m>+snmf` (and ofa/snmf) models in their low-rank
form (coordinates trainable, primitives trainable or frozen: `pretrain.train_primitives`); the
saved model has the multiplied-out embeddings. `pretrain.embeddings_only_steps: N` first trains the
input embeddings and the LM head (output embeddings/bias) alone for N steps, the body frozen, then everything.
`pretrain.gradient_checkpointing` recomputes each layer's activations in the backward pass (the model's own
`activation_checkpointing_enable`, non-reentrant, through the Trainer). `pretrain.sharding: fsdp` shards the
model over the processes with torch FSDP2 instead of replicating it (`train.sharding`, docs/scale.md).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import shutil
import time
from pathlib import Path

import torch
from transformers import AutoConfig, PrinterCallback


from vocabtransfer.model import modeling
from vocabtransfer.train.batches import StepBlocks, StepCollator  # noqa: F401 (StepBlocks: read from here too)
from vocabtransfer.model.lmdata import Kind
from vocabtransfer.train import cooldown, parallel, sharding
from vocabtransfer.train import pretrain_outputs
from vocabtransfer.train import pretrain_setup as setup
from vocabtransfer.train.checkpoints import ROWS_FILE
from vocabtransfer.plan.pretrain_params import PretrainParams
from vocabtransfer.plan import availability
from vocabtransfer.pipeline import names
from vocabtransfer.pipeline import paths
from vocabtransfer.pipeline.pretrain_checks import check_pretrain
from vocabtransfer.pipeline.stage_spec import Context
from vocabtransfer.plan.params_root import Params
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.model.losses import distill_alpha, get_objective, OBJECTIVES
from vocabtransfer.model import line_bits
from vocabtransfer.train.objective_trainer import Distillation, MetricsCallback, ObjectiveTrainer
from vocabtransfer.train import lowrank

log = logging.getLogger(__name__)


def check_params(params: Params, source: str = "params.yaml") -> None:
    """Every `pretrain.methods` entry must be an `init.methods` entry; objectives must be known."""

    check_pretrain(params.tree, source)
    bad = [o for o in params.pretrain.objectives if o not in OBJECTIVES]
    if bad:
        raise VocabTransferError(
            f"{source}: pretrain.objectives: {', '.join(bad)} unknown; allowed: {', '.join(OBJECTIVES)}"
        )


def valid_bits(ctx: Context, opts: PretrainParams, data: setup.RunData):
    """`pretrain.bits_per_byte` for a causal model: the function giving bits per byte of the first `eval_lines`
    valid lines (the corpus's text, each line scored alone in windows of `seq_len`, `line_bits.score_lines`);
    None otherwise."""

    if data.kind != "causal" or not opts.bits_per_byte:
        return None
    lines = line_bits.valid_lines(ctx.input["valid_text"], opts.eval_lines)
    return lambda m: (
        line_bits.score_lines(
            m, data.tokenizer, lines, seq_len=opts.seq_len, batch_size=opts.eval_batch_size
        ).bits_per_byte
    )


def log_token_budgets(tokens: int, first: int = 1000, after: int = 0) -> list[int]:
    """`pretrain.eval_schedule: log_tokens`: 1 and 3 × 10^k tokens from `first` up to below `tokens` (the most
    the run can see), two a decade: 1000, 3000, 10000, 30000, …; only those above `after` (the warm-up's
    positions: no budget is read inside the warm-up)."""
    budgets, scale = [], first
    while scale < tokens:
        budgets += [b for b in (scale, 3 * scale) if after < b < tokens]
        scale *= 10
    return budgets


def positions_per_step(opts: PretrainParams, world_size: int) -> int:
    """Target positions an optimiser step feeds (padding included: the budgets' nominal tokens)."""
    return opts.batch_size * opts.gradient_accumulation_steps * opts.seq_len * world_size


def valid_scorer(batches: list[dict], kind: Kind):
    """The callback's evaluation: model -> (valid loss, each block's summed loss); the loss is the blocks' total
    over their predicted tokens (the same fixed batches at every evaluation)."""

    def score(model) -> tuple[float, list[float]]:
        sums, counts = pretrain_outputs.block_losses(model, batches, kind)
        return sum(sums) / max(1, sum(counts)), sums

    return score


def cooldown_plan(opts: PretrainParams, world_size: int) -> list[cooldown.Branch]:
    """The cool-down branches of a wsd run (`train.cooldown.plan`); none under the other schedules."""
    if opts.schedule != "wsd":
        return []
    return cooldown.plan(opts.steps, positions_per_step(opts, world_size), opts.warmup_steps, opts.cooldown)


def tuned_rate(ctx: Context, opts: PretrainParams) -> PretrainParams:
    """pretrain.tune: the options at the peak learning rate that the run's pretrain_tune job picked on the dev
    split (its `tuning` input); else as they are."""
    if "tuning" not in ctx.input:
        return opts
    rate = json.loads(Path(ctx.input["tuning"]).read_text(encoding="utf-8"))["pick"]
    log.info("pretrain.tune: peak learning rate %g, picked on the dev split (%s)", rate, ctx.input["tuning"])
    return dataclasses.replace(opts, learning_rate=rate)


def with_passes(opts: PretrainParams, train_blocks: int, lang: str | None = None) -> PretrainParams:
    """`pretrain.passes` (`pretrain.language_passes[lang]` where it names the language) as optimiser steps:
    ceil(passes × train blocks / blocks per step), at least 1."""
    if lang is not None and lang in opts.language_passes:
        opts = dataclasses.replace(opts, passes=opts.language_passes[lang])
    if opts.passes is None:
        return opts
    per_step = opts.batch_size * opts.gradient_accumulation_steps * int(os.environ.get("WORLD_SIZE", "1"))
    steps = max(1, math.ceil(opts.passes * train_blocks / per_step))
    log.info(
        "pretrain.passes %g over %d train blocks of %d a step: %d steps", opts.passes, train_blocks, per_step, steps
    )
    return dataclasses.replace(opts, steps=steps)


# ---------------------------------------------------------------------------------------------
# The stage
# ---------------------------------------------------------------------------------------------


def check_distill(ctx: Context, objective: str) -> Path | None:
    """The teacher's directory (the source model) for the distill objective, else None; one line for a
    masked-LM source (the schema checks pretrain.distill's alpha and temperature)."""

    if not get_objective(objective).teacher:
        return None

    source = Path(ctx.input["source"]) if "source" in ctx.input else Path(paths.SOURCE_MODEL)
    kind = modeling.detect_kind(AutoConfig.from_pretrained(str(source)))
    if kind != "causal":
        raise VocabTransferError(
            f"pretrain.objectives: distill needs a causal source model, and {source} is a masked "
            "LM (it gives no sequence likelihood to match); use standard or selfish with it"
        )
    return source


def _check_job(ctx: Context, opts: PretrainParams, method: str, objective: str, pseed: int) -> Path | None:
    """The job is one of params pretrain's runs, and its options fit the processes; returns the
    teacher's directory for distill (`check_distill`), else None."""
    check_params(ctx.params)
    if (method, objective) not in availability.pretrain_pairs(ctx.params) or pseed not in availability.pretrain_seeds(
        ctx.params
    ):
        raise VocabTransferError(
            f"pretrain {method}/{objective}/pseed{pseed}: not a job of params pretrain.methods × "
            f"pretrain.objectives (or pretrain.pairs) × pretrain.seeds ({', '.join(opts.methods)} × "
            f"{', '.join(opts.objectives)} × 1..{opts.seeds})"
        )
    teacher_dir = check_distill(ctx, objective)
    parallel.check_processes(opts.processes, ctx.device, int(os.environ.get("WORLD_SIZE", "1")))
    sharding.check_options(
        opts.sharding, opts.processes, embeddings_only_steps=opts.embeddings_only_steps, factorized=opts.factorized
    )
    return teacher_dir


def _trainer(
    ctx: Context,
    opts: PretrainParams,
    data: setup.RunData,
    training: setup.Training,
    rows: dict[int, dict],
    teacher_dir: Path | None,
    checkpoints: Path,
    *,
    branch: cooldown.Branch | None = None,
):
    """Step 4 of `run`, before training: the Trainer with the objective's loss, its evaluation callback (the
    valid loss per block, bits per byte, at `eval_every` steps or the log-spaced token budgets; its metrics
    rows in `rows`) and the seeded collator. A cool-down `branch` is scored at its end only."""

    objective = ctx.wildcards["objective"]
    evaluate = valid_scorer(data.eval_batches, data.kind)
    bits = valid_bits(ctx, opts, data)
    per_step = positions_per_step(opts, training.args.world_size)
    budgets = (
        log_token_budgets(opts.steps * per_step, after=opts.warmup_steps * per_step)
        if opts.eval_schedule == "log_tokens" and branch is None
        else None
    )
    callback = MetricsCallback(
        evaluate,
        opts.eval_every if branch is None else opts.steps + 1,  # a branch: its end only
        rows,
        opts.embeddings_only_steps,
        training.embedding_params,
        budgets=budgets,
        bits=bits,
        branch=None if branch is None else f"cool-down to step {branch.end}",
    )
    # the pretraining seed's masks (training.args.seed is the run's seed: setup.training_arguments)
    collator = StepCollator(data.tokenizer, data.kind, training.args.seed, setup.teacher_pad(data.teacher_tok))
    trainer = ObjectiveTrainer(
        model=data.model,
        args=training.args,
        train_dataset=training.dataset,
        data_collator=collator,
        callbacks=[callback],
        kind=data.kind,
        objective=objective,
        margin=opts.selfish.margin,
        checkpoints=checkpoints,
        distill=None
        if teacher_dir is None
        else Distillation(data.teacher, distill_alpha(objective, opts.distill.alpha), opts.distill.temperature),
        sharded=training.sharded,
        bf16=training.bf16 and not training.sharded,
    )
    trainer.remove_callback(PrinterCallback)
    return trainer


def run(ctx: Context) -> None:

    start = time.perf_counter()
    opts = ctx.params.pretrain
    method, objective, pseed = ctx.method, ctx.wildcards["objective"], int(ctx.wildcards["pseed"])
    seed = names.seed_value(ctx.params, pseed)  # data order, masks and dropout of this pretraining seed
    teacher_dir = _check_job(ctx, opts, method, objective, pseed)
    init_dir = Path(ctx.input["init"])
    model_dir = init_dir / "model"
    checkpoints = Path(
        paths.fill(paths.PRETRAIN_CHECKPOINTS, lang=ctx.lang, method=method, objective=objective, pseed=pseed)
    )
    # 1. model, tokenizer, data; 2. resume: the params the checkpoints were written with must be these
    data = setup.load_data(ctx, opts, model_dir, teacher_dir)
    opts = tuned_rate(ctx, with_passes(opts, len(data.blocks), ctx.lang))
    resume = setup.resume_point(
        ctx,
        checkpoints,
        model_dir,
        teacher_dir,
        pseed,
        ctx.stage.leaves(ctx.params, ctx.wildcards),
        learning_rate=opts.learning_rate if "tuning" in ctx.input else None,
    )
    # 3. options: factorised embeddings, precision, embedding warm-up, sharding, the distill teacher
    original = setup.factorised(data.model, opts, init_dir)
    training = setup.prepare_training(ctx, opts, data, checkpoints, seed, teacher_dir)

    # 4. train (wsd: the stable run keeps its fork checkpoints; then each cool-down branch from its fork)
    rows: dict[int, dict] = (
        {r["step"]: r for r in json.loads((resume[1] / ROWS_FILE).read_text(encoding="utf-8"))} if resume else {}
    )
    branches = cooldown_plan(opts, training.args.world_size)
    trainer = _trainer(ctx, opts, data, training, rows, teacher_dir, checkpoints)
    if branches:  # after the metrics callback: a fork checkpoint is kept once its rows are in it
        trainer.add_callback(cooldown.fork_callback(branches, checkpoints))
    train_start = time.perf_counter()
    trainer.train(resume_from_checkpoint=str(resume[1]) if resume else None)
    train_seconds = time.perf_counter() - train_start
    ends = run_branches(ctx, opts, data, branches, seed, teacher_dir, checkpoints)
    state = sharding.full_state_dict(trainer.model) if training.sharded else None  # collective: every process
    checkpointed = bool(getattr(trainer.accelerator.unwrap_model(trainer.model), "is_activation_checkpointing", False))
    if not trainer.is_world_process_zero():
        return

    # 5. outputs (sharded: an ordinary model with the gathered weights)
    if training.sharded:
        assert state is not None  # gathered above when sharded
        model = sharding.unsharded_copy(state, model_dir)
    else:
        model = trainer.accelerator.unwrap_model(trainer.model).to("cpu").float()
    if original is not None:
        lowrank.unfactorize_model(model, original)
    model.eval()
    record = pretrain_outputs.RunRecord(
        tokens_seen=int(trainer.state.num_input_tokens_seen),
        start=start,
        train_seconds=train_seconds,
        resume=resume,
        seed=seed,
        factorized=original is not None,
        teacher_dir=teacher_dir,
        checkpointed=checkpointed,
        model_dir=model_dir,
    )
    stats = pretrain_outputs.run_stats(ctx, opts, data, training, model, rows, record, ends)
    pretrain_outputs.write_outputs(ctx, model, data, rows, stats, distill=teacher_dir is not None, ends=ends)
    if not opts.keep_checkpoints:
        shutil.rmtree(checkpoints, ignore_errors=True)
    log.info(
        "pretrain %s/%s/%s pseed %d done in %.1f s: valid loss %.4f -> %.4f",
        ctx.lang,
        method,
        objective,
        pseed,
        stats["seconds"],
        stats["initial_valid_loss"],
        stats["final_valid_loss"],
    )


def run_branches(
    ctx: Context,
    opts: PretrainParams,
    data: setup.RunData,
    branches: list[cooldown.Branch],
    seed: int,
    teacher_dir: Path | None,
    checkpoints: Path,
) -> list[dict]:
    """Step 4 of `run` under wsd, after the stable run: each cool-down branch (`train.cooldown`) as a Trainer run of
    `branch.end` steps with its own decay, resumed from the latest fork checkpoint at or before its fork (else from
    the initialisation), scored at its end; the ends already written by an earlier attempt are read back."""

    ends = []
    for branch in branches:
        done = cooldown.finished(checkpoints, branch)
        if done is not None:
            ends.append(done)
            continue
        tick = time.perf_counter()
        fresh, _ = modeling.load_source_model(Path(ctx.input["init"]) / "model", data.kind, dtype=torch.float32)
        branch_data = dataclasses.replace(data, model=fresh)
        branch_opts = dataclasses.replace(opts, steps=branch.end)
        out_dir = checkpoints / cooldown.BRANCHES / f"run-{branch.end}"
        training = setup.prepare_training(
            ctx, branch_opts, branch_data, out_dir, seed, teacher_dir, decay=branch.decay, save=False
        )
        rows: dict[int, dict] = {}
        trainer = _trainer(ctx, branch_opts, branch_data, training, rows, teacher_dir, out_dir, branch=branch)
        start = cooldown.fork_checkpoint(checkpoints, branch.fork)
        trainer.train(resume_from_checkpoint=str(start) if start is not None else None)
        row = dict(rows[branch.end], seconds=time.perf_counter() - tick, resumed_at=start.name if start else None)
        if trainer.is_world_process_zero():
            ends.append(cooldown.record(checkpoints, branch, row))
        shutil.rmtree(out_dir, ignore_errors=True)
        log.info(
            "cool-down branch of %d steps (budget %d positions, fork at step %d from %s): %d tokens seen, valid "
            "loss %.4f, %.1f s",
            branch.end,
            branch.budget,
            branch.fork,
            start.name if start is not None else "the initialisation",
            row["tokens_seen"],
            row["valid_loss"],
            row["seconds"],
        )
    return ends
