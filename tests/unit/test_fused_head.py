"""linear_objective_loss (the LM head fused with the objective) against materialised logits."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from vocabtransfer.model import fused_head
from vocabtransfer.model import losses
from vocabtransfer.model.fused_head import linear_objective_loss
from vocabtransfer.errors import VocabTransferError


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    """Chunks of 8 rows and tiles of 16 columns, so that every case runs several of each."""
    monkeypatch.setattr(fused_head, "MIN_GEMM_ROWS", 8)
    monkeypatch.setattr(fused_head, "cache_bytes", lambda: 1)
    monkeypatch.setattr(fused_head, "MAX_CHUNK_BYTES", 8 * 8 * 4096)
    monkeypatch.setattr(fused_head, "TILE", 16)
    torch.set_num_threads(1)


def case(n=29, h=12, v=200, dtype=torch.float64, bias=True, ignored=5, seed=0, spread=1.0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, h, generator=g, dtype=torch.float64) * spread
    weight = torch.randn(v, h, generator=g, dtype=torch.float64)
    b = torch.randn(v, generator=g, dtype=torch.float64) if bias else None
    labels = torch.randint(0, v, (n,), generator=g)
    labels[torch.randperm(n, generator=g)[:ignored]] = -100
    cast = [t.to(dtype).requires_grad_(True) if t is not None else None for t in (hidden, weight, b)]
    return cast[0], cast[1], cast[2], labels


def loss_and_grads(fn, hidden, weight, bias, labels, reduction, seed=1):
    """The loss and the gradients of <loss, random weights> for hidden, weight and bias."""
    out = fn(hidden, weight, bias, labels, reduction)
    upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(out.dtype)
    inputs = [t for t in (hidden, weight, bias) if t is not None]
    return out.detach(), torch.autograd.grad((out * upstream).sum(), inputs)


def fused(objective, margin):
    return lambda h, w, b, y, r: linear_objective_loss(h, w, y, objective=objective, margin=margin, bias=b, reduction=r)


def materialised(objective, margin):
    """Logits, in float32 when they are half-precision, then the objective on them."""

    def loss(h, w, b, y, r):
        logits = F.linear(h, w, b)
        logits = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
        return losses.objective_loss(objective, logits, y, margin=margin, reduction=r)

    return loss


def assert_same(objective, margin, inputs, reduction, rtol=1e-10, atol=1e-12):
    got, g_got = loss_and_grads(fused(objective, margin), *inputs, reduction)
    ref, g_ref = loss_and_grads(materialised(objective, margin), *inputs, reduction)
    torch.testing.assert_close(got, ref.to(got.dtype), rtol=rtol, atol=atol, equal_nan=True)
    for a, b in zip(g_got, g_ref):
        assert a.dtype == b.dtype
        torch.testing.assert_close(a, b, rtol=rtol, atol=atol)
    return got, g_got


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("objective,margin", [("standard", 2.0), ("selfish", 0.5), ("selfish", 2.0), ("selfish", 6.0)])
@pytest.mark.parametrize("bias", [True, False])
def test_equals_materialised_float64(objective, margin, reduction, bias):
    assert_same(objective, margin, case(bias=bias, spread=2.0), reduction)


@pytest.mark.parametrize("objective,margin", [("standard", 2.0), ("selfish", 2.0), ("selfish", 1e6)])
def test_equals_materialised_float32(objective, margin):
    """float32, also a margin far beyond the logits' spread (rows are shifted by the target's logit,
    not by the threshold, so a large margin costs no precision)."""
    inputs = case(n=70, h=24, v=5000, dtype=torch.float32, seed=3, spread=1.5)
    assert_same(objective, margin, inputs, "mean", rtol=2e-5, atol=2e-6)


def test_selfish_margin_bites_and_skips_tiles(monkeypatch):
    """Targets far above the rest: few tokens are kept, most tiles hold none (they are left out of
    the gradient products), and the result is still the reference's."""
    hidden, weight, bias, labels = case(n=40, h=8, v=640, bias=True, ignored=4, seed=5)
    with torch.no_grad():
        weight[:, 0] = 0.0
        weight[:32, 0] = 20.0  # the first two tiles score ~30 above the rest for every row
        hidden[:, 0] = 1.5
        labels[labels != -100] = labels[labels != -100] % 32
    seen = []
    real = fused_head._runs
    monkeypatch.setattr(fused_head, "_runs", lambda kept, tile: seen.append(real(kept, tile)) or seen[-1])
    _, grads = assert_same("selfish", 2.0, (hidden, weight, bias, labels), "mean")
    assert seen and all(sum(b - a for a, b in runs) < 640 for runs in seen)  # some tiles skipped
    assert (grads[1][32:].abs().sum(1) == 0).mean(dtype=torch.float64) > 0.5  # their rows got exactly nothing
    std, _ = loss_and_grads(fused("standard", 2.0), hidden, weight, bias, labels, "mean")
    self_, _ = loss_and_grads(fused("selfish", 2.0), hidden, weight, bias, labels, "mean")
    assert float(self_) < float(std)  # the margin left tokens out


