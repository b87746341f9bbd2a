"""Stage `source_head`: train only the missing LM head; everything else stays bit for bit."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from vocabtransfer.model import modeling
from vocabtransfer.model.hub import resolve_model_path
from vocabtransfer.init import source_head
from vocabtransfer.errors import VocabTransferError

from helpers import MINILM, bpe_tokenizer, make_ctx, save_dir, text_lines, tiny_bert, wordpiece_tokenizer


def head_ctx(tmp_path, source_model: str, n_lines=300, **overrides):
    tmp_path.mkdir(parents=True, exist_ok=True)
    text = tmp_path / "en.txt"
    text.write_text("\n".join(text_lines("en", n_lines)) + "\n", encoding="utf-8")
    opts = {
        "text": str(text),
        "steps": 30,
        "learning_rate": 3e-3,
        "batch_size": 8,
        "seq_len": 64,
        "eval_lines": 40,
        "train_blocks": 10_000,
        "eval_every": 10,
        **overrides,
    }
    outputs = {"model": tmp_path / "source" / "model", "stats": tmp_path / "source" / "head_stats.json"}
    # the stage reads the source from the source_model stage's directory: here the model's own directory
    inputs = {"source": resolve_model_path(source_model)}
    return make_ctx(
        "vocabtransfer.init.source_head:run",
        {},
        inputs,
        outputs,
        {"seed": 5, "source_model": source_model, "source_head": opts},
    ), outputs


def test_minilm_head_is_trained_and_nothing_else_changes(tmp_path):
    ctx, out = head_ctx(tmp_path, MINILM)
    source_head.run(ctx)
    stats = json.loads(out["stats"].read_text())
    assert stats["skipped"] is False and stats["kind"] == "masked"
    assert set(stats["trained_parameters"]) == {
        "cls.predictions.bias",
        "cls.predictions.transform.dense.weight",
        "cls.predictions.transform.dense.bias",
        "cls.predictions.transform.LayerNorm.weight",
        "cls.predictions.transform.LayerNorm.bias",
    }
    assert stats["loss_before"] > 10.0  # random head: about ln(30522)
    assert stats["loss_unigram_bias"] < stats["loss_before"] - 0.5  # the unigram bias alone helps
    assert stats["loss_after"] < stats["loss_before"] - 2.0
    assert stats["heldout_lines"] == 40 and stats["train_lines"] == 260
    curve = stats["learning_curve"]
    assert [c["step"] for c in curve] == [0, 10, 20, 30]
    assert (
        curve[0]["heldout_loss"] == stats["loss_unigram_bias"] and curve[-1]["heldout_loss"] < curve[0]["heldout_loss"]
    )
    # the cached-feature loss and the saved model's own loss agree (same masks)
    assert curve[-1]["heldout_loss"] == pytest.approx(stats["loss_after"], rel=1e-4)
    assert stats["reference_perplexity"] == pytest.approx(torch.tensor(stats["loss_after"]).exp().item(), rel=1e-5)

    original = load_file(str(resolve_model_path(MINILM) / "model.safetensors"))
    saved = load_file(str(out["model"] / "model.safetensors"))
    compared = 0
    for key, value in original.items():
        if key.startswith("pooler.") or key.endswith("position_ids"):
            continue  # BertForMaskedLM has no pooler; position_ids is a buffer, not a weight
        assert torch.equal(saved[f"bert.{key}"], value), key
        compared += 1
    assert compared == 101
    assert not torch.equal(
        saved["cls.predictions.transform.dense.weight"],
        torch.zeros_like(saved["cls.predictions.transform.dense.weight"]),
    )
    model, kind, info = modeling.load_source_model(out["model"], output_loading_info=True)
    assert kind == "masked" and not info.head_missing  # complete now
    assert model.cls.predictions.decoder.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()


@pytest.mark.slow  # trains MiniLM's LM head twice
def test_same_seed_same_head(tmp_path):
    first, out1 = head_ctx(tmp_path / "a", MINILM, n_lines=120, steps=4, eval_every=2, eval_lines=20)
    second, out2 = head_ctx(tmp_path / "b", MINILM, n_lines=120, steps=4, eval_every=2, eval_lines=20)
    source_head.run(first)
    source_head.run(second)
    assert (out1["model"] / "model.safetensors").read_bytes() == (out2["model"] / "model.safetensors").read_bytes()


def test_complete_checkpoint_is_saved_unchanged(tmp_path):
    tok = wordpiece_tokenizer("en")
    src = save_dir(tiny_bert(len(tok)), tok, tmp_path / "tiny")
    ctx, out = head_ctx(tmp_path, str(src))
    source_head.run(ctx)
    stats = json.loads(out["stats"].read_text())
    assert stats["skipped"] is True and stats["trained_parameters"] == []
    assert stats["loss_before"] == stats["loss_after"] and stats["heldout_tokens_predicted"] > 0
    before, after = load_file(str(src / "model.safetensors")), load_file(str(out["model"] / "model.safetensors"))
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)


def test_missing_untied_lm_head_of_a_decoder_is_trained(tmp_path):
    from transformers import LlamaConfig, LlamaModel

    tok = bpe_tokenizer("en")
    torch.manual_seed(0)
    body = LlamaModel(
        LlamaConfig(
            vocab_size=len(tok),
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            intermediate_size=64,
            tie_word_embeddings=False,
        )
    )
    src = save_dir(body, tok, tmp_path / "llama_body")  # a checkpoint without lm_head
    ctx, out = head_ctx(tmp_path, str(src), steps=20, learning_rate=1e-2)
    source_head.run(ctx)
    stats = json.loads(out["stats"].read_text())
    assert stats["kind"] == "causal" and stats["trained_parameters"] == ["lm_head.weight"]
    assert stats["loss_after"] < stats["loss_before"] - 0.5
    before, after = load_file(str(src / "model.safetensors")), load_file(str(out["model"] / "model.safetensors"))
    assert all(torch.equal(v, after[k if k.startswith("model.") else f"model.{k}"]) for k, v in before.items())


def test_too_few_lines(tmp_path):
    ctx, _ = head_ctx(tmp_path, MINILM, n_lines=30, eval_lines=30)
    with pytest.raises(
        VocabTransferError, match=r"en.txt: 30 non-empty lines, but source_head.eval_lines holds out 30"
    ):
        source_head.run(ctx)
