"""heads: the LM head of each architecture family through the fused loss, on tiny random-weight models."""

from __future__ import annotations

import pytest
import torch

from vocabtransfer.model import heads
from vocabtransfer.model.losses import objective_loss
from vocabtransfer.train import lowrank
from vocabtransfer.model import lm_loss
from vocabtransfer.errors import VocabTransferError

V = 97
SMALL = dict(num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, max_position_embeddings=64)


def bert():
    from transformers import BertConfig, BertForMaskedLM

    return BertForMaskedLM(BertConfig(vocab_size=V, hidden_size=16, **SMALL)), "masked"


def roberta():
    from transformers import XLMRobertaConfig, XLMRobertaForMaskedLM

    return XLMRobertaForMaskedLM(XLMRobertaConfig(vocab_size=V, hidden_size=16, pad_token_id=1, **SMALL)), "masked"


def distilbert():
    from transformers import DistilBertConfig, DistilBertForMaskedLM

    return DistilBertForMaskedLM(
        DistilBertConfig(vocab_size=V, dim=16, n_layers=1, n_heads=2, hidden_dim=32, max_position_embeddings=64)
    ), "masked"


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(vocab_size=V, n_embd=16, n_layer=1, n_head=2, n_positions=64)), "causal"


def llama_untied():
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(
        LlamaConfig(vocab_size=V, hidden_size=16, num_key_value_heads=2, tie_word_embeddings=False, **SMALL)
    ), "causal"


def phi_bias():
    from transformers import PhiConfig, PhiForCausalLM

    model = PhiForCausalLM(
        PhiConfig(vocab_size=V, hidden_size=16, num_key_value_heads=2, tie_word_embeddings=False, **SMALL)
    )
    assert model.lm_head.bias is not None  # an untied lm_head with a bias
    return model, "causal"


def granite_scaled():
    from transformers import GraniteConfig, GraniteForCausalLM

    return GraniteForCausalLM(
        GraniteConfig(vocab_size=V, hidden_size=16, num_key_value_heads=2, logits_scaling=4.0, **SMALL)
    ), "causal"


def gemma2_softcapped():
    from transformers import Gemma2Config, Gemma2ForCausalLM

    return Gemma2ForCausalLM(
        Gemma2Config(
            vocab_size=V, hidden_size=16, num_key_value_heads=2, head_dim=8, final_logit_softcapping=3.0, **SMALL
        )
    ), "causal"


FAMILIES = {
    "bert": bert,
    "xlm-roberta": roberta,
    "distilbert": distilbert,
    "gpt2": gpt2,
    "llama": llama_untied,
    "phi": phi_bias,
    "granite": granite_scaled,
    "gemma2": gemma2_softcapped,
}


def batch(kind: str, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, V, (3, 10), generator=g)
    mask = torch.ones_like(ids)
    mask[2, 7:] = 0
    labels = ids.masked_fill(mask == 0, -100)
    if kind == "masked":
        labels = labels.masked_fill(torch.rand(ids.shape, generator=g) > 0.4, -100)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def reference_loss(model, b, kind, objective, margin):
    """The model's own logits at the predicted positions, then the objective on them."""
    logits, labels = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits, b["labels"]
    if kind == "causal":
        logits, labels = logits[:, :-1], labels[:, 1:]
    sel = labels != -100
    return objective_loss(objective, logits[sel], labels[sel], margin=margin)


def grads(loss, model):
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.autograd.grad(loss, params, allow_unused=True)


def spread_logits(model):
    """Wider logits than a fresh init gives, so that the selfish margin leaves tokens out."""
    with torch.no_grad():
        w = model.get_output_embeddings().weight
        w.mul_(8.0 / w.norm(dim=1, keepdim=True).clamp_min(1e-6))


