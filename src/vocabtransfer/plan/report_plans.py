"""The report's planning: params `report` (ReportParams), the plan of every artefact the report reads (`Plan`,
from the job planners of the stages that write them: `plan`), its inputs (`inputs`) and the DVC plots of the
valid-loss curves it writes (`dvc_plots`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

from vocabtransfer.pipeline import paths
from vocabtransfer.pipeline.stage_spec import Stage
from vocabtransfer.plan.params_root import Params
from vocabtransfer.plan import availability
from vocabtransfer.plan.finetune_plans import skipped_tasks


Run = tuple[str, str, int]  # (method, objective, pretraining seed)


@dataclass
class Plan:
    """Every artefact the report reads, per language."""

    languages: list[str]
    pretrain: list[Run] = field(default_factory=list)
    gradients: list[Run] = field(default_factory=list)
    token_frequency: bool = False
    evals: dict[str, list[dict]] = field(default_factory=dict)
    skipped: dict[str, dict[str, str]] = field(default_factory=dict)
    # per language, the runs it has no model for (its init method cannot run there)
    absent: dict[str, set[Run]] = field(default_factory=dict)
    lm_eval: dict[str, list[str]] = field(default_factory=dict)  # per language, the models of its lm_eval jobs
    tune: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # per language, its pretrain_tune pairs

    def tasks(self, lang: str) -> list[str]:
        """The tasks with finetune_eval jobs for `lang` (each has a floor job too)."""
        return list(dict.fromkeys(job["task"] for job in self.evals.get(lang, [])))


def plan(params: Params, stages: Mapping[str, Stage]) -> Plan:
    """Every artefact the report reads, from the job planner (`Stage.jobs`) of the stages that write them:
    `stages` maps pretrain, gradient_scenarios and finetune_eval to their `Stage` (the stage table,
    vocabtransfer.plan.stages.STAGES, or a part of it), and token_frequency_loss, lm_eval and pretrain_tune when their
    artefacts are read."""

    def runs(jobs: list[dict]) -> list[Run]:
        return [(job["method"], job["objective"], int(job["pseed"])) for job in jobs]

    out = Plan(
        languages=list(params.languages),
        pretrain=runs(stages["pretrain"].combos(params)),
        gradients=runs(stages["gradient_scenarios"].combos(params)),
        token_frequency="token_frequency_loss" in stages
        and any(stages["token_frequency_loss"].jobs(params, lang) for lang in params.languages),
    )
    for lang in out.languages:
        out.evals[lang], out.skipped[lang] = stages["finetune_eval"].jobs(params, lang), skipped_tasks(params, lang)
        out.absent[lang] = set(out.pretrain) - set(runs(stages["pretrain"].jobs(params, lang)))
        if "lm_eval" in stages:
            out.lm_eval[lang] = [job["model"] for job in stages["lm_eval"].jobs(params, lang)]
        if "pretrain_tune" in stages:
            out.tune[lang] = [(job["method"], job["objective"]) for job in stages["pretrain_tune"].jobs(params, lang)]
    return out


def _key(*parts: object) -> str:
    return re.sub(r"\W", "_", "_".join(str(p) for p in parts))


def inputs(p: Plan) -> dict[str, str]:
    """The report stage's inputs: every artefact the plan names."""
    out = {"head_stats": paths.SOURCE_HEAD_STATS, "base_stats": paths.SOURCE_BASE_STATS}
    for lang in p.languages:
        for name, template in (
            ("init_eval", paths.INIT_EVAL),
            ("corpus_stats", paths.CORPUS_STATS),
            ("tokenizer_stats", paths.TOKENIZER_STATS),
            ("pretok_stats", paths.PRETOK_STATS),
        ):
            out[_key(name, lang)] = paths.fill(template, lang=lang)
        absent = p.absent.get(lang, set())
        for m, o, s in (run for run in p.pretrain if run not in absent):
            out[_key("pretrain", lang, m, o, s)] = paths.fill(
                paths.PRETRAIN_DIR, lang=lang, method=m, objective=o, pseed=s
            )
        if p.token_frequency:
            out[_key("token_frequency_loss", lang)] = paths.fill(paths.TOKEN_FREQUENCY_LOSS, lang=lang)
            out[_key("token_frequency_blocks", lang)] = paths.fill(paths.TOKEN_FREQUENCY_BLOCKS, lang=lang)
            out[_key("bits_per_byte", lang)] = paths.fill(paths.BITS_PER_BYTE, lang=lang)
        for m, o, s in (run for run in p.gradients if run not in absent):
            out[_key("gradients", lang, m, o, s)] = paths.fill(
                paths.GRADIENT_SCENARIOS, lang=lang, method=m, objective=o, pseed=s
            )
        for job in p.evals[lang]:
            out[_key("eval", lang, job["task"], job["model"], f"seed{job['seed']}")] = paths.fill(
                paths.EVAL_RESULT, lang=lang, task=job["task"], model=job["model"], seed=str(job["seed"])
            )
        for task in p.tasks(lang):
            out[_key("floor", lang, task)] = paths.fill(paths.EVAL_FLOOR, lang=lang, task=task)
        for model in p.lm_eval.get(lang, []):
            for name, template in (("lm_eval", paths.LM_EVAL_SCORES), ("lm_eval_samples", paths.LM_EVAL_SAMPLES)):
                out[_key(name, lang, model)] = paths.fill(template, lang=lang, model=model)
        for m, o in p.tune.get(lang, []):
            out[_key("tuning", lang, m, o)] = paths.fill(paths.PRETRAIN_TUNE, lang=lang, method=m, objective=o)
    return out


def curves_csv(lang: str) -> str:
    return f"{paths.REPORT_CURVES}/{lang}.csv"


def dvc_plots(params: Params) -> dict[str, dict]:
    """Top-level DVC plot definitions: per language, the valid loss of every run against the step."""
    models = [f"{m}-{o}" for m, o in availability.pretrain_pairs(params)]
    if not models:
        return {}
    return {
        f"valid_loss_{lang}": {
            "template": "linear",
            "x": "step",
            "y": {curves_csv(lang): list(models)},
            "title": f"{lang}: valid loss during continued pretraining",
            "x_label": "step",
            "y_label": "valid loss",
        }
        for lang in params.languages
    }
