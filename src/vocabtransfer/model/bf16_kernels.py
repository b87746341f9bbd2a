"""Faster bf16 training on the CPU: work that transformers' modules do in fp32, or in more passes than needed,
when the tensors are bf16. Every path here applies only to bf16 tensors (or under bf16 autocast) and hands
everything else to the module's own code, so fp32 runs keep their bits.

`install(model)` (called by the bf16 training steps: `ObjectiveTrainer` with bf16, the finetune_eval stage in
bf16; the attention's registration happens once per process, a second call changes nothing) puts in place:

* attention with dropout (`attention_dropout`): transformers' `sdpa` attention calls
  `scaled_dot_product_attention`, which has no fused CPU kernel with dropout and takes its math path; for bf16
  inputs that path casts query, key and value to fp32 and computes the scores, the softmax, the dropout and
  their backward in fp32 (BERT/MiniLM: `attention_probs_dropout_prob` 0.1, a third of a bf16 pretrain step).
  Here: the scores as one bf16 batched product with the scale folded in (`baddbmm`), the softmax of bf16 scores
  (fp32 inside, bf16 out, as transformers' eager attention), dropout's mask (`keep_mask`, one pass) and the
  product with the values in bf16 (the dropout's 1 / (1 - p) folded into it). Without dropout (evaluation,
  Gemma) `sdpa` keeps its fused flash kernel.
  The registration replaces transformers' `sdpa` entry by a function that calls the original for every other
  case (fp32, dropout 0, causal without a mask, grouped heads, a position bias, a cache, soft-capping).
* dropout's masks: drawn as the math path draws them (`keep_mask`), so that bf16 and fp32 runs of the same
  seed drop the same entries and differ by their precision alone. (torch's CPU `bernoulli_` draws one number
  per entry in one thread, MKL's vectorised generator being used only on Intel CPUs: on this project's AMD CPU
  the masks cost a tenth to a quarter of MiniLM's bf16 step. Four 16-bit draws from one 64-bit integer are 3x
  faster, but other masks: used for every dropout, tests/stage/test_precision.py's tiny causal model's bf16 valid
  loss moved 0.03 nats from its fp32 twin's in 24 steps (tolerance 0.02; 0.006 with the same masks); for the
  attention alone, the masked model's 0.010 (0.0004 with the same masks).)
* the tied input embedding's gradient (`install(model)`, a model whose input embeddings share the LM head's
  weight): the lookup's backward builds a dense V x H gradient (zeroed, the looked-up rows added) that autograd
  then adds to the head's gradient of the same weight: Gemma's 262,144 x 640, 0.7 GB zeroed, read and added
  every step. Under bf16 autocast the lookup's gradient is sparse instead (`sparse=True` for that call: the
  looked-up rows), added in place into the head's dense gradient; `.grad` stays dense. Untied embeddings keep
  the dense gradient (a sparse `.grad` would reach the optimiser).
* Gemma's RMSNorm (`install(model)`: the model's Gemma, Gemma 2 and Gemma 3 norms): transformers computes
  x / rms(x) * (1 + w) in fp32 as seven tensor operations (a copy to fp32, x², the mean, rsqrt, two products,
  the cast back) and autograd differentiates each: most of the elementwise work of Gemma's bf16 step.
  Here (`_GemmaRMSNorm`): the row statistic in one fp32 reduction pass, the output in two, a hand-written
  backward; the same fp32 arithmetic up to rounding. The norms before the attention and the MLP
  (`LINEAR_INPUT_NORMS`) return bf16, which autocast would otherwise cast for each of the 3 (q, k, v) or 2
  (gate, up) products, and back for each of their gradients. Outside bf16 autocast the module's own forward runs.
"""

from __future__ import annotations

import types

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

_ORIGINAL_SDPA = None


def _fast_attention_applies(module, query, key, value, attention_mask, dropout, is_causal, kwargs) -> bool:
    """Whether `attention_dropout` computes what transformers' sdpa attention would (dropout aside)."""
    if not dropout or query.device.type != "cpu" or query.dim() != 4:
        return False
    if not (query.dtype == key.dtype == value.dtype == torch.bfloat16):
        return False
    if query.shape[1] != key.shape[1] or getattr(module, "num_key_value_groups", 1) != 1:
        return False
    if any(kwargs.get(k) is not None for k in ("position_bias", "cache", "softcap")) or kwargs.get("output_attentions"):
        return False
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    if causal and attention_mask is None and query.shape[2] > 1:
        return False
    return attention_mask is None or attention_mask.dim() == 4


def attention_with_dropout(query, key, value, attention_mask, dropout: float, scale: float) -> torch.Tensor:
    """softmax(q kᵀ scale + mask) with dropout, times v, in bf16 ((B, H, T, D) in, (B, H, T, D) out). `attention_mask`:
    None, bool (True: attend) or additive, broadcastable to (B, H, T, S)."""
    b, h, t, d = query.shape
    s = key.shape[2]
    q = query.reshape(b * h, t, d)
    k = key.reshape(b * h, s, d)
    scores = torch.baddbmm(q.new_empty(1, 1, 1), q, k.transpose(1, 2), beta=0.0, alpha=scale).view(b, h, t, s)
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:  # a finite minimum: a row with no key left stays finite
            scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + attention_mask.to(scores.dtype)
    probs = torch.softmax(scores, -1)
    keep, rescale = keep_mask(probs.shape, dropout, probs.device)
    probs = torch.where(keep, probs, 0.0).view(b * h, t, s)  # the 1 / (1 - p) folded into the next product
    out = torch.baddbmm(probs.new_empty(1, 1, 1), probs, value.reshape(b * h, s, -1), beta=0.0, alpha=rescale)
    return out.view(b, h, t, -1)


