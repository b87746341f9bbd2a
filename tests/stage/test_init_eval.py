"""Stage `init_eval`: LM loss and parallel-sentence retrieval of initialised models, on tiny models."""

from __future__ import annotations

import logging
import math

import matplotlib.image
import numpy as np
import pyarrow as pa
import pytest
import torch
from conftest import shared_file

from vocabtransfer.evaluate import init_eval, init_eval_plot, retrieval
from vocabtransfer import io
from vocabtransfer.data.token_ids import TokenIds
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.model.lmdata import lm_batches, pack_lines
from vocabtransfer.plan.params_root import Params
from vocabtransfer.plan import eval_plans

from helpers import (
    bpe_tokenizer,
    make_ctx,
    over_defaults,
    save_dir,
    text_lines,
    tiny_bert,
    tiny_llama,
    wordpiece_tokenizer,
    write_ids,
)

N_XNLI_ROWS = 90  # 30 distinct premises


def setup_study(tmp_path, source_model, source_tok, methods: dict, *, xx_same_as_en: bool):
    """Source model dir, one init dir per method (model/ only), valid split, XNLI files and source text, and the
    train split (text, and pre-tokenised with the last method's tokenizer) the floors are fitted on."""
    src = save_dir(source_model, source_tok, tmp_path / "source" / "model")
    for name, (model, tok) in methods.items():
        save_dir(model, tok, tmp_path / "xx" / "init" / name / "model")
    en = text_lines("en", 60, start=1000)
    text = tmp_path / "en.txt"
    text.write_text("\n".join(en) + "\n", encoding="utf-8")
    valid = tmp_path / "xx" / "corpus" / "valid.parquet"
    io.write_parquet(pa.table({"text": en[-40:]}), valid)  # = the source model's held-out lines
    xnli = tmp_path / "xnli"
    xnli.mkdir()
    rows = shared_file("xnli/dev-en.tsv").read_text(encoding="utf-8").splitlines()[:N_XNLI_ROWS]
    (xnli / "dev-en.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    other = (
        rows if xx_same_as_en else shared_file("xnli/dev-sw.tsv").read_text(encoding="utf-8").splitlines()[:N_XNLI_ROWS]
    )
    (xnli / "dev-xx.tsv").write_text("\n".join(other) + "\n", encoding="utf-8")
    params = {
        "seed": 3,
        "init": {"methods": list(methods)},
        "source_head": over_defaults("source_head", {"text": str(text), "eval_lines": 40}),
        "init_eval": over_defaults(
            "init_eval",
            {
                "max_lines": 100,
                "seq_len": 64,
                "batch_size": 8,
                "retrieval_sentences": 25,
                "xnli": str(xnli / "dev-{lang}.tsv"),
                "source_lang": "en",
            },
        ),
    }
    train = text_lines("sw", 120, start=3000)
    io.write_parquet(pa.table({"text": train}), tmp_path / "xx" / "corpus" / "train.parquet")
    write_ids(list(methods.values())[-1][1], train, tmp_path / "xx" / "pretokenized" / "train")
    inputs = {
        "source_model": src,
        "valid": valid,
        "train_ids": tmp_path / "xx" / "pretokenized" / "train",
        "train_text": tmp_path / "xx" / "corpus" / "train.parquet",
    }
    inputs.update({eval_plans.input_key(m): tmp_path / "xx" / "init" / m for m in methods})
    out = tmp_path / "xx" / "init_eval.parquet"
    outputs = {"init_eval": out, "plot": out.with_suffix(".png")}
    return make_ctx("vocabtransfer.evaluate.init_eval:run", {"lang": "xx"}, inputs, outputs, params), out


@pytest.fixture(scope="module")
def en_wp():
    return wordpiece_tokenizer("en")


