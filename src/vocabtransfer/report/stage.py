"""Stage `report`: the study's results as one Markdown file, `results/report.md`, with its figures.

Reads every artefact the study produced (paths from vocabtransfer.pipeline.paths):

* the set-up: params, results/source/head_stats.json, and per language the corpus, tokenizer and
  pre-tokenisation stats;
* per language: init_eval.parquet (loss right after initialisation); every continued-pretraining run
  (`pretrain_jobs`: metrics.parquet, stats.json); token_frequency_loss.parquet; the gradient-scenario
  plots; every downstream eval JSON (`eval_plan`).

Writes results/report.md (readable on GitHub; links are relative), PNG figures in
results/report/figures/ (byte-identical for identical inputs), the valid-loss curves as CSV in
results/report/curves/<lang>.csv (DVC plots) and results/report/metrics.json (final numbers per
language, model and task; DVC metrics). A section without data says what is missing instead of
failing; "What was skipped and why" lists it all.

Downstream numbers: mean ± standard deviation over seeds of each run's main metric, and for every
model the paired bootstrap difference to `random-<same objective>` (vocabtransfer.evaluate.stats).
"""

from __future__ import annotations

import csv
import io as _io
import logging
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vocabtransfer import io
from vocabtransfer.pipeline import paths as P
from vocabtransfer.evaluate import stats as S

log = logging.getLogger(__name__)

TASKS = ("nli", "qa", "ner")
OBJECTIVE_ORDER = ("init", "standard", "selfish")
DPI = 100


# 1. what the study asked for ------------------------------------------------------------------------

def pretrain_jobs(params: dict, lang: str | None = None) -> list[tuple[str, str]]:
    """The (method, objective) continued-pretraining runs params ask for (of one language: those it has)."""
    from vocabtransfer.train.pretrain import pretrain_jobs as jobs

    return list(jobs(params, lang))


def _result_files(root: Path, lang: str) -> list[dict]:
    """Eval jobs whose result files exist (`results/{lang}/eval/{task}/{model}/seed{seed}.json`)."""
    pattern = re.compile(r"seed(\d+)\.json")
    jobs = []
    for path in sorted((root / P.fill(P.EVAL_RESULT.split("/{task}")[0], lang=lang)).glob("*/*/seed*.json")):
        m = pattern.fullmatch(path.name)
        if m:
            jobs.append({"task": path.parent.parent.name, "model": path.parent.name, "seed": int(m.group(1))})
    return jobs


def eval_plan(params: dict, lang: str, root: Path = Path(".")) -> tuple[list[dict], dict[str, str]]:
    """The downstream eval jobs of a language and the tasks it skips, with the reason."""
    try:
        from vocabtransfer.evaluate.finetune_eval import eval_jobs, skipped_tasks
    except ImportError:  # a build without the finetune_eval stage: report the result files present
        jobs = _result_files(root, lang)
        have = {j["task"] for j in jobs}
        return jobs, {t: "no result files (this build has no finetune_eval stage to give the reason)"
                      for t in TASKS if t not in have}
    return list(eval_jobs(params, lang)), dict(skipped_tasks(params, lang))


@dataclass
class Plan:
    """Every artefact the report reads, per language."""

    languages: list[str]
    pretrain: list[tuple[str, str]] = field(default_factory=list)
    gradients: list[tuple[str, str]] = field(default_factory=list)
    token_frequency: bool = False
    evals: dict[str, list[dict]] = field(default_factory=dict)
    skipped: dict[str, dict[str, str]] = field(default_factory=dict)
    # per language, the (method, objective) runs it has no model for (its init method cannot run there)
    absent: dict[str, set[tuple[str, str]]] = field(default_factory=dict)


def plan(params: dict, root: Path = Path(".")) -> Plan:
    from vocabtransfer.pipeline.stages import STAGES

    gradient_stage = STAGES.get("gradient_scenarios")
    gradients = ([(c["method"], c["objective"]) for c in gradient_stage.combinations(params)]
                 if gradient_stage else [])
    out = Plan(languages=list(params["languages"]), pretrain=pretrain_jobs(params), gradients=gradients,
               token_frequency="token_frequency_loss" in STAGES)
    for lang in out.languages:
        out.evals[lang], out.skipped[lang] = eval_plan(params, lang, root)
        out.absent[lang] = set(out.pretrain) - set(pretrain_jobs(params, lang))
    return out


