"""Stage `export`: one pretrained run of a language as a complete Hugging Face folder with its model card, and, for a
decoder source, the model and its tokenizer in one GGUF file beside it (results/{lang}/export).

1. which run: `export.model` (`<method>-<objective>-pseed<k>`, a pretrain job of the language), else the recommended
   one (vocabtransfer.report.export_pick: the report's pick, its median seed); a name that is no pretrain job of the
   language, or GGUF asked by name for an encoder source, is refused before any job (`check`, through the job planner);
2. the run's model/ folder (weights, config, target tokenizer) copied byte for byte;
3. GGUF (`export.gguf`): `auto` writes one where the source is a decoder that GGUF export covers (llama, gemma3,
   gpt2 with a BPE tokenizer), in the source weights' dtype, and says why not elsewhere; `source`, `f32`, `f16` or
   `bf16` ask for it (refused where it cannot be written); `none` writes none. The file is read back by
   transformers on `export.check_lines` valid lines (vocabtransfer.model.gguf_export.round_trip) before it is kept;
4. the model card (vocabtransfer.report.model_card) and export.json (what was exported, from what, and the checks).
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from vocabtransfer.evaluate.stats import Runs
from vocabtransfer.model import gguf_export
from vocabtransfer.model.gguf_export import source_dtype
from vocabtransfer.model.line_bits import valid_lines
from vocabtransfer.model.modeling import detect_kind
from vocabtransfer.report import model_card, tables
from vocabtransfer.report.model_card import Score
from vocabtransfer.version import __version__
from vocabtransfer import io
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.pipeline import names, paths
from vocabtransfer.pipeline.stage_spec import Context
from vocabtransfer.plan.export_plans import check
from vocabtransfer.plan.report_params import ExportParams
from vocabtransfer.plan import report_plans
from vocabtransfer.report import read
from vocabtransfer.report.export_pick import exported_run

log = logging.getLogger(__name__)


def chosen(opts: ExportParams, lang: read.Language, settings, baseline) -> tuple[read.Run, str]:
    """Step 1: the run to export and the card's sentence on why."""
    if opts.model is not None:
        m = names.parse_model_name(opts.model)
        assert m.objective is not None and m.pseed is not None  # the schema's pattern: a pretraining run's name
        return (m.method, m.objective, m.pseed), f"The run `export.model` names ({opts.model})."
    pick = exported_run(lang, settings, baseline)
    if pick is None:
        raise VocabTransferError(
            f"export {lang.lang}: no pretraining run has a valid loss to recommend by (metrics.parquet); rerun the "
            "pretrain jobs, or name the run in export.model"
        )
    return pick.run, pick.sentence()


def gguf_dtype(mode: str, base: Path, base_stats: dict) -> str:
    """`export.gguf` as a GGUF dtype: `source`/`auto` the source weights' (a quantised GGUF source: f16)."""
    if mode in ("f32", "f16", "bf16"):
        return mode
    if base_stats.get("gguf_type_weights"):
        kinds = base_stats["gguf_type_weights"]
        main = max(kinds, key=kinds.get)
        return {"F32": "f32", "F16": "f16", "BF16": "bf16"}.get(main, "f16")

    return source_dtype(AutoConfig.from_pretrained(str(base)))


def write_gguf(ctx: Context, opts: ExportParams, model_dir: Path, out: Path, general: dict) -> tuple[dict | None, str]:
    """Step 3: (the GGUF file's stats, '') or (None, why there is none)."""
    if opts.gguf == "none":
        return None, "export.gguf is none"

    config = AutoConfig.from_pretrained(str(model_dir))
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    why = (
        "the source is an encoder (a masked LM); GGUF holds decoders"
        if detect_kind(config) != "causal"
        else gguf_export.obstacle(config, tokenizer)
    )
    if why:
        if opts.gguf != "auto":
            raise VocabTransferError(f"export.gguf: {opts.gguf} asks for a GGUF file, but {why}; set export.gguf: none")
        log.warning("export %s: no GGUF file: %s", ctx.lang, why)
        return None, why
    base_stats = io.read_json(ctx.input["base_stats"])
    dtype = gguf_dtype(opts.gguf, Path(paths.SOURCE_BASE), base_stats)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    path = out / f"{general['name']}-{dtype}.gguf"
    stats = gguf_export.write(model, tokenizer, path, dtype=dtype, general=general)
    stats["file"] = path.name
    if opts.check_lines:
        lines = valid_lines(ctx.input["valid"], opts.check_lines)
        stats["round_trip"] = gguf_export.round_trip(path, model, tokenizer, lines, dtype)
    return stats, ""


def _bits_per_byte(lang: read.Language, method: str, objective: str, pseed: int) -> float | None:
    """Σ bits / Σ UTF-8 bytes of the valid lines of one model (the source: method `source`, any seed)."""
    df = lang.bits_per_byte
    if df is None or not len(df):
        return None
    rows = df[(df["method"] == method) & (df["objective"] == objective)]
    if method != names.SOURCE:
        rows = rows[rows["pseed"] == pseed]
    if not len(rows) or rows["bits"].isna().any() or rows["n_bytes"].sum() <= 0:
        return None
    return float(rows["bits"].sum() / rows["n_bytes"].sum())


