"""The LM head fused with the training objective: the loss from hidden states, never the N x V logits.

    linear_objective_loss(hidden (N, H), weight (V, H), labels (N,), objective=..., margin, bias (V,))
      == objective on the logits hidden @ weight.T + bias   (F.cross_entropy / losses.selfish_cross_entropy)

Both objectives are a cross-entropy over a kept set: `standard` keeps every token, `selfish` the tokens
whose logit is at least the target's minus `margin` (margin = inf is `standard`). The gradient of a row
is softmax over its kept set minus the one-hot target, exactly zero outside the kept set.

Algorithm (CPU, and CUDA tensors when Triton is absent): only the rows that count, in chunks of R rows
(R from the vocabulary and the last-level cache, `chunk_rows`):
  1. x = h_c @ weight.T + bias, the chunk's logits (R x V: the only buffer that grows with V);
  2. selfish: each row shifted by its target logit (read off x itself: the target becomes exactly 0,
     log-softmax is shift-invariant) and the entries below -margin set to -inf;
  3. log-softmax in place; the row's loss is minus its target entry;
  4. when gradients are needed, in the same pass: exp in place (the softmax over the kept set), 1 taken
     off at the target, and the three gradient products dh_c = G @ weight, dweight += G.T @ h_c,
     dbias += G.T @ 1; for `selfish`, column tiles whose entries were all dropped in every row of the
     chunk are left out of these products (their gradient is exactly zero). Finding them costs a pass,
     so once a chunk has no such tile, the later chunks are not searched.
For reduction mean/sum the gradients are computed in the forward pass and the backward pass only
scales them by the upstream gradient (a second backward through a retained graph recomputes them);
for `none` the backward pass recomputes them with the per-row upstream gradients. On CUDA with Triton
the same function runs `fused_head_triton` (cuBLAS products per chunk, the objective in one Triton
kernel; imported lazily, CPU code never needs it; VOCABTRANSFER_FUSED_HEAD=torch forces this path).
"""

from __future__ import annotations

import math
import os
from functools import lru_cache
from typing import Literal

import torch
import torch.nn.functional as F

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.model.tiles import kept_runs
from vocabtransfer.model import fused_head_triton
from vocabtransfer.plan.objectives import KERNELS, OBJECTIVES

Reduction = Literal["none", "sum", "mean"]
# the objectives computed here, the kernels (plan/objectives.py's KERNELS): every objective names one of them
OBJECTIVE_NAMES = KERNELS

MIN_GEMM_ROWS = 256  # rows per chunk at least: each weight row read from memory then feeds >= 256 products
MAX_CHUNK_BYTES = 224 << 20  # the logits chunk at most (CPU); on a GPU without Triton: GPU_CHUNK_BYTES
GPU_CHUNK_BYTES = 1 << 30
DEFAULT_CACHE_BYTES = 32 << 20
TILE = 2048  # columns per tile when looking for selfish tiles without a kept entry
HALF_GROUP_BYTES = 1 << 30  # half precision: G's group buffer at most (one dweight product per group)


@lru_cache(maxsize=None)
def cache_bytes() -> int:
    """Size of the last-level CPU cache (Linux sysfs), else 32 MiB."""
    best = 0
    for index in range(8):
        path = f"/sys/devices/system/cpu/cpu0/cache/index{index}/size"
        try:
            with open(path, encoding="ascii") as fh:
                text = fh.read().strip()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
        digits = text[:-1] if scale != 1 else text
        if digits.isdigit():
            best = max(best, int(digits) * scale)
    return best or DEFAULT_CACHE_BYTES


