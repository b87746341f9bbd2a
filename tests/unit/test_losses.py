"""The selfish cross-entropy against its naive reference and `F.cross_entropy`."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from vocabtransfer.model import losses
from vocabtransfer.errors import VocabTransferError


def random_case(n=37, v=53, seed=0, ignored=0.3, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, v, generator=g, dtype=torch.float64) * scale
    labels = torch.randint(0, v, (n,), generator=g)
    labels[torch.rand(n, generator=g) < ignored] = -100
    return logits, labels


def value_and_grad(fn, logits, labels, low=0.5, **kw):
    x = logits.clone().requires_grad_()
    out = fn(x, labels, **kw)
    # a non-uniform upstream gradient, so reduction="none" checks each row's scale
    weight = torch.linspace(low, 1.5, out.numel(), dtype=out.dtype).reshape(out.shape)
    (out * weight).sum().backward()
    return out.detach(), x.grad


def test_three_token_example_by_hand():
    """logits (2, 1, -1), target 0, margin 2: the threshold is 2 - 2 = 0, so token 2 (logit -1) leaves the
    softmax. loss = log(e^2 + e^1) - 2 = log(1 + e^-1) = 0.313262; the kept softmax is
    (1, e^-1) / (1 + e^-1) = (0.731059, 0.268941), so the gradient is (0.731059 - 1, 0.268941, 0).
    Plain cross-entropy keeps token 2: log(1 + e^-1 + e^-3) = 0.349012 and its gradient on token 2 is
    e^-3 / (1 + e^-1 + e^-3) = 0.035119."""
    logits = torch.tensor([[2.0, 1.0, -1.0]], dtype=torch.float64, requires_grad=True)
    loss = losses.selfish_cross_entropy(logits, torch.tensor([0]), margin=2.0)
    loss.backward()
    loss = loss.detach()
    assert float(loss) == pytest.approx(math.log(1 + math.exp(-1)), abs=1e-9)
    assert float(loss) == pytest.approx(0.313262, abs=1e-6)
    assert logits.grad[0].tolist() == pytest.approx([0.731059 - 1, 0.268941, 0.0], abs=1e-6)
    plain = logits.detach().clone().requires_grad_()
    ce = F.cross_entropy(plain, torch.tensor([0]))
    ce.backward()
    assert float(ce.detach()) == pytest.approx(0.349012, abs=1e-6)
    assert float(plain.grad[0, 2]) == pytest.approx(0.035119, abs=1e-6)


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("margin", [0.5, 2.0, 6.0])
def test_equals_naive_reference(reduction, margin, monkeypatch):
    monkeypatch.setattr(losses, "CHUNK_ELEMENTS", 300)  # several chunks of ~5 rows
    logits, labels = random_case(seed=int(margin * 10))
    fast, g_fast = value_and_grad(losses.selfish_cross_entropy, logits, labels, margin=margin, reduction=reduction)
    ref, g_ref = value_and_grad(losses.selfish_cross_entropy_naive, logits, labels, margin=margin, reduction=reduction)
    torch.testing.assert_close(fast, ref, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(g_fast, g_ref, rtol=1e-6, atol=1e-7)
    ignored = labels == -100
    assert ignored.any() and g_fast[ignored].abs().max() == 0
    if reduction == "none":
        assert fast[ignored].abs().max() == 0 and (fast[~ignored] >= 0).all()
    # the margin bites: some non-target tokens got no gradient where plain cross-entropy gives them some
    assert (g_fast[~ignored] == 0).sum() > 0


@pytest.mark.parametrize("low", [-1.0, 0.0])
def test_upstream_gradient_zero_or_negative(low, monkeypatch):
    """Rows whose upstream gradient is not positive take the multiply path instead of the folded one."""
    monkeypatch.setattr(losses, "CHUNK_ELEMENTS", 300)
    logits, labels = random_case(seed=11)
    fast, g_fast = value_and_grad(losses.selfish_cross_entropy, logits, labels, low=low, reduction="none")
    ref, g_ref = value_and_grad(losses.selfish_cross_entropy_naive, logits, labels, low=low, reduction="none")
    torch.testing.assert_close(g_fast, g_ref, rtol=1e-6, atol=1e-7)


def test_a_logit_exactly_at_the_threshold_is_kept():
    """logits (2, 0, -1), target 0, margin 2: token 1 sits exactly at 2 - 2 = 0 and stays in the softmax."""
    logits = torch.tensor([[2.0, 0.0, -1.0]], requires_grad=True)
    losses.selfish_cross_entropy(logits, torch.tensor([0])).backward()
    p1 = 1 / (math.exp(2) + 1)  # kept softmax (e^2, e^0) / (e^2 + 1); the target's gradient is p0 - 1 = -p1
    assert logits.grad[0].tolist() == pytest.approx([-p1, p1, 0.0], abs=1e-6)


def test_backward_twice_is_an_error_and_no_grad_needs_no_buffer():
    logits, labels = random_case(n=6, v=9, ignored=0.0)
    x = logits.clone().requires_grad_()
    loss = losses.selfish_cross_entropy(x, labels)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="second time"):
        loss.backward()
    with torch.no_grad():
        assert float(losses.selfish_cross_entropy(x, labels)) == pytest.approx(float(loss))


def test_no_ignored_rows_and_float32(monkeypatch):
    monkeypatch.setattr(losses, "CHUNK_ELEMENTS", 500)
    logits, labels = random_case(n=20, v=40, ignored=0.0)
    logits = logits.float()
    fast, g_fast = value_and_grad(losses.selfish_cross_entropy, logits, labels)
    ref, g_ref = value_and_grad(losses.selfish_cross_entropy_naive, logits, labels)
    torch.testing.assert_close(fast, ref)
    torch.testing.assert_close(g_fast, g_ref)


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_infinite_margin_is_cross_entropy(reduction):
    logits, labels = random_case(seed=5)
    fast, g_fast = value_and_grad(losses.selfish_cross_entropy, logits, labels, margin=math.inf, reduction=reduction)
    ce, g_ce = value_and_grad(F.cross_entropy, logits, labels, reduction=reduction)
    torch.testing.assert_close(fast, ce)
    torch.testing.assert_close(g_fast, g_ce)


def test_selfish_loss_is_below_cross_entropy_and_all_ignored_is_nan():
    logits, labels = random_case(seed=3)
    assert float(losses.selfish_cross_entropy(logits, labels)) < float(F.cross_entropy(logits, labels))
    none = torch.full((4,), -100)
    assert math.isnan(float(losses.selfish_cross_entropy(torch.randn(4, 6), none)))
    assert math.isnan(float(F.cross_entropy(torch.randn(4, 6), none)))  # the same convention


def test_bfloat16_logits_give_bfloat16_loss_and_gradient():
    logits, labels = random_case(n=16, v=30, ignored=0.2)
    x = logits.to(torch.bfloat16).requires_grad_()
    loss = losses.selfish_cross_entropy(x, labels)
    loss.backward()
    assert loss.dtype == torch.bfloat16 and x.grad.dtype == torch.bfloat16
    ref = losses.selfish_cross_entropy_naive(logits.to(torch.bfloat16).double(), labels)
    assert float(loss.detach()) == pytest.approx(float(ref), rel=1e-2)


@pytest.mark.parametrize("margin", [-1.0, math.nan])
def test_bad_margin(margin):
    with pytest.raises(VocabTransferError, match="margin must be a number >= 0"):
        losses.selfish_cross_entropy(torch.randn(2, 5), torch.tensor([0, 1]), margin=margin)


def test_margin_zero_keeps_the_tokens_at_or_above_the_target():
    """logits (2, 2, 1, 3), target 0, margin 0: tokens 0, 1 and 3 stay, token 2 leaves."""
    logits = torch.tensor([[2.0, 2.0, 1.0, 3.0]])
    loss = losses.selfish_cross_entropy(logits, torch.tensor([0]), margin=0.0)
    assert float(loss) == pytest.approx(math.log(2 * math.exp(2) + math.exp(3)) - 2, rel=1e-6)
    naive = losses.selfish_cross_entropy_naive(logits, torch.tensor([0]), margin=0.0)
    assert float(naive) == pytest.approx(float(loss))


@pytest.mark.parametrize("bad", [5, -2, 99])
def test_labels_outside_the_vocabulary(bad):
    with pytest.raises(VocabTransferError, match=rf"label {bad} is outside \[0, 5\)"):
        losses.selfish_cross_entropy(torch.randn(3, 5), torch.tensor([0, bad, -100]))


def test_shapes_and_objectives():
    with pytest.raises(VocabTransferError, match="expected logits"):
        losses.selfish_cross_entropy(torch.randn(2, 3, 5), torch.tensor([[0, 1, 2], [0, 1, 2]]))
    logits, labels = random_case(seed=9)
    assert float(losses.objective_loss("standard", logits, labels)) == pytest.approx(
        float(F.cross_entropy(logits, labels))
    )
    assert float(losses.objective_loss("selfish", logits, labels, margin=1.0)) == pytest.approx(
        float(losses.selfish_cross_entropy_naive(logits, labels, margin=1.0))
    )
    with pytest.raises(VocabTransferError, match="unknown"):
        losses.objective_loss("focal", logits, labels)
