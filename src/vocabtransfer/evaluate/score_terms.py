"""What the report reads of the scoring stages without loading a model or torch: bits per byte's floors (their
names and labels, the best one), the share of the source's advantage a method keeps, why a masked LM has no bits
per byte, and token_frequency_loss's loss per bucket averaged over pretraining seeds.

The definitions are `evaluate.bits_per_byte`'s and `evaluate.bpb_floor`'s docstrings; those modules, which score
with a model, read these terms from here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MASKED_REASON = (
    "bits per byte needs a causal LM: a masked LM predicts a few masked tokens from both sides, "
    "a pseudo-likelihood that is no probability of the text, so it keeps its per-token loss"
)

FLOOR = "floor"  # the `method` of a floor's rows in bits_per_byte.parquet (its `objective` is the floor's name)
NAMES = ("unigram-target", "unigram-source", "uniform")
# init_eval's row of the target unigram: its bits per byte, and its loss in nats on the methods' predicted tokens
UNIGRAM_ROW = f"{FLOOR}:unigram-target"
LABELS = {
    "unigram-target": "unigram, target tokenizer",
    "unigram-source": "unigram, source tokenizer",
    "uniform": "uniform, target vocabulary",
}


def share_kept(bpb_floor: float, bpb_method: float, bpb_source: float) -> float:
    """(BPB_floor − BPB_method) / (BPB_floor − BPB_source), the floor being the best predictor without a model:
    0 = no better than the floor, 1 = as good as the source with its own tokenizer. NaN when a value is
    missing or the source does not beat the floor (it then has no advantage to keep: `nothing_to_keep`)."""
    values = (bpb_floor, bpb_method, bpb_source)
    if any(v is None or not math.isfinite(float(v)) for v in values) or nothing_to_keep(bpb_floor, bpb_source):
        return math.nan
    return float((bpb_floor - bpb_method) / (bpb_floor - bpb_source))


def nothing_to_keep(bpb_floor: float, bpb_source: float) -> bool:
    """Whether the source fails to beat the best floor (needs as many bits per byte or more): then it has
    nothing to keep on this language and no share is given."""
    return not bpb_source < bpb_floor


@dataclass(frozen=True)
class Best:
    """The floor with the fewest bits per byte."""

    name: str
    bits_per_byte: float

    @property
    def label(self) -> str:
        return LABELS.get(self.name, self.name)


def best(values: dict[str, float]) -> Best | None:
    """The lowest of name -> bits per byte (None without a finite one)."""
    finite = {k: v for k, v in values.items() if v is not None and math.isfinite(v)}
    if not finite:
        return None
    name = min(finite, key=lambda k: (finite[k], k))
    return Best(name, finite[name])


def seed_means(rows: list[dict]) -> dict[tuple[str, str, int], tuple[float, float, float]]:
    """(method, objective, bucket) -> (mean loss over pretraining seeds, lowest, highest seed's loss)."""
    per: dict[tuple[str, str, int], list[float]] = {}
    for r in rows:
        per.setdefault((r["method"], r["objective"], r["bucket"]), []).append(r["loss"])
    return {k: (float(np.mean(v)), float(np.min(v)), float(np.max(v))) for k, v in per.items()}
