"""The report's "Learning rates and compute" section: per pretrained method × objective, the peak learning rate
it trained at (picked on the dev split by `pretrain_tune`, or the one `pretrain.learning_rate`), the rates tried
with their dev losses, and the compute each arm used: optimiser steps and target tokens of a run, the cool-down
branches' steps beyond it (schedule wsd), and the tuning runs' tokens. So a comparison's arms are seen tuned by
one rule and their compute stated."""

from __future__ import annotations

import math

import numpy as np

from vocabtransfer.report.markdown import fmt, md_table
from vocabtransfer.report.read import Language


def _tokens(x: float) -> str:
    if not math.isfinite(x):
        return "–"
    return f"{x / 1e6:.2f}M" if x >= 1e6 else f"{x / 1e3:.1f}k" if x >= 1e3 else f"{x:.0f}"


def _rate(x) -> str:
    return "–" if x is None else f"{float(x):g}"


def _mean(runs: list[dict], key: str) -> float:
    """The runs' mean of a stats.json count (NaN where a run's stats lack it)."""
    return float(np.mean([r.get(key, math.nan) for r in runs]))


def _tried(tuning: dict | None) -> str:
    """The rates tried and their dev losses, the pick in bold."""
    if not tuning:
        return "not tuned"
    parts = []
    for r in tuning["results"]:
        text = f"{r['learning_rate']:g}: {fmt(r['dev_loss'])}"
        text = f"{text} (beyond the grid)" if r["learning_rate"] in tuning.get("extended", ()) else text
        parts.append(f"**{text}**" if r["learning_rate"] == tuning["pick"] else text)
    # a pick still on the edge after the extensions: the best rate may lie outside the rates tried
    return ", ".join(parts) + ("; **the pick is at the edge of the rates tried**" if tuning.get("at_edge") else "")


def rows(lang: Language) -> list[list[str]]:
    """One row per pretrained (method, objective): its rate, the rates tried, and the compute of its runs."""
    pairs: dict[tuple[str, str], list[dict]] = {}
    for (m, o, _), stats in sorted(lang.runs.items()):
        pairs.setdefault((m, o), []).append(stats)
    out = []
    for (m, o), runs in pairs.items():
        tuning = lang.tuning.get((m, o))
        rates = sorted({r.get("learning_rate") for r in runs}, key=lambda x: -1 if x is None else x)
        branch = [((r.get("cooldown") or {}).get("branch_steps") or 0) for r in runs]
        tune_tokens = sum(r["tokens_seen"] for r in tuning["results"]) if tuning else 0
        out.append(
            [
                f"{m}-{o}",
                ", ".join(_rate(x) for x in rates),
                _tried(tuning),
                str(len(runs)),
                f"{_mean(runs, 'steps'):.0f} + {np.mean(branch):.0f}",
                _tokens(_mean(runs, "tokens_seen")),
                _tokens(float(tune_tokens)) if tuning else "–",
            ]
        )
    return out


def section(lang: Language) -> list[str]:
    """The section, or nothing without pretraining runs."""
    table = rows(lang)
    if not table:
        return []
    tunings = list(lang.tuning.values())
    if tunings:
        first = tunings[0]
        rule = (
            f"Each method × objective trained at the peak learning rate picked on the dev split (lines never "
            f"trained on and never scored here): pretraining seed 1 trained {first['steps']} optimiser steps at "
            f"each rate (a wsd run of that length), scored on {first['dev_blocks']} dev blocks; the pick is "
            f"{first['rule']}, the same grid and rule for every method (bold: the pick); a pick at the grid's "
            f"smallest or largest rate led to one more rate beyond it at the grid's own ratio, up to "
            f"{first.get('extend', 0)} times (pretrain.tune.extend)."
        )
    else:
        rule = "Every run trained at the one peak learning rate `pretrain.learning_rate`, not tuned per method."
    return [
        "### Learning rates and compute",
        "",
        md_table(
            [
                "run",
                "peak rate",
                "dev loss by rate",
                "seeds",
                "steps + branches'",
                "tokens a run",
                "tuning tokens",
            ],
            table,
        ),
        "",
        rule + " Steps + branches': a run's optimiser steps and those its cool-down branches (schedule wsd) "
        "train beyond them, from each fork to its end (the compute its curve cost besides the run itself); tokens a "
        "run: the target tokens one run saw (mean over seeds); tuning tokens: those of all its tuning runs.",
        "",
    ]