@pytest.mark.parametrize("objective", ["standard", "selfish"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_fused_head_equals_the_models_own_logits(family, objective, one_thread):
    torch.manual_seed(0)
    model, kind = FAMILIES[family]()
    spread_logits(model)
    model.double().eval()  # float64: the comparison shows the method, not round-off
    head = heads.head_parts(model)
    assert head.fusable == (family != "gemma2")
    b = batch(kind)
    hidden, targets = heads.predicted_hidden(model, b, kind, head)
    ref_labels = b["labels"][:, 1:] if kind == "causal" else b["labels"]
    assert hidden.shape == (int((ref_labels != -100).sum()), model.config.get_text_config().hidden_size)
    logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
    logits = logits[:, :-1] if kind == "causal" else logits
    torch.testing.assert_close(head.logits(hidden), logits[ref_labels != -100], rtol=1e-10, atol=1e-10)
    loss = heads.head_loss(head, hidden, targets, objective=objective, margin=1.0)
    ref = reference_loss(model, b, kind, objective, 1.0)
    torch.testing.assert_close(loss, ref, rtol=1e-10, atol=1e-12)
    for a, r in zip(grads(loss, model), grads(ref, model)):
        if r is None:
            assert a is None or bool((a == 0).all())
        else:
            torch.testing.assert_close(a, r, rtol=1e-8, atol=1e-10)


def test_tied_and_untied_heads_reach_the_right_matrices():
    model, _ = bert()
    head = heads.head_parts(model)
    assert head.family == "bert" and head.projection.weight is model.get_input_embeddings().weight
    assert head.projection.bias is model.cls.predictions.bias
    assert {id(p) for p in head.parameters()} == {id(p) for p in model.cls.parameters()}
    model, _ = llama_untied()
    head = heads.head_parts(model)
    assert head.family == "decoder" and head.transform is None
    assert head.projection.weight is not model.get_input_embeddings().weight
    model, _ = gpt2()
    head = heads.head_parts(model)
    assert head.root is model.lm_head and head.projection.weight is model.get_input_embeddings().weight


@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_low_rank_output_is_read_through_its_factors(family, one_thread):
    """A factorised model (pretrain.factorized): logits (h P^T) C^T + b, fused, as the model computes."""
    torch.manual_seed(1)
    model, kind = FAMILIES[family]()
    coords, prims = torch.randn(V, 4), torch.randn(4, 16) * 0.5
    low = lowrank.LowRankEmbedding(coords, prims)
    bias = getattr(model.get_output_embeddings(), "bias", None)
    model.set_input_embeddings(low)
    model.set_output_embeddings(lowrank.LowRankOutput(low, bias, shared=True))
    model.eval()
    head = heads.head_parts(model)
    states, weight, _ = head.linear(torch.randn(5, 16))
    assert weight is low.coordinates and states.shape == (5, 4)
    b = batch(kind, seed=2)
    loss = heads.head_loss(head, *heads.predicted_hidden(model, b, kind, head), objective="selfish", margin=2.0)
    ref = reference_loss(model, b, kind, "selfish", 2.0)
    torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-6)
    for a, r in zip(grads(loss, model), grads(ref, model)):
        torch.testing.assert_close(a, r, rtol=1e-4, atol=1e-6)


def test_unknown_head_is_an_error():
    with pytest.raises(VocabTransferError, match="no LM head of a family vocabtransfer knows"):
        heads.head_parts(torch.nn.Linear(2, 2))


def test_evaluate_lm_through_the_fused_head_equals_the_logits(one_thread):
    torch.manual_seed(3)
    model, kind = bert()
    model.eval()
    batches = [batch(kind, seed=s) for s in range(3)]
    fused = lm_loss.evaluate_lm(model, batches, kind)
    calibrated = lm_loss.evaluate_lm(model, batches, kind, calibrate=True)  # the logits path
    assert fused["n_tokens"] == calibrated["n_tokens"] > 0
    assert fused["loss"] == pytest.approx(calibrated["loss"], rel=1e-6)
    losses, targets = lm_loss.token_losses(model, batches[0], kind)
    logits, t = lm_loss.predicted_logits(model, batches[0], kind)
    torch.testing.assert_close(losses, torch.nn.functional.cross_entropy(logits, t, reduction="none"))


@pytest.mark.parametrize("find_unused", [True, False])
def test_ddp_wrapped_model_synchronises_through_the_fused_head(tmp_path, find_unused, one_thread):
    """Under DistributedDataParallel (gloo, one process) the wrapped forward runs with the head
    bypassed; every parameter gets its gradient once (no 'marked ready twice', none left unused,
    also with a frozen part as in the embedding warm-up) and the gradients are the plain model's."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        torch.manual_seed(4)
        model, kind = bert()
        model.eval()
        if find_unused:  # the embedding warm-up freezes the body; DDP must see those as unused
            for p in model.bert.encoder.parameters():
                p.requires_grad_(False)
        wrapped = DDP(model, find_unused_parameters=find_unused)
        head = heads.head_parts(model)
        b = batch(kind, seed=5)
        for _ in range(2):  # two steps: an unsynchronised parameter fails on the second
            model.zero_grad(set_to_none=True)
            loss = heads.head_loss(head, *heads.predicted_hidden(wrapped, b, kind, head), objective="selfish")
            loss.backward()
        got = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
        model.zero_grad(set_to_none=True)
        reference_loss(model, b, kind, "selfish", 2.0).backward()
        for n, p in model.named_parameters():
            if p.requires_grad and p.grad is not None:
                torch.testing.assert_close(got[n], p.grad, rtol=1e-4, atol=1e-6, msg=n)
    finally:
        dist.destroy_process_group()


def test_head_loss_under_autocast_runs_the_head_in_the_autocast_dtype(one_thread, monkeypatch):
    """bf16 mixed precision (the pretrain stage wraps the loss in the accelerator's autocast): the
    fused head gets bf16 states and weights; the loss is the float32 one to bf16 precision and the
    float32 parameters get float32 gradients."""
    from vocabtransfer.model import fused_head

    seen = []
    real = fused_head.chunked_pass
    monkeypatch.setattr(
        fused_head, "chunked_pass", lambda h, w, *a, **k: seen.append((h.dtype, w.dtype)) or real(h, w, *a, **k)
    )
    torch.manual_seed(6)
    model, kind = bert()
    model.eval()
    head, b = heads.head_parts(model), batch(kind, seed=6)
    ref = heads.head_loss(head, *heads.predicted_hidden(model, b, kind, head), objective="selfish")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = heads.head_loss(head, *heads.predicted_hidden(model, b, kind, head), objective="selfish")
    assert seen == [(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16)]
    assert loss.dtype == torch.float32 and float(loss.detach()) == pytest.approx(float(ref.detach()), rel=2e-2)
    loss.backward()
    assert model.cls.predictions.bias.grad.dtype == torch.float32
