"""Stage `pretrain` with the `distill` objective, end to end on tiny models built from configs with random
weights: a Llama-style source (SentencePiece-style BPE with byte fallback, untied head) is the teacher in
results/source/model, a GPT-2-style student with a byte-level BPE target tokenizer trained on Swahili is the
initialised model; real Swahili text. Also: resume from a checkpoint, and the one-line refusals."""

from __future__ import annotations

import math
import shutil

import numpy as np
import pytest
import torch

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.plan.stages import STAGES
from vocabtransfer.train.checkpoints import complete_checkpoints
from vocabtransfer.plan.params_root import Params

from helpers import (
    TOLERANCE,
    finish,
    gpt2_seed,
    launch,
    llama_seed,
    pretrain_outputs,
    pretrain_project,
    run_pretrain,
    save_dir,
    text_lines,
    tiny_bert,
    tiny_gpt2,
    tiny_model,
    wordpiece_tokenizer,
)

STEPS = {
    "steps": 8,
    "eval_every": 4,
    "save_every": 4,
    "log_every": 2,
    "batch_size": 4,
    "seq_len": 32,
    "learning_rate": 0.01,
    "warmup_steps": 1,
    "eval_lines": 20,
    "eval_batch_size": 8,
    "precision": "fp32",
}  # fp32: the equivalences below are exact in fp32 (bf16: tests/stage/test_precision.py)


@pytest.fixture(scope="module")
def tokenizers():
    from vocabtransfer.data.tokenizer import train_tokenizer

    teacher = train_tokenizer(llama_seed(), [text_lines("en", 2000)], vocab_size=400)
    student = train_tokenizer(gpt2_seed(), [text_lines("sw", 2000)], vocab_size=400)
    return teacher, student


def tiny_llama(tok):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(1)
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
            bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id,
        )
    )


def distill_project(root, tokenizers, **pretrain):
    teacher_tok, student_tok = tokenizers
    save_dir(tiny_llama(teacher_tok), teacher_tok, root / "results/source/model")
    params = pretrain_project(
        root, tiny_gpt2(len(student_tok)), student_tok, objectives=["standard", "distill"], **{**STEPS, **pretrain}
    )
    return params


def test_distill_trains_and_resumes(tmp_path, monkeypatch, one_thread, tokenizers):
    monkeypatch.chdir(tmp_path)
    params = distill_project(
        tmp_path, tokenizers, distill={"alpha": 0.7, "temperature": 2.0, "chunks": "exact"}, keep_checkpoints=True
    )
    run_pretrain(params, objective="distill")
    out, metrics, stats = pretrain_outputs(tmp_path, objective="distill")
    rows = metrics.to_pylist()
    valid = [r["valid_loss"] for r in rows if not math.isnan(r["valid_loss"])]
    assert len(valid) == 3 and valid[-1] < valid[0] - 0.1, valid
    assert stats["objective"] == "distill" and stats["distill"]["alpha"] == 0.7
    assert stats["distill"]["temperature"] == 2.0 and stats["distill"]["train_chunks"] > 1000
    assert all(math.isfinite(r["train_loss"]) for r in rows if r["step"] in (2, 4, 6, 8))
    # each term's gradient norm on every logged step, both moving the model, neither the whole step's
    logged = [r for r in rows if r["step"] in (2, 4, 6, 8)]
    assert all(r["grad_norm_distill"] > 0 and r["grad_norm_lm"] > 0 and r["grad_norm_total"] > 0 for r in logged)
    assert stats["distill"]["chunks"] == "exact" and stats["distill"]["visited_chunks"] > 100
    # the saved model is the student alone (the teacher is not a submodule)
    from transformers import AutoModelForCausalLM

    loaded = AutoModelForCausalLM.from_pretrained(str(out / "model"))
    assert loaded.get_input_embeddings().weight.shape[0] == len(tokenizers[1])
    # resume: drop the output and the last checkpoint, run again from step 4: the same metrics
    ckpt = tmp_path / "checkpoints/sw/pretrain/focus/distill/pseed1"
    assert sorted(s for s, _ in complete_checkpoints(ckpt)) == [4, 8]
    shutil.rmtree(out)
    shutil.rmtree(ckpt / "checkpoint-8")
    run_pretrain(params, objective="distill")
    _, resumed, stats2 = pretrain_outputs(tmp_path, objective="distill")
    assert stats2["resumed_from_step"] == 4
    for column in ("step", "tokens_seen", "train_loss", "valid_loss", "learning_rate"):
        np.testing.assert_allclose(
            resumed.column(column).to_numpy(), metrics.column(column).to_numpy(), rtol=0, atol=1e-5, err_msg=column
        )
    # another teacher is not resumed from these checkpoints
    shutil.rmtree(tmp_path / "results/sw/pretrain")
    save_dir(_other(tokenizers[0]), tokenizers[0], tmp_path / "results/source/model")
    with pytest.raises(VocabTransferError, match="input:source_model_sha256"):
        run_pretrain(params, objective="distill")


