"""`init.random.scale`: the rows `random` draws, at the source's scale or calibrated so that the initialised
model starts near the uniform guess ln V, through the real init stage on tiny models whose embeddings are
large (a tied head then makes random rows confidently wrong, as on Gemma 3)."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pytest
import torch
from safetensors.torch import load_file

from vocabtransfer import io
from vocabtransfer.init import initialise
from vocabtransfer.init.methods.baselines import source_moments
from vocabtransfer.model import lm_loss
from vocabtransfer.model.lmdata import lm_batches, pack_lines
from vocabtransfer.plan import init_plans

from helpers import bpe_tokenizer, init_params, make_ctx, text_lines, tiny_llama, write_inputs

TRAIN = text_lines("sw", 200)
HELD_OUT = text_lines("sw", 64, start=400)  # never scored by the calibration


@pytest.fixture(scope="module")
def tokenizers():
    return {"en": bpe_tokenizer("en"), "sw": bpe_tokenizer("sw", 280)}


def loud_llama(tokenizer, tie: bool):
    """A tiny Llama whose ordinary token rows are ~50x the default's (std ~1, like a trained model's through
    a tied head): random rows of that scale give logits with a std of several nats. Its special tokens' rows
    (copied into the target as they are) keep the default scale, as a trained model's are no random noise."""
    model = tiny_llama(len(tokenizer), seed=3, tie=tie)
    ordinary = torch.ones(len(tokenizer), 1)
    ordinary[sorted(set(tokenizer.all_special_ids))] = 1 / 50
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(50 * ordinary)
        if not tie:
            model.get_output_embeddings().weight.mul_(50 * ordinary)
    return model


def run_init(tmp_path, inputs, method: str = "random", **options):
    train = tmp_path / "sw" / "corpus" / "train.parquet"
    if not train.exists():
        io.write_parquet(pa.table({"text": TRAIN}), train)
    out = tmp_path / "sw" / "init" / method / "-".join(f"{k}{v}" for k, v in sorted(options.items()))
    params = init_params({"methods": [method], method: options})
    ctx = make_ctx(
        "vocabtransfer.init.initialise:run",
        {"lang": "sw", "method": method},
        {**inputs, **({"calibration_text": train} if options.get("scale") == "calibrated" else {})},
        {"init": out},
        params,
    )
    initialise.run(ctx)
    return out


def shrunk(rows, factor: float, source_rows):
    """The drawn rows as calibration leaves them: toward the source mean, mean + factor · (row − mean)."""
    mean = source_moments(source_rows.detach().float())[0]
    return (rows - mean) * factor + mean


def held_out_loss(out, tokenizer) -> float:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(out / "model"))
    batches = lm_batches(tokenizer, pack_lines(tokenizer, HELD_OUT, 128, kind="causal"), "causal", 8, 0)
    return lm_loss.evaluate_lm(model, batches, "causal")["loss"]


def test_calibrated_random_rows_start_near_ln_v_on_a_tied_model(tmp_path, tokenizers):
    source = loud_llama(tokenizers["en"], tie=True)
    inputs, _ = write_inputs(tmp_path, source, tokenizers["en"], tokenizers["sw"])
    ln_v = math.log(len(tokenizers["sw"]))
    old = run_init(tmp_path, inputs, scale="source")
    new = run_init(tmp_path, inputs, scale="calibrated")
    # the old baseline is the strawman: far above the uniform guess; the calibrated one starts within 0.5 nats
    old_loss, new_loss = held_out_loss(old, tokenizers["sw"]), held_out_loss(new, tokenizers["sw"])
    assert old_loss > ln_v + 3, (old_loss, ln_v)
    assert new_loss <= ln_v + 0.5, (new_loss, ln_v)

    stats = json.loads((new / "stats.json").read_text())
    rec = stats["random_scale"]
    assert rec["scale"] == "calibrated" and 0 < rec["factor"] < 1 and rec["ln_vocab"] == pytest.approx(ln_v)
    # the threshold: the zero-spread loss (here about ln V: the copied rows are small) plus the margin, 0.2
    assert rec["initial_loss"] <= rec["threshold"] == pytest.approx(rec["zero_spread_loss"] + 0.2)
    assert abs(rec["zero_spread_loss"] - ln_v) < 0.1 and rec["tokens"] > 500
    assert [f for f, _ in rec["tried"][:2]] == [2.0**-16, 1.0] and rec["tried"][1][1] > rec["threshold"]
    assert stats["options"]["scale"] == "calibrated"
    assert json.loads((old / "stats.json").read_text())["random_scale"] == {"scale": "source", "factor": 1.0}

    # only the drawn rows are scaled: the copied special tokens keep their source rows
    e_old = load_file(str(old / "embeddings.safetensors"))["input_embeddings"]
    e_new = load_file(str(new / "embeddings.safetensors"))["input_embeddings"]
    special = sorted(set(tokenizers["sw"].all_special_ids))
    assert torch.equal(e_new[special], e_old[special])
    drawn = np.setdiff1d(np.arange(len(tokenizers["sw"])), special)
    assert torch.equal(e_new[drawn], shrunk(e_old[drawn], rec["factor"], source.get_input_embeddings().weight))
    # and the model saved is the one scored (its tied head reads the scaled rows)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(new / "model"))
    assert torch.equal(model.get_input_embeddings().weight.detach(), e_new)


