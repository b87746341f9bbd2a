"""modeling.py: loading with an LM head, embedding matrices, building and saving target models, LM batches.

Tiny models are built from configs with random weights; tiny tokenizers are trained on a few
hundred lines of the shared data (the builders in helpers.py).
"""

from __future__ import annotations

import json
import os

import pytest
import torch

from vocabtransfer.model import lm_loss, modeling
from vocabtransfer.model.hub import load_tokenizer, resolve_model_path
from vocabtransfer.model.lmdata import lm_batches, pack_ids, pack_lines, special_tokens_around
from vocabtransfer.errors import VocabTransferError

from helpers import MINILM, bpe_tokenizer, save_dir, text_lines, tiny_bert, tiny_llama, wordpiece_tokenizer

os.environ.setdefault("HF_HUB_OFFLINE", "1")


# ---------------------------------------------------------------- tokenizers


@pytest.fixture(scope="session")
def en_wordpiece():
    return wordpiece_tokenizer("en")


@pytest.fixture(scope="session")
def sw_wordpiece():
    return wordpiece_tokenizer("sw", vocab_size=250)


@pytest.fixture(scope="session")
def en_bpe():
    return bpe_tokenizer("en")


@pytest.fixture(scope="session")
def sw_bpe():
    return bpe_tokenizer("sw", vocab_size=280)


# ---------------------------------------------------------------- loading


def test_minilm_loads_as_masked_lm_with_missing_head():
    model, kind, info = modeling.load_source_model(resolve_model_path(MINILM), output_loading_info=True)
    assert kind == "masked" and type(model).__name__ == "BertForMaskedLM"
    assert info.head_missing
    assert {k for k in info.missing_keys} >= {"cls.predictions.transform.dense.weight", "cls.predictions.bias"}
    assert all(k.startswith("cls.predictions.") for k in info.missing_keys)
    assert not model.training
    mats = modeling.embedding_matrices(model, load_tokenizer(resolve_model_path(MINILM)))
    assert mats["input"].shape == (30522, 384) and mats["output"] is None  # BERT ties its decoder
    assert modeling.is_tied(model)


def test_complete_checkpoint_reports_no_missing_head(tmp_path, en_wordpiece):
    d = save_dir(tiny_bert(len(en_wordpiece)), en_wordpiece, tmp_path / "bert")
    model, kind, info = modeling.load_source_model(d, output_loading_info=True)
    assert kind == "masked" and not info.head_missing and info.missing_keys == ()
    assert modeling.load_source_model(d)[1] == "masked"  # plain call: (model, kind)


def test_detect_kind():
    from transformers import BertConfig, GPT2Config, LlamaConfig

    assert modeling.detect_kind(BertConfig(architectures=["BertModel"])) == "masked"
    assert modeling.detect_kind(BertConfig(is_decoder=True)) == "causal"
    assert modeling.detect_kind(GPT2Config()) == "causal"
    assert modeling.detect_kind(LlamaConfig(architectures=["LlamaForCausalLM"])) == "causal"


