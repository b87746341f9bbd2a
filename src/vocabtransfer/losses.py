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
keeps the logits and two numbers per row (the kept set's log-sum-exp and the threshold) and, in
chunks of rows, recomputes the kept softmax straight into the gradient buffer on the way back.
Ignored positions are never touched (a masked LM predicts ~15 % of its positions). With
`margin = inf` it equals `F.cross_entropy`.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F

from vocabtransfer.errors import VocabTransferError

Reduction = Literal["none", "sum", "mean"]

# rows per chunk: about this many logits, so a chunk's temporaries stay in cache
CHUNK_ELEMENTS = 1 << 18


def _check(logits: torch.Tensor, labels: torch.Tensor, margin: float, ignore_index: int, reduction: str) -> None:
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or math.isnan(margin) or margin <= 0:
        raise VocabTransferError(f"selfish_cross_entropy: margin must be a positive number (or math.inf for plain "
                                 f"cross-entropy), got {margin!r}; set pretrain.selfish.margin > 0")
    if reduction not in ("none", "sum", "mean"):
        raise VocabTransferError(f"selfish_cross_entropy: reduction must be none, sum or mean, got {reduction!r}")
    if logits.dim() != 2 or labels.dim() != 1 or labels.shape[0] != logits.shape[0]:
        raise VocabTransferError(f"selfish_cross_entropy: expected logits (N, V) and labels (N,), got "
                                 f"{tuple(logits.shape)} and {tuple(labels.shape)}; flatten the batch first")
    if labels.dtype.is_floating_point or labels.dtype == torch.bool:
        raise VocabTransferError(f"selfish_cross_entropy: labels must be integer token ids, got {labels.dtype}")
    vocab = logits.shape[1]
    bad = (labels != ignore_index) & ((labels < 0) | (labels >= vocab))
    if bool(bad.any()):
        first = int(labels[bad][0])
        raise VocabTransferError(f"selfish_cross_entropy: label {first} is outside [0, {vocab}) and is not "
                                 f"ignore_index ({ignore_index}); the labels do not match the model's vocabulary")


def selfish_cross_entropy_naive(logits: torch.Tensor, labels: torch.Tensor, margin: float = 2.0,
                                ignore_index: int = -100, reduction: Reduction = "mean") -> torch.Tensor:
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


def _row_chunks(n: int, vocab: int):
    step = max(1, CHUNK_ELEMENTS // max(1, vocab))
    return [(s, min(n, s + step)) for s in range(0, n, step)]


class _SelfishCrossEntropy(torch.autograd.Function):
    """Per-row loss of the rows in `rows` (all rows when None); gradient recomputed in chunks."""

    @staticmethod
    def forward(ctx, logits, labels, rows, margin):
        n_rows = labels.shape[0]
        work = _work_dtype(logits)
        lse = torch.empty(n_rows, dtype=work, device=logits.device)
        threshold = torch.empty_like(lse)
        losses = torch.empty_like(lse)
        for s, e in _row_chunks(n_rows, logits.shape[1]):
            # 1. the chunk in float32 or better (a view when every row counts and no cast is needed)
            x = (logits[s:e] if rows is None else logits.index_select(0, rows[s:e])).to(work)
            y = labels[s:e, None]
            target = x.gather(1, y)
            thr = target - margin
            # 2. log-sum-exp over the kept set; the row maximum is always kept (it is >= the target)
            top = x.amax(1, keepdim=True)
            ex = torch.sub(x, top).exp_()
            ex.masked_fill_(x < thr, 0.0)
            chunk_lse = ex.sum(1, keepdim=True).log_().add_(top)
            lse[s:e] = chunk_lse[:, 0]
            threshold[s:e] = thr[:, 0]
            losses[s:e] = (chunk_lse - target)[:, 0]
        ctx.save_for_backward(logits, labels, rows, lse, threshold)
        return losses

    @staticmethod
    def backward(ctx, grad_losses):
        logits, labels, rows, lse, threshold = ctx.saved_tensors
        # the one (N, V) buffer: rows that do not count stay zero
        grad = torch.empty_like(logits) if rows is None else torch.zeros_like(logits)
        work = _work_dtype(logits)
        in_place = rows is None and logits.dtype == work
        grad_losses = grad_losses.to(work)
        # a positive upstream gradient c folds into the exponent: c * exp(x - lse) = exp(x - (lse - log c))
        folded = bool((grad_losses > 0).all())
        shift = lse - grad_losses.log() if folded else lse
        for s, e in _row_chunks(labels.shape[0], logits.shape[1]):
            x = (logits[s:e] if rows is None else logits.index_select(0, rows[s:e])).to(work)
            # 3. softmax over the kept set (0 outside it) minus the one-hot target, times the upstream gradient
            g = torch.sub(x, shift[s:e, None], out=grad[s:e]) if in_place else torch.sub(x, shift[s:e, None])
            g.exp_()
            g.masked_fill_(x < threshold[s:e, None], 0.0)
            idx = torch.arange(e - s, device=g.device)
            if folded:
                g[idx, labels[s:e]] -= grad_losses[s:e]
            else:
                g[idx, labels[s:e]] -= 1.0
                g.mul_(grad_losses[s:e, None])
            if rows is not None:
                grad.index_copy_(0, rows[s:e], g.to(grad.dtype))
            elif not in_place:
                grad[s:e] = g
        return grad, None, None, None


def selfish_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, margin: float = 2.0,
                          ignore_index: int = -100, reduction: Reduction = "mean") -> torch.Tensor:
    """Cross-entropy where, at each position, tokens whose logit is more than `margin` below the
    target's are left out of the softmax (they get no gradient from that position).

    logits (N, V), labels (N,) with `ignore_index` for positions that do not count; `reduction` as
    in `F.cross_entropy` ("mean": over the positions that count). `margin = math.inf` gives
    `F.cross_entropy`. Computed in float32 for half-precision logits (else in their dtype); the gradient has the logits'
    dtype. Raises VocabTransferError for margin <= 0 or NaN and labels outside [0, V).
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


OBJECTIVES = ("standard", "selfish")


def objective_loss(objective: str, logits: torch.Tensor, labels: torch.Tensor, *, margin: float = 2.0,
                   ignore_index: int = -100) -> torch.Tensor:
    """Mean loss of a training objective over the positions that count: `standard`
    (`F.cross_entropy`) or `selfish` (`selfish_cross_entropy` with `margin`)."""
    if objective == "standard":
        return F.cross_entropy(logits, labels, ignore_index=ignore_index)
    if objective == "selfish":
        return selfish_cross_entropy(logits, labels, margin, ignore_index=ignore_index)
    raise VocabTransferError(f"objective {objective!r}: unknown, expected one of {', '.join(OBJECTIVES)}")