def test_source_model_as_its_own_initialisation(tmp_path, en_wp, caplog):
    """Sanity: the 'initialised' model is the source model with the source tokenizer, on identical text."""
    source = tiny_bert(len(en_wp))
    other = tiny_bert(len(en_wp), seed=1)  # a different model with the same tokenizer
    ctx, out = setup_study(
        tmp_path, source, en_wp, {"same": (source, en_wp), "other": (other, en_wp)}, xx_same_as_en=True
    )
    with caplog.at_level(logging.INFO, logger="vocabtransfer.evaluate.init_eval"):
        init_eval.run(ctx)
    table = io.read_parquet(out)
    assert table.schema == init_eval.SCHEMA
    rows = {r["method"]: r for r in table.to_pylist()}
    assert list(rows) == ["source", "same", "other", "floor:unigram-target"]
    floor = rows.pop("floor:unigram-target")
    ref, same, oth = rows["source"], rows["same"], rows["other"]
    assert ref["lang"] == "en" and same["lang"] == "xx"
    for r in rows.values():
        assert math.isfinite(r["loss"]) and r["perplexity"] == pytest.approx(math.exp(r["loss"]))
        assert r["n_eval_tokens"] > 50 and r["n_sentences"] == 25 and r["kind"] == "masked"
    # same model, same text, same seeded masks: exactly the reference loss
    assert same["loss"] == pytest.approx(ref["loss"], rel=1e-6)
    assert same["calibrated_loss"] == pytest.approx(ref["calibrated_loss"], rel=1e-6)
    assert all(r["calibrated_loss"] <= r["loss"] + 1e-9 and r["temperature"] > 0 for r in rows.values())
    assert same["retrieval_en2xx"] == 1.0 and same["retrieval_xx2en"] == 1.0
    assert ref["retrieval_en2xx"] == 1.0  # the source model on identical "translations"
    # paired comparison: the same masked tokens for every method
    assert oth["n_eval_tokens"] == same["n_eval_tokens"] and oth["loss"] != same["loss"]
    assert oth["retrieval_en2xx"] < 1.0
    # per valid block, for the report's paired bootstrap: the sums give the loss; every row the same blocks
    for r in (*rows.values(), floor):
        assert sum(r["block_loss"]) / sum(r["block_tokens"]) == pytest.approx(r["loss"], rel=1e-9)
    assert same["block_tokens"] == oth["block_tokens"] == floor["block_tokens"] == ref["block_tokens"]
    assert same["block_loss"] == pytest.approx(ref["block_loss"], rel=1e-6)
    # the unigram floor, by hand: add-one unigram of the train ids on the same masked tokens
    counts = np.bincount(np.concatenate(list(TokenIds(ctx.input["train_ids"], en_wp).chunks())), minlength=len(en_wp))
    valid = io.read_parquet(ctx.input["valid"]).column("text").to_pylist()
    labels = torch.cat([b["labels"].flatten() for b in lm_batches(en_wp, pack_lines(en_wp, valid, 64), "masked", 8, 3)])
    picked = labels[labels != -100].numpy()
    want = -np.log((counts[picked] + 1.0) / (counts.sum() + len(en_wp))).mean()
    assert floor["kind"] == "floor" and floor["loss"] == pytest.approx(want, rel=1e-9)
    assert floor["n_eval_tokens"] == len(picked) == same["n_eval_tokens"]
    assert "| lang | method | loss |" in caplog.text and "| xx | other |" in caplog.text
    # masked LMs keep their per-token loss: no bits per byte, the log says why; bytes per token all the same
    assert all(r["bits_per_byte"] is None and r["share_kept"] is None for r in rows.values())
    assert "no bits per byte for source, same, other (bits per byte needs a causal LM" in caplog.text
    assert same["bytes_per_token"] == ref["bytes_per_token"] > 1 and same["n_bytes"] == ref["n_bytes"] > 1000
    image = matplotlib.image.imread(out.with_suffix(".png"))
    assert image.shape[:2] == (int(120 * (2.4 + 0.32 * 2)), 120 * 11)  # two methods, loss and retrieval panels


def test_translations_and_causal_models(tmp_path, en_wp):
    sw_wp = wordpiece_tokenizer("sw", 250)
    sw_bpe = bpe_tokenizer("sw", 280)
    source = tiny_bert(len(en_wp))
    methods = {"bert_sw": (tiny_bert(len(sw_wp), seed=2), sw_wp), "llama_sw": (tiny_llama(len(sw_bpe)), sw_bpe)}
    ctx, out = setup_study(tmp_path, source, en_wp, methods, xx_same_as_en=False)
    init_eval.run(ctx)
    rows = {r["method"]: r for r in io.read_parquet(out).to_pylist()}
    bert, llama = rows["bert_sw"], rows["llama_sw"]
    assert bert["n_sentences"] == 25 and (bert["retrieval_en2xx"] * 25).is_integer()
    assert rows["source"]["retrieval_en2xx"] is not None  # the no-transfer baseline on the real translations
    assert llama["kind"] == "causal" and llama["retrieval_en2xx"] is None and llama["n_sentences"] is None
    # a random model knows nothing: its loss is about that of a uniform guess over its vocabulary
    assert abs(llama["loss"] - math.log(len(sw_bpe))) < 1.0
    assert abs(bert["loss"] - math.log(len(sw_wp))) < 1.0


