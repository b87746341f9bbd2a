"""The cross-key checks of params `pretrain` that the schema cannot express (called by `config.validate` before any
job): the runs' methods and pairs, and what a wsd schedule with cool-down branches needs."""

from __future__ import annotations

import math
from typing import Mapping

from vocabtransfer.errors import VocabTransferError


def check_pretrain(tree: Mapping, source: str = "params.yaml") -> None:
    """`pretrain.methods` must be `init.methods` entries (continued pretraining starts from init's models)."""
    init_methods = list((tree.get("init") or {}).get("methods") or [])
    unknown = [m for m in (tree.get("pretrain") or {}).get("methods") or [] if m not in init_methods]
    if unknown:
        raise VocabTransferError(
            f"{source}: pretrain.methods: {', '.join(unknown)} not in init.methods "
            f"({', '.join(init_methods)}); add them to init.methods or remove them"
        )
    section = tree.get("pretrain") or {}
    unknown = [lang for lang in section.get("language_passes") or {} if lang not in (tree.get("languages") or [])]
    if unknown:
        raise VocabTransferError(
            f"{source}: pretrain.language_passes: {', '.join(unknown)} not in languages "
            f"({', '.join(tree.get('languages') or [])}); name only languages the study runs"
        )
    methods, objectives = section.get("methods") or [], section.get("objectives") or []
    for pair in section.get("pairs") or []:
        method, _, objective = pair.rpartition("-")
        if method not in methods or objective not in objectives:
            raise VocabTransferError(
                f"{source}: pretrain.pairs: {pair} is not a pretrain.methods × pretrain.objectives pair "
                f"({', '.join(methods)} × {', '.join(objectives)}); add its method and objective there or remove it"
            )


def check_schedule(tree: Mapping, source: str = "params.yaml") -> None:
    """`pretrain.schedule: wsd` needs a stable phase between the warm-up and the decay (with `pretrain.steps`; with
    `pretrain.passes` the steps are known at the job's start), and its cool-down branches (train.cooldown) resume
    ordinary Trainer checkpoints: not a factorised or FSDP-sharded run's."""
    section = tree.get("pretrain") or {}
    check_tune(tree, source)
    if section.get("schedule") != "wsd":
        return
    options = section.get("cooldown") or {}
    fraction, steps, warmup = options.get("fraction", 0.2), section.get("steps", 200), section.get("warmup_steps", 0)
    decay = max(1, math.ceil(fraction * steps - 1e-9))
    if section.get("passes") is None and warmup > steps - decay:
        raise VocabTransferError(
            f"{source}: pretrain.warmup_steps: {warmup} leaves no stable phase in a wsd run of {steps} steps that "
            f"decays over its last {decay} (pretrain.cooldown.fraction {fraction}); lower warmup_steps or raise "
            "pretrain.steps"
        )
    unsupported = [k for k in ("factorized",) if section.get(k)] + (
        ["sharding: fsdp"] if section.get("sharding") == "fsdp" else []
    )
    if options.get("per_decade", 2) and unsupported:
        raise VocabTransferError(
            f"{source}: pretrain.{unsupported[0]}: cool-down branches (pretrain.schedule wsd) resume ordinary "
            "checkpoints, not this run's; set pretrain.cooldown.per_decade: 0 (the run's own end only) or train "
            "without it"
        )


def check_tune(tree: Mapping, source: str = "params.yaml") -> None:
    """`pretrain.tune.learning_rates` scores the dev split (corpus.dev_fraction > 0), and each tuning run (a wsd run
    of tune.steps) must hold the warm-up and its decay."""
    section = tree.get("pretrain") or {}
    tune = section.get("tune") or {}
    if not tune.get("learning_rates"):
        return
    if not (tree.get("corpus") or {}).get("dev_fraction"):
        raise VocabTransferError(
            f"{source}: pretrain.tune.learning_rates: the rates are picked on the dev split, and corpus.dev_fraction "
            "is 0 (no dev split); set corpus.dev_fraction (e.g. 0.05) or remove pretrain.tune.learning_rates"
        )
    steps, warmup = tune.get("steps", 40), section.get("warmup_steps", 0)
    decay = max(1, math.ceil((section.get("cooldown") or {}).get("fraction", 0.2) * steps - 1e-9))
    if warmup > steps - decay:
        raise VocabTransferError(
            f"{source}: pretrain.tune.steps: {steps} cannot hold the warm-up ({warmup} steps) and the decay ({decay}) "
            "of a tuning run; raise pretrain.tune.steps"
        )