def test_runs_cover_the_alive_tiles():
    kept = torch.zeros(100, dtype=torch.bool)
    kept[[3, 40, 41, 99]] = True
    assert fused_head._runs(kept, 16) == [(0, 16), (32, 48), (96, 100)]
    assert fused_head._runs(torch.ones(100, dtype=torch.bool), 16) == [(0, 100)]


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_all_labels_ignored(reduction):
    hidden, weight, bias, labels = case(n=6, ignored=6)
    got, grads = assert_same("selfish", 2.0, (hidden, weight, bias, labels), reduction)
    assert math.isnan(float(got)) if reduction == "mean" else bool((got == 0).all())
    assert all(bool((g == 0).all()) for g in grads)


def test_infinite_margin_is_cross_entropy():
    inputs = case(seed=7, spread=2.0)
    got, g_got = loss_and_grads(fused("selfish", math.inf), *inputs, "mean")
    ref, g_ref = loss_and_grads(lambda h, w, b, y, r: F.cross_entropy(F.linear(h, w, b), y), *inputs, "mean")
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)
    for a, b in zip(g_got, g_ref):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def integer_case(v=64, seed=0):
    """Small-integer hidden states and weights: every logit is exact in any summation order, so
    ties and tokens exactly at the threshold are the same for every implementation."""
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randint(-2, 3, (20, 4), generator=g).float().requires_grad_(True)
    weight = torch.randint(-2, 3, (v, 4), generator=g).float().requires_grad_(True)
    labels = torch.randint(0, v, (20,), generator=g)
    return hidden, weight, None, labels


@pytest.mark.parametrize("margin", [0.0, 1.0, 2.0])
def test_ties_and_tokens_at_the_threshold(margin):
    """Many logits tie with each other, with the target and with target - margin: the kept set is
    the reference's (x >= target - margin), margin 0 keeping the tokens tied with the target."""
    inputs = integer_case()
    logits = F.linear(inputs[0], inputs[1]).detach()
    target = logits.gather(1, inputs[3][:, None])
    assert bool((logits == target - margin).sum(1).gt(0).float().mean() > 0.5)  # ties at the threshold
    got, g = assert_same("selfish", margin, inputs, "mean", rtol=1e-6, atol=1e-6)
    kept = (logits >= target - margin).sum(1).double()
    assert bool((kept >= 1).all())


def test_margin_zero_keeps_the_tokens_tied_with_the_target():
    """logits (2, 2, 1, 3), target 0, margin 0: tokens 0, 1 and 3 are kept, token 2 is not."""
    hidden, weight = torch.tensor([[1.0]]), torch.tensor([[2.0], [2.0], [1.0], [3.0]])
    got = linear_objective_loss(hidden, weight, torch.tensor([0]), objective="selfish", margin=0.0)
    assert float(got) == pytest.approx(math.log(2 * math.exp(2) + math.exp(3)) - 2, rel=1e-6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("objective", ["standard", "selfish"])
@pytest.mark.parametrize("reduction", ["mean", "none"])
@pytest.mark.parametrize("group_chunks", [1, 2, 100])
def test_half_precision_inputs(dtype, objective, reduction, group_chunks, monkeypatch):
    """Half-precision hidden states and weights: logits in that dtype, softmax in float32 (as the
    reference with `.float()` on the logits), gradients in the inputs' dtype; the weight gradient one
    product per group of chunks (1 or 2 chunks of 8 rows a group: summed in float32 over groups; 100:
    all rows in one group), per-row upstream weights (`none`) included."""
    monkeypatch.setattr(fused_head, "HALF_GROUP_BYTES", group_chunks * 8 * 300 * 2)
    inputs = case(n=24, h=16, v=300, dtype=dtype, seed=11)
    got, grads = assert_same(objective, 2.0, inputs, reduction, rtol=3e-2, atol=3e-3)
    assert got.dtype == torch.float32 and all(g.dtype == dtype for g in grads)
    assert fused_head._half_group_rows(19, 8, 300, 2) == min(19, 8 * group_chunks)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("objective", ["standard", "selfish"])
def test_gradcheck(objective, reduction):
    hidden, weight, bias, labels = case(n=7, h=3, v=40, ignored=2, seed=2, spread=2.0)
    fn = fused(objective, 1.0)
    assert torch.autograd.gradcheck(lambda h, w, b: fn(h, w, b, labels, reduction), (hidden, weight, bias))


def test_second_backward_recomputes():
    hidden, weight, bias, labels = case(seed=4)
    loss = linear_objective_loss(hidden, weight, labels, objective="selfish", bias=bias)
    first = torch.autograd.grad(loss * 3, (hidden, weight, bias), retain_graph=True)
    second = torch.autograd.grad(loss * 3, (hidden, weight, bias))
    for a, b in zip(first, second):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)