def _key(*parts: str) -> str:
    return re.sub(r"\W", "_", "_".join(parts))


def inputs(params: dict, wildcards: dict) -> dict[str, str]:
    """The stage's inputs: every artefact `plan(params)` names."""
    p = plan(params)
    out = {"head_stats": P.SOURCE_HEAD_STATS}
    for lang in p.languages:
        out[_key("init_eval", lang)] = P.fill(P.INIT_EVAL, lang=lang)
        out[_key("corpus_stats", lang)] = P.fill(P.CORPUS_STATS, lang=lang)
        out[_key("tokenizer_stats", lang)] = P.fill(P.TOKENIZER_STATS, lang=lang)
        out[_key("pretok_stats", lang)] = P.fill(P.PRETOK_STATS, lang=lang)
        absent = p.absent.get(lang, set())
        for method, objective in (pair for pair in p.pretrain if pair not in absent):
            out[_key("pretrain", lang, method, objective)] = P.fill(P.PRETRAIN_DIR, lang=lang, method=method,
                                                                    objective=objective)
        if p.token_frequency:
            out[_key("token_frequency_loss", lang)] = P.fill(P.TOKEN_FREQUENCY_LOSS, lang=lang)
        for method, objective in (pair for pair in p.gradients if pair not in absent):
            out[_key("gradients", lang, method, objective)] = P.fill(P.GRADIENT_SCENARIOS, lang=lang,
                                                                     method=method, objective=objective)
        for job in p.evals[lang]:
            out[_key("eval", lang, job["task"], job["model"], f"seed{job['seed']}")] = P.fill(
                P.EVAL_RESULT, lang=lang, task=job["task"], model=job["model"], seed=str(job["seed"]))
    return out


def curves_csv(lang: str) -> str:
    return f"{P.REPORT_CURVES}/{lang}.csv"


def dvc_plots(params: dict) -> dict[str, dict]:
    """Top-level DVC plot definitions: per language, the valid loss of every run against the step."""
    models = [f"{m}-{o}" for m, o in pretrain_jobs(params)]
    if not models:
        return {}
    return {f"valid_loss_{lang}": {"template": "linear", "x": "step", "y": {curves_csv(lang): list(models)},
                                   "title": f"{lang}: valid loss during continued pretraining",
                                   "x_label": "step", "y_label": "valid loss"}
            for lang in params["languages"]}


# 2. reading ------------------------------------------------------------------------------------------

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
    curves: dict = field(default_factory=dict)  # (method, objective) -> DataFrame of metrics.parquet
    runs: dict = field(default_factory=dict)  # (method, objective) -> stats.json
    token_frequency: object = None  # DataFrame
    gradients: list[tuple[str, str]] = field(default_factory=list)  # runs with a gradient plot
    evals: dict = field(default_factory=dict)  # task -> model -> seed -> result dict
    skipped: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)


def read_language(lang: str, p: Plan, root: Path) -> Language:
    out = Language(lang=lang, skipped=dict(p.skipped.get(lang, {})))

    def need(template: str, **wc) -> Path:
        path = root / P.fill(template, lang=lang, **wc)
        if not path.exists():
            out.missing.append(P.fill(template, lang=lang, **wc))
        return path

    out.corpus = _json(need(P.CORPUS_STATS))
    out.tokenizer = _json(need(P.TOKENIZER_STATS))
    out.pretok = _json(need(P.PRETOK_STATS))
    table = _parquet(need(P.INIT_EVAL))
    out.init_eval = table.to_dict("records") if table is not None else None
    for method, objective in p.pretrain:
        run = need(P.PRETRAIN_DIR, method=method, objective=objective)
        metrics = _parquet(run / "metrics.parquet")
        if metrics is not None:
            out.curves[(method, objective)] = metrics
        st = _json(run / "stats.json")
        if st is not None:
            out.runs[(method, objective)] = st
    if p.token_frequency:
        out.token_frequency = _parquet(need(P.TOKEN_FREQUENCY_LOSS))
    for method, objective in p.gradients:
        if need(P.GRADIENT_PLOT, method=method, objective=objective).is_file():
            out.gradients.append((method, objective))
    for job in p.evals.get(lang, []):
        res = _json(need(P.EVAL_RESULT, task=job["task"], model=job["model"], seed=str(job["seed"])))
        if res is not None:
            out.evals.setdefault(job["task"], {}).setdefault(job["model"], {})[int(job["seed"])] = res
    return out


