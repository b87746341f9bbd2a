"""Which pretrained run of a language `vocabtransfer export` exports when `export.model` names none: the method the
report recommends (vocabtransfer.report.recommend: its rule, the one "In brief" states), with the standard
objective, and among its pretraining seeds the one whose final valid loss is the median (with an even count, the
lower of the two middle ones): a typical run, not the luckiest. Where no method other than a baseline was
pretrained, the baselines' method × objective with the lowest mean final valid loss, and the card says so.

The final valid loss is each seed's last evaluated loss (`metrics.parquet`), on the split the report scores: the
pick is the report's best measured model, not a held-out choice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from vocabtransfer.report.baseline_choice import final_losses, mean_final_losses
from vocabtransfer.report.read import Language, Run
from vocabtransfer.report.recommend import OBJECTIVE, RULE, recommend
from vocabtransfer.report.tables import Settings


@dataclass(frozen=True)
class Pick:
    """The run to export and why: `reason`, the recommendation's words; `means`, each candidate method ×
    objective's mean final valid loss where only baselines ran."""

    run: Run
    loss: float  # the run's own final valid loss
    reason: str
    means: dict[tuple[str, str], float] = field(default_factory=dict)
    baselines_only: bool = False

    def sentence(self) -> str:
        """The rule and its numbers, for the model card."""
        method, objective, pseed = self.run
        if self.baselines_only:
            listed = ", ".join(f"{m}-{o} {v:.3f}" for (m, o), v in sorted(self.means.items(), key=lambda kv: kv[1]))
            head = (
                "Only baselines were pretrained, so the one with the lowest mean final valid loss (nats per token: "
                f"{listed})"
            )
        else:
            head = f"Recommended by the report's rule ({RULE}): {method}, {self.reason}"
        return (
            f"{head}; pretraining seed {pseed} of {method}-{objective}, the median final valid loss ({self.loss:.3f})."
        )


def median_seed(finals: dict[Run, float], method: str, objective: str) -> tuple[int, float] | None:
    """(pretraining seed, its final loss) of the median run of method × objective (even count: the lower middle)."""
    runs = sorted((loss, pseed) for (m, o, pseed), loss in finals.items() if (m, o) == (method, objective))
    if not runs:
        return None
    loss, pseed = runs[(len(runs) - 1) // 2]
    return pseed, loss


def exported_run(lang: Language, settings: Settings, baseline: str | Sequence[str]) -> Pick | None:
    """The run this module's rule picks among `lang`'s pretrained runs; None without any."""
    finals = final_losses(lang)
    rec = recommend(lang, settings, baseline)
    if rec.pick is not None and (found := median_seed(finals, rec.pick, OBJECTIVE)) is not None:
        return Pick((rec.pick, OBJECTIVE, found[0]), found[1], rec.reason)
    if not finals:
        return None
    means = mean_final_losses(finals)
    best = min(means, key=lambda key: (means[key], key))
    pseed, loss = median_seed(finals, *best)  # type: ignore[misc]
    return Pick((best[0], best[1], pseed), loss, "only baselines were pretrained", means, True)
