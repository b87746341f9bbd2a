"""Which baseline a language's token-equivalent counts in (`report.baseline`): one method, or a list of them
(`[random, mean]`), of which the report takes the STRONGER in each language, the one whose final valid loss after
pretraining (with the standard objective, the mean over pretraining seeds of each seed's last evaluated loss) is
lower. Conservative: a method is credited only with what it is worth over the better of the baselines, never the
weaker. A listed baseline without standard-objective runs in the language is left out of the choice; where none
has runs, the first listed is named (and the report says it has no runs).

The same baseline is the one every "method − baseline" comparison subtracts (report.comparisons, report.bpb): a
weaker listed baseline is then one of the compared methods, its row (`random − mean`) saying how much weaker it
is, and each such table says so (`BaselineChoice.weaker_note`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

from vocabtransfer.report.read import Language, Run

OBJECTIVE = "standard"  # the objective the baselines are compared with


@dataclass(frozen=True)
class BaselineChoice:
    method: str  # the baseline the language's token-equivalent counts in
    candidates: tuple[str, ...]  # report.baseline, in its order
    final_loss: dict[str, float] = field(default_factory=dict)  # candidate -> its final valid loss (with runs only)

    @property
    def weaker(self) -> tuple[str, ...]:
        """The other listed baselines with runs here, in report.baseline's order: rows of the − baseline tables."""
        return tuple(m for m in self.candidates if m != self.method and m in self.final_loss)

    def weaker_note(self) -> str:
        """`random, the weaker of report.baseline (random, mean), is compared with mean as a row too.` ('' for a
        single baseline or none weaker with runs)."""
        if not self.weaker:
            return ""
        listed, one = " and ".join(self.weaker), len(self.weaker) == 1
        rows = ", ".join(f"{m} − {self.method}" for m in self.weaker)
        return (
            f"{listed}, the weaker of report.baseline ({', '.join(self.candidates)}), "
            f"{'is' if one else 'are'} compared with {self.method} as {'a row' if one else 'rows'} too ({rows})."
        )

    def sentence(self) -> str:
        """How the baseline was chosen, for the report ('' for a single baseline)."""
        if len(self.candidates) < 2:
            return ""
        scored = ", ".join(f"{m} {v:.3f}" for m, v in self.final_loss.items())
        if not self.final_loss:
            return (
                f"Baseline: {self.method}, the first of report.baseline ({', '.join(self.candidates)}); none of them "
                f"has {OBJECTIVE}-objective runs here."
            )
        return (
            f"Baseline: {self.method}, the stronger of report.baseline ({', '.join(self.candidates)}) here, the one "
            f"with the lower final valid loss after pretraining ({OBJECTIVE} objective, mean over seeds: {scored}); "
            "a conservative choice: every method is credited only with what it is worth over the better baseline."
        )


def final_losses(lang: Language) -> dict[Run, float]:
    """Run -> its last evaluated valid loss (runs without a finite one left out): the final valid loss the baseline
    choice and the exported run's pick (report.export_pick) compare."""
    out = {}
    for run, curve in sorted(lang.curves.items()):
        if "valid_loss" not in curve:
            continue
        losses = curve.dropna(subset=["valid_loss"]).sort_values("step")["valid_loss"]
        if len(losses) and math.isfinite(float(losses.iloc[-1])):
            out[run] = float(losses.iloc[-1])
    return out


def mean_final_losses(finals: dict[Run, float]) -> dict[tuple[str, str], float]:
    """(method, objective) -> the mean over its pretraining seeds of each seed's final valid loss (`final_losses`)."""
    per: dict[tuple[str, str], list[float]] = {}
    for (method, objective, _), loss in finals.items():
        per.setdefault((method, objective), []).append(loss)
    return {key: math.fsum(v) / len(v) for key, v in per.items()}


def stronger_baseline(lang: Language, candidates: str | Sequence[str]) -> BaselineChoice:
    """The baseline of `lang` among `candidates` (report.baseline): the one with the lower final valid loss (ties:
    the first listed); a single name is itself."""
    names = (candidates,) if isinstance(candidates, str) else tuple(candidates)
    if len(names) == 1:
        return BaselineChoice(names[0], names)
    finals = mean_final_losses(final_losses(lang))
    scored = {m: finals[(m, OBJECTIVE)] for m in names if (m, OBJECTIVE) in finals}
    if not scored:
        return BaselineChoice(names[0], names)
    best = min(scored, key=lambda m: (scored[m], names.index(m)))
    return BaselineChoice(best, names, scored)
