"""GGUF out (vocabtransfer.model.gguf_export): the tests' tiny decoders, each with a target tokenizer of its family
trained on Swahili text as the tokenizer stage trains one (SentencePiece-style BPE with byte fallback for Llama and
Gemma, byte-level BPE for GPT-2), written as one GGUF file and read back by transformers alone
(`from_pretrained(dir, gguf_file=…)`): the same token ids on 1,000 held-out Swahili lines, and per-line
log-likelihoods equal in f32 (measured: 0.0) and within 1e-3 nats per token in f16 and bf16 (measured on these
random weights: 2e-5 and 7e-4). A model GGUF cannot carry is refused with one line, not written wrong.
(The export stage on the shared workflow run: test_workflow.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers import gpt2_seed, llama_seed, text_lines, tiny_bert, tiny_llama

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.model import gguf_export

LINES = 1000
HELD_OUT = 5000  # the lines checked start here: the tokenizers train on the first 2,000


@pytest.fixture(scope="module")
def lines() -> list[str]:
    return text_lines("sw", LINES, start=HELD_OUT)


def target_tokenizer(seed, n_lines: int = 2000, vocab_size: int = 600):
    from vocabtransfer.data.tokenizer import train_tokenizer

    return train_tokenizer(seed, [text_lines("sw", n_lines)], vocab_size=vocab_size)


def read_back(path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(path.parent), path.name
    return (
        AutoTokenizer.from_pretrained(folder, gguf_file=name),
        AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).eval(),
    )


def assert_same(model, tok, path, lines, per_token: float) -> None:
    """The file read back tokenises every line as `tok` does and scores it as `model` does (within `per_token`
    nats per scored token)."""
    back_tok, back = read_back(path)
    ids = [tok(line)["input_ids"] for line in lines]
    assert [back_tok(line)["input_ids"] for line in lines] == ids
    assert back_tok.decode(ids[0], skip_special_tokens=True) == tok.decode(ids[0], skip_special_tokens=True)
    _, ours = gguf_export.line_loglik(model, tok, lines)
    _, theirs = gguf_export.line_loglik(back, back_tok, lines)
    scored = np.array([max(min(len(row), 128) - 1, 1) for row in ids])  # line_loglik scores 128 tokens at most
    assert (np.abs(ours - theirs) / scored).max() <= per_token


@pytest.mark.parametrize("dtype, per_token", [("f32", 1e-6), ("f16", 1e-3)])
def test_a_llama_with_a_sentencepiece_bpe_target_reads_back_the_same(tmp_path, lines, one_thread, dtype, per_token):
    import gguf

    tok = target_tokenizer(llama_seed())
    # untied, grouped-query attention (4 query heads, 2 key/value heads): both of llama.cpp's query/key permutations
    model = tiny_llama(
        len(tok),
        num_attention_heads=4,
        max_position_embeddings=256,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=None,
    ).eval()
    path = tmp_path / f"llama-{dtype}.gguf"
    stats = gguf_export.write(
        model, tok, path, dtype=dtype, general={"name": "t", "license": "apache-2.0", "languages": ["sw"]}
    )
    assert stats["architecture"] == "llama" and stats["tokenizer_model"] == "llama" and stats["tokens"] == len(tok)
    reader = gguf.GGUFReader(str(path))

    def field(key: str):
        return reader.get_field(key).contents()

    assert field("general.architecture") == "llama" and field("general.license") == "apache-2.0"
    assert field("tokenizer.ggml.model") == "llama" and field("tokenizer.ggml.pre") == "default"
    assert field("tokenizer.ggml.add_bos_token") is True and field("tokenizer.ggml.add_space_prefix") is True
    types = dict(zip(field("tokenizer.ggml.tokens"), field("tokenizer.ggml.token_type")))
    assert types["<0x41>"] == gguf.TokenType.BYTE and types["<s>"] == gguf.TokenType.CONTROL
    assert types["<unk>"] == gguf.TokenType.UNKNOWN
    kinds = {t.name: gguf.GGMLQuantizationType(t.tensor_type).name for t in reader.tensors}
    assert kinds["output_norm.weight"] == "F32" and kinds["blk.0.attn_q.weight"] == dtype.upper()
    assert "output.weight" in kinds  # untied: the head is its own tensor
    assert_same(model, tok, path, lines, per_token)
    if dtype == "f32":  # the export's own check says the same
        check = gguf_export.round_trip(path, model, tok, lines[:200], dtype)
        assert check["identical_token_ids"] == check["lines"] == 200 and check["max_abs_loglik_per_token"] <= 1e-6


def test_a_gpt2_with_a_byte_level_target_reads_back_the_same(tmp_path, lines, one_thread):
    from transformers import GPT2Config, GPT2LMHeadModel

    tok = target_tokenizer(gpt2_seed())
    torch.manual_seed(0)
    model = GPT2LMHeadModel(  # tied; 1024 positions, the n_positions transformers reads a GGUF GPT-2 with
        GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=2, n_head=2, eos_token_id=tok.eos_token_id)
    ).eval()
    path = tmp_path / "gpt2.gguf"
    stats = gguf_export.write(model, tok, path, dtype="f32", general={"name": "t"})
    assert stats["tokenizer_model"] == "gpt2" and stats["tokenizer_pre"] == "gpt-2"
    assert_same(model, tok, path, lines, 1e-6)
    # a GPT-2 of other than 1024 positions would not load back: said before writing
    short = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=1, n_head=2, n_positions=256))
    assert "n_positions" in gguf_export.obstacle(short.config, tok)


def test_a_gemma3_with_a_target_of_gemmas_family_reads_back_the_same(tmp_path, lines, one_thread, gemma_tokenizer):
    """Gemma 3's conventions (the offline real source): RMSNorm weights stored as 1 + w, a target tokenizer trained
    from Gemma's own, bf16 matrices. A config GGUF does not carry (query_pre_attn_scalar) is caught on reading back."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    tok = target_tokenizer(gemma_tokenizer, n_lines=1000, vocab_size=7000)

    def gemma(**extra):
        torch.manual_seed(0)
        config = Gemma3TextConfig(
            vocab_size=len(tok),
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=16,
            intermediate_size=64,
            max_position_embeddings=256,
            sliding_window=16,
            bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
            **extra,
        )
        model = Gemma3ForCausalLM(config).eval()
        with torch.no_grad():  # norms away from their zero initialisation, so that 1 + w matters
            for name, p in model.named_parameters():
                if name.endswith("norm.weight"):
                    p.uniform_(-0.5, 0.5)
        return model

    model = gemma()
    path = tmp_path / "gemma.gguf"
    assert gguf_export.write(model, tok, path, dtype="bf16", general={"name": "t"})["architecture"] == "gemma3"
    assert_same(model, tok, path, lines[:200], 1e-3)
    odd = gemma(query_pre_attn_scalar=16)
    gguf_export.write(odd, tok, tmp_path / "odd.gguf", dtype="f32", general={"name": "t"})
    with pytest.raises(VocabTransferError, match="query_pre_attn_scalar: 16 -> 256") as err:
        gguf_export.round_trip(tmp_path / "odd.gguf", odd, tok, lines[:20], "f32")
    assert "\n" not in str(err.value) and "export.gguf: none" in str(err.value)


def test_an_encoder_is_refused_in_one_line(tmp_path):
    from helpers import wordpiece_tokenizer

    tok = wordpiece_tokenizer("sw")
    model = tiny_bert(len(tok))
    assert "GGUF export writes the decoders" in gguf_export.obstacle(model.config, tok)
    with pytest.raises(VocabTransferError, match=r"^export.gguf: the model is bert .*set export.gguf: none"):
        gguf_export.write(model, tok, tmp_path / "bert.gguf", dtype="f16", general={})
    assert not (tmp_path / "bert.gguf").exists()
