"""`pretrain.sharding: fsdp`: torch FSDP2 over two CPU processes (gloo), launched as the Snakemake rule
launches a multi-process pretrain job, on a tiny Llama (untied head) and a tiny Gemma 3 (tied
embeddings, scaled embeddings) built from configs with dropout off, and real Swahili text.

1. For each objective (standard, selfish, distill), two sharded processes with batch b each equal one
   unsharded process with batch 2b, step by step: train losses over 5 steps, valid losses and final
   weights to TOLERANCE (1e-5); the saved model is an ordinary Hugging Face directory that
   `AutoModelForCausalLM` loads alone.
   With activation checkpointing as well (`pretrain.gradient_checkpointing`), the same.
2. A sharded run killed (SIGKILL of the process group) after a checkpoint resumes from its torch
   distributed checkpoint to the final weights of the uninterrupted sharded run.
"""

from __future__ import annotations


import numpy as np
import pytest
import torch

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.train import sharding
from vocabtransfer.train.checkpoints import complete_checkpoints

from helpers import (
    assert_same_run,
    finish,
    gpt2_seed,
    killed as killed_run,
    launch,
    llama_seed,
    pretrain_outputs,
    pretrain_project,
    run_pretrain,
    save_dir,
    text_lines,
)

pytestmark = pytest.mark.slow
STEPS = {
    "steps": 5,
    "eval_every": 5,
    "save_every": 5,
    "log_every": 1,
    "seq_len": 32,
    "learning_rate": 0.003,
    "warmup_steps": 1,
    "eval_lines": 20,
    "eval_batch_size": 8,
    "objectives": ["standard", "selfish", "distill"],
    "selfish": {"margin": 0.5},
    "precision": "fp32",
}  # fp32: the equivalences are exact in fp32


@pytest.fixture(scope="module")
def tokenizers():
    from vocabtransfer.data.tokenizer import train_tokenizer

    teacher = train_tokenizer(llama_seed(), [text_lines("en", 1000)], vocab_size=300)
    student = train_tokenizer(gpt2_seed(), [text_lines("sw", 1000)], vocab_size=300)
    return teacher, student


