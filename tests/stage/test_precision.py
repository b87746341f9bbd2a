"""`pretrain.precision`: what `auto` picks from the hardware, and a bf16 run against an fp32 run of the
same pretraining (tiny models, real Swahili text): the valid loss agrees within BF16_TOLERANCE."""

from __future__ import annotations

import math

import pytest

from vocabtransfer.model import precision

from helpers import (
    bpe_tokenizer,
    pretrain_outputs,
    pretrain_project,
    run_pretrain,
    tiny_bert,
    tiny_gpt2,
    wordpiece_tokenizer,
)

# |bf16 - fp32| of the valid loss (nats) a bf16 run may differ by at any evaluation: measured at most 0.0003
# (masked) and 0.006 (causal) on these runs, 0.0004 and 0.008 with model.bf16_kernels (the causal model's tied
# embedding then gets a sparse lookup gradient); the MiniLM study-sized pair, with its interval, is in
# benchmarks/README.md
BF16_TOLERANCE = 0.02


@pytest.mark.parametrize(
    "features,expected", [(["amx_bf16", "avx512_bf16"], True), (["avx512_bf16"], True), ([], False)]
)
def test_auto_follows_the_cpus_bf16_instructions(monkeypatch, features, expected):
    monkeypatch.setattr(precision, "cpu_bf16_features", lambda: features)
    choice = precision.resolve("auto", use_cpu=True)
    assert choice.bf16 is expected and choice.name == ("bf16" if expected else "fp32")
    assert all(f in choice.reason for f in features)  # the log names the instructions it found
    if not expected:
        assert "neither amx_bf16 nor avx512_bf16" in choice.reason
    assert precision.resolve("fp32", use_cpu=True).bf16 is False  # fp32 whatever the CPU
    forced = precision.resolve("bf16", use_cpu=True)
    assert forced.bf16 is True and "set by precision: bf16" in forced.reason


def test_the_features_are_read_from_torch():
    import torch

    found = precision.cpu_bf16_features()
    assert ("avx512_bf16" in found) == torch.cpu._is_avx512_bf16_supported()
    assert ("amx_bf16" in found) == torch.cpu._is_amx_tile_supported()


@pytest.fixture(scope="module")
def tokenizers():
    return {"masked": wordpiece_tokenizer("sw", vocab_size=250), "causal": bpe_tokenizer("sw", vocab_size=280)}


def _run(root, monkeypatch, tok, kind: str, prec: str):
    root.mkdir()
    monkeypatch.chdir(root)
    model = tiny_bert(len(tok)) if kind == "masked" else tiny_gpt2(len(tok))
    run_pretrain(pretrain_project(root, model, tok, precision=prec))
    _, metrics, stats = pretrain_outputs(root)
    return metrics.to_pylist(), stats


@pytest.mark.parametrize("kind", ["masked", "causal"])
def test_bf16_and_fp32_runs_agree_in_valid_loss(tmp_path, monkeypatch, one_thread, tokenizers, kind):
    """The same pretraining in fp32 and in bf16 (autocast, fp32 master weights, fused AdamW): the valid loss
    (scored in fp32 in both) agrees within BF16_TOLERANCE at every evaluation, the bf16 run is not the fp32
    one (its training losses differ), and `auto` on a CPU without bf16 instructions is the fp32 run, bit for bit."""
    tok = tokenizers[kind]
    fp32_rows, fp32_stats = _run(tmp_path / "fp32", monkeypatch, tok, kind, "fp32")
    bf16_rows, bf16_stats = _run(tmp_path / "bf16", monkeypatch, tok, kind, "bf16")
    assert fp32_stats["bf16"] is False and bf16_stats["bf16"] is True
    assert bf16_stats["precision"].startswith("bf16") and bf16_stats["valid_precision"] == "fp32"
    valid = [
        (a["step"], a["valid_loss"], b["valid_loss"])
        for a, b in zip(fp32_rows, bf16_rows)
        if not math.isnan(a["valid_loss"])
    ]
    assert [s for s, _, _ in valid] == [0, 8, 16, 24]
    assert valid[0][1] == valid[0][2]  # step 0: the same initial model, scored the same way
    assert valid[-1][1] < valid[0][1] - 0.1  # both learn
    print(kind, "bf16 - fp32 valid loss by step:", [(step, round(b - a, 5)) for step, a, b in valid])
    for step, a, b in valid:
        assert abs(a - b) < BF16_TOLERANCE, (step, a, b)
    train = [
        (a["train_loss"], b["train_loss"]) for a, b in zip(fp32_rows, bf16_rows) if not math.isnan(a["train_loss"])
    ]
    assert any(a != b for a, b in train)  # bf16 products: not the fp32 numbers
    monkeypatch.setattr(precision, "cpu_bf16_features", lambda: [])
    auto_rows, auto_stats = _run(tmp_path / "auto", monkeypatch, tok, kind, "auto")
    assert auto_stats["bf16"] is False and "neither amx_bf16 nor avx512_bf16" in auto_stats["precision"]
    same = ("step", "tokens_seen", "train_loss", "valid_loss")

    def as_list(rows):
        return [[None if isinstance(r[k], float) and math.isnan(r[k]) else r[k] for k in same] for r in rows]

    assert as_list(auto_rows) == as_list(fp32_rows)


