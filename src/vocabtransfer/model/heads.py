"""The LM head of each architecture family, as the parts a fused loss takes, and the hidden states it reads.

A masked or causal LM maps its final hidden states h to vocabulary logits as

    logits = scale * (transform(h) @ weight.T + bias)        (then Gemma 2/3: softcap * tanh(logits / softcap))

`head_parts(model)` returns those parts (`Head`) by architecture family, one function each:
  - BERT family (BERT, MiniLM, …): `cls.predictions.transform` (dense, activation, LayerNorm), then the
    decoder (weight tied to the input embeddings, bias `cls.predictions.bias`);
  - RoBERTa family (RoBERTa, XLM-R, CamemBERT, …): `lm_head.dense`, gelu, `lm_head.layer_norm`, then
    `lm_head.decoder` (tied weight, bias `lm_head.bias`);
  - DistilBERT: `vocab_transform`, activation, `vocab_layer_norm`, then `vocab_projector`;
  - decoders (GPT-2, Llama, Qwen, Gemma, Mistral, …): the output embeddings `lm_head` alone, tied or
    not, with or without bias; Cohere's `logit_scale`, Granite's `logits_scaling`, Gemma's soft-capping.
A vocabulary projection swapped for `lowrank.LowRankOutput` (factorised pretraining) is read as
states @ primitives.T against the coordinates: the same logits, a smaller product.

`predicted_hidden` runs the model's own forward (so a DDP-wrapped model synchronises its gradients)
with a pre-hook on the head's first module that keeps the hidden states and hands the head an empty
sequence, then selects the predicted positions: no logits are formed. `head_loss` is the objective
from those states through the fused head (`losses.linear_objective_loss`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import torch
import torch.nn as nn
from transformers.activations import gelu

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.model.fused_head import linear_objective_loss
from vocabtransfer.model.losses import Reduction, get_objective, objective_loss


@dataclass(frozen=True)
class Head:
    """The head of one model: `root` is the module the final hidden states enter, `modules` all the
    modules it consists of, `transform` the map before the vocabulary projection (or None),
    `projection` the vocabulary projection (nn.Linear or a low-rank one)."""

    family: str
    root: nn.Module
    modules: tuple[nn.Module, ...]
    transform: Callable | None
    projection: nn.Module
    scale: float = 1.0
    softcap: float | None = None

    @property
    def fusable(self) -> bool:
        """Whether the logits are linear in the projection's states (no soft-capping)."""
        return self.softcap is None

    def linear(self, hidden: torch.Tensor):
        """(states, weight (V, K), bias or None) with logits = states @ weight.T + bias (before soft-capping)."""
        states = hidden if self.transform is None else self.transform(hidden)
        proj, bias = self.projection, getattr(self.projection, "bias", None)
        if isinstance(proj, nn.Linear):
            weight = proj.weight
        elif hasattr(proj, "factors"):  # lowrank.LowRankOutput: (h @ P.T) @ C.T
            states, weight = states @ proj.factors.primitives.T, proj.factors.coordinates
        else:
            raise VocabTransferError(
                f"{self.family} head: its vocabulary projection is a {type(proj).__name__}, "
                "neither nn.Linear nor a low-rank output; vocabtransfer cannot read its weight"
            )
        if self.scale != 1.0:
            states, bias = states * self.scale, None if bias is None else bias * self.scale
        return states, weight, bias

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The head's logits for `hidden` (materialised: for few rows, or a soft-capped head)."""
        states, weight, bias = self.linear(hidden)
        logits = torch.nn.functional.linear(
            states, weight.to(states.dtype), None if bias is None else bias.to(states.dtype)
        )
        return logits if self.softcap is None else torch.tanh(logits / self.softcap) * self.softcap

    __call__ = logits

    def parameters(self) -> Iterator[nn.Parameter]:
        seen: set[int] = set()
        for module in self.modules:
            for p in module.parameters():
                if id(p) not in seen:
                    seen.add(id(p))
                    yield p


# ------------------------------------------------------------------------------ one function per family


def bert_head(model) -> Head:
    p = model.cls.predictions
    return Head("bert", model.cls, (model.cls,), p.transform, p.decoder)


def roberta_head(model) -> Head:

    lm = model.lm_head
    return Head("roberta", lm, (lm,), lambda h: lm.layer_norm(gelu(lm.dense(h))), lm.decoder)


