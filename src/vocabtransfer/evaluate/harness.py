"""Stage `lm_eval`: one causal model judged zero-shot (or few-shot) by EleutherAI's lm-evaluation-harness.

One job per language and model (`source`, every `<method>-init-pseed<k>`, every pretrained
`<method>-<objective>-pseed<k>`; vocabtransfer.pipeline.names) calls `lm_eval.simple_evaluate` with the
harness's HF model class (`hf`) on the model's directory, on the device the job gets, over the tasks of
`lm_eval.tasks` for the job's language, with `lm_eval.num_fewshot`, `lm_eval.limit` and
`lm_eval.batch_size`.

Tasks are looked up by a `TaskManager` that adds this project's offline task folder
(`vocabtransfer/evaluate/harness_tasks`: `local_xnli_{sw,de}`, `local_tydiqa_sw`, `local_xquad_de`, read
from $VOCABTRANSFER_DATA) and the user's own folder of task YAMLs (`lm_eval.include_path`, whose every file
is a dependency of the jobs) to the harness's catalogue; a catalogue task (`belebele_swh_Latn`, `xcopa_sw`)
passes straight through, which needs its dataset from the hub. An entry of `lm_eval.tasks` is a task
name, in which `{lang}` becomes the job's language (`local_xnli_{lang}`), or `<lang>:<task>` for that
language only (`sw:belebele_swh_Latn`, `de:belebele_deu_Latn`).

Outputs (results/<lang>/lm_eval/<model>/):

* scores.json: per task, the harness's aggregate of every metric (`acc`, `f1`, `exact_match`; the
  `,none` filter suffix dropped) and the number of items; `{"not_run": reason}` for a masked LM;
* samples.parquet: one row per task, item and metric with an item score (the harness's `log_samples`; a
  corpus-level metric such as bleu has none): `doc_id`, `cluster`
  (what items share: an XNLI premise, a QA passage; the item itself for a catalogue task), `value`,
  `target`, the choices' log-likelihoods (multiple choice) or the generated text, so the report pairs
  models item by item (vocabtransfer.report.harness_table).
"""

from __future__ import annotations

import json
import logging
import numbers
import time
from importlib.metadata import version
from pathlib import Path

import pyarrow as pa
from transformers import AutoConfig

import lm_eval

from vocabtransfer import io
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.plan.finetune_plans import parse_model
from vocabtransfer.model.modeling import detect_kind
from vocabtransfer.plan.eval_params import LmEvalParams
from vocabtransfer.plan.harness_plans import (
    check_include,
    check_tasks,
    include_key,
    skip_reason,
    task_manager,
    task_names,
)
from vocabtransfer.pipeline.stage_spec import Context

log = logging.getLogger(__name__)

MASKED_REASON = "lm-evaluation-harness scores causal LMs: a masked LM has no left-to-right likelihood"
SAMPLE_SCHEMA = pa.schema(
    [
        ("task", pa.string()),
        ("doc_id", pa.int64()),
        ("cluster", pa.string()),
        ("metric", pa.string()),
        ("value", pa.float64()),
        ("target", pa.string()),
        ("loglikelihoods", pa.list_(pa.float64())),
        ("response", pa.string()),
    ]
)


def causal_reason(model_dir: Path) -> str | None:
    """Why the model in `model_dir` cannot be scored (a masked LM), None for a causal LM."""

    return None if detect_kind(AutoConfig.from_pretrained(model_dir)) == "causal" else MASKED_REASON


def evaluate(
    model_dir: Path, names: list[str], opts: LmEvalParams, *, device: str = "cpu", seed: int = 0, manager=None
) -> dict:
    """`lm_eval.simple_evaluate` of the model in `model_dir` on `names` with `opts`' num_fewshot, limit, batch_size
    and precision (bf16: the forward passes under torch.autocast over the float32 weights), with per-item
    samples; the harness's own stderr bootstrap is left out (the report computes paired intervals from the
    samples)."""
    manager = manager or task_manager()
    check_tasks(names, manager.all_tasks)
    args = {"pretrained": str(model_dir), "dtype": "float32"}
    if opts.precision == "bf16":  # the harness's own autocast around each forward pass, its log-softmax in float32
        args |= {"mixed_precision_dtype": "bfloat16", "softmax_dtype": "float32"}
    return lm_eval.simple_evaluate(
        model="hf",
        model_args=args,
        tasks=names,
        num_fewshot=opts.num_fewshot,
        limit=opts.limit,
        batch_size=opts.batch_size,
        device=device,
        log_samples=True,
        bootstrap_iters=0,
        task_manager=manager,
        random_seed=seed,
        numpy_random_seed=seed,
        torch_random_seed=seed,
        fewshot_random_seed=seed,
    )