def _other(tok):
    model = tiny_llama(tok)
    with torch.no_grad():
        model.lm_head.weight.mul_(2)
    return model


def test_cached_teacher_equals_the_teacher_on_the_fly(tmp_path, monkeypatch, one_thread, tokenizers):
    """`pretrain.distill.teacher: cached` (its chunk log-likelihoods computed once per visited block before
    training) gives the run `on_the_fly` gives (the teacher beside the student at every step)."""
    runs = {}
    for mode in ("cached", "on_the_fly"):
        root = tmp_path / mode
        monkeypatch.chdir(root.parent)
        params = distill_project(root, tokenizers, distill={"alpha": 1.0, "teacher": mode}, steps=4, eval_every=2)
        monkeypatch.chdir(root)
        run_pretrain(params, objective="distill")
        runs[mode] = pretrain_outputs(root, objective="distill")
    (_, cached, s1), (_, fly, s2) = runs["cached"], runs["on_the_fly"]
    assert s1["distill"]["teacher_mode"] == "cached" and s1["distill"]["teacher_cache_seconds"] > 0
    assert s2["distill"]["teacher_mode"] == "on_the_fly" and s2["distill"]["teacher_cache_seconds"] is None
    for r in cached.to_pylist():  # alpha = 1: the chunk term is the whole loss
        if r["step"] == 2:
            assert r["grad_norm_distill"] == pytest.approx(r["grad_norm_total"], rel=1e-4) and r["grad_norm_lm"] > 0
    losses = cached.column("train_loss").to_numpy()
    assert np.isfinite(losses[[1, 2]]).all() and (losses[[1, 2]] > 0).all()  # alpha = 1: the chunk loss alone
    for column in ("train_loss", "valid_loss"):
        np.testing.assert_allclose(
            cached.column(column).to_numpy(), fly.column(column).to_numpy(), rtol=1e-4, atol=1e-6, err_msg=column
        )


def test_distill_with_alpha_zero_is_the_standard_objective(tmp_path, monkeypatch, one_thread, tokenizers):
    """alpha = 0: the teacher is read but weighs nothing; the run equals the standard one step for step."""
    monkeypatch.chdir(tmp_path)
    params = distill_project(tmp_path, tokenizers, distill={"alpha": 0.0}, steps=4, eval_every=2)
    run_pretrain(params, objective="distill")
    run_pretrain(params, objective="standard")
    _, dist, _ = pretrain_outputs(tmp_path, objective="distill")
    _, std, _ = pretrain_outputs(tmp_path, objective="standard")
    for column in ("train_loss", "valid_loss"):
        np.testing.assert_allclose(
            dist.column(column).to_numpy(), std.column(column).to_numpy(), rtol=1e-5, atol=1e-6, err_msg=column
        )
    # alpha = 0: the cross-entropy term is the whole loss, so its gradient norm is the step's (one micro-batch)
    logged = [r for r in dist.to_pylist() if r["step"] in (2, 4)]
    assert len(logged) == 2 and all(r["grad_norm_distill"] > 0 for r in logged)
    for r in logged:
        assert r["grad_norm_lm"] == pytest.approx(r["grad_norm_total"], rel=1e-4)
    assert "grad_norm_lm" not in std.column_names  # standard's metrics keep their columns


def test_alm_is_distill_at_alpha_one_whatever_pretrain_distill_alpha_says(
    tmp_path, monkeypatch, one_thread, tokenizers
):
    """`alm` (distill's chunk term alone): with pretrain.distill.alpha = 0.3 it trains as distill does at
    alpha = 1, step for step, reads the teacher and pretrain.distill's options, and says alpha 1 in its stats."""
    runs = {}
    for objective, alpha in (("alm", 0.3), ("distill", 1.0)):
        root = tmp_path / objective
        root.mkdir()
        monkeypatch.chdir(root)
        teacher_tok, student_tok = tokenizers
        save_dir(tiny_llama(teacher_tok), teacher_tok, root / "results/source/model")
        params = pretrain_project(
            root,
            tiny_gpt2(len(student_tok)),
            student_tok,
            objectives=["standard", objective],
            **{**STEPS, "steps": 4, "eval_every": 2, "distill": {"alpha": alpha}},
        )
        run_pretrain(params, objective=objective)
        runs[objective] = pretrain_outputs(root, objective=objective)
    (_, alm, alm_stats), (_, dist, _) = runs["alm"], runs["distill"]
    assert alm_stats["objective"] == "alm" and alm_stats["distill"]["alpha"] == 1.0
    for column in ("train_loss", "valid_loss", "grad_norm_distill"):
        np.testing.assert_allclose(
            alm.column(column).to_numpy(), dist.column(column).to_numpy(), rtol=1e-5, atol=1e-6, err_msg=column
        )
    assert "pretrain.distill.temperature" in STAGES["pretrain"].leaves(Params(params), {"objective": "alm"})

    assert "source" in STAGES["pretrain"].input_templates(
        Params(params), {"lang": "sw", "method": "focus", "pseed": "1", "objective": "alm"}
    )