# 3. numbers ------------------------------------------------------------------------------------------

def _finite(x) -> bool:
    return x is not None and isinstance(x, (int, float, np.floating, np.integer)) and math.isfinite(float(x))


def fmt(x, digits: int = 3) -> str:
    return f"{float(x):.{digits}f}" if _finite(x) else "–"


def signed(x, digits: int = 1) -> str:
    return f"{float(x):+.{digits}f}"


def model_sort_key(model: str, method_order: list[str]) -> tuple:
    if model == "source":
        return (-1, 0, model)
    method, _, objective = model.rpartition("-")
    rank = method_order.index(method) if method in method_order else len(method_order)
    obj = OBJECTIVE_ORDER.index(objective) if objective in OBJECTIVE_ORDER else len(OBJECTIVE_ORDER)
    return (rank, obj, model)


@dataclass
class Cell:
    mean: float
    std: float
    n_seeds: int
    diff: S.Difference | None = None
    note: str = ""


def downstream(lang: Language, params: dict, method_order: list[str]) -> dict[str, dict[str, Cell]]:
    """task -> model -> Cell: mean ± std of the main metric over seeds and the paired difference to
    `random-<objective>`."""
    opts = params.get("report") or {}
    resamples, confidence = int(opts.get("bootstrap_resamples", 1000)), float(opts.get("confidence", 0.95))
    seed = int(params.get("seed", 0))
    out: dict[str, dict[str, Cell]] = {}
    for task, models in lang.evals.items():
        cells = {}
        for model, runs in models.items():
            values = [r["metrics"][r["metric"]] for r in runs.values()]
            mean, std = S.mean_std(values)
            cell = Cell(mean=mean, std=std, n_seeds=len(values))
            objective = next(iter(runs.values())).get("objective")
            baseline = f"random-{objective}" if objective else None
            if model == "source" or baseline is None:
                cell.note = "no random baseline for the source model"
            elif model == baseline:
                cell.note = "baseline"
            elif baseline not in models:
                cell.note = f"no {baseline} result"
            else:
                cell.diff = S.paired_bootstrap(
                    task, {s: r["examples"] for s, r in models[baseline].items()},
                    {s: r["examples"] for s, r in runs.items()}, resamples=resamples, seed=seed,
                    confidence=confidence)
                if cell.diff is None:
                    cell.note = f"no seed shared with {baseline}"
            cells[model] = cell
        out[task] = dict(sorted(cells.items(), key=lambda kv: model_sort_key(kv[0], method_order)))
    return out


def final_valid_loss(curve) -> float:
    v = curve["valid_loss"].dropna()
    return float(v.iloc[-1]) if len(v) else math.nan


def initial_valid_loss(curve) -> float:
    v = curve.loc[curve["step"] == 0, "valid_loss"].dropna()
    return float(v.iloc[0]) if len(v) else math.nan


# 4. figures ------------------------------------------------------------------------------------------

def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> None:
    fig.savefig(path, format="png", dpi=DPI, metadata={"Software": None})
    _plt().close(fig)


def plot_curves(lang: Language, path: Path) -> None:
    """Valid loss against the step, one panel per objective, one line per method."""
    plt = _plt()
    objectives = [o for o in OBJECTIVE_ORDER if any(ob == o for _, ob in lang.curves)]
    fig, axes = plt.subplots(1, len(objectives), figsize=(5.5 * len(objectives), 4), sharey=True, squeeze=False)
    methods = sorted({m for m, _ in lang.curves})
    colors = {m: plt.cm.tab10(i % 10) for i, m in enumerate(methods)}
    for ax, objective in zip(axes[0], objectives):
        for (method, ob), curve in sorted(lang.curves.items()):
            if ob != objective:
                continue
            c = curve.dropna(subset=["valid_loss"])
            ax.plot(c["step"], c["valid_loss"], marker="o", markersize=3, label=method, color=colors[method])
        ax.set_title(objective)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("valid loss (standard cross-entropy)")
    fig.suptitle(f"{lang.lang}: continued pretraining")
    fig.tight_layout()
    _save(fig, path)


