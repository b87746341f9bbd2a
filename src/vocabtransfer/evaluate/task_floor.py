"""Stage `floor`: the score of a downstream task's floor for one language, the level below which a
fine-tuned model has not learned the task.

A floor is a predictor without a model, built from the same training and test examples the
finetune_eval jobs read (the split and the subsample depend on the params `seed` only, so they are
the same for every model and fine-tuning seed): NLI's majority class, NER's training lexicon (each
test word's most frequent training tag), QA's sliding-window span (vocabtransfer.evaluate.tasks).
It is scored per test example like the models, so the report compares every model with it by the
same interval as any two models, and a task where no model is above it is "not learned at these
sizes".

Output: results/<lang>/eval/<task>/floor.json — {lang, task, metric, name, value (percent), n_train,
n_test, examples: {ids, clusters, the task's per-example parts}}.
"""

from __future__ import annotations

import logging

from vocabtransfer import io
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.evaluate.tasks import get_task, load_splits, test_clusters
from vocabtransfer.plan.task_options import TaskOptions
from vocabtransfer.plan.finetune_plans import floor_skip_reason
from vocabtransfer.pipeline.stage_spec import Context

log = logging.getLogger(__name__)


def floor(options: TaskOptions, lang: str, task_name: str, seed: int) -> dict:
    """The floor's result for one language and task, whose options (`eval.tasks.<task>`) are `options`."""
    task = get_task(task_name, options)
    key = f"eval.tasks.{task_name}.data.{lang}"
    spec = options.data[lang]
    if spec is None:
        raise VocabTransferError(f"{key} is null: the task has no data for {lang!r}; give it a `train` source")
    splits = load_splits(task, spec, key, seed=seed)
    result = task.floor(splits)
    result["examples"]["clusters"] = test_clusters(splits.test, task_name)
    return {
        "lang": lang,
        "task": task_name,
        "metric": task.metric,
        "name": result["name"],
        "value": round(float(result["value"]), 4),
        "n_train": len(splits.train),
        "n_test": len(splits.test),
        "examples": result["examples"],
    }


def run(ctx: Context) -> None:
    why = floor_skip_reason(ctx.params, ctx.wildcards)
    if why is not None:
        raise VocabTransferError(f"floor: no job {ctx.wildcards['task']} for {ctx.lang!r}: {why}")
    options = ctx.params.eval.task(ctx.wildcards["task"])
    out = floor(options, ctx.lang, ctx.wildcards["task"], ctx.seed)
    io.write_json({**out, "versions": io.versions()}, ctx.output["floor"])
    log.info(
        "%s %s floor (%s): %s %.2f on %d test examples",
        ctx.lang,
        out["task"],
        out["name"],
        out["metric"],
        out["value"],
        out["n_test"],
    )
