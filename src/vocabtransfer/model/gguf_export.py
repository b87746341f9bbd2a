"""GGUF out: a transferred decoder and its target tokenizer in one file, written with the gguf package's
`GGUFWriter`, in the layout llama.cpp's converter (convert_hf_to_gguf.py) gives and transformers' GGUF loader
reads back (`from_pretrained(…, gguf_file=…)`).

1. the architecture: config.model_type llama, gemma3_text or gpt2 (`ARCHITECTURES`, the GGUF
   `general.architecture` each is written as); any other is refused with one line;
2. general metadata: name, licence, base model, language, tags;
3. the hyperparameters under the architecture's keys, the ones transformers' loader maps back to the config
   (transformers.integrations.ggml.GGUF_CONFIG_MAPPING) and llama.cpp reads;
4. the tokenizer (vocabtransfer.model.gguf_vocab);
5. the tensors under GGUF's names (gguf.get_tensor_name_map), each transformed as llama.cpp's converter does and
   transformers' loader undoes: llama's query and key rows permuted for llama.cpp's rotary layout, GPT-2's Conv1D
   weights transposed, Gemma's RMSNorm weights stored as 1 + w; an untied LM head as `output.weight` (a tied one
   is left out, which is how both readers know it is tied). Matrices in `dtype` (f32, f16 or bf16), vectors
   (norms, biases) in f32, as llama.cpp's converter keeps them;
6. `round_trip`: the file read back by transformers, its tokenizer and model compared with the exported ones on
   lines of text (identical token ids, per-line log-likelihoods within a tolerance).
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from vocabtransfer.errors import VocabTransferError, brief
from vocabtransfer.model import gguf_vocab

log = logging.getLogger(__name__)

ARCHITECTURES = {"llama": "llama", "gemma3_text": "gemma3", "gpt2": "gpt2"}  # config.model_type -> GGUF's name
DTYPES = ("f32", "f16", "bf16")
GPT2_POSITIONS = 1024  # the n_positions transformers gives a GPT-2 read from GGUF (it maps the context to n_ctx)
# per-line log-likelihood agreement of the file read back with the exported model: f32 holds the same numbers;
# f16 and bf16 round every matrix (about 3 and 2 significant digits), so a line's sum moves by a few hundredths
# of a nat per token at most
TOLERANCE = {"f32": 1e-3, "f16": 0.02, "bf16": 0.1}  # nats per token, the largest |Δ| over lines / tokens scored


def obstacle(config, tokenizer) -> str | None:
    """Why this model and tokenizer cannot go into a GGUF file that transformers reads back (None: they can)."""
    model_type = getattr(config, "model_type", "?")
    if model_type not in ARCHITECTURES:
        kind = ", ".join(getattr(config, "architectures", None) or ["?"])
        return f"the model is {model_type} ({kind}); GGUF export writes the decoders {', '.join(sorted(ARCHITECTURES))}"
    if json.loads(tokenizer.backend_tokenizer.to_str())["model"].get("type") != "BPE":
        return "the target tokenizer is not BPE; GGUF export writes BPE tokenizers (byte-level or SentencePiece-style)"
    if model_type == "gpt2" and config.n_positions != GPT2_POSITIONS:
        return (
            f"transformers' GGUF loader keeps GPT-2's n_positions at {GPT2_POSITIONS} whatever the file says, and "
            f"this model has {config.n_positions} positions, so the file would not load back"
        )
    return None


def architecture(config) -> str:
    """The GGUF architecture of a model config, or one line saying what GGUF export writes."""
    name = ARCHITECTURES.get(getattr(config, "model_type", ""))
    if name is None:
        raise VocabTransferError(
            f"export.gguf: the model is {getattr(config, 'model_type', '?')} "
            f"({', '.join(getattr(config, 'architectures', None) or ['?'])}); GGUF export writes the decoders "
            f"{', '.join(sorted(ARCHITECTURES))}: set export.gguf: none for the Hugging Face folder alone"
        )
    return name


def source_dtype(config) -> str:
    """The GGUF dtype matching the weights' own dtype (`config.dtype`): f16, bf16, else f32."""
    dtype = str(getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or "float32")
    return {"torch.float16": "f16", "float16": "f16", "torch.bfloat16": "bf16", "bfloat16": "bf16"}.get(dtype, "f32")