def distilbert_head(model) -> Head:
    modules = (model.vocab_transform, model.vocab_layer_norm, model.vocab_projector)
    return Head(
        "distilbert",
        model.vocab_transform,
        modules,
        lambda h: model.vocab_layer_norm(model.activation(model.vocab_transform(h))),
        model.vocab_projector,
    )


def decoder_head(model) -> Head:
    lm = model.get_output_embeddings()
    config = model.config.get_text_config()
    scale = float(getattr(config, "logit_scale", None) or 1.0)  # Cohere
    scale /= float(getattr(config, "logits_scaling", None) or 1.0)  # Granite
    softcap = getattr(config, "final_logit_softcapping", None)  # Gemma 2/3
    return Head("decoder", lm, (lm,), None, lm, scale, float(softcap) if softcap else None)


def head_parts(model) -> Head:
    """The model's `Head`, by the structure its family gives it (see the module docstring)."""
    if hasattr(getattr(model, "cls", None), "predictions"):
        return bert_head(model)
    lm = getattr(model, "lm_head", None)
    if lm is not None and hasattr(lm, "dense") and hasattr(lm, "decoder"):
        return roberta_head(model)
    if hasattr(model, "vocab_projector") and hasattr(model, "vocab_transform"):
        return distilbert_head(model)
    out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    linear = isinstance(out, nn.Linear) or hasattr(out, "factors")
    if linear and not getattr(model.config, "is_encoder_decoder", False):
        return decoder_head(model)
    raise VocabTransferError(
        f"{type(model).__name__}: no LM head of a family vocabtransfer knows (BERT, RoBERTa, "
        "DistilBERT, decoder lm_head); use a masked or causal LM of one of these families"
    )


# ------------------------------------------------------------------------------ states and loss


def _capture(store: list):
    def hook(module, args, kwargs):
        if args:
            store.append(args[0])
            return (args[0][..., :0, :],) + tuple(args[1:]), kwargs
        key = next(iter(kwargs))
        store.append(kwargs[key])
        return args, {**kwargs, key: kwargs[key][..., :0, :]}

    return hook


def predicted_hidden(model, batch: dict, kind: str, head: Head | None = None):
    """(final hidden states at the predicted positions, their target ids) of one batch.

    1. the model's own forward (wrapped or not), the hidden states taken where they enter the head,
       which then runs on an empty sequence (its parameters stay in the graph: DDP sees them used);
    2. causal models predict the next token: states up to the last but one position, labels shifted;
    3. the positions whose label is not -100 (masked LMs: the masked ones).
    `head` is `head_parts` of the unwrapped model (computed when None).
    """
    head = head if head is not None else head_parts(model)
    device = next(model.parameters()).device
    store: list = []
    handle = head.root.register_forward_pre_hook(_capture(store), with_kwargs=True)
    try:
        model(input_ids=batch["input_ids"].to(device), attention_mask=batch["attention_mask"].to(device))
    finally:
        handle.remove()
    if not store:
        raise VocabTransferError(f"{type(head.root).__name__}: the model's forward never called its LM head")
    hidden, labels = store[-1], batch["labels"].to(device)
    if kind == "causal":
        hidden, labels = hidden[:, :-1], labels[:, 1:]
    selected = labels != -100
    return hidden[selected], labels[selected]


def head_loss(
    head: Head,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    *,
    objective: str = "standard",
    margin: float = 2.0,
    reduction: Reduction = "mean",
) -> torch.Tensor:
    """The objective's loss of `targets` from the head's input states, through the fused head.

    Under autocast the head runs in the autocast dtype (as its matmul would), else in the weight's
    dtype. A soft-capped head (not linear) materialises the logits of these rows instead.
    """
    if not head.fusable:
        logits = head.logits(hidden)
        logits = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
        return objective_loss(objective, logits, targets, margin=margin, reduction=reduction)
    states, weight, bias = head.linear(hidden)
    device = states.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else weight.dtype
    with torch.autocast(device, enabled=False):
        return linear_objective_loss(
            states.to(dtype),
            weight.to(dtype),
            targets,
            objective=get_objective(objective).kernel,
            margin=margin,
            bias=None if bias is None else bias.to(dtype),
            reduction=reduction,
        )
