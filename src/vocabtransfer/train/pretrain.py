"""Stage `pretrain`: continued pretraining of an initialised model with the standard, selfish or distill objective.

For `--lang L --method M --objective O --pseed K` (pretraining seed K, 1..`pretrain.seeds`, whose seed
value is `seed + 1000 (K - 1)`, see vocabtransfer.pipeline.names):
1. load `results/L/init/M/pseedK/model` (pseed1 for a method without random rows; masked or causal LM, from its config) and its tokenizer; pack the
   pre-tokenised train split (mapped, `data.token_ids`) into blocks of `seq_len` ids (`packing.PackedBlocks`:
   block boundaries from the line offsets, each block's ids read when it is drawn) and check that every
   id is inside the vocabulary;
2. fixed evaluation batches of the valid split with seeded masks (`modeling.lm_batches`): the same
   tokens and masks at every evaluation, for every method and objective;
3. train with the transformers `Trainer` (AdamW, linear or constant-with-warm-up schedule, gradient
   accumulation, bf16 where the hardware multiplies it natively: `model.precision`) for `steps` optimiser steps (or `passes` over the blocks), in `pretrain.processes` DDP processes
   (`train.parallel`). The loss: hidden states at the predicted positions only, through the LM head
   fused with the objective (`model.heads`, `losses.linear_objective_loss`: no logits), the mean over
   the step's predicted tokens of all micro-batches and processes; `pretrain.selfish.margin` for
   `selfish`. `distill` (causal sources; `train.distill`): the source model `results/source/model`, frozen,
   reads the same lines through its own tokenizer (`distill.PairBlocks`, beside the same student blocks, built when drawn)
   and the loss is `pretrain.distill.alpha` x the chunk-likelihood matching loss + (1 - alpha) x the
   standard one. The valid loss is always the standard cross-entropy, by the same path;
4. data order and masks are a function of the pretraining seed and the sample's position in the run
   (a seeded permutation per pass over the blocks, a masking seed per sample), so a run resumed from
   a checkpoint in `checkpoints/L/pretrain/M/O/pseedK/` sees exactly the batches of an uninterrupted one; the metrics rows
   up to a checkpoint are stored in it, and the params it was written with beside it;
5. write `results/L/pretrain/M/O/pseedK/` atomically: `model/` (HF directory with the tokenizer),
   `metrics.parquet`, `valid_blocks.parquet` (the final valid loss summed per evaluation block, with
   its token count and the target unigram floor's summed loss on the same tokens: the clusters of the report's
   bootstrap), `valid_curve.parquet` (each evaluation's valid loss summed per block, with the step and the
   tokens seen: the learning curve's clusters), `stats.json` (with the floors `unigram_valid_loss` and
   `uniform_valid_loss`, nats per valid token); then drop the checkpoints unless `pretrain.keep_checkpoints`.

Params: `pretrain` as `PretrainParams` (with `SelfishOptions` and `DistillOptions`, in train/pretrain_params.py),
read once at the entry (`ctx.section`); a job's rerun keys are its fields' leaves but those that choose the runs, and the
selfish / distill options only for that objective (`leaves`).

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

import pyarrow as pa
import pyarrow.compute as pc

from vocabtransfer import io
from vocabtransfer.model import modeling
from vocabtransfer.train.batches import StepBlocks, StepCollator  # noqa: F401 (StepBlocks: read from here too)
from vocabtransfer.model.lmdata import Kind, target_labels
from vocabtransfer.data.token_ids import unigram_counts
from vocabtransfer.train import parallel, sharding
from vocabtransfer.train import pretrain_setup as setup
from vocabtransfer.train.checkpoints import ROWS_FILE
from vocabtransfer.train.pretrain_params import DISTILL_COLUMNS, PretrainParams
from vocabtransfer.init import availability
from vocabtransfer.pipeline import names
from vocabtransfer.pipeline import paths
from vocabtransfer.pipeline.config import check_pretrain
from vocabtransfer.pipeline.typed import Params, field_leaves
from vocabtransfer.errors import VocabTransferError

log = logging.getLogger(__name__)


METRICS_SCHEMA = pa.schema(
    [
        ("step", pa.int64()),
        ("tokens_seen", pa.int64()),
        ("train_loss", pa.float64()),
        ("valid_loss", pa.float64()),
        ("learning_rate", pa.float64()),
        ("tokens_per_second", pa.float64()),
        ("valid_bits_per_byte", pa.float64()),  # causal models with pretrain.bits_per_byte, at every evaluation
    ]
)
# distill: at every logged step the gradient norm of each of its two terms, unweighted, and of the step's
# loss before clipping (objective_trainer.ObjectiveTrainer; null on the other rows; the terms' NaN where not measured:
# several processes or sharded)
DISTILL_METRICS_SCHEMA = pa.schema(list(METRICS_SCHEMA) + [pa.field(c, pa.float64()) for c in DISTILL_COLUMNS])

# the objectives trained against the source model as a teacher (losses.OBJECTIVES' `teacher`; named here so
# that planning a DAG does not import torch; tests/test_pretrain_distill.py checks the two agree)
TEACHER_OBJECTIVES = ("distill", "alm")


def check_params(params: Params, source: str = "params.yaml") -> None:
    """Every `pretrain.methods` entry must be an `init.methods` entry; objectives must be known."""
    from vocabtransfer.model.losses import OBJECTIVES  # imports torch: not at CLI start-up

    check_pretrain(params.tree, source)
    bad = [o for o in params.section("pretrain", PretrainParams).objectives if o not in OBJECTIVES]
    if bad:
        raise VocabTransferError(
            f"{source}: pretrain.objectives: {', '.join(bad)} unknown; allowed: {', '.join(OBJECTIVES)}"
        )


def leaves(params: Params, wildcards: dict) -> list[str]:
    """The params leaves one job reads (its rerun keys): the leaves of `PretrainParams` but the `rerun=False`
    ones, with an objective's own options (`pretrain.selfish.margin`, `pretrain.distill.*`) for that
    objective only."""
    objective = wildcards.get("objective")
    if objective in TEACHER_OBJECTIVES:
        objective = "distill"  # every teacher objective (distill, alm) reads pretrain.distill
    return field_leaves(
        PretrainParams,
        "pretrain",
        params.leaf("pretrain"),
        keep=lambda f: f.metadata.get("rerun", True) and f.metadata.get("objective", objective) == objective,
    )


def expand(params: Params) -> list[dict[str, str]]:
    return [{"method": m, "objective": o, "pseed": str(s)} for m, o, s in availability.pretrain_runs(params)]


BLOCKS_SCHEMA = pa.schema(
    [("block", pa.int32()), ("loss_sum", pa.float64()), ("n_tokens", pa.int64()), ("unigram_sum", pa.float64())]
)
# one row per evaluation and valid block: the learning curve with its clusters (the report's token-equivalent
# bootstrap resamples the blocks); the block's token count is valid_blocks.parquet's
CURVE_SCHEMA = pa.schema(
    [("step", pa.int64()), ("tokens_seen", pa.int64()), ("block", pa.int32()), ("loss_sum", pa.float64())]
)


def valid_bits(ctx, opts: PretrainParams, data: setup.RunData):
    """`pretrain.bits_per_byte` for a causal model: the function giving bits per byte of the first `eval_lines`
    valid lines (the corpus's text, each line scored alone in windows of `seq_len`, `line_bits.score_lines`);
    None otherwise."""
    from vocabtransfer.model import line_bits  # imports torch: not at CLI start-up

    if data.kind != "causal" or not opts.bits_per_byte:
        return None
    lines = line_bits.valid_lines(ctx.input["valid_text"], opts.eval_lines)
    return lambda m: (
        line_bits.score_lines(
            m, data.tokenizer, lines, seq_len=opts.seq_len, batch_size=opts.eval_batch_size
        ).bits_per_byte
    )


def log_token_budgets(tokens: int, first: int = 1000) -> list[int]:
    """`pretrain.eval_schedule: log_tokens`: 1 and 3 × 10^k tokens from `first` up to below `tokens` (the most
    the run can see), two a decade: 1000, 3000, 10000, 30000, …"""
    budgets, scale = [], first
    while scale < tokens:
        budgets += [b for b in (scale, 3 * scale) if b < tokens]
        scale *= 10
    return budgets


def block_losses(model, batches: list[dict], kind: Kind) -> tuple[list[float], list[int]]:
    """The summed standard cross-entropy and the number of predicted tokens of every evaluation block
    (the clusters the report's bootstrap resamples); their totals give the valid loss."""
    result = modeling.evaluate_lm(model, batches, kind)
    return result["block_loss"], result["block_tokens"]


def valid_scorer(batches: list[dict], kind: Kind):
    """The callback's evaluation: model -> (valid loss, each block's summed loss); the loss is the blocks' total
    over their predicted tokens (the same fixed batches at every evaluation)."""

    def score(model) -> tuple[float, list[float]]:
        sums, counts = block_losses(model, batches, kind)
        return sum(sums) / max(1, sum(counts)), sums

    return score


def unigram_block_sums(batches: list[dict], kind: Kind, counts) -> list[float]:
    """Each evaluation block's summed loss in nats under the add-one-smoothed unigram of the training split's
    ids (`counts`, one per id): p(t) = (c_t + 1) / (N + V), on exactly the tokens the model is scored on
    (the floor a model without context reaches)."""
    import numpy as np

    counts = np.asarray(counts, dtype=np.float64)
    neg_log = -np.log((counts + 1.0) / (counts.sum() + len(counts)))
    out = []
    for batch in batches:
        labels = target_labels(batch, kind).numpy()
        out += [float(neg_log[row[row != -100]].sum()) for row in labels]
    return out


def with_passes(opts: PretrainParams, train_blocks: int) -> PretrainParams:
    """`pretrain.passes` as optimiser steps: ceil(passes × train blocks / blocks per step), at least 1."""
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


def check_distill(ctx, objective: str) -> Path | None:
    """The teacher's directory (the source model) for the distill objective, else None; one line for a
    masked-LM source (the schema checks pretrain.distill's alpha and temperature)."""
    from vocabtransfer.model.losses import get_objective  # imports torch: not at CLI start-up

    if not get_objective(objective).teacher:
        return None
    from transformers import AutoConfig  # transformers: heavy, not at CLI start-up

    source = Path(ctx.input["source"]) if "source" in ctx.input else Path(paths.SOURCE_MODEL)
    kind = modeling.detect_kind(AutoConfig.from_pretrained(str(source)))
    if kind != "causal":
        raise VocabTransferError(
            f"pretrain.objectives: distill needs a causal source model, and {source} is a masked "
            "LM (it gives no sequence likelihood to match); use standard or selfish with it"
        )
    return source


def _check_job(ctx, opts: PretrainParams, method: str, objective: str, pseed: int) -> Path | None:
    """The job is one of params pretrain's runs, and its options fit the processes; returns the
    teacher's directory for distill (`check_distill`), else None."""
    check_params(ctx.params)
    if (method, objective) not in availability.pretrain_pairs(ctx.params) or pseed not in names.pretrain_seeds(
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


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """What one run did, beside its options and data: the run-level facts its stats.json records."""

    tokens_seen: int  # target tokens the Trainer fed, over every process
    start: float  # time.perf_counter() at the job's start
    train_seconds: float  # trainer.train's wall-clock seconds
    resume: tuple | None  # (step, checkpoint directory) the run resumed from, or None
    seed: int  # the pretraining seed's random seed (names.seed_value)
    factorized: bool
    teacher_dir: Path | None  # distill's teacher, None for the other objectives
    checkpointed: bool  # activation checkpointing was on
    model_dir: Path  # the initialised model it started from


def _stats(
    ctx, opts: PretrainParams, data: setup.RunData, training: setup.Training, model, rows: dict, record: RunRecord
) -> dict:
    """The run's stats.json (but `valid_tokens`, counted again on the final valid blocks)."""
    from vocabtransfer.model.losses import distill_alpha  # imports torch: not at CLI start-up

    distill_opts, blocks, objective = opts.distill, data.blocks, ctx.wildcards["objective"]
    resume, teacher_dir = record.resume, record.teacher_dir
    return {
        "lang": ctx.lang,
        "method": ctx.method,
        "objective": objective,
        "kind": data.kind,
        "model_class": type(model).__name__,
        "steps": opts.steps,
        "tokens_seen": record.tokens_seen,
        "passes": opts.steps
        * training.args.world_size
        * opts.batch_size
        * opts.gradient_accumulation_steps
        / len(blocks),
        "initial_valid_loss": rows[0]["valid_loss"],
        "final_valid_loss": rows[max(rows)]["valid_loss"],
        "seconds": time.perf_counter() - record.start,
        "train_seconds": record.train_seconds,
        "resumed_from_step": resume[0] if resume else None,
        "pseed": int(ctx.wildcards["pseed"]),
        "seed": record.seed,
        "margin": opts.selfish.margin if objective == "selfish" else None,
        "factorized": record.factorized,
        "distill": None
        if teacher_dir is None
        else {
            "alpha": distill_alpha(objective, distill_opts.alpha),
            "temperature": distill_opts.temperature,
            "chunks": distill_opts.chunks,
            "bias_threshold": distill_opts.bias_threshold if distill_opts.chunks == "unbiased" else None,
            "teacher": str(teacher_dir),
            "train_chunks": sum(b.n_chunks for b in blocks) if distill_opts.chunks == "exact" else None,
            "visited_chunks": sum(blocks[b].n_chunks for b in sorted(set(training.dataset.visited()))),
            "teacher_mode": distill_opts.teacher,
            "teacher_cache_seconds": training.teacher_seconds,
        },
        "train_blocks": len(blocks),
        "valid_blocks": len(data.valid_blocks),
        "valid_tokens": sum(int((b["labels"] != -100).sum()) for b in data.eval_batches),
        "bf16": training.bf16,
        "precision": training.precision,
        "valid_precision": "bf16" if training.bf16 and training.sharded else "fp32",
        "processes": training.args.world_size,
        "sharding": opts.sharding,
        "gradient_checkpointing": record.checkpointed,
        "init_model": str(record.model_dir),
        "versions": io.versions(),
    }


def _write_outputs(ctx, model, data: setup.RunData, rows: dict, stats: dict, *, distill: bool) -> None:
    """Step 5 of `run`: the pretrain directory, atomically: the model with its tokenizer, the metrics rows,
    the final valid loss per evaluation block (for intervals) and the stats."""
    ordered = sorted(rows.values(), key=lambda r: r["step"])
    table = pa.Table.from_pylist(ordered, schema=DISTILL_METRICS_SCHEMA if distill else METRICS_SCHEMA)
    sums, counts = block_losses(model, data.eval_batches, data.kind)  # the final valid loss per block, for intervals
    unigram = unigram_block_sums(data.eval_batches, data.kind, unigram_counts(ctx.input["train"], data.tokenizer))
    blocks_table = pa.table(
        {
            "block": pa.array(range(len(counts)), pa.int32()),
            "loss_sum": sums,
            "n_tokens": pa.array(counts, pa.int64()),
            "unigram_sum": unigram,
        },
        schema=BLOCKS_SCHEMA,
    )
    curve = [
        {"step": r["step"], "tokens_seen": r["tokens_seen"], "block": b, "loss_sum": v}
        for r in ordered
        for b, v in enumerate(r.get("valid_block_loss") or [])
    ]
    stats["valid_tokens"] = int(pc.sum(blocks_table.column("n_tokens")).as_py())  # predicted positions scored
    stats["unigram_valid_loss"] = sum(unigram) / max(1, stats["valid_tokens"])  # floors, nats per valid token
    stats["uniform_valid_loss"] = math.log(len(data.tokenizer))
    with io.atomic_output(ctx.output["pretrain"], directory=True) as tmp:
        modeling.save_model_dir(model, data.tokenizer, tmp / "model")
        io.write_parquet(table, tmp / "metrics.parquet")
        io.write_parquet(blocks_table, tmp / "valid_blocks.parquet")
        io.write_parquet(pa.Table.from_pylist(curve, schema=CURVE_SCHEMA), tmp / "valid_curve.parquet")
        io.write_json(stats, tmp / "stats.json")


def run(ctx) -> None:
    from transformers import PrinterCallback  # transformers: heavy, not at CLI start-up

    from vocabtransfer.model.losses import distill_alpha  # imports torch: not at CLI start-up
    from vocabtransfer.train import lowrank  # imports torch: not at CLI start-up
    from vocabtransfer.train.objective_trainer import (
        Distillation,
        MetricsCallback,
        ObjectiveTrainer,
    )  # torch, transformers

    start = time.perf_counter()
    opts = ctx.section("pretrain", PretrainParams)  # params pretrain, typed
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
    opts = with_passes(opts, len(data.blocks))
    resume = setup.resume_point(
        ctx, checkpoints, model_dir, teacher_dir, pseed, ["seed"] + leaves(ctx.params, ctx.wildcards)
    )
    # 3. options: factorised embeddings, precision, embedding warm-up, sharding, the distill teacher
    original = setup.factorised(data.model, opts, init_dir)
    training = setup.prepare_training(ctx, opts, data, checkpoints, seed, teacher_dir)

    # 4. train
    rows: dict[int, dict] = {}
    if resume is not None:
        rows = {r["step"]: r for r in json.loads((resume[1] / ROWS_FILE).read_text(encoding="utf-8"))}
    evaluate = valid_scorer(data.eval_batches, data.kind)
    bits = valid_bits(ctx, opts, data)
    budgets = (
        log_token_budgets(
            opts.steps * opts.batch_size * opts.gradient_accumulation_steps * opts.seq_len * training.args.world_size
        )
        if opts.eval_schedule == "log_tokens"
        else None
    )
    callback = MetricsCallback(
        evaluate,
        opts.eval_every,
        rows,
        opts.embeddings_only_steps,
        training.embedding_params,
        budgets=budgets,
        bits=bits,
    )
    collator = StepCollator(data.tokenizer, data.kind, seed, setup.teacher_pad(data.teacher_tok))
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
    train_start = time.perf_counter()
    trainer.train(resume_from_checkpoint=str(resume[1]) if resume else None)
    train_seconds = time.perf_counter() - train_start
    state = sharding.full_state_dict(trainer.model) if training.sharded else None  # collective: every process
    checkpointed = bool(getattr(trainer.accelerator.unwrap_model(trainer.model), "is_activation_checkpointing", False))
    if not trainer.is_world_process_zero():
        return

    # 5. outputs (sharded: an ordinary model with the gathered weights)
    model = (
        sharding.unsharded_copy(state, model_dir)
        if training.sharded
        else trainer.accelerator.unwrap_model(trainer.model).to("cpu").float()
    )
    if original is not None:
        lowrank.unfactorize_model(model, original)
    model.eval()
    record = RunRecord(
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
    stats = _stats(ctx, opts, data, training, model, rows, record)
    _write_outputs(ctx, model, data, rows, stats, distill=teacher_dir is not None)
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