def test_bits_per_byte_of_causal_models_and_the_source(tmp_path, caplog):
    """Causal models get bits per byte on the valid lines, the source with its own tokenizer on the same
    lines, the floors beside them; the share kept is measured from the best floor, and an untrained source that
    does not beat it has nothing to keep."""
    from vocabtransfer.evaluate import bits_per_byte, bpb_floor

    en_bpe, sw_bpe = bpe_tokenizer("en"), bpe_tokenizer("sw", 280)
    source, rand = tiny_llama(len(en_bpe)), tiny_llama(len(sw_bpe), seed=1)
    ctx, out = setup_study(
        tmp_path, source, en_bpe, {"random": (rand, sw_bpe), "same": (source, en_bpe)}, xx_same_as_en=True
    )
    with caplog.at_level(logging.INFO, logger="vocabtransfer.evaluate.init_eval"):
        init_eval.run(ctx)
    rows = {r["method"]: r for r in io.read_parquet(out).to_pylist()}
    valid = io.read_parquet(tmp_path / "xx" / "corpus" / "valid.parquet").column("text").to_pylist()
    for name, (model, tok) in (("random", (rand, sw_bpe)), ("source", (source, en_bpe))):
        want = bits_per_byte.score_lines(model.eval(), tok, valid, seq_len=64, batch_size=8)
        assert rows[name]["bits_per_byte"] == pytest.approx(want.bits_per_byte, rel=1e-6)
        assert rows[name]["bytes_per_token"] == pytest.approx(want.bytes_per_token)
        assert rows[name]["n_bytes"] == sum(len(s.encode("utf-8")) for s in valid)
    assert rows["same"]["bits_per_byte"] == pytest.approx(rows["source"]["bits_per_byte"], rel=1e-6)
    # the floors beside the models, on the target tokenizer (the last method's) and the source's
    train = tmp_path / "xx" / "pretokenized" / "train"
    floors = bpb_floor.floor_scores(en_bpe, train, en_bpe, tmp_path / "xx" / "corpus" / "train.parquet", valid)
    for name, want in floors.items():
        row = rows[f"floor:{name}"]
        assert row["kind"] == "floor" and row["share_kept"] is None
        assert (row["loss"] is None) == (name != "unigram-target")  # the unigram's loss per token: the floor row
        assert row["bits_per_byte"] == pytest.approx(want.bits_per_byte) and row["n_bytes"] == rows["same"]["n_bytes"]
    assert rows["floor:uniform"]["bits_per_byte"] == pytest.approx(
        math.log2(len(en_bpe)) / rows["floor:uniform"]["bytes_per_token"]
    )
    # an untrained tiny source does not beat the best floor: it has nothing to keep, and no share is given
    best = min(r["bits_per_byte"] for r in rows.values() if r["kind"] == "floor")
    assert rows["source"]["bits_per_byte"] > best and all(r["share_kept"] is None for r in rows.values())
    # the share from the best floor, where the source beats it
    table = list(rows.values())
    for r in table:
        if r["method"] == "source":
            r["bits_per_byte"] = best - 1.0
    rows["same"]["bits_per_byte"] = best - 0.5
    init_eval.add_share_kept(table)
    assert rows["same"]["share_kept"] == pytest.approx(0.5) and rows["source"]["share_kept"] is None
    assert "| bits_per_byte | bytes_per_token | share_kept |" in caplog.text and "no bits per byte" not in caplog.text


def test_a_source_without_its_lm_head_is_refused_before_any_output(tmp_path):
    """A causal source whose checkpoint lacks its LM head gives a random head's bits: refused in one line
    naming the file when bits per byte is asked for, and no output is left; not asked, it runs."""
    from transformers import LlamaModel

    en_bpe = bpe_tokenizer("en")
    ctx, out = setup_study(
        tmp_path,
        LlamaModel(tiny_llama(len(en_bpe)).config),
        en_bpe,
        {"random": (tiny_llama(len(en_bpe), seed=1), en_bpe)},
        xx_same_as_en=True,
    )
    with pytest.raises(VocabTransferError) as err:
        init_eval.run(ctx)
    assert "\n" not in str(err.value) and str(err.value).startswith(
        str(tmp_path / "source" / "model" / "model.safetensors")
    )
    assert "no LM head (lm_head.weight" in str(err.value) and "init_eval.bits_per_byte: false" in str(err.value)
    assert not out.exists() and not out.with_suffix(".png").exists()
    # a job's typed section is built once: the run without bits per byte is another job
    tree = ctx.params.tree
    params = {**tree, "init_eval": {**tree["init_eval"], "bits_per_byte": False}}
    init_eval.run(make_ctx("vocabtransfer.evaluate.init_eval:run", ctx.wildcards, ctx.input, ctx.output, params))
    assert all(r["bits_per_byte"] is None for r in io.read_parquet(out).to_pylist())