def tiny(arch: str, tok, seed: int = 0):
    """A tiny Llama (untied head) or Gemma 3 (tied, scaled embeddings), dropout-free."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    ids = {"bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id}
    if arch == "llama":
        return LlamaForCausalLM(
            LlamaConfig(
                vocab_size=len(tok),
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=2,
                num_key_value_heads=2,
                intermediate_size=64,
                max_position_embeddings=512,
                tie_word_embeddings=False,
                **ids,
            )
        )
    return Gemma3ForCausalLM(
        Gemma3TextConfig(
            vocab_size=len(tok),
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=16,
            intermediate_size=64,
            max_position_embeddings=512,
            sliding_window=16,
            tie_word_embeddings=True,
            **ids,
        )
    )


def project(root, tokenizers, arch: str, **pretrain):
    teacher_tok, student_tok = tokenizers
    save_dir(tiny("llama", teacher_tok, seed=1), teacher_tok, root / "results/source/model")
    return pretrain_project(root, tiny(arch, student_tok), student_tok, **{**STEPS, **pretrain})


def final_weights(root, objective: str) -> dict:
    from transformers import AutoModelForCausalLM  # the saved model loads with transformers alone

    out = pretrain_outputs(root, objective=objective)[0] / "model"
    return AutoModelForCausalLM.from_pretrained(str(out)).state_dict()


def assert_same(a, b, objective: str, columns=("train_loss", "valid_loss")) -> None:
    assert_same_run(a, b, objective, final_weights(a, objective), final_weights(b, objective), columns)


@pytest.mark.parametrize("objective", ["standard", "selfish", "distill"])
@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_fsdp_two_processes_equal_one_process_with_twice_the_batch(
    arch, objective, tokenizers, tmp_path, monkeypatch, one_thread
):
    sharded, single = tmp_path / "fsdp", tmp_path / "one"
    # distill: the teacher's chunk log-likelihoods cached (Llama), or the teacher beside the sharded student (Gemma 3)
    teacher = {"distill": {"teacher": "cached" if arch == "llama" else "on_the_fly"}}
    project(sharded, tokenizers, arch, batch_size=4, processes=2, sharding="fsdp", **teacher)
    proc = launch(sharded, 2, objective=objective)
    params = project(single, tokenizers, arch, batch_size=8, **teacher)
    monkeypatch.chdir(single)
    run_pretrain(params, objective=objective)  # beside the two processes: the machine has two cores
    log = finish(proc)
    assert "fsdp: 2 layer units + the root (embeddings, head) sharded over 2 processes" in log
    stats = pretrain_outputs(sharded, objective=objective)[2]
    assert (stats["processes"], stats["sharding"]) == (2, "fsdp")
    rows = pretrain_outputs(sharded, objective=objective)[1].to_pylist()
    assert [r["step"] for r in rows if not np.isnan(r["train_loss"])] == [1, 2, 3, 4, 5]
    assert_same(sharded, single, objective)


def test_fsdp_with_gradient_checkpointing_equals_one_process(tokenizers, tmp_path, monkeypatch, one_thread):
    """The 8 B set-up of docs/scale.md: FSDP and the model's own activation checkpointing together."""
    sharded, single = tmp_path / "fsdp", tmp_path / "one"
    project(sharded, tokenizers, "llama", batch_size=4, processes=2, sharding="fsdp", gradient_checkpointing=True)
    proc = launch(sharded, 2, objective="standard")
    params = project(single, tokenizers, "llama", batch_size=8)
    monkeypatch.chdir(single)
    run_pretrain(params, objective="standard")
    finish(proc)
    stats = pretrain_outputs(sharded, objective="standard")[2]
    assert (stats["sharding"], stats["gradient_checkpointing"]) == ("fsdp", True)
    assert pretrain_outputs(single, objective="standard")[2]["gradient_checkpointing"] is False
    assert_same(sharded, single, "standard")


def test_fsdp_killed_after_a_checkpoint_resumes_to_the_uninterrupted_weights(tokenizers, tmp_path):
    steps = {"steps": 10, "save_every": 2, "eval_every": 10, "log_every": 2}
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    project(whole, tokenizers, "gemma3", batch_size=4, processes=2, sharding="fsdp", **steps)
    finish(launch(whole, 2, objective="standard"))
    project(killed, tokenizers, "gemma3", batch_size=4, processes=2, sharding="fsdp", keep_checkpoints=True, **steps)
    killed_run(launch(killed, 2, objective="standard", kill_after=4))
    ckpt = killed / "checkpoints/sw/pretrain/focus/standard/pseed1"
    killed_at = max(s for s, _ in complete_checkpoints(ckpt))
    assert killed_at == 4 and (ckpt / f"checkpoint-{killed_at}" / sharding.SHARDED_DIR).is_dir()
    assert not (killed / "results/sw/pretrain/focus/standard").exists()
    finish(launch(killed, 2, objective="standard"))
    stats = pretrain_outputs(killed, objective="standard")[2]
    assert stats["resumed_from_step"] is not None and stats["resumed_from_step"] >= killed_at
    assert_same(whole, killed, "standard", columns=("train_loss", "valid_loss", "learning_rate"))


def test_fsdp_refuses_what_it_does_not_combine_with():
    with pytest.raises(VocabTransferError, match=r"^pretrain.sharding: fsdp .* pretrain.processes, which is 1"):
        sharding.check_options("fsdp", 1, embeddings_only_steps=0, factorized=False)
    with pytest.raises(VocabTransferError, match=r"^pretrain.embeddings_only_steps: not available"):
        sharding.check_options("fsdp", 2, embeddings_only_steps=3, factorized=False)
    with pytest.raises(VocabTransferError, match=r"^pretrain.factorized: not available"):
        sharding.check_options("fsdp", 2, embeddings_only_steps=0, factorized=True)
    sharding.check_options("none", 1, embeddings_only_steps=3, factorized=True)
