"""Factorised embeddings for continued pretraining: E = coordinates @ primitives, computed in the forward pass.

`factorize_model` swaps a model's input embedding (and its tied or untied LM-head projection) for
low-rank modules built from the init stage's `coordinates.safetensors` / `primitives.safetensors`
(`output_…` for untied output embeddings); `unfactorize_model` multiplies them out and puts the
original modules back, so the saved model loads with `AutoModelFor…` alone.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from vocabtransfer import io
from vocabtransfer.model import modeling
from vocabtransfer.errors import VocabTransferError


class LowRankEmbedding(nn.Module):
    """An input embedding E = coordinates (V×k) @ primitives (k×D), looked up without forming E."""

    def __init__(self, coordinates, primitives, train_primitives: bool = True):
        super().__init__()
        self.coordinates = nn.Parameter(coordinates.float().clone())
        self.primitives = nn.Parameter(primitives.float().clone(), requires_grad=train_primitives)

    @property
    def weight(self):
        return self.coordinates @ self.primitives

    def forward(self, ids):
        return F.embedding(ids, self.coordinates) @ self.primitives


class LowRankOutput(nn.Module):
    """Vocabulary logits h @ (C @ P)ᵀ + b = (h @ Pᵀ) @ Cᵀ + b; with `shared`, C and P are the input
    embedding's (tied models) and not registered again."""

    def __init__(self, factors: LowRankEmbedding, bias, shared: bool):
        super().__init__()
        if shared:
            object.__setattr__(self, "factors", factors)
        else:
            self.factors = factors
        self.bias = bias

    @property
    def weight(self):
        return self.factors.weight

    def forward(self, hidden):
        return F.linear(F.linear(hidden, self.factors.primitives), self.factors.coordinates, self.bias)


def factorize_model(model, init_dir: Path, train_primitives: bool) -> dict:
    """Swap the embedding matrices for their low-rank factors (init's coordinates/primitives files).

    Returns what `unfactorize_model` needs to put full matrices back: the original modules.
    """

    def factors(prefix: str) -> tuple[torch.Tensor, torch.Tensor] | None:
        c, p = init_dir / f"{prefix}coordinates.safetensors", init_dir / f"{prefix}primitives.safetensors"
        if not (c.is_file() and p.is_file()):
            return None
        return (
            io.load_tensors(c, [f"{prefix}coordinates"])[f"{prefix}coordinates"],
            io.load_tensors(p, [f"{prefix}primitives"])[f"{prefix}primitives"],
        )

    inp = factors("")
    if inp is None:
        raise VocabTransferError(
            f"{init_dir}: pretrain.factorized needs coordinates.safetensors and "
            "primitives.safetensors (written by <method>+svd, <method>+snmf, ofa, snmf); "
            "set pretrain.factorized: false for this method"
        )
    tied = modeling.is_tied(model)
    original = {"input": model.get_input_embeddings(), "output": model.get_output_embeddings(), "tied": tied}
    weight = original["input"].weight
    if inp[0].shape[0] != weight.shape[0] or (inp[0] @ inp[1]).shape != weight.shape:
        raise VocabTransferError(
            f"{init_dir}: coordinates {tuple(inp[0].shape)} @ primitives {tuple(inp[1].shape)} "
            f"do not make the model's {tuple(weight.shape)} embeddings; rerun the init stage"
        )
    low = LowRankEmbedding(inp[0], inp[1], train_primitives).to(weight.device)
    model.set_input_embeddings(low)
    out = original["output"]
    if out is not None:
        bias = getattr(out, "bias", None)
        if tied:
            model.set_output_embeddings(LowRankOutput(low, bias, shared=True))
        else:
            fac = factors("output_")
            if fac is not None:
                model.set_output_embeddings(
                    LowRankOutput(LowRankEmbedding(*fac, train_primitives).to(weight.device), bias, shared=False)
                )
    return original


def unfactorize_model(model, original: dict) -> None:
    """Multiply the factors out into the original embedding modules and put them back (re-tied)."""
    with torch.no_grad():
        low = model.get_input_embeddings()
        original["input"].weight.copy_(low.weight.detach())
        model.set_input_embeddings(original["input"])
        out = model.get_output_embeddings()
        if isinstance(out, LowRankOutput):
            if not original["tied"]:
                original["output"].weight.copy_(out.weight.detach())
            model.set_output_embeddings(original["output"])
    if original["tied"]:
        model.tie_weights()
