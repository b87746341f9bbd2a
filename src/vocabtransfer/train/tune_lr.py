"""Stage `pretrain_tune`: each method × objective's peak learning rate, picked on the dev split
(`pretrain.tune`).

For `--lang L --method M --objective O`:
1. the dev split's first `tune.dev_lines` lines (results/L/corpus/dev.parquet: lines in no trained artefact and in
   no set the report scores), tokenised with the initialised model's tokenizer, packed into blocks of seq_len ids
   and scored as the valid loss is (the same seeded masks for every rate);
2. for each rate in `tune.learning_rates`: pretraining seed 1 of M/O trained for `tune.steps` optimiser steps
   under a wsd schedule (warm-up, stable, the decay of `pretrain.cooldown` at its end, no branches: its end is
   what a run of that length reaches) with everything else as the pretrain stage has it, and its dev loss at the
   end; each rate's result is written under checkpoints/L/pretrain_tune/M/O/ as it finishes, so a killed job
   redoes only the rates it had not finished (a rate's run itself restarts from its beginning);
3. while the pick is the smallest or largest rate tried, one more rate one grid step beyond that edge (the ratio of
   the two rates nearest it), up to `tune.extend` times (a pick at the edge of a grid says the best rate may lie
   outside it);
4. the pick: the rate with the lowest dev loss (ties: the smaller rate), written with every rate's dev loss, the
   initial dev loss, the tokens and seconds of each run to results/L/pretrain_tune/M/O/tuning.json. Every
   pretraining seed of M/O then trains at the pick (the pretrain stage reads this file).

The rule is the same for every method (3 rates each in the studies), so each arm is tuned alike; the tuning runs'
tokens are the compute each arm spent on tuning, which the report states.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import shutil
import time
from pathlib import Path
from typing import Callable

import torch


from vocabtransfer import io
from vocabtransfer.data import token_ids
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.model import modeling
from vocabtransfer.model.hub import load_tokenizer
from vocabtransfer.model.line_bits import valid_lines
from vocabtransfer.pipeline import names, paths
from vocabtransfer.pipeline.stage_spec import Context
from vocabtransfer.plan.params_root import Params
from vocabtransfer.train import pretrain
from vocabtransfer.train import pretrain_setup as setup
from vocabtransfer.plan.pretrain_params import PretrainParams
from vocabtransfer.plan.objectives import TEACHER_OBJECTIVES

log = logging.getLogger(__name__)

RULE = "the lowest dev loss at the end of the tuning run (ties: the smaller rate)"


def tuned(opts: PretrainParams) -> bool:
    return bool(opts.tune.learning_rates)


def tuning_options(opts: PretrainParams, rate: float) -> PretrainParams:
    """The options of one tuning run: `tune.steps` steps at `rate`, wsd without branches, scored at its end."""
    return dataclasses.replace(
        opts,
        learning_rate=rate,
        steps=opts.tune.steps,
        passes=None,
        schedule="wsd",
        cooldown=dataclasses.replace(opts.cooldown, per_decade=0),
        eval_schedule="steps",
        eval_every=opts.tune.steps,
        eval_lines=opts.tune.dev_lines,
        bits_per_byte=False,
    )


def pick(rates: list[float], losses: list[float]) -> float:
    """`RULE`: the rate with the lowest dev loss, the smaller rate on a tie; NaN losses (a diverged run) lose."""
    best = min(range(len(rates)), key=lambda i: (math.inf if math.isnan(losses[i]) else losses[i], rates[i]))
    if math.isnan(losses[best]):
        raise VocabTransferError(
            f"pretrain.tune.learning_rates: every rate ({', '.join(map(str, rates))}) diverged; add smaller rates"
        )
    return rates[best]


def beyond_edge(rates: list[float], losses: list[float]) -> float | None:
    """The rate to try next when `pick` lands on the smallest or largest rate tried: one step beyond that edge at
    the ratio of the two rates nearest it (rates 1e-4, 3e-4, 1e-3 picking 1e-4: 3.33e-5); None when the pick is
    interior, or at the top edge next to a diverged rate, or fewer than two rates were tried."""
    if len(rates) < 2:
        return None
    chosen, ordered = pick(rates, losses), sorted(rates)
    if chosen == ordered[0]:
        return ordered[0] * ordered[0] / ordered[1]
    if chosen == ordered[-1]:
        return ordered[-1] * ordered[-1] / ordered[-2]
    return None


def search(grid: list[float], extend: int, score: Callable[[int, float], dict]) -> tuple[list[dict], list[float]]:
    """Steps 2 and 3: `score(k, rate)` (a result with `learning_rate` and `dev_loss`) for each rate of `grid`, then
    for the rate `beyond_edge` names while there is one, at most `extend` times; the results and the rates added."""
    results = [score(k, rate) for k, rate in enumerate(grid)]
    extended: list[float] = []
    while len(extended) < extend:
        rate = beyond_edge([r["learning_rate"] for r in results], [r["dev_loss"] for r in results])
        if rate is None:
            break
        log.info("pretrain_tune: the pick is at the edge of the rates tried; trying %g", rate)
        results.append(score(len(results), rate))
        extended.append(rate)
    return results, extended


def dev_split(ctx: Context, tokenizer, lines: int, directory: Path) -> Path:
    """The dev lines tokenised as the pretokenize stage tokenises a split, written to `directory`."""
    text = valid_lines(ctx.input["dev_text"], lines)
    if not text:
        raise VocabTransferError(
            f"{ctx.input['dev_text']}: the dev split is empty; pretrain.tune needs corpus.dev_fraction > 0 (e.g. "
            "0.05) and a corpus large enough to fill it"
        )
    token_ids.write_lines(directory, tokenizer, tokenizer(text, add_special_tokens=False)["input_ids"])
    return directory


def train_rate(ctx: Context, opts: PretrainParams, data: setup.RunData, rate: float, seed: int, work: Path) -> dict:
    """Step 2 for one rate: a fresh copy of the initialised model trained `tune.steps` steps; its dev losses."""

    tick = time.perf_counter()
    run_opts = tuning_options(opts, rate)
    model, _ = modeling.load_source_model(Path(ctx.input["init"]) / "model", data.kind, dtype=torch.float32)
    run_data = dataclasses.replace(data, model=model)
    training = setup.prepare_training(ctx, run_opts, run_data, work, seed, None, save=False)
    rows: dict[int, dict] = {}
    trainer = pretrain._trainer(ctx, run_opts, run_data, training, rows, None, work)
    trainer.train()
    shutil.rmtree(work, ignore_errors=True)
    end = rows[run_opts.steps]
    return {
        "learning_rate": rate,
        "initial_dev_loss": rows[0]["valid_loss"],
        "dev_loss": end["valid_loss"],
        "tokens_seen": end["tokens_seen"],
        "seconds": time.perf_counter() - tick,
    }


def names_of(ctx: Context) -> tuple[str, str, str]:
    return ctx.lang, ctx.method, ctx.wildcards["objective"]


def tried(
    ctx: Context, opts: PretrainParams, data: setup.RunData, rate: tuple[int, float], seed: int, work: Path
) -> dict:
    """Rate `rate` = (k, value) trained and scored, or its result read back when a killed job had finished it."""
    k, value = rate
    done = work / f"rate-{k}.json"
    if done.is_file() and json.loads(done.read_text(encoding="utf-8"))["learning_rate"] == value:
        return json.loads(done.read_text(encoding="utf-8"))
    result = train_rate(ctx, opts, data, value, seed, work / f"run-{k}")
    with io.atomic_output(done) as tmp:
        tmp.write_text(json.dumps(result), encoding="utf-8")
    log.info("pretrain_tune %s/%s/%s: rate %g, dev loss %.4f", *names_of(ctx), value, result["dev_loss"])
    return result


def run(ctx: Context[Params]) -> None:
    opts = ctx.params.pretrain
    if not tuned(opts):
        raise VocabTransferError(
            "pretrain_tune: pretrain.tune.learning_rates is empty (no rate to pick from); set e.g. "
            "[0.0001, 0.0003, 0.001] or leave the stage out"
        )
    if ctx.wildcards["objective"] in TEACHER_OBJECTIVES:
        raise VocabTransferError(
            f"pretrain_tune: the {ctx.wildcards['objective']} objective's teacher is not tuned here; tune its "
            "standard run or set pretrain.learning_rate"
        )
    seed = names.seed_value(ctx.params, 1)  # pretraining seed 1's data order, masks and dropout
    start = time.perf_counter()
    objective = ctx.wildcards["objective"]
    work = Path(paths.fill(paths.PRETRAIN_TUNE_CHECKPOINTS, lang=ctx.lang, method=ctx.method, objective=objective))
    work.mkdir(parents=True, exist_ok=True)
    # 1. the dev split, then the model, tokenizer and training blocks as the pretrain stage loads them
    model_dir = Path(ctx.input["init"]) / "model"
    dev = dev_split(ctx, load_tokenizer(model_dir), opts.tune.dev_lines, work / "dev")
    data = setup.load_data(ctx, tuning_options(opts, opts.learning_rate), model_dir, None, valid_ids=dev)
    # 2. each rate, its result kept as it finishes; then past the grid's edge while the pick lies on it
    results, extended = search(
        list(opts.tune.learning_rates), opts.tune.extend, lambda k, rate: tried(ctx, opts, data, (k, rate), seed, work)
    )
    # 3. the pick
    rates, losses = [r["learning_rate"] for r in results], [r["dev_loss"] for r in results]
    chosen = pick(rates, losses)
    out = {
        "lang": ctx.lang,
        "method": ctx.method,
        "objective": objective,
        "pick": chosen,
        "rule": RULE,
        "steps": opts.tune.steps,
        "dev_lines": opts.tune.dev_lines,
        "extend": opts.tune.extend,
        "dev_blocks": len(data.valid_blocks),
        "pseed": 1,
        "seed": seed,
        "results": results,
        "extended": extended,  # the rates tried beyond the grid (pretrain.tune.extend), in order
        "at_edge": beyond_edge(rates, losses) is not None,  # the pick still the smallest or largest rate tried
        "seconds": time.perf_counter() - start,
        "versions": io.versions(),
    }
    io.write_json(out, ctx.output["tuning"])
    shutil.rmtree(work, ignore_errors=True)
    log.info("pretrain_tune %s/%s/%s: picked %g (%s)", ctx.lang, ctx.method, objective, chosen, RULE)


def picked(path: str | Path) -> float:
    """The learning rate a `pretrain_tune` result picked (the pretrain stage's peak rate when tuning is on)."""
    return float(json.loads(Path(path).read_text(encoding="utf-8"))["pick"])