def plot_downstream(lang: str, cells: dict[str, dict[str, Cell]], path: Path) -> None:
    """Mean ± std over seeds per model, one panel per task."""
    plt = _plt()
    tasks = [t for t in TASKS if t in cells] + sorted(t for t in cells if t not in TASKS)
    n = max(len(c) for c in cells.values())
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.5 * len(tasks), 1.2 + 0.3 * n), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        models = list(cells[task])[::-1]
        y = np.arange(len(models))
        ax.barh(y, [cells[task][m].mean for m in models], xerr=[cells[task][m].std for m in models],
                color="tab:blue", capsize=2)
        ax.set_yticks(y, models, fontsize=8)
        ax.set_title(task)
        ax.set_xlabel("score (percent), mean ± std over seeds")
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(f"{lang}: downstream tasks")
    fig.tight_layout()
    _save(fig, path)


# 5. Markdown -----------------------------------------------------------------------------------------

def md_table(headers: list[str], rows: list[list[str]]) -> str:
    from tabulate import tabulate

    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


def bold_best(values: list[float], texts: list[str], higher: bool) -> list[str]:
    finite = [v for v in values if _finite(v)]
    if not finite:
        return texts
    best = max(finite) if higher else min(finite)
    return [f"**{t}**" if _finite(v) and v == best else t for v, t in zip(values, texts)]


def _rel(target: str) -> str:
    """A link from report.md to a path relative to the root."""
    return Path(os.path.relpath(target, Path(P.REPORT).parent)).as_posix()


def setup_section(params: dict, head: dict | None, langs: list[Language], p: Plan) -> list[str]:
    lines = ["## Set-up", ""]
    lines.append(f"* Source model: `{params.get('source_model')}`"
                 + (f" ({head.get('model_class')}, {head.get('kind')} LM)" if head else ""))
    if head is None:
        lines.append(f"* LM head: {P.SOURCE_HEAD_STATS} missing")
    elif head.get("skipped"):
        lines.append("* LM head: the checkpoint's own")
    else:
        lines.append(f"* LM head: the checkpoint has none; trained for {head.get('steps')} steps on "
                     f"`{Path(str(head.get('text'))).name}` (held-out loss {fmt(head.get('loss_before'))} → "
                     f"{fmt(head.get('loss_after'))})")
    pre = params.get("pretrain") or {}
    steps = sorted({r.get("steps") for lang in langs for r in lang.runs.values() if r.get("steps") is not None})
    lines.append(f"* Continued pretraining: {len(p.pretrain)} runs per language "
                 f"({', '.join(f'{m}-{o}' for m, o in p.pretrain) or 'none configured'})"
                 + (f", {', '.join(map(str, steps))} steps" if steps else
                    (f", {pre['steps']} steps" if "steps" in pre else "")))
    seeds = sorted({s for lang in langs for models in lang.evals.values() for runs in models.values() for s in runs})
    lines.append(f"* Downstream evaluation: seeds {', '.join(map(str, seeds)) if seeds else '–'}; "
                 f"paired bootstrap with {(params.get('report') or {}).get('bootstrap_resamples', 1000)} resamples, "
                 f"{100 * float((params.get('report') or {}).get('confidence', 0.95)):g}% intervals")
    lines.append("")
    rows = []
    for lang in langs:
        c, t, k = lang.corpus or {}, lang.tokenizer or {}, lang.pretok or {}
        valid = (k.get("stats") or {}).get("valid") or {}
        rows.append([lang.lang, str(c.get("train_lines", "–")), str(c.get("train_bytes", "–")),
                     str(c.get("valid_lines", "–")),
                     f"{t.get('family', '–')} {t.get('style', '') or ''}".strip(),
                     str(t.get("vocab_size_reached", "–")),
                     fmt((valid.get("target") or {}).get("fertility"), 2),
                     fmt((valid.get("source") or {}).get("fertility"), 2)])
    lines.append(md_table(["lang", "train lines", "train bytes", "valid lines", "tokenizer", "vocabulary",
                           "fertility (target)", "fertility (source)"], rows))
    lines.append("")
    lines.append("Fertility: tokens per word on the valid split, target tokenizer vs the source tokenizer.")
    lines.append("")
    return lines


