"""Training objectives: the "selfish" cross-entropy next to the standard one.

In softmax cross-entropy every position pushes down the logit of every token that is not its
target, so frequent targets keep pushing down the logits (and, through tied embeddings, the
embeddings) of rare tokens ("jostling"). The selfish objective (Stop Jostling / "selfish
tokens") removes that pressure where it is pointless: at each predicted position, tokens whose
logit is already more than `margin` below the target's are left out of the softmax, so they get
no gradient from that position.

    kept_i   = { v : logit_iv >= logit_i,target - margin }      (the target is always kept)
    loss_i   = logsumexp_{v in kept_i} logit_iv - logit_i,target
    dloss_i / dlogit_iv = softmax over kept_i (0 outside it) - onehot(target)

`selfish_cross_entropy` computes this without a second (N, V) tensor: a custom autograd function
that, in chunks of rows, computes the kept log-sum-exp and turns the same exponentials into the
gradient in one buffer (of the counted rows only: a masked LM predicts ~15 % of its positions),
which the backward pass scales in place. With `margin = inf` it equals `F.cross_entropy`.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.plan.objectives import OBJECTIVES, Objective

Reduction = Literal["none", "sum", "mean"]

# rows per chunk: about this many logits; on CPU so a chunk's temporaries stay in cache, on a GPU
# large enough that kernel launches do not dominate (the temporaries are then at most 2 x 64 MiB)
CHUNK_ELEMENTS = 1 << 18
GPU_CHUNK_ELEMENTS = 1 << 24


def _check(logits: torch.Tensor, labels: torch.Tensor, margin: float, ignore_index: int, reduction: str) -> None:
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or math.isnan(margin) or margin < 0:
        raise VocabTransferError(
            f"selfish_cross_entropy: margin must be a number >= 0 (or math.inf for plain "
            f"cross-entropy), got {margin!r}; set pretrain.selfish.margin > 0"
        )
    if reduction not in ("none", "sum", "mean"):
        raise VocabTransferError(f"selfish_cross_entropy: reduction must be none, sum or mean, got {reduction!r}")
    if logits.dim() != 2 or labels.dim() != 1 or labels.shape[0] != logits.shape[0]:
        raise VocabTransferError(
            f"selfish_cross_entropy: expected logits (N, V) and labels (N,), got "
            f"{tuple(logits.shape)} and {tuple(labels.shape)}; flatten the batch first"
        )
    if labels.dtype.is_floating_point or labels.dtype == torch.bool:
        raise VocabTransferError(f"selfish_cross_entropy: labels must be integer token ids, got {labels.dtype}")
    vocab = logits.shape[1]
    bad = (labels != ignore_index) & ((labels < 0) | (labels >= vocab))
    if bool(bad.any()):
        first = int(labels[bad][0])
        raise VocabTransferError(
            f"selfish_cross_entropy: label {first} is outside [0, {vocab}) and is not "
            f"ignore_index ({ignore_index}); the labels do not match the model's vocabulary"
        )


def selfish_cross_entropy_naive(
    logits: torch.Tensor,
    labels: torch.Tensor,
    margin: float = 2.0,
    ignore_index: int = -100,
    reduction: Reduction = "mean",
) -> torch.Tensor:
    """The reference: logits below `logit[target] - margin` set to -inf, then `F.cross_entropy`
    (autograd does the rest). Materialises two more (N, V) tensors; for tests and benchmarks."""
    _check(logits, labels, margin, ignore_index, reduction)
    valid = labels != ignore_index
    safe = torch.where(valid, labels, 0)
    target = logits.gather(1, safe[:, None])
    masked = logits.masked_fill(logits < target - margin, float("-inf"))
    return F.cross_entropy(masked, labels, ignore_index=ignore_index, reduction=reduction)


def _work_dtype(logits: torch.Tensor) -> torch.dtype:
    """float32 for half-precision logits, else their own dtype."""
    return torch.promote_types(logits.dtype, torch.float32)


# the smallest positive (subnormal) number: a nonzero difference of two floats is at least this large
_TINY = {torch.float32: 2.0**-149, torch.float64: 2.0**-1074}


def _kept(x: torch.Tensor, threshold: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """`x` where `x >= threshold` (per row), else -inf; exact. Four scalar-fused passes, several times
    faster on CPU than building a boolean mask and `masked_fill`."""
    g = torch.sub(x, threshold, out=out)  # >= 0 exactly where kept: a nonzero difference keeps its sign
    torch.threshold_(g, -_TINY[x.dtype], float("-inf"))  # g > -tiny  <=>  g >= 0
    g.clamp_max_(0.0)  # kept: 0, dropped: -inf
    return g.add_(x)  # kept: x itself, dropped: -inf


def _row_chunks(n: int, vocab: int, device: torch.device):
    step = max(1, (CHUNK_ELEMENTS if device.type == "cpu" else GPU_CHUNK_ELEMENTS) // max(1, vocab))
    return [(s, min(n, s + step)) for s in range(0, n, step)]


class _SelfishCrossEntropy(torch.autograd.Function):
    """Per-row loss of the rows in `rows` (all rows when None).

    The forward pass, chunk by chunk, also turns the kept exponentials into the gradient
    (softmax over the kept set minus the one-hot target) in one buffer of the counted rows; the
    backward pass scales that buffer in place by the upstream gradient and hands it back. So the
    exponentials are computed once, and nothing but that buffer is as large as the logits.
    """

    @staticmethod
    def forward(ctx, logits, labels, rows, margin):
        n_rows, vocab = labels.shape[0], logits.shape[1]
        work = _work_dtype(logits)
        need_grad = ctx.needs_input_grad[0]
        grad = torch.empty((n_rows, vocab), dtype=logits.dtype, device=logits.device) if need_grad else None
        losses = torch.empty(n_rows, dtype=work, device=logits.device)
        for s, e in _row_chunks(n_rows, vocab, logits.device):
            # 1. the chunk in float32 or better (a view when every row counts and no cast is needed)
            x = (logits[s:e] if rows is None else logits.index_select(0, rows[s:e])).to(work)
            y = labels[s:e, None]
            target = x.gather(1, y)
            # 2. log-sum-exp over the kept set; the row maximum is always kept (it is >= the target)
            ex = _kept(x, target - margin, out=grad[s:e] if grad is not None and grad.dtype == work else None)
            top = ex.amax(1, keepdim=True)
            ex.sub_(top).exp_()
            total = ex.sum(1, keepdim=True)
            losses[s:e] = (total.log() + top - target)[:, 0]
            if grad is not None:  # need_grad
                # 3. the gradient: softmax over the kept set (0 outside it) minus the one-hot target
                ex.div_(total)
                ex.scatter_add_(1, y, torch.full_like(target, -1.0))
                if ex.data_ptr() != grad[s:e].data_ptr():
                    grad[s:e] = ex
        ctx.grad_buffer, ctx.rows, ctx.shape = grad, rows, logits.shape
        return losses

    @staticmethod
    def backward(ctx, grad_losses):
        grad = ctx.grad_buffer
        if grad is None:
            raise RuntimeError(
                "selfish_cross_entropy: backward a second time through the same graph is not "
                "supported (its gradient buffer is used up); recompute the loss instead"
            )
        ctx.grad_buffer = None
        grad.mul_(grad_losses.to(grad.dtype)[:, None])
        if ctx.rows is None:
            return grad, None, None, None
        full = torch.zeros(ctx.shape, dtype=grad.dtype, device=grad.device)  # rows that do not count: 0
        return full.index_copy_(0, ctx.rows, grad), None, None, None


def selfish_cross_entropy(
    logits: torch.Tensor,
    labels: torch.Tensor,
    margin: float = 2.0,
    ignore_index: int = -100,
    reduction: Reduction = "mean",
) -> torch.Tensor:
    """Cross-entropy where, at each position, tokens whose logit is more than `margin` below the
    target's are left out of the softmax (they get no gradient from that position).

    logits (N, V), labels (N,) with `ignore_index` for positions that do not count; `reduction` as
    in `F.cross_entropy` ("mean": over the positions that count). `margin = math.inf` gives
    `F.cross_entropy`. Computed in float32 for half-precision logits (else in their dtype); the
    gradient has the logits' dtype. Raises VocabTransferError for a negative or NaN margin and labels
    outside [0, V); margin 0 keeps the tokens at or above the target's logit. A second backward
    through the same loss is a RuntimeError.
    """
    _check(logits, labels, margin, ignore_index, reduction)
    valid = labels != ignore_index
    n_valid = int(valid.sum())
    rows = None if n_valid == labels.shape[0] else valid.nonzero()[:, 0]
    kept_labels = labels if rows is None else labels[rows]
    row_losses = _SelfishCrossEntropy.apply(logits, kept_labels.long(), rows, float(margin))
    if reduction == "none":
        out = torch.zeros(labels.shape[0], dtype=row_losses.dtype, device=logits.device)
        out = row_losses if rows is None else out.index_put((rows,), row_losses)
        return out.to(logits.dtype)
    total = row_losses.sum()
    return (total if reduction == "sum" else total / n_valid).to(logits.dtype)


# ---------------------------------------------------------------------------------------------
# The objectives' losses on logits: the objectives themselves (vocabtransfer.plan.objectives.OBJECTIVES, re-exported
# here) name these by reference; pretraining, evaluation and the analyses all read objectives from that registry
# ---------------------------------------------------------------------------------------------


def standard_loss(logits, labels, *, margin, ignore_index, reduction):
    """`standard`'s loss on logits (and distill's and alm's LM part): `F.cross_entropy`; `margin` is not read."""
    return F.cross_entropy(logits, labels, ignore_index=ignore_index, reduction=reduction)


