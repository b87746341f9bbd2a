"""model.bf16_kernels: the bf16 paths compute what transformers' modules compute (within bf16's rounding), and
everything that is not bf16 goes through the modules' own code, bit for bit."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from vocabtransfer.model import bf16_kernels


def _qkv(b=4, h=3, t=16, d=8, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(b, h, t, d, generator=g).to(dtype) for _ in range(3)]


@pytest.mark.parametrize("mask_kind", ["none", "bool", "additive"])
def test_attention_without_dropout_is_sdpa(mask_kind):
    q, k, v = _qkv()
    keep = torch.ones(4, 1, 16, 16, dtype=torch.bool)
    keep[1, :, :, 10:] = False
    mask = {"none": None, "bool": keep, "additive": (~keep[:, :, :1]).float() * torch.finfo(torch.bfloat16).min}
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=None if mask_kind == "none" else keep)
    out = bf16_kernels.attention_with_dropout(
        q.bfloat16(), k.bfloat16(), v.bfloat16(), mask[mask_kind], 0.0, 8**-0.5
    ).float()
    assert out.shape == ref.shape
    assert (out - ref).abs().max() < 0.02  # bf16 rounding of inputs, scores and probabilities


def test_attention_dropout_drops_and_rescales():
    q, k, v = (x.bfloat16() for x in _qkv())
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float())
    torch.manual_seed(0)
    draws = [bf16_kernels.attention_with_dropout(q, k, v, None, 0.3, 8**-0.5).float() for _ in range(300)]
    assert not torch.equal(draws[0], draws[1])  # a new mask each call
    assert (sum(draws) / len(draws) - ref).abs().max() < 0.15  # unbiased: the kept entries scaled by 1 / 0.7


def _bert(dropout: float):
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=50,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        attention_probs_dropout_prob=dropout,
        attn_implementation="sdpa",
    )
    return BertForMaskedLM(config).train()


def test_fp32_training_keeps_transformers_bits(monkeypatch):
    bf16_kernels.install()
    ids = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0
    model = _bert(0.1)
    torch.manual_seed(3)
    installed = model(input_ids=ids, attention_mask=mask).logits
    monkeypatch.setattr(bf16_kernels, "_fast_attention_applies", lambda *a: pytest.fail("fast path taken in fp32"))
    from transformers import AttentionInterface

    monkeypatch.setitem(AttentionInterface._global_mapping, "sdpa", bf16_kernels._ORIGINAL_SDPA)
    torch.manual_seed(3)
    assert torch.equal(installed, model(input_ids=ids, attention_mask=mask).logits)


def test_bf16_training_takes_the_fast_path(monkeypatch):
    bf16_kernels.install()
    calls = []
    fast = bf16_kernels.attention_with_dropout
    monkeypatch.setattr(bf16_kernels, "attention_with_dropout", lambda *a: calls.append(1) or fast(*a))
    ids = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0
    model = _bert(0.1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(input_ids=ids, attention_mask=mask, labels=ids).loss
    loss.backward()
    assert len(calls) == 2 and torch.isfinite(loss)  # both layers
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters() if p.requires_grad)
    model.eval()  # no dropout: sdpa's own (flash) path
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
        model(input_ids=ids, attention_mask=mask)
    assert len(calls) == 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gemma_norm_under_autocast_matches_transformers(dtype):
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm

    norm = Gemma3RMSNorm(64)
    torch.nn.init.normal_(norm.weight, std=0.3)
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(3, 5, 64, generator=g) * 4).to(dtype).requires_grad_()
    upstream = torch.randn(3, 5, 64, generator=g).to(dtype)
    kept = upstream.clone()
    results = []
    for forward in (norm, lambda t: bf16_kernels.gemma_norm_forward(norm, t)):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = forward(x)
        results.append((y, *torch.autograd.grad(y, (x, norm.weight), upstream)))
    for ref, fast in zip(*results):
        assert ref.dtype == fast.dtype and ref.shape == fast.shape
        tolerance = 1e-4 if dtype == torch.float32 else 2**-7  # one bf16 rounding step of values up to ~2
        assert ((ref.float() - fast.float()).abs() / ref.float().abs().clamp(min=1)).max() <= tolerance
    assert torch.equal(upstream, kept)  # the incoming gradient is not written


def test_gemma_norms_keep_fp32_bits_and_their_copies():
    import copy

    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(0)
    config = Gemma3TextConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        layer_types=["sliding_attention", "full_attention"],
        sliding_window=4,
    )
    model = Gemma3ForCausalLM(config).train()
    plain = copy.deepcopy(model)
    bf16_kernels.install(model)
    patched = [
        m
        for m in model.modules()
        if getattr(vars(m).get("forward"), "__func__", None) is bf16_kernels.gemma_norm_forward
    ]
    assert len(patched) == 2 * 4 + 2 * 2 + 1  # per layer 4 norms + q and k norms, the final norm
    ids = torch.randint(0, 64, (2, 10), generator=torch.Generator().manual_seed(1))
    assert torch.equal(model(input_ids=ids).logits, plain(input_ids=ids).logits)  # fp32: the module's own
    twin = copy.deepcopy(model)
    assert all(vars(m)["forward"].__self__ is m for m in twin.modules() if "forward" in vars(m))
    outputs = {}
    for name in ("model.layers.0.input_layernorm", "model.layers.0.post_attention_layernorm"):
        model.get_submodule(name).register_forward_hook(lambda m, a, out, name=name: outputs.update({name: out}))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fast, ref = model(input_ids=ids).logits, plain(input_ids=ids).logits
    assert outputs["model.layers.0.input_layernorm"].dtype == torch.bfloat16  # read by q, k, v only
    assert outputs["model.layers.0.post_attention_layernorm"].dtype == torch.bfloat16  # its input's (o_proj's)
    assert (fast.float() - ref.float()).abs().max() < 0.1 * ref.float().abs().max()


def test_attention_drops_what_the_fp32_math_path_drops():
    q, k, v = _qkv()
    torch.manual_seed(5)
    ref = torch.ops.aten._scaled_dot_product_attention_math(q, k, v, dropout_p=0.3)[1]  # the dropped weights
    torch.manual_seed(5)
    keep, rescale = bf16_kernels.keep_mask(ref.shape, 0.3, torch.device("cpu"))
    assert torch.equal(keep, ref != 0) and rescale == pytest.approx(1 / 0.7)
    assert not bf16_kernels.keep_mask((3, 4), 1.0, torch.device("cpu"))[0].any()


def test_tied_embedding_gradient_is_the_dense_one():
    import copy

    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    from vocabtransfer.model import heads

    torch.manual_seed(0)
    config = Gemma3TextConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        layer_types=["full_attention"],
        tie_word_embeddings=True,
    )
    plain = Gemma3ForCausalLM(config).train()
    bf16_kernels.install(plain)
    model = copy.deepcopy(plain)
    assert bf16_kernels.tied_input_embeddings(model) is model.get_input_embeddings()
    del vars(plain.get_input_embeddings())["forward"]  # plain: the dense gradient (its norms as model's)
    ids = torch.randint(0, 64, (2, 10), generator=torch.Generator().manual_seed(1))
    ids[0, :4] = 7  # a repeated id
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}
    grads = []
    for m in (plain, model):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            hidden, targets = heads.predicted_hidden(m, batch, "causal")
            loss = heads.head_loss(heads.head_parts(m), hidden, targets, reduction="sum")
        loss.backward()
        grads.append(m.get_input_embeddings().weight.grad)
    assert not grads[1].is_sparse and grads[1].shape == grads[0].shape
    assert torch.allclose(grads[0], grads[1], rtol=1e-5, atol=1e-6)  # the same sum, in another order
    model.zero_grad()
    plain.zero_grad()
    for m in (plain, model):  # fp32: the dense gradient, its bits
        m(input_ids=ids).logits.sum().backward()
    assert torch.equal(plain.get_input_embeddings().weight.grad, model.get_input_embeddings().weight.grad)
