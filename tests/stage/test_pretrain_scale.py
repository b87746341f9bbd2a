"""Pretraining options for real scale: the embeddings-only warm-up
(`pretrain.embeddings_only_steps`) and activation checkpointing (`pretrain.gradient_checkpointing`),
on a tiny Llama (dropout-free) and real Swahili text, in one process (the warm-up also in two DDP
processes). Sharding (`pretrain.sharding: fsdp`) is in
test_pretrain_fsdp.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from helpers import bpe_tokenizer, finish, launch, pretrain_outputs, pretrain_project, run_pretrain, tiny_llama


@pytest.fixture(scope="module")
def sw_bpe():
    return bpe_tokenizer("sw", vocab_size=280)


EMBEDDINGS = ("model.embed_tokens.weight", "lm_head.weight")


def assert_embeddings_first(root, init: dict) -> None:
    """checkpoint-3 (after the 3 warm-up steps): the body bitwise as initialised, the embeddings and head
    trained; the final model: every body weight trained too."""
    warm = load_file(root / "checkpoints/sw/pretrain/focus/standard/pseed1/checkpoint-3/model.safetensors")
    body = [k for k in init if k not in EMBEDDINGS]
    assert body and set(EMBEDDINGS) <= set(warm)
    for name in body:
        assert torch.equal(warm[name], init[name]), name
    for name in EMBEDDINGS:
        assert not torch.equal(warm[name], init[name]), name
    final = load_file(pretrain_outputs(root)[0] / "model/model.safetensors")
    assert sorted(k for k in body if not torch.equal(final[k], init[k])) == sorted(body)


WARM_UP = {
    "steps": 5,
    "embeddings_only_steps": 3,
    "save_every": 3,
    "eval_every": 3,
    "log_every": 1,
    "warmup_steps": 0,
    "keep_checkpoints": True,
}


def test_embeddings_only_steps_leave_the_body_bitwise_unchanged_then_train_it(
    tmp_path, monkeypatch, one_thread, sw_bpe
):
    monkeypatch.chdir(tmp_path)
    model = tiny_llama(len(sw_bpe))
    init = {k: v.clone() for k, v in model.state_dict().items()}
    run_pretrain(pretrain_project(tmp_path, model, sw_bpe, **WARM_UP))
    assert_embeddings_first(tmp_path, init)


@pytest.mark.slow
def test_embeddings_only_steps_under_ddp_with_gradient_checkpointing(tmp_path, sw_bpe):
    """Two DDP processes: the frozen body's parameters are unused during the warm-up (DDP is told so,
    also under activation checkpointing, where the Trainer would not)."""
    model = tiny_llama(len(sw_bpe))
    init = {k: v.clone() for k, v in model.state_dict().items()}
    pretrain_project(tmp_path, model, sw_bpe, batch_size=4, processes=2, gradient_checkpointing=True, **WARM_UP)
    finish(launch(tmp_path, 2, objective="standard"))
    assert_embeddings_first(tmp_path, init)


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
        params = pretrain_project(
            root,
            tiny_llama(len(sw_bpe)),
            sw_bpe,
            steps=6,
            eval_every=3,
            save_every=6,
            log_every=1,
            gradient_checkpointing=flag,
        )
        run_pretrain(params)
        runs[flag] = pretrain_outputs(root)
        assert bool(calls) == flag  # the layers ran through torch's checkpoint only when asked
        assert runs[flag][2]["gradient_checkpointing"] is flag
    (out_a, a, _), (out_b, b, _) = runs[False], runs[True]
    for column in ("train_loss", "valid_loss"):
        np.testing.assert_allclose(
            a.column(column).to_numpy(), b.column(column).to_numpy(), rtol=0, atol=1e-5, err_msg=column
        )
    wa, wb = load_file(out_a / "model/model.safetensors"), load_file(out_b / "model/model.safetensors")
    for name in wa:
        torch.testing.assert_close(wa[name], wb[name], rtol=0, atol=1e-5, msg=name)


def test_the_overlays_of_docs_scale_are_valid_params():
    """docs/scale.md's example overlays (Llama 3.2 1B with DDP, Llama 3.1 8B with FSDP), merged into
    params.yaml as `--configfile` merges them, pass the schema."""
    import re

    import yaml

    from vocabtransfer.app.params import validate_params

    from vocabtransfer.pipeline.config import merge_overlay, read_yaml

    from conftest import REPO

    blocks = re.findall(r"^```yaml\n(.*?)^```", (REPO / "docs/scale.md").read_text(encoding="utf-8"), re.M | re.S)
    assert len(blocks) == 2
    for block, sharding in zip(blocks, ("none", "fsdp")):
        merged = merge_overlay(read_yaml(REPO / "params.yaml"), yaml.safe_load(block))
        checked = validate_params(merged, "docs/scale.md")
        assert checked["pretrain"]["sharding"] == sharding and checked["pretrain"]["processes"] in (4, 8)
