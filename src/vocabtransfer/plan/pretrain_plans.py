"""The train phase's planning: which continued-pretraining and learning-rate tuning jobs params ask for
(`pretrain_expand`, `tune_expand`), what a tuning job reads of params (`tune_reads`: its rerun keys), and the
objectives trained against the source model as a teacher (TEACHER_OBJECTIVES)."""

from __future__ import annotations

from dataclasses import fields

from vocabtransfer.plan.params_root import Params
from vocabtransfer.plan import availability
from vocabtransfer.plan.pretrain_params import CooldownOptions, PretrainParams


# the objectives trained against the source model as a teacher (losses.OBJECTIVES' `teacher`; named here, in
# planning, which imports no torch; tests/stage/test_pretrain_distill.py checks the two agree)
TEACHER_OBJECTIVES = ("distill", "alm")


def pretrain_expand(params: Params) -> list[dict[str, str]]:
    return [{"method": m, "objective": o, "pseed": str(s)} for m, o, s in availability.pretrain_runs(params)]


# the pretrain leaves a tuning run does not read: its length, evaluations and rate come from pretrain.tune, and its
# runs are wsd whatever pretrain.schedule, with their cool-downs at the tuning budget (no per_decade branches)
NOT_READ = {"learning_rate", "steps", "passes", "eval_every", "eval_schedule", "eval_lines", "bits_per_byte"}
COOLDOWN_NOT_READ = {"per_decade"}


def tune_reads(params: Params, wildcards: dict) -> list[str]:
    """What a tuning job reads: the pretrain run's sections and leaves (but the `rerun=False` ones, which decide which
    jobs run) but those pretrain.tune replaces, and of
    pretrain.cooldown (read by wsd runs only, and every tuning run is wsd) the leaves but `per_decade`."""
    out = ["seed"]
    for f in fields(PretrainParams):
        if f.name == "cooldown":
            out += [f"pretrain.cooldown.{g.name}" for g in fields(CooldownOptions) if g.name not in COOLDOWN_NOT_READ]
        elif f.name not in NOT_READ and f.metadata.get("rerun", True):
            out.append(f"pretrain.{f.name}")
    return out


def tune_expand(params: Params) -> list[dict[str, str]]:
    """One job per (method, objective) pretrain pair (but the teacher objectives'), when pretrain.tune is on."""
    if not params.pretrain.tune.learning_rates:
        return []
    return [
        {"method": m, "objective": o} for m, o in availability.pretrain_pairs(params) if o not in TEACHER_OBJECTIVES
    ]
