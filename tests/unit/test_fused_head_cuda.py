"""linear_objective_loss on CUDA (the Triton path and the chunked torch path) against materialised
logits on the same GPU. Skipped without CUDA; also runs as a script (`python tests/unit/test_fused_head_cuda.py`)
where pytest is not installed."""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
from vocabtransfer.model import fused_head
from vocabtransfer.model import fused_head_triton
from vocabtransfer.model import losses
from vocabtransfer.model.fused_head import linear_objective_loss

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 2e-2}  # of the largest reference entry
PATHS = ["triton", "torch"]


def setup_path(path: str) -> None:
    """Small chunks, so that every case runs several; `torch` forces the chunked torch path."""
    if path == "triton" and not fused_head_triton.available():
        pytest.skip("Triton is not installed")
    os.environ["VOCABTRANSFER_FUSED_HEAD"] = "torch" if path == "torch" else "auto"
    fused_head_triton.GPU_CHUNK_BYTES = fused_head.GPU_CHUNK_BYTES = 96 * 20_000 * 4


def close(got, ref, dtype, what: str) -> None:
    scale = float(ref.detach().float().abs().max().clamp_min(1e-6))
    err = float((got.float() - ref.float()).abs().max())
    assert err <= TOLERANCE[dtype] * scale, f"{what}: max error {err:.3g} of {scale:.3g}"


def check_case(path, dtype, objective, margin, bias, reduction, n=300, h=64, v=20_000, seed=0):
    setup_path(path)
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, h, generator=g)
    weight = torch.randn(v, h, generator=g) * (3.0 / h**0.5)
    b = torch.randn(v, generator=g) if bias else None
    labels = torch.randint(0, v, (n,), generator=g)
    labels[::7] = -100
    leaves = [t.cuda().to(dtype).requires_grad_(True) if t is not None else None for t in (hidden, weight, b)]
    labels = labels.cuda()
    upstream = torch.rand(n, generator=g).cuda() if reduction == "none" else None

    def run(fn):
        out = fn(*leaves)
        total = (out * upstream).sum() if upstream is not None else out
        params = [t for t in leaves if t is not None]
        return out.detach(), torch.autograd.grad(total, params)

    got, g_got = run(
        lambda hh, ww, bb: linear_objective_loss(
            hh, ww, labels, objective=objective, margin=margin, bias=bb, reduction=reduction
        )
    )

    def reference(hh, ww, bb):
        logits = F.linear(hh, ww, bb).float()
        return losses.objective_loss(objective, logits, labels, margin=margin, reduction=reduction)

    ref, g_ref = run(reference)
    close(got, ref, dtype, "loss")
    for name, a, r in zip(("hidden", "weight", "bias"), g_got, g_ref):
        assert a.dtype == r.dtype == dtype
        close(a, r, dtype, f"d{name}")


OBJECTIVES = [("standard", 2.0), ("selfish", 2.0), ("selfish", 0.0)]
CASES = list(itertools.product(PATHS, [torch.float32, torch.bfloat16], OBJECTIVES, [True, False], ["mean", "none"]))


@pytest.mark.parametrize("path,dtype,objective_margin,bias,reduction", CASES)
def test_cuda_equals_materialised(path, dtype, objective_margin, bias, reduction):
    check_case(path, dtype, *objective_margin, bias, reduction)


@pytest.mark.parametrize("path", PATHS)
def test_cuda_selfish_skips_blocks_nobody_keeps(path):
    """Targets among the first 64 tokens, which score ~80 above the rest: the other column blocks hold
    no kept token and are skipped (Triton path), with the reference's result."""
    setup_path(path)
    g = torch.Generator().manual_seed(1)
    n, h, v = 200, 16, 5 * fused_head_triton.BLOCK + 100
    hidden, weight = torch.randn(n, h, generator=g), torch.randn(v, h, generator=g)
    hidden[:, 0], weight[:, 0] = 1.5, 0.0
    weight[:64, 0] = 50.0
    labels = torch.randint(0, 64, (n,), generator=g).cuda()
    hidden, weight = hidden.cuda().requires_grad_(True), weight.cuda().requires_grad_(True)
    seen = []
    real = fused_head_triton.kept_runs
    fused_head_triton.kept_runs = lambda alive, tile, vocab: seen.append(real(alive, tile, vocab)) or seen[-1]
    try:
        loss = linear_objective_loss(hidden, weight, labels, objective="selfish")
        dh, dw = torch.autograd.grad(loss, (hidden, weight))
    finally:
        fused_head_triton.kept_runs = real
    ref = losses.objective_loss("selfish", hidden @ weight.T, labels)
    rh, rw = torch.autograd.grad(ref, (hidden, weight))
    close(loss, ref, torch.float32, "loss")
    close(dh, rh, torch.float32, "dhidden")
    close(dw, rw, torch.float32, "dweight")
    if path == "triton":
        assert seen and all(runs == [(0, fused_head_triton.BLOCK)] for runs in seen), seen
    assert bool((dw[fused_head_triton.BLOCK :] == 0).all())


if __name__ == "__main__":
    failures = 0
    for case in CASES + [("skip", p) for p in PATHS]:
        try:
            if case[0] == "skip":
                test_cuda_selfish_skips_blocks_nobody_keeps(case[1])
            else:
                check_case(case[0], case[1], *case[2], case[3], case[4])
            print("ok  ", case)
        except BaseException as exc:  # report every case
            failures += 1
            print("FAIL", case, type(exc).__name__, str(exc)[:300])
    print(f"{len(CASES) + len(PATHS) - failures} passed, {failures} failed")
    sys.exit(1 if failures else 0)