def test_body_weights_missing_is_an_error(tmp_path, en_wordpiece):
    from safetensors.torch import load_file, save_file

    d = save_dir(tiny_bert(len(en_wordpiece)), en_wordpiece, tmp_path / "bert")
    weights = load_file(str(d / "model.safetensors"))
    dropped = next(k for k in weights if "encoder.layer.0.attention.self.query.weight" in k)
    del weights[dropped]
    save_file(weights, str(d / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(VocabTransferError, match=r"lacks 1 weight\(s\) of the model body"):
        modeling.load_source_model(d)


def test_not_a_model_directory(tmp_path):
    with pytest.raises(VocabTransferError, match="cannot read the model config"):
        modeling.load_source_model(tmp_path)


# ---------------------------------------------------------------- embedding matrices


def test_embedding_matrices_padded_vocab_is_cut_to_tokenizer(en_wordpiece):
    n = len(en_wordpiece)
    model = tiny_bert(n + 8)  # vocabulary padded beyond the tokenizer
    mats = modeling.embedding_matrices(model, en_wordpiece)
    assert mats["input"].shape == (n, 32) and mats["output"] is None
    assert torch.equal(mats["input"], model.get_input_embeddings().weight[:n])
    mats["input"][0] += 1  # a copy, not a view of the model
    assert not torch.equal(mats["input"][0], model.get_input_embeddings().weight[0])


def test_embedding_matrices_errors(en_wordpiece):
    small = tiny_bert(len(en_wordpiece) - 5)
    small.name_or_path = "some/model-dir"
    with pytest.raises(
        VocabTransferError, match=r"some/model-dir: input embeddings have \d+ rows but the tokenizer has"
    ):
        modeling.embedding_matrices(small, en_wordpiece)
    model = tiny_bert(len(en_wordpiece))
    model.name_or_path = "some/model-dir"
    with torch.no_grad():
        model.get_input_embeddings().weight[7, 3] = float("nan")
    with pytest.raises(VocabTransferError, match=r"some/model-dir: input embeddings contain NaN/Inf .*token id 7"):
        modeling.embedding_matrices(model, en_wordpiece)


def test_embedding_matrices_untied(en_bpe):
    model = tiny_llama(len(en_bpe))
    assert not modeling.is_tied(model)
    mats = modeling.embedding_matrices(model, en_bpe)
    assert mats["output"] is not None and mats["output"].shape == mats["input"].shape == (len(en_bpe), 32)
    assert torch.equal(mats["output"], model.lm_head.weight)
    assert modeling.embedding_matrices(tiny_llama(len(en_bpe), tie=True), en_bpe)["output"] is None


# ---------------------------------------------------------------- build + save target models


def test_build_target_model_tied_bert_round_trip(tmp_path, en_wordpiece, sw_wordpiece):
    from safetensors.torch import load_file
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    src = save_dir(tiny_bert(len(en_wordpiece)), en_wordpiece, tmp_path / "src")
    tgt = tmp_path / "tgt_tok"
    sw_wordpiece.save_pretrained(str(tgt))
    n = len(sw_wordpiece)
    new = torch.randn(n, 32, generator=torch.Generator().manual_seed(1))
    bias = torch.linspace(-3, 1, n)
    model = modeling.build_target_model(src, tgt, new, bias=bias)
    out = modeling.save_model_dir(model, sw_wordpiece, tmp_path / "out" / "model")
    assert not list((tmp_path / "out").glob(".*tmp*"))  # written atomically, nothing left behind

    loaded = AutoModelForMaskedLM.from_pretrained(str(out))
    tok = AutoTokenizer.from_pretrained(str(out))
    assert type(loaded).__name__ == "BertForMaskedLM" and len(tok) == n
    assert torch.equal(loaded.get_input_embeddings().weight, new)
    assert loaded.cls.predictions.decoder.weight.data_ptr() == loaded.get_input_embeddings().weight.data_ptr()
    assert torch.equal(loaded.cls.predictions.bias, bias)
    assert loaded.config.vocab_size == n and loaded.config.pad_token_id == tok.pad_token_id
    config = json.loads((out / "config.json").read_text())
    assert config["vocab_size"] == n and config["sep_token_id"] == tok.sep_token_id
    # the body is the source model's, unchanged
    source = load_file(str(src / "model.safetensors"))
    target = load_file(str(out / "model.safetensors"))
    key = "bert.encoder.layer.1.output.dense.weight"
    assert torch.equal(source[key], target[key])
    # and it runs on the target tokenizer's ids
    enc = tok(["Habari ya leo"], return_tensors="pt")
    assert loaded(**enc).logits.shape == (1, enc["input_ids"].shape[1], n)


def test_build_target_model_zero_bias_by_default(tmp_path, en_wordpiece, sw_wordpiece):
    src = save_dir(tiny_bert(len(en_wordpiece)), en_wordpiece, tmp_path / "src")
    tgt = tmp_path / "tgt_tok"
    sw_wordpiece.save_pretrained(str(tgt))
    model = modeling.build_target_model(src, tgt, torch.zeros(len(sw_wordpiece), 32))
    assert torch.count_nonzero(model.cls.predictions.bias) == 0


def test_build_target_model_untied_llama_round_trip(tmp_path, en_bpe, sw_bpe):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = save_dir(tiny_llama(len(en_bpe)), en_bpe, tmp_path / "src")
    tgt = tmp_path / "tgt_tok"
    sw_bpe.save_pretrained(str(tgt))
    n = len(sw_bpe)
    g = torch.Generator().manual_seed(2)
    inp, out = torch.randn(n, 32, generator=g), torch.randn(n, 32, generator=g)
    with pytest.raises(VocabTransferError, match="untied output embeddings; pass output_embeddings"):
        modeling.build_target_model(src, tgt, inp)
    with pytest.raises(VocabTransferError, match=r"input_embeddings must have shape \(%d, 32\)" % n):
        modeling.build_target_model(src, tgt, inp[:-1], out)
    model = modeling.build_target_model(src, tgt, inp, out)
    d = modeling.save_model_dir(model, sw_bpe, tmp_path / "model")
    loaded = AutoModelForCausalLM.from_pretrained(str(d))
    tok = AutoTokenizer.from_pretrained(str(d))
    assert torch.equal(loaded.get_input_embeddings().weight, inp)
    assert torch.equal(loaded.lm_head.weight, out)
    assert not modeling.is_tied(loaded)
    assert loaded.config.eos_token_id == tok.eos_token_id and loaded.generation_config.eos_token_id == tok.eos_token_id
    assert loaded.config.vocab_size == n


def test_build_target_model_tied_rejects_output_embeddings(tmp_path, en_wordpiece, sw_wordpiece):
    src = save_dir(tiny_bert(len(en_wordpiece)), en_wordpiece, tmp_path / "src")
    tgt = tmp_path / "tgt_tok"
    sw_wordpiece.save_pretrained(str(tgt))
    e = torch.zeros(len(sw_wordpiece), 32)
    with pytest.raises(VocabTransferError, match="ties its output embeddings"):
        modeling.build_target_model(src, tgt, e, e)
    with pytest.raises(VocabTransferError, match="NaN/Inf"):
        modeling.build_target_model(src, tgt, e.fill_(float("inf")))


# ---------------------------------------------------------------- LM data and loss


def test_pack_lines_keeps_whole_lines(en_wordpiece, en_bpe):
    lines = text_lines("en", 40)
    blocks = pack_lines(en_wordpiece, lines, 64)
    assert all(len(b) <= 64 for b in blocks)
    flat = [i for b in blocks for i in b]
    assert flat.count(en_wordpiece.cls_token_id) == len(lines)  # every line kept, [CLS] … [SEP] each
    assert all(b[0] == en_wordpiece.cls_token_id for b in blocks)
    causal = pack_lines(en_bpe, lines, 64, kind="causal")
    assert sum(b.count(en_bpe.eos_token_id) for b in causal) == len(lines)


def test_masking_is_seeded(en_wordpiece):
    blocks = pack_lines(en_wordpiece, text_lines("en", 60), 64)
    a = lm_batches(en_wordpiece, blocks, "masked", 8, seed=3)
    b = lm_batches(en_wordpiece, blocks, "masked", 8, seed=3)
    c = lm_batches(en_wordpiece, blocks, "masked", 8, seed=4)
    assert all(
        torch.equal(x["labels"], y["labels"]) and torch.equal(x["input_ids"], y["input_ids"]) for x, y in zip(a, b)
    )
    assert not all(torch.equal(x["labels"], y["labels"]) for x, y in zip(a, c))
    labels = torch.cat([x["labels"].flatten() for x in a])
    rate = float((labels != -100).float().sum() / sum(len(bl) for bl in blocks))
    assert 0.08 < rate < 0.2  # ~15 % of the (non-special) tokens


def test_fast_masked_loss_equals_model_loss(en_wordpiece):
    model = tiny_bert(len(en_wordpiece)).eval()
    batch = lm_batches(en_wordpiece, pack_lines(en_wordpiece, text_lines("en", 30), 64), "masked", 16, 0)[0]
    with torch.no_grad():
        total, n = lm_loss.lm_loss_sum(model, batch, "masked")
        reference = model(**batch).loss
    assert n == int((batch["labels"] != -100).sum())
    assert torch.allclose(total / n, reference, atol=1e-5)
    result = lm_loss.evaluate_lm(model, [batch], "masked")
    assert result["n_tokens"] == n and abs(result["perplexity"] - torch.exp(reference).item()) < 1e-2
    # per block: the model's own loss over that block's masked tokens, and their count
    assert result["block_tokens"] == (batch["labels"] != -100).sum(1).tolist()
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    own = torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch["labels"], reduction="none").sum(1)
    assert torch.allclose(torch.tensor(result["block_loss"], dtype=torch.float64), own.double(), atol=1e-3)


def test_causal_loss(en_bpe):
    model = tiny_llama(len(en_bpe)).eval()
    batches = lm_batches(en_bpe, pack_lines(en_bpe, text_lines("en", 30), 64, kind="causal"), "causal", 8, 0)
    assert (batches[-1]["labels"] == -100).any()  # padding is ignored
    result = lm_loss.evaluate_lm(model, batches, "causal")
    assert result["n_tokens"] == sum(int((b["labels"][:, 1:] != -100).sum()) for b in batches)
    assert abs(result["loss"] - torch.log(torch.tensor(float(len(en_bpe)))).item()) < 1.0  # ~uniform at init


def test_calibrated_loss_undoes_an_over_confident_scale(monkeypatch):
    """Logits scaled by 1.1**5 are over-confident by exactly that factor: the calibrated loss is
    unchanged and the temperature is 1.1**5 times larger; it is never above the raw loss."""
    g = torch.Generator().manual_seed(0)
    targets = torch.randint(0, 50, (400,), generator=g)
    logits = torch.randn(400, 50, generator=g)
    logits[torch.arange(400), targets] += 2.0  # informative, so the best temperature is finite
    batches = [{"labels": targets.view(4, 100)}]  # 4 blocks of 100 predicted tokens

    class Fixed(torch.nn.Module):  # a "model" whose predicted logits are fixed, times a factor
        def __init__(self, factor):
            super().__init__()
            self.factor = factor

    monkeypatch.setattr(lm_loss, "predicted_logits", lambda model, batch, kind: (logits * model.factor, targets))
    monkeypatch.setattr(
        lm_loss,
        "token_losses",
        lambda model, batch, kind: (
            torch.nn.functional.cross_entropy(logits * model.factor, targets, reduction="none"),
            targets,
        ),
    )
    base = lm_loss.evaluate_lm(Fixed(3.0), batches, "masked", calibrate=True)
    sharp = lm_loss.evaluate_lm(Fixed(3.0 * 1.1**5), batches, "masked", calibrate=True)
    assert sharp["loss"] > base["loss"]
    for r in (base, sharp):
        assert r["calibrated_loss"] <= r["loss"] + 1e-9
    assert 1.1 < base["temperature"] < 5  # over-confident, and an interior optimum of the grid
    assert sharp["calibrated_loss"] == pytest.approx(base["calibrated_loss"], rel=1e-5)
    assert sharp["temperature"] == pytest.approx(base["temperature"] * 1.1**5, rel=1e-6)
    plain = lm_loss.evaluate_lm(Fixed(1.0), batches, "masked")
    assert "calibrated_loss" not in plain and plain["block_tokens"] == [100] * 4
    assert sum(plain["block_loss"]) == pytest.approx(plain["loss"] * 400, rel=1e-9)


def test_pack_ids_equals_pack_lines_on_the_same_text(shared_data):
    """Pre-tokenised lines (no special tokens, as the pretokenize stage stores them) pack into exactly
    the blocks that packing their text gives, for a BERT tokenizer and a causal (GPT-2-style) one."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    lines = [
        s.strip()
        for s in (shared_data / "pretrain_text" / "sw.txt").read_text(encoding="utf-8").splitlines()[:300]
        if s.strip()
    ]
    bert = load_tokenizer(resolve_model_path("sentence-transformers/all-MiniLM-L6-v2"))
    raw = Tokenizer(models.BPE(unk_token=None))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"]))
    gpt = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|endoftext|>")
    for tok, kind in ((bert, "masked"), (gpt, "causal")):
        ids = [tok(line, add_special_tokens=False)["input_ids"] for line in lines]
        for seq_len in (16, 64):
            packed = pack_ids(tok, ids, seq_len, kind=kind)
            assert packed == pack_lines(tok, lines, seq_len, kind=kind)
            assert max(map(len, packed)) <= seq_len
    assert special_tokens_around(bert) == ([bert.cls_token_id], [bert.sep_token_id])
    assert special_tokens_around(gpt) == ([], [])