def _metric(key: str) -> str:
    return key.split(",", 1)[0]


def scores(results: dict) -> dict[str, dict]:
    """task -> {metric: aggregate value, `n`: items scored} from the harness's results."""
    out = {}
    for task, values in results["results"].items():
        if task not in results.get("samples", {}):
            continue  # a group's own line: its subtasks have theirs
        kept = {
            _metric(k): float(v)
            for k, v in values.items()
            if "," in k and "_stderr" not in k and isinstance(v, (int, float))
        }
        out[task] = {**kept, "n": len(results["samples"][task])}
    return out


def _response(sample: dict) -> tuple[list[float], str]:
    """(the choices' log-likelihoods, '') for a multiple-choice item; ([], generated text) otherwise."""
    resps = sample.get("filtered_resps") or []
    if resps and all(isinstance(r, (list, tuple)) and len(r) == 2 and isinstance(r[1], bool) for r in resps):
        return [float(r[0]) for r in resps], ""
    text = resps[0] if resps else ""
    return [], text if isinstance(text, str) else json.dumps(text, ensure_ascii=False, default=str)


def samples_table(results: dict) -> pa.Table:
    """One row per task, item and metric of the harness's logged samples (SAMPLE_SCHEMA)."""
    rows: dict[str, list] = {name: [] for name in SAMPLE_SCHEMA.names}
    for task, samples in results.get("samples", {}).items():
        for sample in samples:
            doc = sample.get("doc") or {}
            cluster = str(doc.get("cluster", f"item {sample['doc_id']}"))
            lls, text = _response(sample)
            # a corpus-level metric (bleu, chrf) logs a (reference, prediction) pair per item, no item score
            for metric in (m for m in sample.get("metrics", []) if isinstance(sample.get(m), numbers.Real)):
                for key, value in (
                    ("task", task),
                    ("doc_id", int(sample["doc_id"])),
                    ("cluster", cluster),
                    ("metric", metric),
                    ("value", float(sample[metric])),
                    ("target", str(sample.get("target", ""))),
                    ("loglikelihoods", lls),
                    ("response", text),
                ):
                    rows[key].append(value)
    return pa.table(rows, schema=SAMPLE_SCHEMA)


def run(ctx: Context) -> None:
    start = time.perf_counter()
    lang, model = ctx.lang, ctx.wildcards["model"]
    why = skip_reason(ctx.params, ctx.wildcards)
    if why is not None:
        raise VocabTransferError(f"lm_eval: no job {model} for {lang!r}: {why}")
    info = parse_model(ctx.params, model)
    model_dir = ctx.input["model"] / info["subdir"] if info["subdir"] else ctx.input["model"]
    if not (model_dir / "config.json").is_file():
        raise VocabTransferError(
            f"{model_dir}: no model directory (config.json missing); run the stage that produces model {model!r} first"
        )
    names, opts = task_names(ctx.params, lang), ctx.params.lm_eval
    out = {
        "lang": lang,
        "model": model,
        "method": info["method"],
        "objective": info["objective"],
        "pseed": info["pseed"],
        "tasks": names,
        "num_fewshot": opts.num_fewshot,
        "limit": opts.limit,
        "precision": opts.precision,
    }
    table = pa.table({n: [] for n in SAMPLE_SCHEMA.names}, schema=SAMPLE_SCHEMA)
    reason = causal_reason(model_dir)
    if reason:
        out["not_run"] = reason
    else:
        check_include(ctx.params, "lm_eval")
        results = evaluate(
            model_dir, names, opts, device=ctx.device, seed=ctx.seed, manager=task_manager(include_key(ctx.params))
        )
        out["scores"], table = scores(results), samples_table(results)
    out.update(seconds=round(time.perf_counter() - start, 3), versions={**io.versions(), "lm_eval": version("lm_eval")})
    io.write_parquet(table, ctx.output["samples"])
    io.write_json(out, ctx.output["scores"])
    log.info(
        "%s lm_eval %s: %s",
        lang,
        model,
        out.get("not_run")
        or "; ".join(
            f"{t} " + ", ".join(f"{k} {v:.3f}" for k, v in s.items() if k != "n") for t, s in out["scores"].items()
        ),
    )
