"""`fvt_prior`, the frequency-prior control: FVT's rows bit for bit, and the output bias moved by β × the train
split's centred add-one unigram log-probabilities, β fitted on training lines (vocabtransfer.init.output_bias)."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pytest
import torch
from safetensors.torch import load_file

from vocabtransfer import io
from vocabtransfer.data.token_ids import unigram_counts
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.init import initialise
from vocabtransfer.init import output_bias as prior
from vocabtransfer.plan.method_options import FvtPriorOptions
from vocabtransfer.model import modeling
from vocabtransfer.model.lmdata import lm_batches, pack_lines

from helpers import (
    bpe_tokenizer,
    init_params,
    make_ctx,
    text_lines,
    tiny_bert,
    tiny_llama,
    wordpiece_tokenizer,
    write_ids,
    write_inputs,
)

TRAIN = text_lines("sw", 200)


def test_log_unigram_is_the_add_one_unigram_by_hand():
    got = prior.log_unigram(np.array([3, 0, 1]))  # N = 4, V = 3: (c + 1) / 7
    assert got == pytest.approx([math.log(4 / 7), math.log(1 / 7), math.log(2 / 7)], abs=1e-15)


def test_shifted_bias_is_the_bias_itself_at_zero_and_adds_the_centred_prior():
    bias = torch.tensor([0.5, -1.0, 2.0])
    ell = np.log(np.array([0.5, 0.25, 0.25]))
    assert torch.equal(prior.shifted_bias(bias, ell, 0.0), bias)
    expected = bias.double() + 2 * torch.from_numpy(ell - ell.mean())
    assert torch.allclose(prior.shifted_bias(bias, ell, 2.0).double(), expected, atol=1e-6)
    assert float(prior.shifted_bias(bias, ell, 2.0).mean()) == pytest.approx(float(bias.mean()), abs=1e-6)


def test_with_zero_rows_the_fitted_bias_is_the_unigram_and_its_loss_the_unigrams_cross_entropy(tmp_path):
    """Zero embedding rows make every logit the bias alone, so at β = 1 the model predicts the unigram p itself
    (ℓ is normalised: softmax(ℓ − mean ℓ) = p) and its loss is −mean ℓ over the scored tokens, by hand."""
    tok = wordpiece_tokenizer("sw", 300)
    model = tiny_bert(len(tok), seed=1)
    with torch.no_grad():
        model.get_input_embeddings().weight.zero_()
        modeling.output_bias(model).zero_()
    write_ids(tok, TRAIN, tmp_path / "ids")
    ell = prior.log_unigram(unigram_counts(tmp_path / "ids", tok))
    train = tmp_path / "train.parquet"
    io.write_parquet(pa.table({"text": TRAIN}), train)
    options = FvtPriorOptions(grid=(0.5, 1.0, 2.0), lines=40)
    record = prior.fit(model, tok, "masked", train, ell, options, seed=3)

    batches = lm_batches(tok, pack_lines(tok, TRAIN[:40], prior.SEQ_LEN, kind="masked"), "masked", prior.BATCH_SIZE, 3)
    targets = torch.cat([b["labels"][b["labels"] != -100] for b in batches]).numpy()
    tried = dict(record["tried"])
    assert sorted(tried) == [0.0, 0.5, 1.0, 2.0]
    assert tried[1.0] == pytest.approx(float(-ell[targets].mean()), abs=1e-4)
    assert tried[0.0] == pytest.approx(math.log(len(tok)), abs=1e-4)  # flat logits: the uniform guess
    assert record["beta"] == 1.0 and record["loss"] == min(tried.values()) < tried[0.0]
    assert record["fvt_loss"] == tried[0.0] and record["tokens"] == len(targets)
    # the model is left at the chosen β
    got = modeling.output_bias(model).detach()
    assert torch.allclose(got.double(), torch.from_numpy(ell - ell.mean()), atol=1e-5)


def test_a_head_without_an_output_bias_is_refused(tmp_path):
    tok = bpe_tokenizer("sw", 280)
    model = tiny_llama(len(tok), seed=0, tie=True)
    with pytest.raises(VocabTransferError, match=r"fvt_prior: .*has no output bias.*remove fvt_prior"):
        prior.fit(model, tok, "causal", tmp_path / "unused", np.zeros(len(tok)), FvtPriorOptions(), seed=0)


def run_init(tmp_path, inputs, method: str) -> tuple:
    train = tmp_path / "sw" / "corpus" / "train.parquet"
    ids = tmp_path / "sw" / "pretokenized" / "train"
    out = tmp_path / "sw" / "init" / method
    extra = {"calibration_text": train, "prior_ids": ids} if method == "fvt_prior" else {}
    ctx = make_ctx(
        "vocabtransfer.init.initialise:run",
        {"lang": "sw", "method": method},
        {**inputs, **extra},
        {"init": out},
        init_params({"methods": [method], "fvt_prior": {"grid": [0.5, 1.0], "lines": 40}}),
    )
    initialise.run(ctx)
    bias = load_file(str(out / "model" / "model.safetensors"))["cls.predictions.bias"]
    return load_file(str(out / "embeddings.safetensors")), bias, json.loads((out / "stats.json").read_text())


def test_the_init_stage_keeps_fvts_rows_and_moves_only_the_bias(tmp_path):
    source_tok, target_tok = wordpiece_tokenizer("en", 300), wordpiece_tokenizer("sw", 300)
    inputs, _ = write_inputs(tmp_path, tiny_bert(len(source_tok), seed=2), source_tok, target_tok)
    io.write_parquet(pa.table({"text": TRAIN}), tmp_path / "sw" / "corpus" / "train.parquet")
    write_ids(target_tok, TRAIN, tmp_path / "sw" / "pretokenized" / "train")
    fvt_rows, fvt_bias, _ = run_init(tmp_path, inputs, "fvt")
    rows, bias, stats = run_init(tmp_path, inputs, "fvt_prior")

    assert torch.equal(rows["input_embeddings"], fvt_rows["input_embeddings"])
    record = stats["output_prior"]
    assert record["beta"] in (0.0, 0.5, 1.0) and [b for b, _ in record["tried"]] == [0.0, 0.5, 1.0]
    assert record["loss"] <= record["fvt_loss"]
    ell = prior.log_unigram(unigram_counts(tmp_path / "sw" / "pretokenized" / "train", target_tok))
    expected = fvt_bias.double() + record["beta"] * torch.from_numpy(ell - ell.mean())
    assert torch.allclose(bias.double(), expected, atol=1e-5)
    assert stats["method_stats"]["prior_tokens"] == int(
        unigram_counts(tmp_path / "sw/pretokenized/train", target_tok).sum()
    )
    assert "unigram" in stats["output_bias"]