def test_calibrated_random_rows_are_byte_identical_for_one_seed(tmp_path, tokenizers):
    source = loud_llama(tokenizers["en"], tie=True)
    inputs, _ = write_inputs(tmp_path, source, tokenizers["en"], tokenizers["sw"])
    first = run_init(tmp_path / "a", inputs, scale="calibrated")
    second = run_init(tmp_path / "b", inputs, scale="calibrated")
    for name in ("embeddings.safetensors", "model/model.safetensors"):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_calibration_scales_both_matrices_of_an_untied_model(tmp_path, tokenizers):
    source = loud_llama(tokenizers["en"], tie=False)
    inputs, _ = write_inputs(tmp_path, source, tokenizers["en"], tokenizers["sw"])
    ln_v = math.log(len(tokenizers["sw"]))
    old = run_init(tmp_path, inputs, scale="source")
    new = run_init(tmp_path, inputs, scale="calibrated")
    rec = json.loads((new / "stats.json").read_text())["random_scale"]
    assert held_out_loss(new, tokenizers["sw"]) <= ln_v + 0.5 < ln_v + 3 < held_out_loss(old, tokenizers["sw"])
    e_old, e_new = load_file(str(old / "embeddings.safetensors")), load_file(str(new / "embeddings.safetensors"))
    special = sorted(set(tokenizers["sw"].all_special_ids))
    drawn = np.setdiff1d(np.arange(len(tokenizers["sw"])), special)
    matrices = {"input_embeddings": source.model.embed_tokens.weight, "output_embeddings": source.lm_head.weight}
    for key, source_rows in matrices.items():
        assert torch.equal(e_new[key][special], e_old[key][special]), key
        assert torch.equal(e_new[key][drawn], shrunk(e_old[key][drawn], rec["factor"], source_rows)), key


def test_overlap_scales_its_drawn_rows_alike_and_keeps_the_copied_ones(tmp_path, tokenizers):
    """overlap copies the overlapping tokens' rows and shrinks only the ones it draws."""
    source = loud_llama(tokenizers["en"], tie=True)
    inputs, pairs = write_inputs(tmp_path, source, tokenizers["en"], tokenizers["sw"])
    old = run_init(tmp_path, inputs, method="overlap", scale="source")
    new = run_init(tmp_path, inputs, method="overlap", scale="calibrated")
    rec = json.loads((new / "stats.json").read_text())["random_scale"]
    e_old = load_file(str(old / "embeddings.safetensors"))["input_embeddings"]
    e_new = load_file(str(new / "embeddings.safetensors"))["input_embeddings"]
    copied = sorted({t for t, _ in pairs} | set(tokenizers["sw"].all_special_ids))
    drawn = np.setdiff1d(np.arange(len(tokenizers["sw"])), copied)
    assert len(copied) > 20 and rec["factor"] < 1
    assert torch.equal(e_new[copied], e_old[copied])
    assert torch.equal(e_new[drawn], shrunk(e_old[drawn], rec["factor"], source.get_input_embeddings().weight))


def test_calibrated_inputs_and_params(tmp_path):
    from vocabtransfer.plan.params_root import Params

    calibrated = Params(init_params({"random": {"scale": "calibrated"}}))
    plain = Params(init_params({}))
    assert init_plans.init_inputs(calibrated, {"lang": "sw", "method": "random"})["calibration_text"] == (
        "results/{lang}/corpus/train.parquet"
    )
    assert "calibration_text" not in init_plans.init_inputs(plain, {"lang": "sw", "method": "random"})
    assert "calibration_text" not in init_plans.init_inputs(calibrated, {"lang": "sw", "method": "overlap"})
    assert "calibration_text" not in init_plans.init_inputs(calibrated, {"lang": "sw", "method": "mean"})
