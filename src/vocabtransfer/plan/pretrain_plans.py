"""The train phase's planning: which continued-pretraining and learning-rate tuning jobs params ask for
(`pretrain_expand`, `tune_expand`), the params leaves each job reads, its rerun keys (`pretrain_leaves`,
`tune_leaves`), and the objectives trained against the source model as a teacher (TEACHER_OBJECTIVES)."""

from __future__ import annotations

from vocabtransfer.pipeline.typed import Params, field_leaves
from vocabtransfer.plan import availability
from vocabtransfer.plan.pretrain_params import PretrainParams


# the objectives trained against the source model as a teacher (losses.OBJECTIVES' `teacher`; named here, in
# planning, which imports no torch; tests/test_pretrain_distill.py checks the two agree)
TEACHER_OBJECTIVES = ("distill", "alm")


def pretrain_leaves(params: Params, wildcards: dict) -> list[str]:
    """The params leaves one job reads (its rerun keys): the leaves of `PretrainParams` but the `rerun=False`
    ones, with an objective's own options (`pretrain.selfish.margin`, `pretrain.distill.*`) for that
    objective only."""
    objective = wildcards.get("objective")
    if objective in TEACHER_OBJECTIVES:
        objective = "distill"  # every teacher objective (distill, alm) reads pretrain.distill
    # pretrain.cooldown: wsd runs only (a pretrain_tune job's runs are wsd whatever the schedule: `schedule` given)
    schedule = wildcards.get("schedule") or params.section("pretrain", PretrainParams).schedule
    return field_leaves(
        PretrainParams,
        "pretrain",
        params.leaf("pretrain"),
        keep=lambda f: (
            f.metadata.get("rerun", True)
            and f.metadata.get("objective", objective) == objective
            and f.metadata.get("schedule", schedule) == schedule
        ),
    )


def pretrain_expand(params: Params) -> list[dict[str, str]]:
    return [{"method": m, "objective": o, "pseed": str(s)} for m, o, s in availability.pretrain_runs(params)]


# the pretrain leaves a tuning run does not read: its length, evaluations and rate come from pretrain.tune
NOT_READ = {"learning_rate", "steps", "passes", "eval_every", "eval_schedule", "eval_lines", "bits_per_byte"}


def tune_leaves(params: Params, wildcards: dict) -> list[str]:
    """A tuning job's rerun keys: the pretrain run's (`pretrain_leaves`) but those it replaces."""
    return [
        leaf
        for leaf in pretrain_leaves(params, {**wildcards, "schedule": "wsd"})
        if leaf.split(".")[1] not in NOT_READ and not leaf.startswith("pretrain.cooldown.per_decade")
    ]


def tune_expand(params: Params) -> list[dict[str, str]]:
    """One job per (method, objective) pretrain pair (but the teacher objectives'), when pretrain.tune is on."""
    if not params.leaf("pretrain.tune.learning_rates"):
        return []
    return [
        {"method": m, "objective": o} for m, o in availability.pretrain_pairs(params) if o not in TEACHER_OBJECTIVES
    ]
