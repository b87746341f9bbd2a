"""What a pretraining run writes (step 5 of the stage, train.pretrain): the schemas of metrics.parquet,
valid_blocks.parquet and valid_curve.parquet, the final valid loss per evaluation block beside the target
unigram floor's on the same tokens, the run's record and its stats.json, and the pretrain directory written
atomically.
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import numpy as np

from vocabtransfer import io
from vocabtransfer.data.token_ids import unigram_counts
from vocabtransfer.model import lm_loss, modeling
from vocabtransfer.model.lmdata import Kind, target_labels
from vocabtransfer.train import pretrain_setup as setup
from vocabtransfer.plan.pretrain_params import DISTILL_COLUMNS, PretrainParams
from vocabtransfer.model.losses import distill_alpha, get_objective
from vocabtransfer.train.cooldown import decay_steps
from vocabtransfer.pipeline.stage_spec import Context

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
# loss before clipping (objective_trainer.ObjectiveTrainer; null on the other rows; the terms' NaN where not
# measured: several processes or sharded)
DISTILL_METRICS_SCHEMA = pa.schema(list(METRICS_SCHEMA) + [pa.field(c, pa.float64()) for c in DISTILL_COLUMNS])
# valid_blocks.parquet: the final valid loss summed per evaluation block, its token count and the target unigram
# floor's summed loss on the same tokens (the clusters of the report's bootstrap)
BLOCKS_SCHEMA = pa.schema(
    [("block", pa.int32()), ("loss_sum", pa.float64()), ("n_tokens", pa.int64()), ("unigram_sum", pa.float64())]
)
# valid_curve.parquet: one row per evaluation and valid block, the learning curve with its clusters (the
# report's token-equivalent bootstrap resamples the blocks); the block's token count is valid_blocks.parquet's
# `decayed`: the row ends a learning-rate decay (a cool-down branch's end, or the run's own last step under a
# linear or wsd schedule): the loss a run of about that length reaches; the report's token-equivalent reads these
CURVE_SCHEMA = pa.schema(
    [
        ("step", pa.int64()),
        ("tokens_seen", pa.int64()),
        ("block", pa.int32()),
        ("loss_sum", pa.float64()),
        ("decayed", pa.bool_()),
    ]
)
# cooldown.parquet (schedule wsd): one row per decayed end, the cool-down branches' and the run's own: its last
# step, the stable run's step it forked from, the target tokens seen, the valid loss (and bits per byte)
COOLDOWN_SCHEMA = pa.schema(
    [
        ("step", pa.int64()),
        ("fork_step", pa.int64()),
        ("budget", pa.int64()),
        ("tokens_seen", pa.int64()),
        ("valid_loss", pa.float64()),
        ("valid_bits_per_byte", pa.float64()),
        ("seconds", pa.float64()),
    ]
)
# the schedules whose run ends with the learning rate decayed to 0 (its last evaluation is a run of its length)
DECAYING = ("linear", "wsd")


def block_losses(model, batches: list[dict], kind: Kind) -> tuple[list[float], list[int]]:
    """The summed standard cross-entropy and the number of predicted tokens of every evaluation block
    (the clusters the report's bootstrap resamples); their totals give the valid loss."""
    result = lm_loss.evaluate_lm(model, batches, kind)
    return result["block_loss"], result["block_tokens"]


def unigram_block_sums(batches: list[dict], kind: Kind, counts) -> list[float]:
    """Each evaluation block's summed loss in nats under the add-one-smoothed unigram of the training split's
    ids (`counts`, one per id): p(t) = (c_t + 1) / (N + V), on exactly the tokens the model is scored on
    (the floor a model without context reaches)."""

    counts = np.asarray(counts, dtype=np.float64)
    neg_log = -np.log((counts + 1.0) / (counts.sum() + len(counts)))
    out = []
    for batch in batches:
        labels = target_labels(batch, kind).numpy()
        out += [float(neg_log[row[row != -100]].sum()) for row in labels]
    return out


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


def run_stats(
    ctx: Context,
    opts: PretrainParams,
    data: setup.RunData,
    training: setup.Training,
    model,
    rows: dict,
    record: RunRecord,
    ends: list[dict] | None = None,
) -> dict:
    """The run's stats.json (but `valid_tokens`, counted again on the final valid blocks); `ends`: the cool-down
    branches' end rows (schedule wsd), whose steps are the compute the run spent beside its own."""

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
        "schedule": opts.schedule,
        "learning_rate": opts.learning_rate,  # the peak rate trained at (pretrain.tune: the dev split's pick)
        "tuning": ctx.input.get("tuning"),
        "cooldown": None
        if opts.schedule != "wsd"
        else {
            "fraction": opts.cooldown.fraction,
            "shape": opts.cooldown.shape,
            "decay_steps": opts.steps - _decay_start(opts),
            "branches": [
                {k: e[k] for k in ("budget", "step", "fork_step", "tokens_seen", "valid_loss")} for e in ends or []
            ],
            # optimiser steps the branches took beyond the stable run (each from its fork to its end)
            "branch_steps": sum(e["step"] - e["fork_step"] for e in ends or []),
        },
        "initial_valid_loss": rows[0]["valid_loss"],
        "final_valid_loss": rows[max(rows)]["valid_loss"],
        "seconds": time.perf_counter() - record.start,
        "train_seconds": record.train_seconds,
        "resumed_from_step": resume[0] if resume else None,
        "pseed": int(ctx.wildcards["pseed"]),
        "seed": record.seed,
        "margin": opts.selfish.margin if get_objective(objective).uses_margin else None,
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


def _decay_start(opts: PretrainParams) -> int:

    return opts.steps - decay_steps(opts.steps, opts.cooldown.fraction)


def write_outputs(
    ctx: Context, model, data: setup.RunData, rows: dict, stats: dict, *, distill: bool, ends: list[dict] | None = None
) -> None:
    """Step 5 of `pretrain.run`: the pretrain directory, atomically: the model with its tokenizer, the metrics rows,
    the final valid loss per evaluation block (for intervals), the learning curve per block (with the cool-down
    branches' ends, `ends`, under wsd), cooldown.parquet (wsd) and the stats."""
    ordered = sorted(rows.values(), key=lambda r: r["step"])
    last, decays = ordered[-1]["step"], stats.get("schedule") in DECAYING
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
        {
            "step": r["step"],
            "tokens_seen": r["tokens_seen"],
            "block": b,
            "loss_sum": v,
            "decayed": bool(decays and r["step"] == last),
        }
        for r in ordered
        for b, v in enumerate(r.get("valid_block_loss") or [])
    ]
    ends = sorted(ends or [], key=lambda e: e["step"])
    curve += [
        {"step": e["step"], "tokens_seen": e["tokens_seen"], "block": b, "loss_sum": v, "decayed": True}
        for e in ends
        for b, v in enumerate(e.get("valid_block_loss") or [])
    ]
    opts = ctx.params.pretrain
    cooldown_rows = [
        {**{k: e.get(k) for k in COOLDOWN_SCHEMA.names}, "seconds": e.get("seconds", math.nan)} for e in ends
    ] + [
        {  # the run's own end: a run of its length (positions: padding included, as the branches' budgets)
            "step": last,
            "fork_step": _decay_start(opts),
            "budget": last * opts.batch_size * opts.gradient_accumulation_steps * opts.seq_len * stats["processes"],
            "tokens_seen": ordered[-1]["tokens_seen"],
            "valid_loss": ordered[-1]["valid_loss"],
            "valid_bits_per_byte": ordered[-1].get("valid_bits_per_byte", math.nan),
            "seconds": math.nan,
        }
    ]
    stats["valid_tokens"] = int(pc.sum(blocks_table.column("n_tokens")).as_py())  # predicted positions scored
    stats["unigram_valid_loss"] = sum(unigram) / max(1, stats["valid_tokens"])  # floors, nats per valid token
    stats["uniform_valid_loss"] = math.log(len(data.tokenizer))
    with io.atomic_output(ctx.output["pretrain"], directory=True) as tmp:
        modeling.save_model_dir(model, data.tokenizer, tmp / "model")
        io.write_parquet(table, tmp / "metrics.parquet")
        io.write_parquet(blocks_table, tmp / "valid_blocks.parquet")
        io.write_parquet(pa.Table.from_pylist(curve, schema=CURVE_SCHEMA), tmp / "valid_curve.parquet")
        if stats.get("schedule") == "wsd":
            io.write_parquet(pa.Table.from_pylist(cooldown_rows, schema=COOLDOWN_SCHEMA), tmp / "cooldown.parquet")
        io.write_json(stats, tmp / "stats.json")
