"""Pretraining options for real scale on one process: the embeddings-only warm-up
(`pretrain.embeddings_only_steps`) and activation checkpointing (`pretrain.gradient_checkpointing`),
on a tiny Llama (dropout-free) and real Swahili text. Sharding (`pretrain.sharding: fsdp`) is in
test_pretrain_fsdp.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from helpers import bpe_tokenizer, pretrain_outputs, pretrain_project, run_pretrain, tiny_llama


@pytest.fixture(scope="module")
def sw_bpe():
    return bpe_tokenizer("sw", vocab_size=280)


EMBEDDINGS = ("model.embed_tokens.weight", "lm_head.weight")


def test_embeddings_only_steps_leave_the_body_bitwise_unchanged_then_train_it(tmp_path, monkeypatch, one_thread,
                                                                               sw_bpe):
    monkeypatch.chdir(tmp_path)
    model = tiny_llama(len(sw_bpe))
    init = {k: v.clone() for k, v in model.state_dict().items()}
    params = pretrain_project(tmp_path, model, sw_bpe, steps=5, embeddings_only_steps=3, save_every=3, eval_every=3,
                              log_every=1, warmup_steps=0, keep_checkpoints=True)
    run_pretrain(params)
    warm = load_file(tmp_path / "checkpoints/sw/pretrain/focus/standard/pseed1/checkpoint-3/model.safetensors")
    body = [k for k in init if k not in EMBEDDINGS]
    assert body and set(EMBEDDINGS) <= set(warm)
    for name in body:  # after the warm-up: the body as it was initialised, to the bit
        assert torch.equal(warm[name], init[name]), name
    for name in EMBEDDINGS:  # the embeddings and the head trained
        assert not torch.equal(warm[name], init[name]), name
    from transformers import AutoModelForCausalLM

    final = AutoModelForCausalLM.from_pretrained(str(pretrain_outputs(tmp_path)[0] / "model")).state_dict()
    changed = [k for k in body if not torch.equal(final[k], init[k])]
    assert sorted(changed) == sorted(body)  # then the whole model trains


def test_gradient_checkpointing_trains_to_the_same_losses(tmp_path, monkeypatch, one_thread, sw_bpe):
    from transformers import modeling_utils

    calls = []
    real = modeling_utils.checkpoint  # what the model's own gradient checkpointing calls
    monkeypatch.setattr(modeling_utils, "checkpoint", lambda *a, **k: calls.append(1) or real(*a, **k))
    runs = {}
    for flag in (False, True):
        root = tmp_path / str(flag)
        root.mkdir()
        monkeypatch.chdir(root)
        params = pretrain_project(root, tiny_llama(len(sw_bpe)), sw_bpe, steps=6, eval_every=3, save_every=6,
                                  log_every=1, gradient_checkpointing=flag)
        run_pretrain(params)
        runs[flag] = pretrain_outputs(root)
        assert bool(calls) == flag  # the layers ran through torch's checkpoint only when asked
    (out_a, a, _), (out_b, b, _) = runs[False], runs[True]
    for column in ("train_loss", "valid_loss"):
        np.testing.assert_allclose(a.column(column).to_numpy(), b.column(column).to_numpy(), rtol=0, atol=1e-5,
                                   err_msg=column)
    wa, wb = load_file(out_a / "model/model.safetensors"), load_file(out_b / "model/model.safetensors")
    for name in wa:
        torch.testing.assert_close(wa[name], wb[name], rtol=0, atol=1e-5, msg=name)


def test_the_overlays_of_docs_scale_are_valid_params():
    """docs/scale.md's example overlays (Llama 3.2 1B with DDP, Llama 3.1 8B with FSDP), merged into
    params.yaml as `--configfile` merges them, pass the schema."""
    import re

    import yaml

    from vocabtransfer.pipeline.config import merge_overlay, read_yaml, validate_params

    from conftest import REPO

    blocks = re.findall(r"^```yaml\n(.*?)^```", (REPO / "docs/scale.md").read_text(encoding="utf-8"), re.M | re.S)
    assert len(blocks) == 2
    for block, sharding in zip(blocks, ("none", "fsdp")):
        merged = merge_overlay(read_yaml(REPO / "params.yaml"), yaml.safe_load(block))
        checked = validate_params(merged, "docs/scale.md")
        assert checked["pretrain"]["sharding"] == sharding and checked["pretrain"]["processes"] in (4, 8)