def _hparams(writer, config, arch: str) -> None:
    """Step 3: the architecture's hyperparameter keys."""
    if arch == "gpt2":
        writer.add_context_length(config.n_positions)
        writer.add_embedding_length(config.n_embd)
        writer.add_feed_forward_length(config.n_inner or 4 * config.n_embd)
        writer.add_block_count(config.n_layer)
        writer.add_head_count(config.n_head)
        writer.add_layer_norm_eps(config.layer_norm_epsilon)
        return
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_vocab_size(config.vocab_size)
    rope = getattr(config, "rope_parameters", None) or {}
    if arch == "gemma3":
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
        writer.add_sliding_window(config.sliding_window)
        rope = rope.get("full_attention", rope)
    else:
        writer.add_rope_dimension_count(head_dim)
    theta = rope.get("rope_theta") if isinstance(rope, dict) else None
    writer.add_rope_freq_base(float(theta if theta is not None else getattr(config, "rope_theta", 10000.0)))


def _permute(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """llama.cpp's rotary layout of a query or key projection (convert_hf_to_gguf's LlamaModel.permute)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


GPT2_CONV1D = (".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight")


def _transform(name: str, w: torch.Tensor, config, arch: str) -> torch.Tensor:
    """Step 5's per-architecture change of one tensor (HF name `name`)."""
    if arch == "llama" and name.endswith("self_attn.q_proj.weight"):
        return _permute(w, config.num_attention_heads)
    if arch == "llama" and name.endswith("self_attn.k_proj.weight"):
        return _permute(w, config.num_key_value_heads)
    if arch == "gpt2" and name.endswith(GPT2_CONV1D):
        return w.T
    if arch == "gemma3" and name.endswith("norm.weight"):
        return w + 1.0
    return w


def _gguf_tensors(model, arch: str):
    """Step 5: (GGUF name, float32 tensor) of every weight of `model`."""
    import gguf  # gguf: GGUF export only

    config = model.config
    n_blocks = config.n_layer if arch == "gpt2" else config.num_hidden_layers
    model_arch = next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch)
    names = gguf.get_tensor_name_map(model_arch, n_blocks)
    tied = bool(getattr(config, "tie_word_embeddings", False))
    for name, tensor in model.state_dict().items():
        if tied and name.endswith("lm_head.weight"):
            continue
        base, _, suffix = name.rpartition(".")
        new = names.get_name(base)
        if new is None:
            raise VocabTransferError(
                f"export.gguf: the model's weight {name} has no GGUF name for {arch}; "
                "set export.gguf: none for the Hugging Face folder alone"
            )
        yield f"{new}.{suffix}", _transform(name, tensor.detach().to(torch.float32), config, arch)


def _array(name: str, w: torch.Tensor, dtype: str):
    """(numpy array, raw GGML type or None) of one tensor: vectors and norms in f32, matrices in `dtype`."""
    import gguf  # gguf: GGUF export only

    if w.ndim <= 1 or name.endswith("_norm.weight") or dtype == "f32":
        return w.contiguous().numpy().astype(np.float32), None
    if dtype == "f16":
        return w.contiguous().numpy().astype(np.float16), None
    return w.to(torch.bfloat16).contiguous().view(torch.int16).numpy(), gguf.GGMLQuantizationType.BF16


FILE_TYPES = {"f32": 0, "f16": 1, "bf16": 32}  # gguf.LlamaFileType ALL_F32, MOSTLY_F16, MOSTLY_BF16


def write(model, tokenizer, path: Path, *, dtype: str, general: dict) -> dict:
    """Steps 1-5: `model` (a causal LM) and `tokenizer` as one GGUF file at `path` (the caller makes it atomic);
    `general`: name, license, base_model (a hub id), languages, tags, each optional. Returns what stats record."""
    import gguf  # gguf: GGUF export only

    if dtype not in DTYPES:
        raise VocabTransferError(f"export.gguf: {dtype!r} is not a GGUF dtype here; use one of {', '.join(DTYPES)}")
    arch = architecture(model.config)
    n_rows = model.get_input_embeddings().weight.shape[0]
    v = gguf_vocab.vocab(tokenizer, n_rows)
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_type("model")
    writer.add_name(general.get("name") or "vocabtransfer export")
    if general.get("license"):
        writer.add_license(general["license"])
    if general.get("base_model"):
        writer.add_base_model_count(1)
        writer.add_base_model_name(0, general["base_model"])
        writer.add_base_model_repo_url(0, f"https://huggingface.co/{general['base_model']}")
    if general.get("languages"):
        writer.add_languages(list(general["languages"]))
    if general.get("tags"):
        writer.add_tags(list(general["tags"]))
    writer.add_file_type(FILE_TYPES[dtype])
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    _hparams(writer, model.config, arch)
    gguf_vocab.add_to(writer, v)
    n_tensors = 0
    for name, w in _gguf_tensors(model, arch):
        array, raw = _array(name, w, dtype)
        writer.add_tensor(name, array, raw_dtype=raw)
        n_tensors += 1
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return {
        "architecture": arch,
        "dtype": dtype,
        "tensors": n_tensors,
        "tokenizer_model": v.model,
        "tokenizer_pre": v.pre,
        "tokens": len(v.tokens),
        "bytes": Path(path).stat().st_size,
    }


