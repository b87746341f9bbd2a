"""The analyses' planning: params `init_eval` (InitEvalParams), `token_frequency_loss` (TokenFrequencyLossParams)
and `gradient_scenarios` (GradientScenariosParams), and the jobs' inputs: the init directory of each method a
language can run (`init_eval_inputs`), and the models token_frequency_loss scores (`scored_models`, each
pretrained run and the initialisation it started from; `zero_shot_models`, bits per byte only)."""

from __future__ import annotations

import re

from vocabtransfer.pipeline import paths
from vocabtransfer.plan.params_root import Params
from vocabtransfer.plan import availability


def input_key(method: str) -> str:
    """ctx.input key of a method's init directory (`focus+svd` -> `init_focus_svd`)."""
    return "init_" + re.sub(r"\W", "_", method)


def init_eval_inputs(params: Params, wildcards: dict) -> dict[str, str]:
    """An init_eval job's input templates: they depend on params (one init directory per configured method)."""
    out = {
        "source_model": paths.SOURCE_MODEL,
        "valid": paths.CORPUS_VALID,
        "train_ids": paths.PRETOK_TRAIN,
        "train_text": paths.CORPUS_TRAIN,
    }  # the floors' train split
    for method in availability.methods(params, wildcards["lang"]):  # the ones the language has data for
        out[input_key(method)] = paths.partial(paths.INIT_DIR, method=method, pseed=1)  # pretraining seed 1's init
    return out


def model_key(method: str, objective: str, pseed: int) -> str:
    """ctx.input key of a model directory (`focus+svd`, `selfish`, 2 -> `focus_svd__selfish__2`)."""
    return re.sub(r"\W", "_", method) + "__" + objective + f"__{pseed}"


def scored_models(params: Params, lang: str) -> list[tuple[str, str, int]]:
    """(method, objective, pretraining seed) of every model scored: each pretrained run and the
    initialised model it started from (objective `init`)."""
    runs = availability.pretrain_runs(params, lang)
    inits = dict.fromkeys((m, "init", availability.init_pseed(m, s)) for m, _, s in runs)
    return list(inits) + runs


def token_frequency_skip_reason(params: Params, wildcards: dict) -> str | None:
    """Why the language has no job (no pretrained model to compare: `run` would refuse), None when it has one."""
    if scored_models(params, wildcards["lang"]):
        return None
    return "no pretrained model to compare: pretrain.pairs, or pretrain.methods × pretrain.objectives, is empty"


def zero_shot_models(params: Params, lang: str) -> list[tuple[str, str, int]]:
    """The initialised models of the other `init.methods` (pretraining seed 1's initialisation): scored for
    bits per byte only, so every method's zero-shot bits per byte carries an interval."""
    scored = {m for m, _, _ in scored_models(params, lang)}
    return [(m, "init", 1) for m in availability.methods(params, lang) if m not in scored]


def model_template(method: str, objective: str, pseed: int) -> str:
    """The directory template of a model the job scores: its init directory, or its pretrain directory."""
    if objective == "init":
        return paths.partial(paths.INIT_DIR, method=method, pseed=pseed)
    return paths.partial(paths.PRETRAIN_DIR, method=method, objective=objective, pseed=pseed)


def token_frequency_inputs(params: Params, wildcards: dict) -> dict[str, str]:
    """Train and valid ids, the valid text and the source model (bits per byte), every pretrained model and the
    init model each started from."""
    out = {
        "train_ids": paths.PRETOK_TRAIN,
        "valid_ids": paths.PRETOK_VALID,
        "valid_text": paths.CORPUS_VALID,
        "source_model": paths.SOURCE_MODEL,
        "train_text": paths.CORPUS_TRAIN,
    }
    zero_shot = zero_shot_models(params, wildcards["lang"]) if params.token_frequency_loss.bits_per_byte else []
    for method, objective, pseed in scored_models(params, wildcards["lang"]) + zero_shot:
        out[model_key(method, objective, pseed)] = model_template(method, objective, pseed)
    return out
