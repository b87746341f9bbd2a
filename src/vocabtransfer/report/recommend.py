"""Which pretrained run of a language to use: the rule `vocabtransfer export` exports by when `export.model` names
none, in one function (`recommend`), so that a later rule replaces it in one place.

The rule: among the pretrained methods other than the baseline (`report.baseline`, one method or a list), the
method × objective with the lowest final valid loss after pretraining, averaged over its pretraining seeds (each
seed's last evaluated loss, `metrics.parquet`); ties go to the earlier method of the study's order. Within it, the
pretraining seed whose final valid loss is the median (with an even count, the lower of the two middle ones):
a typical run, not the luckiest. Where only baselines were pretrained, the same rule over them.

The valid loss is per target token of one tokenizer, so it compares every method and objective of a language (not
across languages, whose tokenizers differ); it is the split the report scores too, so the pick is the report's
best measured model, not a held-out choice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

from vocabtransfer.report.read import Language, Run

RULE = (
    "the method × objective with the lowest final valid loss after pretraining (mean over pretraining seeds) among "
    "the pretrained methods other than the baseline, and its pretraining seed with the median final loss"
)


@dataclass(frozen=True)
class Pick:
    """The recommended run and why: `means` holds each candidate method × objective's mean final valid loss."""

    run: Run
    loss: float  # the run's own final valid loss
    means: dict[tuple[str, str], float] = field(default_factory=dict)
    baselines_only: bool = False

    def sentence(self) -> str:
        """The rule and its numbers, for the model card."""
        method, objective, pseed = self.run
        ranked = sorted(self.means.items(), key=lambda kv: kv[1])
        listed = ", ".join(f"{m}-{o} {v:.3f}" for (m, o), v in ranked)
        among = " (only baselines were pretrained, so among them)" if self.baselines_only else ""
        return (
            f"Recommended by the rule: {RULE}{among}. Mean final valid loss (nats per token): {listed}; "
            f"pretraining seed {pseed} of {method}-{objective} has {self.loss:.3f}."
        )


def final_losses(lang: Language) -> dict[Run, float]:
    """Run -> its last evaluated valid loss (runs without one left out)."""
    out = {}
    for run, curve in sorted(lang.curves.items()):
        if "valid_loss" not in curve:
            continue
        losses = curve.dropna(subset=["valid_loss"]).sort_values("step")["valid_loss"]
        if len(losses) and math.isfinite(float(losses.iloc[-1])):
            out[run] = float(losses.iloc[-1])
    return out


def recommend(lang: Language, baseline: str | Sequence[str]) -> Pick | None:
    """The run the rule of this module picks among `lang`'s pretrained runs; None without any."""
    finals = final_losses(lang)
    baselines = {baseline} if isinstance(baseline, str) else set(baseline)
    candidates = {run: v for run, v in finals.items() if run[0] not in baselines}
    only = not candidates
    candidates = candidates or finals
    if not candidates:
        return None
    order = lang.methods()
    groups: dict[tuple[str, str], list[tuple[float, int]]] = {}
    for (method, objective, pseed), loss in candidates.items():
        groups.setdefault((method, objective), []).append((loss, pseed))
    means = {key: math.fsum(v for v, _ in runs) / len(runs) for key, runs in groups.items()}
    best = min(means, key=lambda key: (means[key], order.index(key[0]) if key[0] in order else len(order), key))
    ranked = sorted(groups[best])
    loss, pseed = ranked[(len(ranked) - 1) // 2]
    return Pick((best[0], best[1], pseed), loss, means, only)