def line_loglik(model, tokenizer, lines: list[str], max_tokens: int = 128, batch: int = 16) -> tuple[list, np.ndarray]:
    """(token ids of each line, each line's summed log-likelihood in nats, float64) under `model`, in float32:
    every token scored from its predecessors, lines cut at `max_tokens` tokens."""
    ids = [tokenizer(line)["input_ids"] for line in lines]
    out = np.zeros(len(lines))
    pad = 0
    with torch.no_grad():
        for start in range(0, len(lines), batch):
            chunk = [row[:max_tokens] for row in ids[start : start + batch]]
            width = max(len(row) for row in chunk)
            x = torch.tensor([row + [pad] * (width - len(row)) for row in chunk])
            mask = torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in chunk])
            logits = model(input_ids=x, attention_mask=mask).logits.float()
            logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, x[:, 1:, None])[..., 0]
            out[start : start + len(chunk)] = (logp * mask[:, 1:]).sum(-1).double().numpy()
    return ids, out


BOOKKEEPING = {"_name_or_path", "_model_name_or_path", "dtype", "torch_dtype", "quantization_config", "architectures"}


def _config_changes(ours, theirs) -> str:
    """The first config keys that the file read back sets otherwise, as `key: ours -> theirs`."""
    a, b = ours.to_dict(), theirs.to_dict()
    changed = [k for k in sorted(set(a) | set(b)) if k not in BOOKKEEPING and a.get(k) != b.get(k)]
    return ", ".join(f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in changed[:3]) or "none found in the config"


def round_trip(path: Path, model, tokenizer, lines: list[str], dtype: str) -> dict:
    """Step 6: the file read back by transformers against `model` and `tokenizer` on `lines`; one line naming
    the first difference when the token ids differ or a line's log-likelihood moves by more than TOLERANCE."""

    folder, name = str(Path(path).parent), Path(path).name
    try:
        back_tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        back = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).eval()
    except Exception as exc:  # transformers raises many kinds for a file it cannot map back
        raise VocabTransferError(
            f"export.gguf: {path}: transformers cannot read the written file back ({brief(exc)}); "
            "export without GGUF (export.gguf: none)"
        ) from exc
    model = model.eval()
    ids, ours = line_loglik(model, tokenizer, lines)
    back_ids, theirs = line_loglik(back, back_tok, lines)
    differ = [i for i, (a, b) in enumerate(zip(ids, back_ids)) if a != b]
    if differ:
        i = differ[0]
        raise VocabTransferError(
            f"export.gguf: {path}: transformers' GGUF tokenizer splits {len(differ)} of {len(lines)} valid lines "
            f"otherwise than the target tokenizer (first: line {i}, {lines[i][:40]!r}); export without GGUF "
            "(export.gguf: none) and report the tokenizer"
        )
    tokens = np.array([max(min(len(row), 128) - 1, 1) for row in ids], dtype=float)
    per_token = np.abs(ours - theirs) / tokens
    worst = float(per_token.max()) if len(lines) else 0.0
    if not math.isfinite(worst) or worst > TOLERANCE[dtype]:
        raise VocabTransferError(
            f"export.gguf: {path}: read back by transformers, the model scores the valid lines differently "
            f"(up to {worst:.3g} nats per token, more than {TOLERANCE[dtype]} for {dtype}); its config has "
            f"settings GGUF does not carry ({_config_changes(model.config, back.config)}): export without GGUF "
            "(export.gguf: none)"
        )
    return {
        "lines": len(lines),
        "identical_token_ids": len(lines) - len(differ),
        "max_abs_loglik_per_token": worst,
        "mean_abs_loglik_per_token": float(per_token.mean()) if len(lines) else 0.0,
        "tolerance": TOLERANCE[dtype],
    }