def init_section(lang: Language) -> list[str]:
    lines = ["### Right after initialisation", ""]
    if not lang.init_eval:
        return lines + [f"_No init_eval results ({P.fill(P.INIT_EVAL, lang=lang.lang)} missing)._", ""]
    rows = [r for r in lang.init_eval if r["method"] != "source"]
    ref = [r for r in lang.init_eval if r["method"] == "source"]
    cols = [("loss", "loss", False, 3), ("calibrated_loss", "calibrated loss", False, 3),
            ("temperature", "temperature", None, 2), ("retrieval_en2xx", "retrieval en→xx", True, 3),
            ("retrieval_xx2en", "retrieval xx→en", True, 3)]
    table = [[r["method"]] for r in rows]
    for key, _, higher, digits in cols:
        texts = [fmt(r[key], digits) for r in rows]
        if higher is not None:
            texts = bold_best([r[key] for r in rows], texts, higher)
        for row, text in zip(table, texts):
            row.append(text)
    for r in ref:
        table.append([f"source model ({r['lang']} text; retrieval with its own tokenizer)"]
                     + [fmt(r[key], digits) for key, _, _, digits in cols])
    lines.append(md_table(["method"] + [c[1] for c in cols], table))
    lines += ["", "Loss: masked-/causal-LM loss on held-out target text with no training; calibrated: at the "
              "one temperature that minimises it; retrieval: top-1 accuracy on XNLI premises. Best in bold.", "",
              f"![{lang.lang}: right after initialisation]({_rel(P.fill(P.INIT_EVAL_PLOT, lang=lang.lang))})",
              ""]
    return lines


def pretrain_section(lang: Language, figure: str | None) -> list[str]:
    lines = ["### Continued pretraining", ""]
    if not lang.curves:
        return lines + ["_No continued-pretraining results for this language._", ""]
    lines += [f"![{lang.lang}: valid loss during continued pretraining]({_rel(figure)})", ""]
    methods = list(dict.fromkeys(m for m, _ in lang.curves))
    objectives = [o for o in OBJECTIVE_ORDER if any(ob == o for _, ob in lang.curves)]
    values = {m: [min((initial_valid_loss(c) for (mm, _), c in lang.curves.items() if mm == m), default=math.nan)]
              + [final_valid_loss(lang.curves[(m, o)]) if (m, o) in lang.curves else math.nan for o in objectives]
              for m in methods}
    table = [[m] for m in methods]
    for j in range(1 + len(objectives)):
        column = [values[m][j] for m in methods]
        for row, text in zip(table, bold_best(column, [fmt(v) for v in column], higher=False)):
            row.append(text)
    lines.append(md_table(["method", "step 0"] + [f"{o} (end)" for o in objectives], table))
    lines += ["", "Valid loss (standard cross-entropy on the valid split) of the initialised model (step 0) and "
              "after continued pretraining with each objective; lower is better, best in bold.", ""]
    return lines