def test_no_gradients_needed():
    hidden, weight, bias, labels = case(seed=6)
    with torch.no_grad():
        got = linear_objective_loss(hidden, weight, labels, objective="standard", bias=bias)
    assert got.grad_fn is None
    ref = F.cross_entropy(F.linear(hidden, weight, bias), labels)
    torch.testing.assert_close(got, ref.detach(), rtol=1e-12, atol=1e-12)


def test_chunk_rows_follow_the_vocabulary_and_the_cache(monkeypatch):
    monkeypatch.setattr(fused_head, "MIN_GEMM_ROWS", 128)
    monkeypatch.setattr(fused_head, "MAX_CHUNK_BYTES", 256 << 20)
    monkeypatch.setattr(fused_head, "cache_bytes", lambda: 32 << 20)
    cpu = torch.device("cpu")
    assert fused_head.chunk_rows(4096, 32_000, 4, cpu) == 262  # the cache holds 262 rows of 32k logits
    assert fused_head.chunk_rows(4096, 250_000, 4, cpu) == 128  # fewer than MIN_GEMM_ROWS would: 128
    assert fused_head.chunk_rows(4096, 4_000_000, 4, cpu) == 16  # the memory bound: 256 MiB of logits
    assert fused_head.chunk_rows(50, 32_000, 4, cpu) == 50
    monkeypatch.setattr(fused_head, "cache_bytes", lambda: 64 << 20)
    assert fused_head.chunk_rows(4096, 32_000, 4, cpu) == 524


@pytest.mark.parametrize(
    "kwargs,argument",
    [
        ({"hidden": torch.randn(4, 5)}, "weight has width 6"),
        ({"weight": torch.randn(10, 6, dtype=torch.float64)}, "weight dtype torch.float64"),
        ({"labels": torch.tensor([0, 1, 10, 2])}, "labels holds id 10"),
        ({"labels": torch.tensor([0, 1, -1, 2])}, "labels holds id -1"),
        ({"labels": torch.tensor([0.0, 1, 2, 3])}, "labels must hold integer"),
        ({"labels": torch.tensor([0, 1])}, "labels must be a 1-D tensor of 4"),
        ({"margin": -1.0}, "margin must be a number >= 0"),
        ({"margin": math.nan}, "margin must be a number >= 0"),
        ({"bias": torch.randn(9)}, "bias must be a \\(10,\\)"),
        ({"objective": "focal"}, "objective 'focal' is unknown"),
        ({"reduction": "max"}, "reduction must be"),
    ],
)
def test_bad_input_names_the_argument(kwargs, argument):
    args = {
        "hidden": torch.randn(4, 6),
        "weight": torch.randn(10, 6),
        "labels": torch.tensor([0, 1, 2, -100]),
        "objective": "selfish",
        "margin": 2.0,
        "bias": None,
        "reduction": "mean",
        **kwargs,
    }
    with pytest.raises(VocabTransferError, match=f"^linear_objective_loss: {argument}") as err:
        linear_objective_loss(args.pop("hidden"), args.pop("weight"), args.pop("labels"), **args)
    assert "\n" not in str(err.value)


def test_one_registry_of_objectives():
    assert set(losses.OBJECTIVES) == {"standard", "selfish", "distill", "alm"}
    # every objective runs on one of the fused head's kernels; distill's own term needs a teacher (train/distill.py)
    assert {o.kernel for o in losses.OBJECTIVES.values()} == set(fused_head.OBJECTIVE_NAMES) == {"standard", "selfish"}
    assert [o.name for o in losses.OBJECTIVES.values() if o.teacher] == ["distill", "alm"]
    assert [o.alpha for o in losses.OBJECTIVES.values() if o.teacher] == [None, 1.0]  # alm: the chunk term alone
    with pytest.raises(VocabTransferError, match="objective 'focal': unknown"):
        losses.objective_loss("focal", torch.randn(2, 3), torch.tensor([0, 1]))
    from vocabtransfer.train import pretrain

    assert not hasattr(pretrain, "objective_loss")
