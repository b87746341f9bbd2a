"""What the report reads: the plan of every artefact the study produced (paths from
vocabtransfer.pipeline.paths, runs from vocabtransfer.pipeline.names) and one language's results.

A section whose files are missing shows what is missing instead of failing (`Language.missing`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from vocabtransfer import io
from vocabtransfer.pipeline import names
from vocabtransfer.pipeline import paths
from vocabtransfer.evaluate.tasks import available
from vocabtransfer.plan.objectives import OBJECTIVE_NAMES
from vocabtransfer.plan.task_options import EvalTasks
from vocabtransfer.plan.report_plans import Plan, Run

OBJECTIVE_ORDER = ("init", *OBJECTIVE_NAMES)  # the initialisation, then the objectives in their registry's order


@lru_cache(maxsize=None)
def task_order() -> tuple[str, ...]:
    """The registered downstream tasks (vocabtransfer.evaluate.tasks) in the order of the params section
    `eval.tasks` (`EvalTasks`: that of params.yaml and docs/parameters.md, nli, qa, ner); a task without a
    section after them, by name."""
    registered = available()
    keys = [f.name for f in dataclasses.fields(EvalTasks) if f.name in registered]
    return tuple(keys + [t for t in registered if t not in keys])


def _json(path: Path) -> dict | None:
    return io.read_json(path) if path.is_file() else None


def _parquet(path: Path):
    return io.read_parquet(path).to_pandas() if path.is_file() else None


@dataclass
class Language:
    """One language's results (None / empty where missing)."""

    lang: str
    corpus: dict | None = None
    tokenizer: dict | None = None
    pretok: dict | None = None
    init_eval: list[dict] | None = None
    curves: dict = field(default_factory=dict)  # Run -> DataFrame of metrics.parquet
    runs: dict = field(default_factory=dict)  # Run -> stats.json
    blocks: dict = field(default_factory=dict)  # Run -> DataFrame of valid_blocks.parquet
    curve_blocks: dict = field(default_factory=dict)  # Run -> DataFrame of valid_curve.parquet (where written)
    token_frequency: Any = None  # DataFrame: one row per model × pretraining seed × bucket
    token_blocks: Any = None  # DataFrame: per model, bucket and held-out block
    bits_per_byte: Any = None  # DataFrame: per model, pretraining seed and valid line (bits, bytes, tokens)
    gradients: list[Run] = field(default_factory=list)  # runs with a gradient plot
    # task -> model group (`focus-standard`, `focus-init`, `source`) -> (pretraining seed, fine-tuning seed) -> result
    evals: dict = field(default_factory=dict)
    floors: dict = field(default_factory=dict)  # task -> floor.json (vocabtransfer.evaluate.task_floor)
    lm_eval: dict = field(default_factory=dict)  # model -> (scores.json, samples DataFrame) of its lm_eval job
    tuning: dict = field(default_factory=dict)  # (method, objective) -> its pretrain_tune tuning.json
    cooldown: dict = field(default_factory=dict)  # Run -> DataFrame of cooldown.parquet (schedule wsd: decayed ends)
    skipped: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)

    def methods(self) -> list[str]:
        return list(dict.fromkeys(m for m, _, _ in self.curves))


def read_language(lang: str, p: Plan, root: Path) -> Language:
    out = Language(lang=lang, skipped=dict(p.skipped.get(lang, {})))

    def need(template: str, **wc) -> Path:
        path = root / paths.fill(template, lang=lang, **wc)
        if not path.exists():
            out.missing.append(paths.fill(template, lang=lang, **wc))
        return path

    out.corpus = _json(need(paths.CORPUS_STATS))
    out.tokenizer = _json(need(paths.TOKENIZER_STATS))
    out.pretok = _json(need(paths.PRETOK_STATS))
    table = _parquet(need(paths.INIT_EVAL))
    out.init_eval = table.to_dict("records") if table is not None else None
    for run in (r for r in p.pretrain if r not in p.absent.get(lang, set())):
        m, o, s = run
        directory = need(paths.PRETRAIN_DIR, method=m, objective=o, pseed=s)
        for store, name, reader in (
            (out.curves, "metrics.parquet", _parquet),
            (out.runs, "stats.json", _json),
            (out.blocks, "valid_blocks.parquet", _parquet),
        ):
            value = reader(directory / name)
            if value is not None:
                store[run] = value
        curve = _parquet(directory / "valid_curve.parquet")  # optional: runs before it was written have none
        if curve is not None:
            out.curve_blocks[run] = curve
        ends = _parquet(directory / "cooldown.parquet")  # schedule wsd only
        if ends is not None:
            out.cooldown[run] = ends
    if p.token_frequency:
        out.token_frequency = _parquet(need(paths.TOKEN_FREQUENCY_LOSS))
        out.token_blocks = _parquet(need(paths.TOKEN_FREQUENCY_BLOCKS))
        out.bits_per_byte = _parquet(need(paths.BITS_PER_BYTE))
    for m, o, s in p.gradients:
        if need(paths.GRADIENT_PLOT, method=m, objective=o, pseed=s).is_file():
            out.gradients.append((m, o, s))
    for job in p.evals.get(lang, []):
        res = _json(need(paths.EVAL_RESULT, task=job["task"], model=job["model"], seed=str(job["seed"])))
        if res is not None and res.get("not_run"):  # no task head for the architecture: a skip, not a score
            out.skipped[job["task"]] = res["not_run"]
        elif res is not None:
            parsed = names.parse_model_name(job["model"])
            runs = out.evals.setdefault(job["task"], {}).setdefault(parsed.group, {})
            runs[(parsed.pseed or 0, int(job["seed"]))] = res
    for task in p.tasks(lang):
        floor = _json(need(paths.EVAL_FLOOR, task=task))
        if floor is not None:
            out.floors[task] = floor
    for m, o in p.tune.get(lang, []):
        tuning = _json(need(paths.PRETRAIN_TUNE, method=m, objective=o))
        if tuning is not None:
            out.tuning[(m, o)] = tuning
    for model in p.lm_eval.get(lang, []):
        scores = _json(need(paths.LM_EVAL_SCORES, model=model))
        samples = _parquet(need(paths.LM_EVAL_SAMPLES, model=model))
        if scores is not None and samples is not None:
            out.lm_eval[model] = (scores, samples)
    return out