def nli_task():
    """The NLI task with one epoch of batches of 4 (params.yaml's other options)."""
    from vocabtransfer.app.params import validate_params
    from vocabtransfer.evaluate.tasks import get_task

    params = validate_params(
        {"languages": ["sw"], "source_model": "unused", "corpus": {"sources": {"sw": {"path": "unused.txt"}}}}
    )
    return get_task("nli", {**params["eval"]["tasks"]["nli"], "epochs": 1, "batch_size": 4})


def fine_tune_nli(tmp_path, tokenizers, task, **precisions):
    """A tiny BERT fine-tuned on 16 Swahili NLI pairs (real text, labels by position) and scored on 4."""
    from vocabtransfer.evaluate import finetune_eval
    from vocabtransfer.evaluate.tasks import Splits

    from helpers import save_dir, text_lines

    tok = tokenizers["masked"]
    model_dir = save_dir(tiny_bert(len(tok)), tok, tmp_path / "model")
    lines = text_lines("sw", 24, start=100)
    examples = [
        {"id": str(i), "group": str(i), "cluster": str(i), "premise": lines[i], "hypothesis": lines[i + 1]}
        | {"label": i % 3}
        for i in range(20)
    ]
    return finetune_eval.finetune(
        task=task,
        splits=Splits(train=examples[:16], test=examples[16:]),
        model_dir=model_dir,
        seed=1,
        output_dir=tmp_path / "ckpt",
        **precisions,
    )


@pytest.mark.parametrize("prec", ["fp32", "bf16"])
def test_fine_tuning_in_bf16_is_scored_in_fp32(tmp_path, one_thread, tokenizers, prec):
    """`eval.precision`: fine-tuning a tiny BERT on Swahili NLI pairs in bf16 trains under autocast, and the test
    split is scored in fp32 (the autocast wrapper is off the model's forward); the result names both."""
    result, trainer = fine_tune_nli(tmp_path, tokenizers, nli_task(), precision=prec)
    assert result["precision"] == prec and result["scored_in"] == "fp32"
    assert trainer.args.bf16 is (prec == "bf16")
    assert "_original_forward" not in vars(trainer.model)  # no autocast wrapper left for the scoring
    assert len(result["examples"]["score"]) == 4


@pytest.mark.parametrize("test_prec", ["fp32", "bf16"])
def test_the_test_split_is_scored_in_the_precision_asked(tmp_path, one_thread, tokenizers, monkeypatch, test_prec):
    """`eval.test_precision`: a model fine-tuned in bf16 is scored with its autocast wrapper off, under
    torch.autocast in bf16 when bf16 is asked and without it for fp32; the result names it."""
    import torch

    nli = nli_task()
    seen = []
    scoring = type(nli).evaluate

    def evaluate(self, trainer, *args):
        seen.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")))
        return scoring(self, trainer, *args)

    monkeypatch.setattr(type(nli), "evaluate", evaluate)
    result, _ = fine_tune_nli(tmp_path, tokenizers, nli, precision="bf16", test_precision=test_prec)
    assert result["precision"] == "bf16" and result["scored_in"] == test_prec
    assert seen == [(test_prec == "bf16", torch.bfloat16)]