def token_frequency_section(lang: Language, method_order: list[str]) -> list[str]:
    lines = ["### Loss by token frequency", ""]
    df = lang.token_frequency
    if df is None or len(df) == 0:
        return lines + [f"_No token-frequency results ({P.fill(P.TOKEN_FREQUENCY_LOSS, lang=lang.lang)})._", ""]
    buckets = df.drop_duplicates("bucket").sort_values("bucket")
    headers = ["method", "objective"] + [f"b{int(b.bucket)} (ranks {int(b.rank_lo)}–{int(b.rank_hi)})"
                                         for b in buckets.itertuples()]
    rows = []
    order = {o: i for i, o in enumerate(OBJECTIVE_ORDER)}
    keys = sorted({(r.method, r.objective) for r in df.itertuples()},
                  key=lambda k: (model_sort_key(f"{k[0]}-{k[1]}", method_order), order.get(k[1], 9)))
    for method, objective in keys:
        sub = df[(df["method"] == method) & (df["objective"] == objective)].set_index("bucket")["loss"]
        rows.append([method, objective] + [fmt(sub.get(int(b)), 2) for b in buckets["bucket"]])
    lines.append(md_table(headers, rows))
    lines += ["", "Mean cross-entropy on valid-split target tokens, by frequency bucket of the target token "
              "(bucket 0 = most frequent types); `init` = the initialised model before pretraining.", "",
              f"![{lang.lang}: loss by token frequency]"
              f"({_rel(P.fill(P.TOKEN_FREQUENCY_PLOT, lang=lang.lang))})", ""]
    return lines


def gradient_section(lang: Language) -> list[str]:
    lines = ["### Gradient scenarios", ""]
    if not lang.gradients:
        return lines + ["_No gradient-scenario results for this language._", ""]
    objectives = [o for o in OBJECTIVE_ORDER if any(ob == o for _, ob in lang.gradients)]
    methods = list(dict.fromkeys(m for m, _ in lang.gradients))
    rows = []
    for m in methods:
        row = [m]
        for o in objectives:
            path = P.fill(P.GRADIENT_PLOT, lang=lang.lang, method=m, objective=o)
            row.append(f"![{m} {o}]({_rel(path)})" if (m, o) in lang.gradients else "–")
        rows.append(row)
    lines.append(md_table(["method"] + objectives, rows))
    lines += ["", "Gradient norms per token against its frequency rank (input embedding, output embedding as "
              "target, output embedding as non-target), at the start and the end of pretraining.", ""]
    return lines


def downstream_section(lang: Language, cells: dict[str, dict[str, Cell]], figure: str | None,
                       confidence: float, method_order: list[str]) -> list[str]:
    lines = ["### Downstream tasks", ""]
    if not cells:
        return lines + ["_No downstream results for this language._", ""]
    tasks = [t for t in TASKS if t in cells] + sorted(t for t in cells if t not in TASKS)
    models = sorted({m for t in tasks for m in cells[t]}, key=lambda m: model_sort_key(m, method_order))
    # one metric name per task, from the results
    metric_name = {t: next(iter(next(iter(lang.evals[t].values())).values()))["metric"] for t in tasks}
    headers = ["model"]
    for t in tasks:
        headers += [f"{t} ({metric_name[t]})", f"{t}: Δ random [{100 * confidence:g}% CI]"]
    table = [[m] for m in models]
    for t in tasks:
        col = [cells[t].get(m) for m in models]
        texts = [f"{c.mean:.1f} ± {c.std:.1f}" if c else "–" for c in col]
        texts = bold_best([c.mean if c else math.nan for c in col], texts, higher=True)
        for row, text, c in zip(table, texts, col):
            row.append(text)
            if c is None:
                row.append("–")
            elif c.diff is None:
                row.append(f"({c.note})" if c.note != "baseline" else "(baseline)")
            else:
                d = c.diff
                row.append(f"{signed(d.diff)} [{signed(d.low)}, {signed(d.high)}]" + (" ✱" if d.excludes_zero else ""))
    trivial = ["trivial predictor"]
    for t in tasks:  # the same test split for every model: the first result's value stands for all
        first = next(iter(next(iter(lang.evals[t].values())).values())).get("trivial")
        trivial += [f"{first['value']:.1f} ({first['name']})" if first else "–", ""]
    lines.append(md_table(headers, [trivial] + table))
    lines += ["", "Mean ± standard deviation over seeds of each task's main metric (percent); best per column in "
              "bold; the first row is the trivial predictor's score on the same test examples (a model has to "
              "beat it before its score means anything). Δ random: the difference to `random-<same objective>` on the same seeds and test examples, "
              f"with its paired-bootstrap {100 * confidence:g}% interval (test examples resampled jointly for both "
              "models, the same resamples for every seed, differences averaged over seeds); ✱ marks an interval "
              "that excludes 0.", ""]
    if figure:
        lines += [f"![{lang.lang}: downstream tasks]({_rel(figure)})", ""]
    return lines


