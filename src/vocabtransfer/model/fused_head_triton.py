"""CUDA path of `fused_head.linear_objective_loss`: cuBLAS matrix products per chunk of rows, the
objective in one Triton kernel per chunk. Imported only for CUDA tensors; `available()` is False
without Triton (the torch path of fused_head runs then).

For each chunk of R rows (R x V logits in the inputs' dtype: 512 MiB at most, GPU_CHUNK_BYTES):
  1. x = h_c @ weight.T + bias                                    (cuBLAS, tensor cores)
  2. `_objective_kernel`, one program per row, in float32:
       a. pass 1, block by block: the kept set (selfish: x >= x[target] - margin; standard: all),
          the running maximum and sum of exponentials -> log-sum-exp; loss = lse - x[target];
          blocks without a kept entry skip their exponentials;
       b. pass 2 (gradients): x <- w_r * (exp(x - lse) on the kept set - onehot(target)), in place,
          and each column block with a kept entry flagged (selfish objective);
  3. dh_c = G @ weight, dweight += G.T @ h_c, dbias += column sums of G (cuBLAS), over the column
     ranges that hold a flagged block only: for `selfish` the blocks nobody kept are skipped. Reading
     the flags costs a host sync, so once a chunk has every block flagged, the later chunks are not
     searched (their products cover all columns).
dweight accumulates in the weight's dtype (cuBLAS adds in float32 and rounds once per chunk), so
the memory beyond the gradients is the chunk alone.
"""

from __future__ import annotations

import math

import torch

from vocabtransfer.model.tiles import kept_runs

try:  # optional: CPU code never imports this module, and CUDA code runs without Triton
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the installation
    triton = None

GPU_CHUNK_BYTES = 512 << 20
BLOCK = 4096  # columns per block of the kernel (and per skippable column block)


def available() -> bool:
    return triton is not None and torch.cuda.is_available()


if triton is not None:

    @triton.jit
    def _objective_kernel(
        X,
        stride,
        Y,
        ROW_WEIGHT,
        LOSS,
        ALIVE,
        V,
        margin,
        BLOCK: tl.constexpr,
        SELFISH: tl.constexpr,
        NEED_GRAD: tl.constexpr,
        TRACK: tl.constexpr,
    ):
        row = tl.program_id(0)
        x_row = X + row.to(tl.int64) * stride
        y = tl.load(Y + row)
        target = tl.load(x_row + y).to(tl.float32)
        threshold = target - margin
        offs = tl.arange(0, BLOCK)
        m = tl.max(tl.full([BLOCK], float("-inf"), tl.float32), 0)
        s = tl.sum(tl.zeros([BLOCK], tl.float32), 0)
        # a. log-sum-exp over the kept set, online
        for start in tl.range(0, V, BLOCK):
            cols = start + offs
            x = tl.load(x_row + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
            if SELFISH:
                x = tl.where(x >= threshold, x, float("-inf"))
            top = tl.max(x, 0)
            if top > float("-inf"):  # a block without a kept entry adds nothing
                new = tl.maximum(m, top)
                s = s * tl.exp(m - new) + tl.sum(tl.exp(x - new), 0)
                m = new
        lse = m + tl.log(s)
        tl.store(LOSS + row, lse - target)
        # b. the gradient, in place, and the column blocks with a kept entry
        if NEED_GRAD:
            w = tl.load(ROW_WEIGHT + row)
            for start in tl.range(0, V, BLOCK):
                cols = start + offs
                inside = cols < V
                x = tl.load(x_row + cols, mask=inside, other=float("-inf")).to(tl.float32)
                keep = inside
                if SELFISH:
                    keep = inside & (x >= threshold)
                g = tl.where(keep, tl.exp(x - lse), 0.0)
                g = tl.where(cols == y, g - 1.0, g) * w
                tl.store(x_row + cols, g.to(X.dtype.element_ty), mask=inside)
                if TRACK:
                    tl.atomic_max(ALIVE + start // BLOCK, tl.max(keep.to(tl.int32), 0))


def fused_pass(hidden, weight, bias, labels, margin: float, row_weight=1.0, need_grad: bool = True):
    """`fused_head.chunked_pass` on CUDA: the same results, steps 1-3 of the module docstring."""
    n, vocab = hidden.shape[0], weight.shape[0]
    device, dtype = hidden.device, hidden.dtype
    selfish = math.isfinite(margin)
    losses = torch.empty(n, dtype=torch.float32, device=device)
    dh = torch.empty_like(hidden) if need_grad else None
    dw = torch.zeros_like(weight) if need_grad else None
    db = torch.zeros(vocab, dtype=torch.float32, device=device) if need_grad and bias is not None else None
    if isinstance(row_weight, torch.Tensor):
        weights = row_weight.to(device=device, dtype=torch.float32).contiguous()
    else:
        weights = torch.full((n,), float(row_weight), dtype=torch.float32, device=device)
    rows = max(1, min(n, GPU_CHUNK_BYTES // max(1, vocab * hidden.element_size())))
    buffer = torch.empty((min(rows, n), vocab), dtype=dtype, device=device)
    blocks = triton.cdiv(vocab, BLOCK)
    alive = torch.zeros(blocks, dtype=torch.int32, device=device)
    labels = labels.contiguous()
    track = selfish and need_grad  # look for blocks nobody keeps until a chunk keeps them all (a sync each)
    for s in range(0, n, rows):
        e = min(n, s + rows)
        h = hidden[s:e]
        x = buffer[: e - s]
        # 1. the chunk's logits
        if bias is not None:
            torch.addmm(bias, h, weight.T, out=x)
        else:
            torch.mm(h, weight.T, out=x)
        # 2. the objective, and the gradient in place
        if track:
            alive.zero_()
        _objective_kernel[(e - s,)](
            x,
            x.stride(0),
            labels[s:e],
            weights[s:e],
            losses[s:e],
            alive,
            vocab,
            float(margin) if selfish else float("inf"),
            BLOCK=BLOCK,
            SELFISH=selfish,
            NEED_GRAD=need_grad,
            TRACK=track,
            num_warps=8,
        )
        if not need_grad:
            continue
        assert dh is not None and dw is not None  # need_grad: allocated above
        # 3. the gradient products over the column ranges with a kept entry
        runs = kept_runs(alive.tolist(), BLOCK, vocab) if track else [(0, vocab)]
        track = track and runs != [(0, vocab)]
        out = dh[s:e]
        if len(runs) == 1 and runs[0] == (0, vocab):
            torch.mm(x, weight, out=out)
        else:
            out.zero_()
        for a, b in runs if runs != [(0, vocab)] else []:
            out.addmm_(x[:, a:b], weight[a:b])
        for a, b in runs:
            dw[a:b].addmm_(x[:, a:b].T, h)
            if db is not None:
                db[a:b].add_(x[:, a:b].sum(0, dtype=torch.float32))
    return losses, (dh, dw, db)