def test_distill_refusals_in_one_line(tmp_path, monkeypatch, one_thread):
    from vocabtransfer.app.params import validate_params

    monkeypatch.chdir(tmp_path)
    # a masked-LM source: no sequence likelihood to match
    wp = wordpiece_tokenizer("sw", vocab_size=250)
    save_dir(tiny_bert(len(wp)), wp, tmp_path / "results/source/model")
    params = pretrain_project(tmp_path, tiny_bert(len(wp)), wp, objectives=["distill"], **STEPS)
    with pytest.raises(VocabTransferError) as err:
        run_pretrain(params, objective="distill")
    message = str(err.value)
    assert "\n" not in message and message.startswith("pretrain.objectives: distill needs a causal source")
    assert "masked LM" in message and "no sequence likelihood" in message
    # alpha outside [0, 1] and temperature <= 0: the schema names the key
    base = {
        "languages": ["sw"],
        "source_model": "unused",
        "corpus": {"sources": {"sw": {"path": "unused.txt"}}},
        "init": {"methods": ["focus"]},
    }
    for bad, key in (({"alpha": 1.5}, "alpha"), ({"temperature": 0}, "temperature"), ({"alpha": -0.1}, "alpha")):
        with pytest.raises(VocabTransferError, match=rf"pretrain\.distill\.{key}"):
            validate_params({**base, "pretrain": {"objectives": ["distill"], "distill": bad}})


def test_distill_leaves_only_for_the_distill_objective():
    from vocabtransfer.app.params import validate_params

    params = validate_params(
        {
            "languages": ["sw"],
            "source_model": "unused",
            "corpus": {"sources": {"sw": {"path": "unused.txt"}}},
            "init": {"methods": ["focus"]},
            "pretrain": {"methods": ["focus"], "objectives": ["standard", "distill"]},
        }
    )
    assert params["pretrain"]["distill"] == {
        "temperature": 100.0,
        "alpha": 0.5,
        "teacher": "cached",
        "chunks": "unbiased",
        "bias_threshold": 1e-4,
    }  # tokenkit's
    distill = STAGES["pretrain"].leaves(Params(params), {"objective": "distill"})
    standard = STAGES["pretrain"].leaves(Params(params), {"objective": "standard"})
    assert {f"pretrain.distill.{k}" for k in ("alpha", "temperature", "chunks", "bias_threshold")} <= set(distill)
    assert not any(leaf.startswith("pretrain.distill.") for leaf in standard)

    wc = {"lang": "sw", "method": "focus", "pseed": "1"}
    assert "source" in STAGES["pretrain"].input_templates(Params(params), {**wc, "objective": "distill"})
    assert "source" not in STAGES["pretrain"].input_templates(Params(params), {**wc, "objective": "standard"})


@pytest.mark.slow
def test_distill_ddp_two_processes_equal_one_process_with_twice_the_batch(
    tmp_path, monkeypatch, one_thread, tokenizers
):
    """`accelerate launch --multi_gpu --num_processes 2` with batch 4 each equals one process with batch 8:
    the chunk loss is the mean over the step's chunks of all processes, the LM loss the mean over its tokens
    (dropout off: each process would draw its own masks)."""
    teacher_tok, student_tok = tokenizers
    roots = {}
    for processes, batch in ((2, 4), (1, 8)):
        root = tmp_path / f"p{processes}"
        save_dir(tiny_llama(teacher_tok), teacher_tok, root / "results/source/model")
        pretrain_project(
            root,
            tiny_model("causal", len(student_tok)),
            student_tok,
            objectives=["distill"],
            **{**STEPS, "batch_size": batch, "processes": processes, "distill": {"alpha": 0.8}},
        )
        roots[processes] = root
    log = finish(launch(roots[2], 2, objective="distill"))
    assert "2 process(es)" in log
    monkeypatch.chdir(roots[1])
    run_pretrain(yaml_params(roots[1]), objective="distill")
    (_, ma, sa), (_, mb, sb) = (
        pretrain_outputs(roots[2], objective="distill"),
        pretrain_outputs(roots[1], objective="distill"),
    )
    assert sa["processes"] == 2 and sb["processes"] == 1
    assert ma.column("tokens_seen").to_pylist() == mb.column("tokens_seen").to_pylist()
    for column in ("train_loss", "valid_loss"):
        np.testing.assert_allclose(
            ma.column(column).to_numpy(), mb.column(column).to_numpy(), rtol=0, atol=TOLERANCE, err_msg=column
        )


def yaml_params(root):
    import yaml

    return yaml.safe_load((root / "params.yaml").read_text(encoding="utf-8"))