def skipped_section(langs: list[Language], p: Plan) -> list[str]:
    lines = ["## What was skipped and why", ""]
    items = []
    for lang in langs:
        for task, reason in sorted(lang.skipped.items()):
            items.append(f"* {lang.lang} / {task}: {reason}")
        if not p.pretrain:
            items.append(f"* {lang.lang}: no continued-pretraining runs configured")
        for path in lang.missing:
            items.append(f"* {lang.lang}: `{path}` missing, its section shows no data")
    return lines + (items or ["Nothing: every configured job has results."]) + [""]


# 6. the stage ----------------------------------------------------------------------------------------

def write_report(params: dict, p: Plan, root: Path = Path(".")) -> Path:
    """Read everything under `root`, write the report, its figures, curves and metrics there."""
    root = Path(root)
    head = _json(root / P.SOURCE_HEAD_STATS)
    langs = [read_language(lang, p, root) for lang in p.languages]
    method_order = list((params.get("init") or {}).get("methods", []))
    confidence = float((params.get("report") or {}).get("confidence", 0.95))
    metrics: dict = {}
    md = ["# vocabtransfer: report", "",
          "Embedding initialisation for a new target-language vocabulary, continued pretraining with the "
          "standard and the selfish objective, and downstream fine-tuning. Generated by `vocabtransfer report` "
          "from the pipeline's results.", ""]
    md += setup_section(params, head, langs, p)
    with io.atomic_output(root / P.REPORT_FIGURES, directory=True) as figures, \
            io.atomic_output(root / P.REPORT_CURVES, directory=True) as curves:
        for lang in langs:
            m = metrics.setdefault(lang.lang, {})
            md += [f"## {lang.lang}", ""]
            md += init_section(lang)
            if lang.init_eval:
                m["init_loss"] = {r["method"]: float(r["loss"]) for r in lang.init_eval if r["method"] != "source"}
            curve_fig = None
            if lang.curves:
                curve_fig = f"{P.REPORT_FIGURES}/{lang.lang}_valid_loss.png"
                plot_curves(lang, figures / Path(curve_fig).name)
                write_curves_csv(lang, curves / f"{lang.lang}.csv")
                m["valid_loss"] = {f"{k[0]}-{k[1]}": v for k, c in lang.curves.items()
                                   if _finite(v := final_valid_loss(c))}
            md += pretrain_section(lang, curve_fig)
            md += token_frequency_section(lang, method_order)
            md += gradient_section(lang)
            cells = downstream(lang, params, method_order)
            down_fig = None
            if cells:
                down_fig = f"{P.REPORT_FIGURES}/{lang.lang}_downstream.png"
                plot_downstream(lang.lang, cells, figures / Path(down_fig).name)
                m["eval"] = {t: {model: round(c.mean, 4) for model, c in cs.items()} for t, cs in cells.items()}
            md += downstream_section(lang, cells, down_fig, confidence, method_order)
        md += skipped_section(langs, p)
    io.write_json(metrics, root / P.REPORT_METRICS)
    with io.atomic_output(root / P.REPORT) as tmp:
        tmp.write_text("\n".join(md).rstrip() + "\n", encoding="utf-8")
    return root / P.REPORT


def write_curves_csv(lang: Language, path: Path) -> None:
    """step, then one column per run (`<method>-<objective>`): the valid loss, empty where not evaluated."""
    names = {k: f"{k[0]}-{k[1]}" for k in lang.curves}
    series = {k: c.dropna(subset=["valid_loss"]).set_index("step")["valid_loss"] for k, c in lang.curves.items()}
    steps = sorted({int(s) for v in series.values() for s in v.index})
    buf = _io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["step"] + list(names.values()))
    for step in steps:
        writer.writerow([step] + [f"{float(series[k][step]):.6g}" if step in series[k].index else ""
                                  for k in names])
    path.write_text(buf.getvalue(), encoding="utf-8")


def run(ctx) -> None:
    p = plan(ctx.params)
    out = write_report(ctx.params, p)
    log.info("report: %s (figures in %s)", out, P.REPORT_FIGURES)
