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

import difflib
import json
import logging
import numbers
import time
from dataclasses import dataclass
from functools import lru_cache
from importlib.metadata import version
from pathlib import Path
from typing import Literal

import pyarrow as pa
import yaml

from vocabtransfer import io
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.model import source_kind
from vocabtransfer.evaluate.finetune_eval import expand_models, model_reason, parse_model, producible_models
from vocabtransfer.pipeline import paths
from vocabtransfer.model.modeling import detect_kind
from vocabtransfer.pipeline.typed import Params, option

log = logging.getLogger(__name__)

TASKS_DIR = Path(__file__).resolve().parent / "harness_tasks"
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


def models(params: Params) -> list[str]:
    """The models `lm_eval.models` names (every model some stage produces when it is null)."""
    entries = params.section("lm_eval", LmEvalParams).models
    if entries is None:
        return producible_models(params)
    try:
        return expand_models(params, entries)
    except VocabTransferError as exc:  # the key that names it, not eval.models
        raise VocabTransferError(f"lm_eval.models: {str(exc).removeprefix('eval: ')}") from exc


def task_names(params: Params, lang: str) -> list[str]:
    """The harness task names `lm_eval.tasks` gives `lang` (module docstring), in params order."""
    out: list[str] = []
    for entry in params.section("lm_eval", LmEvalParams).tasks:
        only, _, name = entry.rpartition(":")
        name = name.replace("{lang}", lang)
        if only in ("", lang) and name not in out:
            out.append(name)
    return out


def include_folder(params: Params) -> Path | None:
    """The user's task folder (`lm_eval.include_path`), None when not set."""
    folder = params.section("lm_eval", LmEvalParams).include_path
    return Path(folder).expanduser() if folder else None


def check_include(params: Params, source: str = "params.yaml") -> None:
    """`lm_eval.include_path`, when set, is a folder with task YAMLs: else one error naming the key and the fix."""
    folder = include_folder(params)
    if folder is None:
        return
    if not folder.is_dir():
        raise VocabTransferError(
            f"{source}: lm_eval.include_path: {folder} is not a folder (relative paths resolve "
            f"against the working directory, {Path.cwd()}); give the folder of your task YAMLs"
        )
    if not any(folder.rglob("*.yaml")):
        raise VocabTransferError(
            f"{source}: lm_eval.include_path: {folder} has no .yaml task file; put your "
            "harness task YAMLs in it (docs/evaluation.md#adding-a-zero-shot-task)"
        )


@lru_cache(maxsize=4)
def task_manager(include: str | None = None):
    """The harness's catalogue plus this project's offline task folder and the user's (`include`, when given),
    indexed once per process (seconds)."""
    from lm_eval.tasks import TaskManager  # lm_eval: optional, heavy

    return TaskManager(include_path=[str(TASKS_DIR)] + ([include] if include else []))


def check_tasks(names: list[str], known: list[str]) -> None:
    """Every name is a task, group or tag the harness knows: else one error naming `lm_eval.tasks` and the
    closest names it does know."""
    unknown = [n for n in names if n not in set(known)]
    if unknown:
        close = {n: difflib.get_close_matches(n, known, n=3, cutoff=0.5) for n in unknown}
        said = "; ".join(f"{n!r} (closest: {', '.join(c) if c else 'none'})" for n, c in close.items())
        raise VocabTransferError(
            f"lm_eval.tasks: the harness knows no task {said}; the offline tasks are {', '.join(sorted(local_tasks()))}"
        )


class _TaskLoader(yaml.SafeLoader):
    """A task YAML's own tags (`!function module.name`) read as plain strings."""


_TaskLoader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))


@lru_cache(maxsize=4)
def local_tasks(include: str | None = None) -> dict[str, list[str]]:
    """The offline tasks shipped in TASKS_DIR -> the data files they read (relative to the data folder), and
    the task, group and tag names of the user's folder `include` -> [] (their files are the jobs'
    dependencies through `data_files`); read once per process (the job planner asks for every job)."""
    out = {}
    for path in sorted(TASKS_DIR.glob("*.yaml")):
        spec = yaml.load(path.read_text(encoding="utf-8"), Loader=_TaskLoader)
        kwargs = spec.get("dataset_kwargs") or {}
        out[spec["task"]] = [kwargs[k] for k in ("file", "train_file") if kwargs.get(k)]
    for path in sorted(Path(include).rglob("*.yaml")) if include else []:
        try:
            spec = yaml.load(path.read_text(encoding="utf-8"), Loader=_TaskLoader)
        except yaml.YAMLError as exc:
            raise VocabTransferError(
                f"{path}: not YAML ({str(exc).splitlines()[0]}); lm_eval.include_path reads "
                "every .yaml file in its folder as a harness task"
            ) from exc
        spec = spec if isinstance(spec, dict) else {}
        tags = spec.get("tag") or []
        for name in [spec.get("task"), spec.get("group"), *([tags] if isinstance(tags, str) else tags)]:
            if isinstance(name, str):
                out.setdefault(name, [])
    return out


def include_key(params: Params) -> str | None:
    """The user's task folder as the key of `task_manager` and `local_tasks` (None when not set)."""
    folder = include_folder(params)
    return str(folder) if folder else None


def causal_reason(model_dir: Path) -> str | None:
    """Why the model in `model_dir` cannot be scored (a masked LM), None for a causal LM."""
    from transformers import AutoConfig  # transformers: heavy, not at CLI start-up

    return None if detect_kind(AutoConfig.from_pretrained(model_dir)) == "causal" else MASKED_REASON


def evaluate(
    model_dir: Path, names: list[str], opts: LmEvalParams, *, device: str = "cpu", seed: int = 0, manager=None
) -> dict:
    """`lm_eval.simple_evaluate` of the model in `model_dir` on `names` with `opts`' num_fewshot, limit, batch_size
    and precision (bf16: the forward passes under torch.autocast over the float32 weights), with per-item
    samples; the harness's own stderr bootstrap is left out (the report computes paired intervals from the
    samples)."""
    import lm_eval  # lm_eval: optional, heavy

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


def skip_reason(params: Params, wildcards: dict) -> str | None:
    """None when the job (lang, model) runs, else why: no task for the language, or a model that does not
    exist there."""
    if not task_names(params, wildcards["lang"]):
        return f"lm_eval.tasks has no task for {wildcards['lang']!r}"
    if source_kind.kind(params.source_model) == "masked":
        return (
            f"the harness scores causal LMs and source_model {params.source_model} is a masked LM: its "
            "models have no likelihood of a text"
        )
    return model_reason(params, wildcards["lang"], wildcards["model"])


def data_files(params: Params, wildcards: dict) -> dict[str, Path]:
    """The local files the job's offline tasks read (a catalogue task's data come from the hub)."""
    shipped = local_tasks()
    files = [f for name in task_names(params, wildcards["lang"]) for f in shipped.get(name, [])]
    out = {f"data_{i}": paths.data_path(f) for i, f in enumerate(files)}  # keys alike across languages
    folder = include_folder(params)
    if folder is not None and folder.is_dir():  # the user's tasks: every file, so that an edit reruns the jobs
        own = sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        out.update({f"task_file_{i}": p for i, p in enumerate(own)})
    return out


def run(ctx) -> None:
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
    names, opts = task_names(ctx.params, lang), ctx.section("lm_eval", LmEvalParams)
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
