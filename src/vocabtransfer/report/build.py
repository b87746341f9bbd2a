"""Stage `report`: the study's results as one Markdown file, `results/report.md`, with its figures.

Reads every artefact the study produced (report.read), computes the comparisons (report.comparisons,
with the nested intervals of vocabtransfer.evaluate.stats) and writes:

* results/report.md, opening with `## Verdict` (report.verdict), then the set-up and per language:
  the loss right after initialisation, continued pretraining (curves with seed bands), the
  comparison tables (method − random, selfish − standard, …), bits per byte
  (every model and the source on one scale, with the − random differences), the loss by token
  frequency, the gradient plots and the downstream scores beside each task's floor (tasks no model
  learns greyed);
* PNG figures in results/report/figures/ (byte-identical for identical inputs), the valid-loss
  curves as CSV in results/report/curves/<lang>.csv (DVC plots) and results/report/metrics.json
  (DVC metrics). A section without data says what is missing; "What was skipped and why" lists it.

Two passes: first every language's comparisons (each table corrected on its own), then the correction over the
report's headline family (`tables.correct_headline`: every claim of the verdict, all languages together; the
exploratory tables and each task's floor check keep their own), and only then the tables and the verdict.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pandas as pd


from vocabtransfer import io
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.pipeline import paths
from vocabtransfer.pipeline.typed import Params
from vocabtransfer.report import harness_table
from vocabtransfer.report import distill_terms
from vocabtransfer.report import markdown
from vocabtransfer.report import rivals
from vocabtransfer.report import study_setup
from vocabtransfer.report import comparisons, tables
from vocabtransfer.report import token_equivalent, token_worth
from vocabtransfer.report import verdict
from vocabtransfer.report.baseline_choice import stronger_baseline
from vocabtransfer.report.bpb import bits_per_byte_table, share_sentence
from vocabtransfer.report import compute
from vocabtransfer.report.bpb_markdown import bits_per_byte_section
from vocabtransfer.report.costs import read_benchmark
from vocabtransfer.report.figures import plot_curves, plot_downstream, plot_token_curves, seed_curves, write_curves_csv
from vocabtransfer.report.read import read_language
from vocabtransfer.plan.report_plans import Plan, ReportParams, plan
from vocabtransfer.plan.eval_plans import TokenFrequencyLossParams
from vocabtransfer.plan.pretrain_params import PretrainParams

log = logging.getLogger(__name__)


def job_seconds(root: Path) -> float | None:
    """The sum of the `s` column (the job's wall-clock seconds) of Snakemake's per-job benchmark tables
    (logs/benchmarks/<stage>/<job>.tsv; the last row of a table counts: one per run of the job); None
    without a readable one."""
    costs = [read_benchmark(t) for t in sorted((root / paths.LOGS / "benchmarks").glob("*/*.tsv"))]
    seconds = [c.seconds for c in costs if c is not None]
    return sum(seconds) if seconds else None


def _comparisons_section(lang, families: list, settings: tables.Settings) -> list[str]:
    """`### Comparisons`: every family's table, an objective's with its distill-terms note."""
    body = ["### Comparisons", ""]
    for family in families:
        body += markdown.family_section(family, settings)
        body += (
            distill_terms.note(lang, family.objective) if family.objective and family.kind != tables.EXPLORATORY else []
        )
    if not families:
        body += ["_No comparison: no paired runs for this language._", ""]
    return body


def _downstream_section(lang, status: dict, figures: Path, m: dict) -> list[str]:
    """The downstream tasks' section with its figure (written into `figures`); their scores, floors and
    whether each is learned go into the language's metrics `m`."""
    down_fig = None
    if status:
        down_fig = f"{paths.REPORT_FIGURES}/{lang.lang}_downstream.png"
        plot_downstream(lang.lang, status, figures / Path(down_fig).name)
        m["eval"] = {t: {s.group: round(s.score.diff, 4) for s in st.scores} for t, st in status.items()}
        m["floor"] = {t: round(float(st.floor["value"]), 4) for t, st in status.items()}
        m["learned"] = {t: st.learned for t, st in status.items()}
    return markdown.downstream_section(lang, status, down_fig)


def _stats_file(path: Path) -> dict | None:
    return io.read_json(path) if path.is_file() else None


def write_report(params: Params, report: ReportParams, p: Plan, root: Path = Path(".")) -> Path:
    """Read everything under `root`, write the report, its figures, curves and metrics there; `report`
    is params `report`, typed."""
    root = Path(root)
    settings = tables.Settings.of(report, params.seed)
    head, base = (_stats_file(root / path) for path in (paths.SOURCE_HEAD_STATS, paths.SOURCE_BASE_STATS))
    langs = [read_language(lang, p, root) for lang in p.languages]
    metrics: dict = {}
    per_language, body, zero_shot_verdict = {}, [], {}
    built = {lang.lang: _comparisons(lang, settings) for lang in langs}
    _correct_headline(built.values(), settings)
    with (
        io.atomic_output(root / paths.REPORT_FIGURES, directory=True) as figures,
        io.atomic_output(root / paths.REPORT_CURVES, directory=True) as curves,
    ):
        for lang in langs:
            m = metrics.setdefault(lang.lang, {})
            status, families, bpb, found = built[lang.lang]
            per_language[lang.lang] = (
                families + ([bpb.family] if bpb is not None and bpb.family.rows else []),
                status,
                [share_sentence(bpb, settings)],
            )
            # one share per model: the bits-per-byte table's, where there is one
            body += [f"## {lang.lang}", ""] + markdown.init_section(lang, share=bpb is None or not bpb.rows)
            if lang.init_eval:
                m["init_loss"] = {r["method"]: float(r["loss"]) for r in lang.init_eval if r["method"] != "source"}
            curve_fig = None
            worth = token_equivalent.read_curves(lang)
            if lang.curves:
                curve_fig = f"{paths.REPORT_FIGURES}/{lang.lang}_valid_loss.png"
                if worth is None:  # runs without their curves by block: the valid loss against the step
                    plot_curves(lang, figures / Path(curve_fig).name)
                write_curves_csv(lang, curves / f"{lang.lang}.csv")
                m["valid_loss"] = {f"{k[0]}-{k[1]}": float(c["mean"].iloc[-1]) for k, c in seed_curves(lang).items()}
            body += markdown.pretrain_section(lang, curve_fig) + compute.section(lang)
            if worth is not None:
                if curve_fig is None:  # curves by block (valid_curve.parquet) without metrics.parquet
                    raise VocabTransferError(
                        f"{lang.lang}: pretraining runs with valid_curve.parquet but no metrics.parquet; rerun them"
                    )
                choice = stronger_baseline(lang, report.baseline)  # report.baseline: one method or a list
                section, bullets, m["token_equivalent"] = _tokens_section(
                    lang, worth, choice.method, settings, bpb, figures / Path(curve_fig).name, params
                )
                if choice.sentence():
                    section = section[:2] + [choice.sentence(), ""] + section[2:]  # under the section's heading
                    m["baseline"] = {"method": choice.method, "final_valid_loss": choice.final_loss}
                body += section
                per_language[lang.lang][2].extend(bullets)
            body += _comparisons_section(lang, families, settings)
            body += bits_per_byte_section(lang, bpb, settings)
            if bpb is not None and bpb.rows:
                m["bits_per_byte"] = {
                    (r.method if r.method == tables.SOURCE_ROW else f"{r.method}-{r.objective}"): round(r.score.diff, 4)
                    for r in bpb.rows
                    if r.score is not None
                }
                m["bits_per_byte_floor"] = {r.objective: round(r.score.diff, 4) for r in bpb.floors if r.score}
            body += markdown.token_frequency_section(lang) + markdown.gradient_section(lang)
            body += _downstream_section(lang, status, figures, m)
            zero_shot, m["lm_eval"], zero_shot_verdict[lang.lang] = harness_table.section(
                lang.lang, lang.lm_eval, settings, found
            )
            body += zero_shot
            if not m["lm_eval"]:
                del m["lm_eval"]
        md = [
            "# vocabtransfer: report",
            "",
            _opening(p) + " Generated by `vocabtransfer report` from the pipeline's results.",
            "",
        ]
        md += verdict.section(per_language, settings, zero_shot_verdict)
        md += study_setup.setup_section(params, head, langs, p, settings, job_seconds(root), root, base) + body
        md += markdown.skipped_section(langs, p) + markdown.method_section(settings)
    io.write_json(metrics, root / paths.REPORT_METRICS)
    with io.atomic_output(root / paths.REPORT) as tmp:
        tmp.write_text("\n".join(md).rstrip() + "\n", encoding="utf-8")
    return root / paths.REPORT


def _comparisons(lang, settings: tables.Settings) -> tuple:
    """The first pass for one language: which tasks are learned, the comparison families, the bits-per-byte
    table and the zero-shot tables, each corrected on its own (`_correct_headline` corrects the claims again,
    together)."""
    status = tables.learned(lang, settings)
    families = comparisons.families(lang, settings, status, rivals.families(lang, settings))
    bpb = bits_per_byte_table(lang, settings)
    found = harness_table.tables(lang.lm_eval, settings, lang.lang) if lang.lm_eval else []
    return status, families, bpb, found


def _correct_headline(built, settings: tables.Settings) -> int:
    """The second pass: every claim of every language (`_comparisons`' families but the exploratory ones, both
    bits-per-byte tables, the zero-shot model − source rows of learned tasks) corrected together, the headline
    family; returns its size."""
    families, claims, found_all = [], [], []
    for _, fams, bpb, found in built:
        families += fams
        if bpb is not None:
            families += [f for f in (bpb.family, bpb.floor_family) if f is not None and f.rows]
        claims += harness_table.claims(found)
        found_all += found
    n = tables.correct_headline(families, settings, [row for _, row in claims])
    harness_table.adopt(found_all, claims, settings, n)
    return n


def _tokens_section(
    lang, worth, baseline: str, settings, bpb, figure: Path, params: Params
) -> tuple[list[str], list[str], dict]:
    """What each initialisation is worth in the baseline's tokens (`token_equivalent`): its figure at `figure`
    (valid loss, and bits per byte for causal runs, against tokens); returns its section, its verdict bullets
    and its metrics (method-objective@budget -> ratio, None for more than the run)."""
    bullets: list[str] = []
    reps = token_equivalent.replicate(worth, settings.resamples, settings.seed)
    eqs = token_equivalent.equivalents(reps, baseline, settings.confidence)
    crossings = token_equivalent.floor_crossings(reps, settings.confidence)

    per_run: dict = {}
    for (m, o, s), table in lang.curves.items():
        if "valid_bits_per_byte" in table and table["valid_bits_per_byte"].notna().any():
            per_run.setdefault((m, o), []).append(table.dropna(subset=["valid_bits_per_byte"]).assign(pseed=s))
    bits = {key: pd.concat(tables_) for key, tables_ in per_run.items()}
    lines = {}
    if bpb is not None:
        source = [r.score.diff for r in bpb.rows if r.method == tables.SOURCE_ROW and r.score]  # one row at most
        lines.update({"source": source[0]} if source else {})
        lines.update({r.objective: r.score.diff for r in bpb.floors if r.score})
    plot_token_curves(lang.lang, reps, figure, bits=bits or None, bits_lines=lines)
    bullets += token_worth.verdict(reps, eqs, crossings, baseline)
    reach, note = _source_reach(lang, reps, settings, params, bpb, lines.get("source"))
    sentence = token_worth.source_sentence(reach, lines["source"], reps) if reach else None
    if sentence is not None:
        bullets.append(sentence)
    metrics = {
        f"{e.method}-{e.objective}@{e.budget:.0f}":  # null: more than the run
        None if math.isinf(e.ratio.value) else round(e.ratio.value, 4)
        for e in eqs
    }
    section = token_worth.section(reps, eqs, crossings, baseline, settings.confidence, None, reach, note)
    return section, bullets, metrics


def _source_reach(lang, reps, settings, params: Params, bpb, source: float | None) -> tuple[dict, str]:
    """The tokens each causal method needs to reach the source's bits per byte, where that is measured on the same
    lines and windows as the curves (pretrain.eval_lines and seq_len equal to token_frequency_loss's max_lines and
    seq_len) and the source beats the best floor; else ({}, why not)."""
    if source is None or bpb is None:
        return {}, ""
    pre = params.section("pretrain", PretrainParams)
    tfl = params.section("token_frequency_loss", TokenFrequencyLossParams)
    if (pre.eval_lines, pre.seq_len) != (tfl.max_lines, tfl.seq_len):
        return {}, (
            "No tokens to the source's bits per byte: the curves score pretrain.eval_lines lines in windows of "
            "pretrain.seq_len, the source is scored on token_frequency_loss.max_lines lines in windows of "
            "token_frequency_loss.seq_len; set them equal to compare."
        )
    floors = [r.score.diff for r in bpb.floors if r.score]
    if floors and source >= min(floors):
        return {}, "The source does not beat the best floor in bits per byte: no tokens to reach it are given."
    return token_equivalent.bits_crossings(
        lang, reps, source, settings.resamples, settings.seed, settings.confidence
    ), ""


def _spoken_list(words: list[str]) -> str:
    """`standard`, `standard and selfish`, `standard, selfish and distill`."""
    return " and ".join([", ".join(words[:-1]), words[-1]]) if len(words) > 1 else "".join(words)


def _opening(p: Plan) -> str:
    """What the study does, from its plan: initialisation, then the pretraining and fine-tuning it has."""
    objectives = list(dict.fromkeys(objective for _, objective, _ in p.pretrain))
    parts = ["embedding initialisation for a new target-language vocabulary"]
    if objectives:
        parts.append(
            f"continued pretraining with the {_spoken_list(objectives)} objective"
            + ("s" if len(objectives) > 1 else "")
        )
    if any(p.evals.values()):
        parts.append("downstream fine-tuning")
    text = _spoken_list(parts) if len(parts) < 3 else f"{', '.join(parts[:-1])}, and {parts[-1]}"
    return (
        text[0].upper()
        + text[1:]
        + ("." if len(parts) > 1 else ", scored right after initialisation (no pretraining or fine-tuning configured).")
    )


def run(ctx) -> None:
    out = write_report(ctx.params, ctx.section("report", ReportParams), plan(ctx.params, ctx.stages))
    log.info("report: %s (figures in %s)", out, paths.REPORT_FIGURES)
