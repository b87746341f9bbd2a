"""The spread of the rows `random` and `overlap` draw at random (`init.random.scale: calibrated`,
`RandomRowsOptions`): the drawn rows shrunk toward the source mean by one factor α ≤ 1, e = μ + α (e − μ), i.e.
drawn from N(μ, (α σ)²) instead of N(μ, σ²), with α measured on the initialised model.

Why: the logits of drawn rows are z_i = h·μ + h·(e_i − μ): a level shared by every drawn token and a random part
of variance ≈ σ²‖h‖²; the loss of a softmax over V such logits is about ln V + Var(z)/2. Through a tied LM head
(Gemma 3: the output layer is the input matrix) rows of the source's spread give Var(z) ≫ 1, and the model starts
confidently wrong (Gemma 3 270M, 16,000 German tokens: ~16 nats where ln V = 9.68). Shrinking the spread lowers
Var(z) and keeps the level h·μ, the level the source's own rows (and the copied special tokens' logits) live at:
scaling whole rows toward 0 instead leaves the few copied special tokens dominating the softmax (on Gemma the loss
then stops at ~11.8 however small the factor). The factor is measured, not derived from the final norm's
weights, because for a tied model α also changes the inputs, and so ‖h‖.

The rule: α is the largest factor on the grid 2^(-k/8), k = 0 … 128, whose model (the drawn rows of every
matrix the method filled, input and — untied — output, shrunk by α; copied rows untouched) scores a mean token
loss at most `margin` nats above the same model at the grid's smallest factor (zero spread: every drawn row at
μ), on the first `calibration_lines` lines of the training split (blocks of `SEQ_LEN` ids, masked positions
seeded as init_eval's): the spread may cost at most `margin` (Var(z)/2 ≤ margin, a logit std ≤ √(2·margin)).
The zero-spread loss is ln V where the copied rows are harmless; on Gemma 3 its five copied special tokens add
0.26 nats to it, so the threshold is relative to it, not to ln V (an ln V + 0.25 target is out of reach there).
α = 1 (the rows exactly as drawn) where the source spread already passes; a bisection over the grid (the loss
falls with the factor) otherwise, about nine forward passes over those lines. Seeded and on fixed lines, the same
params give the same α and byte-identical rows (a loss that lands on the threshold within float error could tip
the other way on another machine: the record keeps every loss tried).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.model import lm_loss
from vocabtransfer.model.lmdata import Kind, lm_batches, pack_lines

log = logging.getLogger(__name__)

GRID = tuple(2.0 ** (-k / 8) for k in range(129))  # 1 down to 2^-16, eight steps an octave
SEQ_LEN = 128  # ids per scored block (init_eval's seq_len)
BATCH_SIZE = 8


def scaled(rows, mask: np.ndarray, factor: float, center):
    """`rows` (V, D) float32 with the rows of `mask` shrunk toward `center` (D,): center + factor · (row −
    center), i.e. drawn from N(mean, (factor · std)²) instead of N(mean, std²) (a new tensor; the other rows,
    and every row at factor 1, copied bit for bit)."""

    out = rows.clone()
    if factor != 1.0:
        idx = torch.from_numpy(np.flatnonzero(mask))
        out[idx] = (out[idx] - center) * factor + center
    return out


@dataclass(frozen=True)
class Drawn:
    """A method's rows and which of them were drawn at random, per embedding ("input", and "output" when untied):
    `rows` (V, D), `masks` (V,) bool, `centers` (D,) the mean they were drawn around."""

    rows: dict[str, Any]
    masks: dict[str, np.ndarray]
    centers: dict[str, Any]

    def at(self, which: str, factor: float):
        """The `which` rows with the drawn ones shrunk by `factor` (`scaled`)."""
        return scaled(self.rows[which], self.masks[which], factor, self.centers[which])


def calibrate(
    model,
    tokenizer,
    kind: Kind,
    lines: list[str],
    drawn: Drawn,
    *,
    margin: float,
    seed: int,
    where: str = "init.random",
) -> dict:
    """The calibration record: `factor` (α), `initial_loss` (the mean token loss at α on these lines),
    `ln_vocab` (ln V), `zero_spread_loss` (the loss at the grid's smallest factor: every drawn row at the mean),
    `threshold` (that plus `margin`), `tokens` scored, `lines`, `tried` ([α, loss] per forward pass, in order).

    `model`: the initialised model with the target vocabulary; `drawn`: the method's rows ({"input": (V, D),
    "output": (V, D) when untied}), the drawn rows of each and the mean each was drawn around (the source rows'
    mean per dimension, `init.moments.source_moments`). The model's embedding rows are overwritten
    while scoring and left at the returned factor."""

    blocks = pack_lines(tokenizer, lines, SEQ_LEN, kind=kind)
    if not blocks:
        raise VocabTransferError(
            f"{where}.scale: calibrated needs training text and the train split gave none; "
            "check corpus.sources, or set the scale to source"
        )
    batches = lm_batches(tokenizer, blocks, kind, BATCH_SIZE, seed)
    weights = {"input": model.get_input_embeddings().weight}
    if "output" in drawn.rows:
        weights["output"] = model.get_output_embeddings().weight
    ln_v = math.log(len(tokenizer))
    tried: list[list[float]] = []
    losses: dict[int, float] = {}
    n_tokens = 0

    def loss_at(k: int) -> float:
        nonlocal n_tokens
        if k not in losses:
            with torch.no_grad():
                for which, weight in weights.items():
                    weight.copy_(drawn.at(which, GRID[k]).to(weight.dtype))
            res = lm_loss.evaluate_lm(model, batches, kind)
            losses[k], n_tokens = float(res["loss"]), int(res["n_tokens"])
            tried.append([GRID[k], losses[k]])
            log.info("%s.scale: factor %.4g -> loss %.4f (ln V = %.4f)", where, GRID[k], losses[k], ln_v)
        return losses[k]

    last = len(GRID) - 1
    threshold = loss_at(last) + margin  # the loss at (almost) zero spread, plus what the spread may add
    if loss_at(0) <= threshold:
        best = 0
    else:  # loss(lo) > threshold >= loss(best): bisect (the loss falls with the factor)
        lo, best = 0, last
        while best - lo > 1:
            mid = (lo + best) // 2
            if loss_at(mid) <= threshold:
                best = mid
            else:
                lo = mid
    with torch.no_grad():  # leave the model's rows at the chosen factor
        for which, weight in weights.items():
            weight.copy_(drawn.at(which, GRID[best]).to(weight.dtype))
    return {
        "factor": GRID[best],
        "initial_loss": losses[best],
        "ln_vocab": ln_v,
        "zero_spread_loss": losses[last],
        "threshold": threshold,
        "tokens": n_tokens,
        "lines": len(lines),
        "tried": tried,
    }