def selfish_loss(logits, labels, *, margin, ignore_index, reduction):
    """`selfish`'s loss on logits: `selfish_cross_entropy` with `margin`."""
    return selfish_cross_entropy(logits, labels, margin, ignore_index=ignore_index, reduction=reduction)


def distill_alpha(objective: str, alpha: float) -> float:
    """The weight of the chunk term a teacher objective trains with: its own (`alm`: 1) or `alpha`
    (pretrain.distill.alpha, `distill`)."""
    fixed = get_objective(objective).alpha
    return alpha if fixed is None else fixed


def get_objective(name: str) -> Objective:
    """The objective `name` (vocabtransfer.plan.objectives), or one error naming the known ones."""
    if name not in OBJECTIVES:
        raise VocabTransferError(f"objective {name!r}: unknown, expected one of {', '.join(OBJECTIVES)}")
    return OBJECTIVES[name]


def objective_loss(
    objective: str,
    logits: torch.Tensor,
    labels: torch.Tensor,
    *,
    margin: float = 2.0,
    ignore_index: int = -100,
    reduction: Reduction = "mean",
) -> torch.Tensor:
    """Loss of a training objective on logits (N, V): `standard` (`F.cross_entropy`) or `selfish`
    (`selfish_cross_entropy` with `margin`); `distill` needs a teacher (`train/distill.py`), on one model's
    logits it is its LM part, `F.cross_entropy`; mean over the positions that count unless `reduction`."""
    return get_objective(objective).on_logits(
        logits, labels, margin=margin, ignore_index=ignore_index, reduction=reduction
    )
