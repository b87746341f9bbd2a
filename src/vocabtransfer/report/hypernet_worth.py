"""The learned initialisation against its own cost. Init method `hypernet` applies a network trained beforehand
(stage hypernet); its start is worth something only beside what that training cost. For each measured budget b:

* the token-equivalent against fvt (`token_equivalent.equivalent` with fvt's standard runs as the reference):
  the tokens fvt needs to reach hypernet's mean valid loss at b, with the report's interval (seeds paired: the
  init of pretraining seed k applies network seed k, so the seed part holds the network's seed variance; valid
  blocks bootstrapped; Bonferroni over the budgets);
* the gain, fvt's tokens saved: that token-equivalent − b;
* the cost: the tokens one network trained on (stage hypernet's stats.json, the mean over network seeds);
* for one target, the network **pays for itself** at b where the gain's interval lies above the cost, does not
  where it lies below, else undetermined; trained once and reused, it pays after ⌈cost / gain⌉ targets (the
  interval from the gain's ends; none where the gain may be 0 or less).

Tokens of the network's training (text through the frozen source under sampled tokenizers, gradients to the
network only) and of pretraining (gradients to every weight) are not the same work per token: the section
states both counts and the seconds each took, and counts tokens, not FLOPs."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from vocabtransfer.report.markdown import md_table
from vocabtransfer.report.token_equivalent import (
    STANDARD,
    Equivalent,
    Estimate,
    Replicates,
    budget_indices,
    equivalent,
)
from vocabtransfer.report.token_worth import interval_text, tokens_text

METHOD, REFERENCE = "hypernet", "fvt"


@dataclass
class Payback:
    """hypernet at one budget: fvt's tokens to reach its loss (`worth`), the gain over the budget and the cost."""

    worth: Equivalent
    cost: float

    @property
    def gain(self) -> tuple[float, float, float]:
        """fvt's tokens saved: the token-equivalent − the budget (value, low, high; inf: more than the run)."""
        t, b = self.worth.tokens, self.worth.budget
        return t.value - b, t.low - b, t.high - b

    def verdict(self) -> str:
        """ "pays for itself", "does not pay for itself" or "undetermined" for one target."""
        _, low, high = self.gain
        if low > self.cost:
            return "pays for itself"
        return "does not pay for itself" if high < self.cost else "undetermined"

    def targets(self) -> str:
        """The targets after which a network trained once pays for itself: ⌈cost / gain⌉ [its interval]."""
        value, low, high = self.gain

        def count(gain: float) -> str:
            return "1" if math.isinf(gain) else str(max(1, math.ceil(self.cost / gain)))

        if low <= 0:
            return "none (no detectable gain)" if value <= 0 else f"{count(value)} [{count(high)}, none]"
        return f"{count(value)} [{count(high)}, {count(low)}]"


def network_tokens(networks: list[dict]) -> tuple[float, float] | None:
    """(tokens, seconds) one network trained on, the mean over network seeds; None without a trained network."""
    if not networks:
        return None
    return float(np.mean([n.get("tokens", 0) for n in networks])), float(
        np.mean([n.get("train_seconds", 0) for n in networks])
    )


def paybacks(reps: Replicates, cost: float, confidence: float) -> list[Payback]:
    """hypernet against fvt (standard objective) at every measured budget; none unless both were pretrained."""
    key, base = (METHOD, STANDARD), (REFERENCE, STANDARD)
    if key not in reps.mean or base not in reps.mean:
        return []
    indices = budget_indices(reps.grid)
    level = 1 - (1 - confidence) / max(1, len(indices))
    return [Payback(equivalent(reps, key, base, i, level), cost) for i in indices]


def _gain_text(p: Payback) -> str:
    value, low, high = p.gain
    return interval_text(Estimate(value, low, high, p.worth.tokens.upto))


def section(reps: Replicates, networks: list[dict], confidence: float) -> tuple[list[str], list[str]]:
    """The subsection and its verdict bullet; nothing unless hypernet and fvt were pretrained and a network's
    stats.json is there."""
    if (spent := network_tokens(networks)) is None or not (rows := paybacks(reps, spent[0], confidence)):
        return [], []
    cost, seconds = spent
    table = md_table(
        ["budget (tokens)", "hypernet's valid loss", "fvt's tokens to reach it", "fvt's tokens saved", "one target",
         "targets to pay back"],
        [
            [tokens_text(p.worth.budget), f"{p.worth.loss:.3f}", interval_text(p.worth.tokens), _gain_text(p),
             p.verdict(), p.targets()]
            for p in rows
        ],
    )  # fmt: skip
    seeds = reps.seeds.get((METHOD, STANDARD), 0)
    lines = [
        "### The hypernetwork against its own cost",
        "",
        table,
        "",
        f"One network trained on {cost:,.0f} tokens ({seconds / 60:.1f} min; the mean over {len(networks)} network "
        f"seed{'s' if len(networks) != 1 else ''}). fvt's tokens to reach hypernet-standard's mean valid loss at "
        "each budget, as the token-equivalent above but against fvt-standard; saved: that − the budget. One "
        "target: the network pays for itself where the saved tokens' interval lies above its training tokens. "
        "Targets to pay back: a network trained once and reused on that many targets (⌈training tokens / saved "
        f"tokens⌉, the interval from the saved tokens' ends). Intervals {100 * confidence:g} % over the budgets "
        f"(Bonferroni): {seeds} pretraining seeds paired, each with its own network seed, and {reps.blocks} valid "
        "blocks bootstrapped. A training token of the network (text through the frozen source, gradients to the "
        "network only) is not a pretraining token's work: compare the minutes too.",
        "",
    ]
    end = rows[-1]
    bullet = (
        f"**The hypernetwork {end.verdict()} for one target at {tokens_text(end.worth.budget)} tokens**: it saves "
        f"{_gain_text(end)} of fvt's tokens against the {cost:,.0f} it trained on; trained once and reused, it pays "
        f"back after {end.targets()} targets ({seeds} pretraining seeds with their own network seeds, "
        f"{reps.blocks} valid blocks)."
    )
    return lines, [bullet]