def test_plot_has_a_retrieval_panel_only_for_encoders(tmp_path):
    row = dict(
        lang="xx",
        kind="causal",
        perplexity=1.0,
        calibrated_loss=2.5,
        temperature=1.2,
        n_eval_tokens=10,
        n_eval_lines=1,
        retrieval_en2xx=None,
        retrieval_xx2en=None,
        n_sentences=None,
        model="m",
        seconds=0.0,
    )
    rows = [
        {**row, "lang": "en", "method": "source", "loss": 3.0},
        {**row, "method": "a", "loss": 5.0},
        {**row, "method": "b", "loss": 4.0},
        {**row, "method": "c", "loss": 6.0},
    ]
    # the loss axis spans the methods (4.0 to 6.0, calibrated 2.5), padded: not from 0, the source's 3.0 on
    # English text not drawn among them (stated under the axis)
    assert init_eval_plot.loss_limits(rows[1:], None) == pytest.approx((2.5 - 0.175, 6.0 + 0.175))
    init_eval_plot.plot(rows, tmp_path / "causal.png", "xx")
    assert matplotlib.image.imread(tmp_path / "causal.png").shape[:2] == (int(120 * (2.4 + 0.32 * 3)), 120 * 6)
    encoders = [
        {**r, "kind": "masked", "retrieval_en2xx": 0.5, "retrieval_xx2en": 0.25, "n_sentences": 4} for r in rows
    ]
    init_eval_plot.plot(encoders, tmp_path / "masked.png", "xx")
    assert matplotlib.image.imread(tmp_path / "masked.png").shape[:2] == (int(120 * (2.4 + 0.32 * 3)), 120 * 11)
    # the same rows give the same bytes (no timestamp or version in the file)
    init_eval_plot.plot(encoders, tmp_path / "again.png", "xx")
    assert (tmp_path / "again.png").read_bytes() == (tmp_path / "masked.png").read_bytes()


def test_read_xnli_premises_deduplicates_and_aligns(tmp_path):
    (tmp_path / "dev-en.tsv").write_text("a\th\tx\na\th2\tx\nb\th\tx\nc\th\tx\n", encoding="utf-8")
    (tmp_path / "dev-xx.tsv").write_text("A\th\tx\nA\th2\tx\nB\th\tx\nC\th\tx\n", encoding="utf-8")
    src, tgt = retrieval.read_xnli_premises(str(tmp_path / "dev-{lang}.tsv"), "en", "xx", 2)
    assert (src, tgt) == (["a", "b"], ["A", "B"])
    (tmp_path / "dev-yy.tsv").write_text("A\th\tx\n", encoding="utf-8")
    with pytest.raises(VocabTransferError, match="dev-yy.tsv: 1 rows but .*dev-en.tsv has 4"):
        retrieval.read_xnli_premises(str(tmp_path / "dev-{lang}.tsv"), "en", "yy", 2)
    with pytest.raises(VocabTransferError, match="dev-zz.tsv: XNLI file not found"):
        retrieval.read_xnli_premises(str(tmp_path / "dev-{lang}.tsv"), "en", "zz", 2)


def test_retrieval_accuracy():
    a = torch.eye(4)
    assert retrieval.retrieval_accuracy(a, a) == (1.0, 1.0)
    assert retrieval.retrieval_accuracy(a, a[[1, 0, 2, 3]]) == (0.5, 0.5)


def test_inputs_follow_params():
    params = Params({"init": {"methods": ["random", "focus+svd"]}})
    assert eval_plans.init_eval_inputs(params, {"lang": "sw"}) == {
        "source_model": "results/source/model",
        "valid": "results/{lang}/corpus/valid.parquet",
        "train_ids": "results/{lang}/pretokenized/train",
        "train_text": "results/{lang}/corpus/train.parquet",
        "init_random": "results/{lang}/init/random/pseed1",
        "init_focus_svd": "results/{lang}/init/focus+svd/pseed1",
    }