def chunk_rows(n: int, vocab: int, element_size: int, device: torch.device) -> int:
    """Rows per chunk: 1. on CPU, the rows whose logits fill the last-level cache; 2. at least
    MIN_GEMM_ROWS, so that the matrix products stay compute-bound; 3. at most MAX_CHUNK_BYTES of
    logits (GPU_CHUNK_BYTES on a GPU, where the cache plays no part), and at most n."""
    row_bytes = max(1, vocab * element_size)
    if device.type == "cpu":
        rows = max(cache_bytes() // row_bytes, MIN_GEMM_ROWS)
        rows = min(rows, max(1, MAX_CHUNK_BYTES // row_bytes))
    else:
        rows = max(1, GPU_CHUNK_BYTES // row_bytes)
    return max(1, min(n, rows))


def _fail(argument: str, message: str) -> None:
    raise VocabTransferError(f"linear_objective_loss: {argument} {message}")


def check_inputs(
    hidden, weight, labels, objective: str, margin: float, bias, ignore_index: int, reduction: str
) -> None:
    """One-line VocabTransferError naming the argument for every input the loss cannot take."""
    if objective not in OBJECTIVE_NAMES:
        _fail("objective", f"{objective!r} is unknown; use one of {', '.join(OBJECTIVE_NAMES)}")
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or math.isnan(margin) or margin < 0:
        _fail(
            "margin",
            f"must be a number >= 0 (math.inf for plain cross-entropy), got {margin!r}; "
            "set pretrain.selfish.margin to a non-negative number",
        )
    if reduction not in ("none", "sum", "mean"):
        _fail("reduction", f"must be none, sum or mean, got {reduction!r}")
    if not isinstance(hidden, torch.Tensor) or hidden.dim() != 2:
        _fail(
            "hidden",
            f"must be a 2-D tensor (N, H), got shape {tuple(getattr(hidden, 'shape', ()))}; flatten the batch first",
        )
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        _fail("weight", f"must be a 2-D tensor (V, H), got shape {tuple(getattr(weight, 'shape', ()))}")
    if hidden.shape[1] != weight.shape[1]:
        _fail(
            "weight",
            f"has width {weight.shape[1]} but hidden has width {hidden.shape[1]}; pass the head's "
            "(vocabulary x hidden) matrix and the states that enter it",
        )
    if not hidden.dtype.is_floating_point or hidden.dtype != weight.dtype:
        _fail(
            "weight",
            f"dtype {weight.dtype} differs from hidden's {hidden.dtype}; cast both to one floating-point dtype",
        )
    if hidden.device != weight.device:
        _fail("weight", f"is on {weight.device} but hidden on {hidden.device}; move them to one device")
    if bias is not None and (
        not isinstance(bias, torch.Tensor)
        or tuple(bias.shape) != (weight.shape[0],)
        or bias.dtype != weight.dtype
        or bias.device != weight.device
    ):
        _fail(
            "bias",
            f"must be a ({weight.shape[0]},) tensor of weight's dtype and device, got "
            f"{tuple(getattr(bias, 'shape', ()))} {getattr(bias, 'dtype', type(bias).__name__)}",
        )
    if not isinstance(labels, torch.Tensor) or labels.dim() != 1 or labels.shape[0] != hidden.shape[0]:
        _fail(
            "labels",
            f"must be a 1-D tensor of {hidden.shape[0]} token ids (one per hidden row), got "
            f"shape {tuple(getattr(labels, 'shape', ()))}",
        )
    if labels.dtype.is_floating_point or labels.dtype.is_complex or labels.dtype == torch.bool:
        _fail("labels", f"must hold integer token ids, got {labels.dtype}")
    vocab = weight.shape[0]
    bad = (labels != ignore_index) & ((labels < 0) | (labels >= vocab))
    if bool(bad.any()):
        _fail(
            "labels",
            f"holds id {int(labels[bad][0])}, outside [0, {vocab}) and not ignore_index "
            f"({ignore_index}); the labels do not match the head's vocabulary",
        )


def _runs(kept_columns: torch.Tensor, tile: int) -> list[tuple[int, int]]:
    """Column ranges covering the tiles with a kept column (all columns when most tiles have one)."""
    vocab = kept_columns.shape[0]
    tiles = -(-vocab // tile)
    return kept_runs(F.pad(kept_columns, (0, tiles * tile - vocab)).view(tiles, tile).any(1).tolist(), tile, vocab)


def chunked_pass(hidden, weight, bias, labels, margin: float, row_weight=1.0, need_grad: bool = True):
    """Per-row losses of the rows of `hidden` (all count), and with `need_grad` the gradients
    (dhidden, dweight, dbias) of sum_r row_weight[r] * loss[r] (`row_weight` a tensor (n,) or one
    number for every row). Steps 1-4 of the module docstring, in chunks of `chunk_rows` rows.

    Half-precision inputs (bf16 under autocast): the three products run in the inputs' dtype (the
    hardware's fast matmul), the softmax and the loss in float32; G is kept in the inputs' dtype for a
    group of up to `HALF_GROUP_BYTES` of rows and dweight is one product per group (summed in float32
    over groups; with one group it is that product, in the inputs' dtype, as a half-precision Linear's
    weight gradient is)."""
    n, vocab = hidden.shape[0], weight.shape[0]
    work = torch.promote_types(hidden.dtype, torch.float32)
    half = work != hidden.dtype
    selfish = math.isfinite(margin)
    losses = torch.empty(n, dtype=work, device=hidden.device)
    rows = chunk_rows(n, vocab, torch.finfo(work).bits // 8, hidden.device)
    group = _half_group_rows(n, rows, vocab, hidden.element_size()) if half and need_grad else 0
    dh = torch.empty(hidden.shape, dtype=work, device=hidden.device) if need_grad else None
    dw = torch.zeros(weight.shape, dtype=work, device=hidden.device) if need_grad and not half else None
    db = torch.zeros(vocab, dtype=work, device=hidden.device) if need_grad and bias is not None else None
    buffer = torch.empty((min(rows, n), vocab), dtype=work, device=hidden.device)
    g_buffer = torch.empty((group, vocab), dtype=hidden.dtype, device=hidden.device) if group else None
    ones = torch.ones(min(rows, n), dtype=work, device=hidden.device)
    minus_one = -ones[:, None]
    # keep x - target >= -margin: F.threshold keeps what is above its threshold, so the next float below
    below = float(torch.nextafter(torch.tensor(-float(margin), dtype=work), torch.tensor(-math.inf, dtype=work)))
    search = selfish and need_grad and vocab > 2 * TILE  # for tiles nobody keeps, until a chunk keeps all
    g0 = 0  # half: the first row of the current group
    for s in range(0, n, rows):
        e = min(n, s + rows)
        h, y = hidden[s:e], labels[s:e, None]
        # 1. the chunk's logits (computed in the inputs' dtype, kept in float32 or better)
        x = buffer[: e - s]
        if half:
            x.copy_(torch.addmm(bias, h, weight.T) if bias is not None else h @ weight.T)
        elif bias is not None:
            torch.addmm(bias, h, weight.T, out=x)
        else:
            torch.mm(h, weight.T, out=x)
        # 2. selfish: each row shifted by its target logit (log-softmax is shift-invariant; the target
        #    becomes exactly 0), the entries below -margin set to -inf: two in-place passes, no mask
        if selfish:
            x.sub_(x.gather(1, y))
            torch.threshold_(x, below, -math.inf)
        # 3. log-softmax over the kept set; the loss is minus the target's entry
        torch.log_softmax(x, 1, out=x)
        losses[s:e] = -x.gather(1, y)[:, 0]
        if not need_grad:
            continue
        assert dh is not None  # need_grad: allocated above
        # 4. the gradient G = softmax over the kept set - onehot(target), and its three products, each
        #    row weighted (a number: folded into the products' alpha; per row: into h and the row sums)
        x.exp_()
        runs = [(0, vocab)]
        if search:  # G != 0 exactly at the kept entries (exp > 0) and at the targets
            runs = _runs((x.amax(0) > 0).index_fill_(0, y[:, 0], True), TILE)
            search = runs != [(0, vocab)]
        x.scatter_add_(1, y, minus_one[: e - s])
        per_row = isinstance(row_weight, torch.Tensor)
        w = row_weight[s:e].to(work) if per_row else float(row_weight)
        out = dh[s:e]
        if half:  # G once in the inputs' dtype (its place in the group), dhidden from it
            assert g_buffer is not None  # half and need_grad: group >= 1 row
            if db is not None:
                db.addmv_(x.T, w if per_row else ones[: e - s], alpha=1.0 if per_row else w)
            _half_dhidden(x, g_buffer[s - g0 : e - g0], weight, runs, out, w)
            if e - g0 == group or e == n:  # the group is full: its dweight product
                hw = hidden[g0:e] * (row_weight[g0:e].to(hidden.dtype)[:, None] if per_row else w)
                dw, g0 = _accumulate(dw, g_buffer[: e - g0].T @ hw, work, last=e == n), e
            continue
        assert dw is not None  # need_grad and not half: allocated above
        hw, alpha, vec = (h * w[:, None], 1.0, w) if isinstance(w, torch.Tensor) else (h, w, ones[: e - s])
        for i, (a, b) in enumerate(runs):
            out.addmm_(x[:, a:b], weight[a:b], beta=0.0 if i == 0 else 1.0, alpha=alpha)
            dw[a:b].addmm_(x[:, a:b].T, hw, alpha=alpha)
            if db is not None:
                db[a:b].addmv_(x[:, a:b].T, vec, alpha=alpha)
        if isinstance(w, torch.Tensor):  # per_row
            out.mul_(w[:, None])
    return losses, (dh, dw, db)


def _half_dhidden(x, g, weight, runs, out, w) -> None:
    """Half precision, one chunk: G (float32 `x`) copied into its rows `g` of the group buffer, and
    out = (G @ weight) * w over the kept column runs, the products in the inputs' dtype."""
    g.copy_(x)
    for i, (a, b) in enumerate(runs):
        part = g[:, a:b] @ weight[a:b]
        out.copy_(part) if i == 0 else out.add_(part)
    out.mul_(w[:, None] if isinstance(w, torch.Tensor) else w)


def _half_group_rows(n: int, rows: int, vocab: int, element_size: int) -> int:
    """Half precision: the rows whose G the group buffer holds (whole chunks, at most HALF_GROUP_BYTES,
    at least one chunk, at most n)."""
    chunks = max(1, HALF_GROUP_BYTES // max(1, rows * vocab * element_size))
    return min(n, rows * chunks)


def _accumulate(total, part, work, last: bool):
    """`part` added to the float32 running sum `total`; the first part (`total` None) converted to `work`,
    unless it is also the `last` (one group: the product itself, in the inputs' dtype)."""
    if total is None:
        return part if last else part.to(work)
    return total.add_(part)


def _expand_rows(values, rows, n: int):
    """Values of the counted rows placed at `rows` of an n-row tensor of zeros (rows None: all)."""
    if rows is None:
        return values
    full = values.new_zeros((n,) + tuple(values.shape[1:]))
    return full.index_copy_(0, rows, values)


class _ReducedLoss(torch.autograd.Function):
    """Sum of the counted rows' losses times `scale`. The gradients are computed in the forward pass
    and handed to the first backward pass (scaled by the upstream gradient); a second backward
    (retain_graph) recomputes them."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, labels, rows, margin, scale):
        need = any(ctx.needs_input_grad[:3])
        h = hidden if rows is None else hidden.index_select(0, rows)
        losses, grads = _dispatch(h, weight, bias, labels, margin, scale, need)
        ctx.grads = _gradients(grads, rows, hidden, weight, bias) if need else None
        ctx.margin, ctx.scale = margin, scale
        if need:
            ctx.save_for_backward(hidden, weight, bias, labels, rows)
        return losses.sum() * scale

    @staticmethod
    def backward(ctx, grad):
        grads, ctx.grads = ctx.grads, None
        if grads is None:  # a second backward through the same graph
            hidden, weight, bias, labels, rows = ctx.saved_tensors
            h = hidden if rows is None else hidden.index_select(0, rows)
            _, raw = _dispatch(h, weight, bias, labels, ctx.margin, ctx.scale, True)
            grads = _gradients(raw, rows, hidden, weight, bias)
        if not bool(grad == 1):
            grads = [None if t is None else t.mul_(grad.to(t.dtype)) for t in grads]
        return grads[0], grads[1], grads[2], None, None, None, None


def _gradients(grads, rows, hidden, weight, bias) -> list:
    """(dhidden with zero rows for the rows that do not count, dweight, dbias) in the inputs' dtypes."""
    dh, dw, db = grads
    dh = _expand_rows(dh, rows, hidden.shape[0])
    return [None if t is None else t.to(p.dtype) for t, p in zip((dh, dw, db), (hidden, weight, bias))]


class _RowLosses(torch.autograd.Function):
    """Per-row losses of the counted rows; the backward pass recomputes the gradients with the
    upstream per-row weights."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, labels, rows, margin):
        h = hidden if rows is None else hidden.index_select(0, rows)
        losses, _ = _dispatch(h, weight, bias, labels, margin, 1.0, False)
        ctx.save_for_backward(hidden, weight, bias, labels, rows)
        ctx.margin = margin
        return losses

    @staticmethod
    def backward(ctx, grad):
        hidden, weight, bias, labels, rows = ctx.saved_tensors
        h = hidden if rows is None else hidden.index_select(0, rows)
        _, (dh, dw, db) = _dispatch(h, weight, bias, labels, ctx.margin, grad, True)
        dh = _expand_rows(dh, rows, hidden.shape[0]).to(hidden.dtype)
        return (dh, dw.to(weight.dtype), None if db is None else db.to(bias.dtype), None, None, None)


def _dispatch(hidden, weight, bias, labels, margin, row_weight, need_grad):
    """The Triton kernels for CUDA tensors when Triton is installed, else the chunked torch pass."""
    if hidden.is_cuda and os.environ.get("VOCABTRANSFER_FUSED_HEAD", "auto") != "torch":
        if fused_head_triton.available():
            return fused_head_triton.fused_pass(hidden, weight, bias, labels, margin, row_weight, need_grad)
    return chunked_pass(hidden, weight, bias, labels, margin, row_weight, need_grad)


def linear_objective_loss(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    *,
    objective: str,
    margin: float = 2.0,
    bias: torch.Tensor | None = None,
    ignore_index: int = -100,
    reduction: Reduction = "mean",
) -> torch.Tensor:
    """The objective's loss on the logits `hidden @ weight.T + bias`, without forming them.

    hidden (N, H), weight (V, H), bias (V,) or None, all of one floating dtype; labels (N,) token ids,
    `ignore_index` for rows that do not count. `objective`: `standard` (cross-entropy) or `selfish`
    (tokens more than `margin` below the target's logit left out of the softmax; margin >= 0, inf =
    standard). `reduction` as in `F.cross_entropy` (mean over the counted rows: NaN when none counts).
    Computed in float32 for half-precision inputs (the loss is float32 then), gradients in the inputs'
    dtypes. Raises VocabTransferError naming the argument for bad input.
    """
    check_inputs(hidden, weight, labels, objective, margin, bias, ignore_index, reduction)
    m = float(margin) if OBJECTIVES[objective].uses_margin else math.inf
    valid = labels != ignore_index
    n_valid = int(valid.sum())
    rows = None if n_valid == labels.shape[0] else valid.nonzero()[:, 0]
    targets = (labels if rows is None else labels[rows]).long()
    if reduction == "none":
        per_row = _RowLosses.apply(hidden, weight, bias, targets, rows, m)
        return _expand_rows(per_row, rows, labels.shape[0]) if rows is not None else per_row
    # mean over no counted rows: 0 * NaN = NaN with zero gradients, as F.cross_entropy
    scale = (1.0 / n_valid if n_valid else math.nan) if reduction == "mean" else 1.0
    return _ReducedLoss.apply(hidden, weight, bias, targets, rows, m, scale)