def scores(lang: read.Language, run: read.Run, settings) -> list:
    """The downstream scores of the run (its own fine-tuning runs, else its method × objective's other pretraining
    seeds, said so) and of the source, each with its interval (report.tables: B minus a zero model)."""

    method, objective, pseed = run
    group = f"{method}-{objective}"
    out = []
    for task in tables.tasks(lang):
        by_group = lang.evals[task]
        results, note = by_group.get(group, {}), ""
        own = {k: v for k, v in results.items() if k[0] == pseed}
        if results and not own:
            note = f"pretraining seeds {', '.join(str(p) for p in sorted({k[0] for k in results}))} of {group}"
        chosen = own or results
        if not chosen:
            continue

        source = by_group.get(names.SOURCE)
        metric = next(iter(chosen.values())).get("metric", "score")
        own_score = _score(task, chosen, settings, lang.lang)
        out.append(Score(task, metric, own_score, _score(task, source, settings, lang.lang) if source else None, note))
    return out


def _score(task: str, results: dict, settings, lang: str):
    """A model's mean score over its runs with its interval (B minus a model that scores 0)."""

    runs = Runs.from_results(task, results, where=f"{lang} {task}")
    return settings.paired(tables.zero_like(runs), runs)


def rebuild_lines(lang: str, opts: ExportParams, model_name: str) -> list[str]:
    named = f"export.model: {model_name}" if opts.model else f"export.model: null, the recommended run: {model_name}"
    return [
        "vocabtransfer validate   # params.yaml (and your overlays) checked before any job",
        f"snakemake --cores 2 {paths.fill(paths.EXPORT_DIR, lang=lang)}   # every stage it needs, then this export",
        f"# once the study has run, the export alone: vocabtransfer export --lang {lang}   ({named})",
    ]


def run(ctx: Context) -> None:
    """Steps 1-4 into results/{lang}/export, atomically."""

    params, lang_code = ctx.params, ctx.lang
    opts = params.export
    check(params, ctx.wildcards)
    report = params.report
    plan = report_plans.plan(params, ctx.stages)
    lang = read.read_language(lang_code, plan, Path("."))
    run_, why = chosen(opts, lang, tables.Settings.of(report, params.seed), report.baseline)
    method, objective, pseed = run_
    run_dir = Path(paths.fill(paths.PRETRAIN_DIR, lang=lang_code, method=method, objective=objective, pseed=pseed))
    model_dir = run_dir / "model"
    if not (model_dir / "config.json").is_file():
        raise VocabTransferError(f"{model_dir}: no model in the pretrain run's folder; rerun its pretrain job")
    name = names.model_name(method, objective, pseed)
    base_stats = io.read_json(ctx.input["base_stats"])
    license_, base_model = model_card.source_facts(params.source_model, base_stats.get("resolved"), opts.base_model)
    general = {
        "name": f"{lang_code}-{name}",
        "license": license_,
        "base_model": base_model,
        "languages": [lang_code],
        "tags": ["vocabtransfer", method, objective],
    }
    with io.atomic_output(ctx.output["export"], directory=True) as tmp:
        for file in sorted(p for p in model_dir.iterdir() if p.is_file()):  # step 2
            shutil.copyfile(file, tmp / file.name)
        gguf, note = write_gguf(ctx, opts, model_dir, tmp, general)  # step 3
        facts = model_card.CardFacts(
            lang=lang_code,
            model_name=name,
            method=method,
            objective=objective,
            pseed=pseed,
            source_model=params.source_model,
            kind=lang.runs.get(run_, {}).get("kind") or "causal",
            why=why,
            run_stats=lang.runs.get(run_, {}),
            tokenizer_size=_tokenizer_size(model_dir),
            license=license_,
            base_model=base_model,
            bits_per_byte=_bits_per_byte(lang, method, objective, pseed),
            source_bits_per_byte=_bits_per_byte(lang, names.SOURCE, names.SOURCE, 0),
            scores=scores(lang, run_, tables.Settings.of(report, params.seed)),
            confidence=report.confidence,
            gguf=gguf,
            gguf_note=note,
            rebuild=rebuild_lines(lang_code, opts, name),
            version=__version__,
        )
        (tmp / "README.md").write_text(model_card.render(facts), encoding="utf-8")  # step 4
        io.write_json(
            {
                "lang": lang_code,
                "model": name,
                "run": str(run_dir),
                "chosen": "export.model" if opts.model else why,
                "license": license_,
                "base_model": base_model,
                "gguf": gguf,
                "no_gguf": note or None,
                "versions": io.versions(),
            },
            tmp / "export.json",
        )
    log.info("export %s: %s -> %s%s", lang_code, name, ctx.output["export"], f" (+ {gguf['file']})" if gguf else "")


def _tokenizer_size(model_dir: Path) -> int:

    return len(AutoTokenizer.from_pretrained(str(model_dir)))