def keep_mask(shape, p: float, device) -> tuple[torch.Tensor, float]:
    """(bool mask of `shape`, True with probability 1 - p, and 1 / (1 - p)): dropout's mask drawn as
    `scaled_dot_product_attention`'s math path draws it (`bernoulli_(1 - p)` over the same shape: the same
    numbers from the same generator whatever the dtype), so a bf16 run drops what its fp32 twin drops."""
    if p >= 1:
        return torch.zeros(shape, dtype=torch.bool, device=device), 0.0
    return torch.empty(shape, dtype=torch.bool, device=device).bernoulli_(1 - p), 1 / (1 - p)


def _bf16_autocast() -> bool:
    return torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16


def attention_dropout(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    """transformers' `sdpa` attention function, bf16 with dropout on the CPU through `attention_with_dropout`."""
    assert _ORIGINAL_SDPA is not None  # install() keeps it before registering this function
    if not _fast_attention_applies(module, query, key, value, attention_mask, dropout, is_causal, kwargs):
        return _ORIGINAL_SDPA(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    out = attention_with_dropout(query, key, value, attention_mask, dropout, scale)
    return out.transpose(1, 2).contiguous(), None


def install(model=None) -> None:
    """Register the bf16 attention (module docstring; once per process) and give `model`'s Gemma RMSNorms
    (GEMMA_NORMS) `gemma_norm_forward`, a bound method of each (a deep copy of the model keeps its own)."""
    global _ORIGINAL_SDPA

    if _ORIGINAL_SDPA is None:
        _ORIGINAL_SDPA = sdpa_attention_forward
        AttentionInterface.register("sdpa", attention_dropout)
    for name, module in model.named_modules() if model is not None else ():
        if type(module).__name__ in GEMMA_NORMS and hasattr(module, "eps"):
            module.forward = types.MethodType(gemma_norm_forward, module)
            module._vt_bf16_output = name.rpartition(".")[2] in LINEAR_INPUT_NORMS
    embeddings = tied_input_embeddings(model) if model is not None else None
    if embeddings is not None:
        embeddings.forward = types.MethodType(tied_embedding_forward, embeddings)


def tied_input_embeddings(model):
    """The model's input embeddings (nn.Embedding) when their weight is its LM head's weight, else None."""
    get_in, get_out = getattr(model, "get_input_embeddings", None), getattr(model, "get_output_embeddings", None)
    inputs, outputs = (get_in() if get_in else None), (get_out() if get_out else None)
    if isinstance(inputs, torch.nn.Embedding) and getattr(outputs, "weight", None) is inputs.weight:
        return inputs
    return None


def tied_embedding_forward(self, ids):
    """A tied input embedding's forward: under bf16 autocast with gradients, its lookup's gradient sparse
    (the rows looked up), which autograd adds in place into the head's dense gradient of the same weight; the
    dense V x H gradient of the lookup is never zeroed and summed. Else the class's own."""
    if torch.is_grad_enabled() and ids.device.type == "cpu" and _bf16_autocast() and not self.sparse:
        self.sparse = True
        try:
            return type(self).forward(self, ids)
        finally:
            self.sparse = False
    return type(self).forward(self, ids)


# ------------------------------------------------------------------------------ Gemma's RMSNorm

GEMMA_NORMS = ("GemmaRMSNorm", "Gemma2RMSNorm", "Gemma3RMSNorm")  # y = x / rms(x) * (1 + w), in fp32


class _GemmaRMSNorm(torch.autograd.Function):
    """y = (x * rsqrt(mean(x²) + eps) * (1 + w)) in fp32, returned in `dtype` (x's dtype, or bf16 where only
    autocast's products read it), with a hand-written backward: the row statistic in one fp32 reduction pass
    (`vector_norm`, no x² tensor), nothing saved but x, w and the per-row rsqrt."""

    @staticmethod
    def forward(ctx, x, weight, eps, dtype):
        rstd = torch.linalg.vector_norm(x, dim=-1, keepdim=True, dtype=torch.float32)
        rstd = rstd.square_().div_(x.shape[-1]).add_(eps).rsqrt_()
        scale = weight.float() + 1.0
        y = torch.mul(x, rstd).mul_(scale)
        ctx.save_for_backward(x, weight, rstd)
        return y.to(dtype)

    @staticmethod
    def backward(ctx, grad):
        x, weight, rstd = ctx.saved_tensors
        xhat = torch.mul(x, rstd)  # fp32, ours
        gs = grad.float()  # may be `grad` itself: never written
        dweight = (gs * xhat).flatten(0, -2).sum(0).to(weight.dtype) if ctx.needs_input_grad[1] else None
        g = gs * (weight.float() + 1.0)  # the gradient at xhat
        dot = (g * xhat).sum(-1, keepdim=True).div_(x.shape[-1])
        dx = g.sub_(xhat.mul_(dot)).mul_(rstd).to(x.dtype)
        return dx, dweight, None, None


LINEAR_INPUT_NORMS = ("input_layernorm", "pre_feedforward_layernorm")  # read by q/k/v, gate/up projections only


def gemma_norm_forward(self, x):
    """A Gemma RMSNorm's forward: under bf16 autocast on the CPU `_GemmaRMSNorm` (its output in bf16 for a norm
    whose output only autocast's products read: they would cast it, each its own copy), else the class's own."""
    if x.device.type == "cpu" and _bf16_autocast():
        dtype = torch.bfloat16 if getattr(self, "_vt_bf16_output", False) else x.dtype
        return _GemmaRMSNorm.apply(x, self.weight, self.eps, dtype)
    return type(self).forward(self, x)
