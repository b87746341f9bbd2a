"""A tiny causal LM written as a GGUF file with gguf.GGUFWriter (random weights, a small SentencePiece-style
vocabulary in its metadata, some tensors in Q8_0): the GGUF route of the source_model stage without a real
model (test_source_model.py, and the smoke run of benchmarks/gguf_materialise.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

LETTERS = list("abcdefghijklmnopqrstuvwxyz")
TOKENS = (
    ["<unk>", "<s>", "</s>", "\u2581"]
    + LETTERS
    + ["\u2581" + c for c in LETTERS]
    + ["th", "\u2581th", "he", "\u2581the"]
)


def write_tiny_gguf(
    path: Path,
    arch: str = "llama",
    hidden: int = 32,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    ffn: int = 64,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """A tiny causal LM as GGUF; returns the float32 tensors written (before any quantisation)."""
    import gguf  # the `test` extra installs it

    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("tiny")
    w.add_context_length(64)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(hidden // heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(len(TOKENS))
    w.add_tokenizer_model("llama")
    w.add_token_list(TOKENS)
    w.add_token_scores([0.0] * 3 + [-float(i) for i in range(len(TOKENS) - 3)])
    w.add_token_types([2, 3, 3] + [1] * (len(TOKENS) - 3))  # unknown, control, control, normal …
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    written = {}

    def tensor(name, shape, quantize=False):
        data = (rng.standard_normal(shape) * 0.02).astype(np.float32)
        written[name] = data
        if quantize:  # Q8_0 blocks: transformers dequantises them
            q = gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(name, data)

    hd = hidden // heads
    tensor("token_embd.weight", (len(TOKENS), hidden))
    for i in range(layers):
        tensor(f"blk.{i}.attn_norm.weight", (hidden,))
        tensor(f"blk.{i}.attn_q.weight", (heads * hd, hidden), True)
        tensor(f"blk.{i}.attn_k.weight", (kv_heads * hd, hidden), True)
        tensor(f"blk.{i}.attn_v.weight", (kv_heads * hd, hidden), True)
        tensor(f"blk.{i}.attn_output.weight", (hidden, heads * hd), True)
        tensor(f"blk.{i}.ffn_norm.weight", (hidden,))
        tensor(f"blk.{i}.ffn_gate.weight", (ffn, hidden), True)
        tensor(f"blk.{i}.ffn_up.weight", (ffn, hidden), True)
        tensor(f"blk.{i}.ffn_down.weight", (hidden, ffn), True)
    tensor("output_norm.weight", (hidden,))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return written
