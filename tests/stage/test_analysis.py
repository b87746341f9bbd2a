"""Stages `token_frequency_loss` and `gradient_scenarios` on hand-made counts and tiny models."""

from __future__ import annotations

import math

import matplotlib.image
import numpy as np
import pyarrow as pa
import pytest
import torch

from vocabtransfer.data import token_ids
from vocabtransfer.evaluate import frequencies, gradient_scenarios
from vocabtransfer import io
from vocabtransfer.model import lm_loss, modeling
from vocabtransfer.model.lmdata import lm_batches, pack_lines
from vocabtransfer.evaluate import token_frequency_loss
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.model.losses import objective_loss
from vocabtransfer.plan import eval_plans

from helpers import filled_params, make_ctx, save_dir, text_lines, tiny_bert, tiny_llama, wordpiece_tokenizer

#               id: 0   1  2  3  4  5  6  7
COUNTS = np.array([0, 10, 5, 5, 1, 0, 3, 2])
# ranks: id 1 -> 0, 2 -> 1, 3 -> 2 (tie with 2: smaller id first), 6 -> 3, 7 -> 4, 4 -> 5; unseen 0 -> 6, 5 -> 7


def test_frequency_ranks_and_equal_type_buckets():
    assert frequencies.frequency_ranks(COUNTS).tolist() == [6, 0, 1, 2, 5, 7, 3, 4]
    bucket, spans = frequencies.frequency_buckets(COUNTS, 3, "equal_types")
    # 6 seen types in 3 buckets of 2 ranks each; the 2 unseen types in bucket 3
    assert spans == [(0, 1, 2), (2, 3, 2), (4, 5, 2), (6, 7, 2)]
    assert bucket.tolist() == [3, 0, 0, 1, 2, 3, 1, 2]


def test_log_buckets():
    # edges floor(geomspace(1, 7, 4)) - 1 = floor(1, 1.91, 3.66, 7) - 1 = 0, 0, 2, 6 -> 0, 2, 6
    bucket, spans = frequencies.frequency_buckets(COUNTS, 3, "log")
    assert spans == [(0, 1, 2), (2, 5, 4), (6, 7, 2)]
    assert bucket.tolist() == [2, 0, 0, 1, 1, 2, 1, 1]
    with pytest.raises(VocabTransferError, match="token_frequency_loss.scheme"):
        frequencies.frequency_buckets(COUNTS, 3, "quantile")


def test_bucket_means_on_known_losses(monkeypatch):
    """Two batches of fixed logits: zeros except a logit a at the target, so a token's loss is
    log(7 + e^a) - a; the bucket means are worked out from the counts above."""
    targets = [torch.tensor([1, 2, 6, 0]), torch.tensor([4, 1, 5, 7, 3])]
    boost = [torch.tensor([2.0, 0.0, 1.0, -1.0]), torch.tensor([0.5, 1.0, 0.0, 3.0, 2.0])]

    def fixed(model, batch, kind, objective):
        t, a = targets[batch["i"]], boost[batch["i"]]
        logits = torch.zeros(len(t), 8)
        logits[torch.arange(len(t)), t] = a
        return torch.nn.functional.cross_entropy(logits, t, reduction="none"), t

    monkeypatch.setattr(lm_loss, "token_losses", fixed)
    bucket, spans = frequencies.frequency_buckets(COUNTS, 3, "equal_types")
    # batch 0: two blocks, predicted positions in block 0 (x2) and block 1 (x2); batch 1: one block of five
    labels = [torch.tensor([[1, 2, -100], [6, -100, 0]]), torch.tensor([[4, 1, 5, 7, 3]])]
    batches = [{"i": 0, "labels": labels[0]}, {"i": 1, "labels": labels[1]}]
    per_block, per_block_n = frequencies.bucket_losses(torch.nn.Linear(1, 1), batches, "masked", bucket, len(spans))
    assert per_block_n.tolist() == [[2, 0, 0, 0], [0, 1, 0, 1], [1, 1, 2, 1]]  # (blocks, buckets)
    sums, n = per_block.sum(0), per_block_n.sum(0)

    def ce(a):
        return math.log(7 + math.exp(a)) - a

    # bucket 0: ids 1, 2 -> targets 1 (a=2), 2 (a=0), 1 (a=1); bucket 1: ids 3, 6 -> 6 (a=1), 3 (a=2);
    # bucket 2: ids 4, 7 -> 4 (a=.5), 7 (a=3); bucket 3 (unseen): 0 (a=-1), 5 (a=0)
    expected = [[ce(2), ce(0), ce(1)], [ce(1), ce(2)], [ce(0.5), ce(3)], [ce(-1), ce(0)]]
    assert n.tolist() == [3, 2, 2, 2]
    assert (sums / n).tolist() == pytest.approx([sum(e) / len(e) for e in expected])
    rows = frequencies.rows_for("xx", "m", "init", 1, spans, sums, n)
    assert [r["loss"] for r in rows] == pytest.approx([sum(e) / len(e) for e in expected])
    assert [r["rank_lo"] for r in rows] == [0, 2, 4, 6] and rows[3]["n_types"] == 2


@pytest.fixture(scope="module")
def wp():
    return wordpiece_tokenizer("en", vocab_size=200, n_lines=200)


def test_token_counts_add_the_special_tokens(wp, tmp_path):
    token_ids.write_lines(tmp_path / "ids", wp, [[10, 11, 11], [12], []])
    counts = frequencies.token_counts(token_ids.TokenIds(tmp_path / "ids", wp), wp, "masked")
    assert counts[11] == 2 and counts[10] == 1 and counts[12] == 1
    assert counts[wp.cls_token_id] == 3 and counts[wp.sep_token_id] == 3
    assert counts.sum() == 4 + 6
    token_ids.write_lines(tmp_path / "bad", wp, [[len(wp)]])
    with pytest.raises(VocabTransferError, match="bad/ids.npy: token id .* outside the tokenizer"):
        frequencies.token_counts(token_ids.TokenIds(tmp_path / "bad", wp), wp, "masked")


# ------------------------------------------------------------------ gradient decomposition


def gpt2(vocab: int, seed: int = 0):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    return GPT2LMHeadModel(
        GPT2Config(vocab_size=vocab, n_embd=32, n_layer=2, n_head=2, n_positions=64, bos_token_id=0, eos_token_id=1)
    )


def causal_batch(vocab: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (3, 12), generator=g)
    mask = torch.ones_like(ids)
    mask[2, 9:] = 0
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def autograd_gradients(model, batch, kind, objective, margin=2.0):
    """Plain autograd: the gradient of the embedding matrices for the same loss."""
    model.eval()
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    labels = batch["labels"]
    if kind == "causal":
        logits, labels = logits[:, :-1], labels[:, 1:]
    sel = labels != -100
    objective_loss(objective, logits[sel].float(), labels[sel], margin=margin).backward()
    inp, out = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    grads = (inp.grad.clone(), out.grad.clone() if out is not inp else None)
    model.zero_grad(set_to_none=True)
    return grads


@pytest.mark.parametrize("objective", ["standard", "selfish"])
def test_decomposition_sums_to_autograd_tied_bert(objective, wp, one_thread):
    model = tiny_bert(len(wp))
    assert modeling.is_tied(model)
    batch = lm_batches(wp, pack_lines(wp, text_lines("en", 12), 32), "masked", 4, seed=1)[0]
    model.eval()
    parts = gradient_scenarios.decompose(model, batch, "masked", objective, margin=1.0)
    full, _ = autograd_gradients(model, batch, "masked", objective, margin=1.0)
    total = parts["input"] + parts["output_target"] + parts["output_nontarget"]
    torch.testing.assert_close(total, full, rtol=1e-4, atol=1e-6)
    for p in gradient_scenarios.PARTS:
        assert parts[p].norm() > 0
    # target rows only where a token is a target, input rows only where it is an input
    targets = set(batch["labels"][batch["labels"] != -100].tolist())
    nonzero = set(parts["output_target"].norm(dim=1).nonzero()[:, 0].tolist())
    assert nonzero <= targets
    assert set(parts["input"].norm(dim=1).nonzero()[:, 0].tolist()) <= set(batch["input_ids"].flatten().tolist())


def test_selfish_nontarget_gradient_is_smaller_than_standard(wp, one_thread):
    model = tiny_bert(len(wp), seed=4)
    with torch.no_grad():  # spread the logits (a random model's are all alike), so the margin bites
        modeling.output_bias(model).copy_(torch.randn(len(wp), generator=torch.Generator().manual_seed(0)) * 3)
    batch = lm_batches(wp, pack_lines(wp, text_lines("en", 12), 32), "masked", 4, seed=1)[0]
    model.eval()
    std = gradient_scenarios.decompose(model, batch, "masked", "standard")["output_nontarget"].norm(dim=1)
    sel = gradient_scenarios.decompose(model, batch, "masked", "selfish", margin=1.0)["output_nontarget"].norm(dim=1)
    # the tokens far below the targets leave the softmax, so most tokens are pushed less; the kept
    # ones share the renormalised mass, so the total need not drop
    assert (sel < std).float().mean() > 0.7


def test_decomposition_tied_gpt2(one_thread):
    model = gpt2(50)
    batch = causal_batch(50)
    model.eval()
    parts = gradient_scenarios.decompose(model, batch, "causal", "selfish")
    full, _ = autograd_gradients(model, batch, "causal", "selfish")
    torch.testing.assert_close(
        parts["input"] + parts["output_target"] + parts["output_nontarget"], full, rtol=1e-4, atol=1e-6
    )


def test_decomposition_untied_llama(one_thread):
    model = tiny_llama(50)
    assert not modeling.is_tied(model)
    batch = causal_batch(50, seed=2)
    model.eval()
    parts = gradient_scenarios.decompose(model, batch, "causal", "standard")
    inp, out = autograd_gradients(model, batch, "causal", "standard")
    torch.testing.assert_close(parts["input"], inp, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(parts["output_target"] + parts["output_nontarget"], out, rtol=1e-4, atol=1e-6)


# ------------------------------------------------------------------ both stages end to end


def encode(tok, lines, path):
    token_ids.write_lines(path, tok, tok(lines, add_special_tokens=False)["input_ids"])


def test_stages_end_to_end(tmp_path, wp, one_thread, caplog):
    pretok = tmp_path / "xx" / "pretokenized"
    encode(wp, text_lines("en", 150), pretok / "train")
    encode(wp, text_lines("en", 40, start=2000), pretok / "valid")
    init = save_dir(tiny_bert(len(wp), seed=0), wp, tmp_path / "xx" / "init" / "focus" / "pseed1" / "model").parent
    pre = {
        o: save_dir(
            tiny_bert(len(wp), seed=s), wp, tmp_path / "xx" / "pretrain" / "focus" / o / "pseed1" / "model"
        ).parent
        for o, s in (("standard", 1), ("selfish", 2))
    }
    params = filled_params(
        {
            "seed": 5,
            "languages": ["xx"],
            "init": {"methods": ["focus"]},
            "pretrain": {
                "methods": ["focus"],
                "objectives": ["standard", "selfish"],
                "seeds": 1,
                "pairs": None,
                "selfish": {"margin": 2.0},
            },
            "token_frequency_loss": {
                "buckets": 4,
                "scheme": "equal_types",
                "max_lines": 40,
                "seq_len": 64,
                "batch_size": 8,
                "bits_per_byte": True,
            },
            "gradient_scenarios": {"batches": 2, "batch_size": 4, "seq_len": 64, "plot_bins": 10},
        }
    )
    assert eval_plans.scored_models(params, "xx") == [
        ("focus", "init", 1),
        ("focus", "standard", 1),
        ("focus", "selfish", 1),
    ]

    # token_frequency_loss
    io.write_parquet(pa.table({"text": text_lines("en", 40, start=2000)}), tmp_path / "xx" / "corpus" / "valid.parquet")
    source = save_dir(tiny_bert(len(wp), seed=9), wp, tmp_path / "source" / "model")
    inputs = {
        "train_ids": pretok / "train",
        "valid_ids": pretok / "valid",
        "valid_text": tmp_path / "xx" / "corpus" / "valid.parquet",
        "source_model": source,
        eval_plans.model_key("focus", "init", 1): init,
        **{eval_plans.model_key("focus", o, 1): d for o, d in pre.items()},
    }
    out = tmp_path / "xx" / "token_frequency_loss.parquet"
    blocks = tmp_path / "xx" / "token_frequency_blocks.parquet"
    bpb = tmp_path / "xx" / "bits_per_byte.parquet"
    ctx = make_ctx(
        "vocabtransfer.evaluate.token_frequency_loss:run",
        {"lang": "xx"},
        inputs,
        {"table": out, "blocks": blocks, "bits_per_byte": bpb, "plot": out.with_suffix(".png")},
        params,
    )
    with caplog.at_level("INFO", logger="vocabtransfer.evaluate.token_frequency_loss"):
        token_frequency_loss.run(ctx)
    table = io.read_parquet(out)
    assert table.schema == token_frequency_loss.SCHEMA
    rows = table.to_pylist()
    models = list(dict.fromkeys((r["method"], r["objective"]) for r in rows))
    assert models == [("focus", "init"), ("focus", "standard"), ("focus", "selfish")]
    by_model = {m: [r for r in rows if (r["method"], r["objective"]) == m] for m in models}
    # paired: every model scored on the same tokens; 4 seen buckets + the unseen one cover the vocabulary
    n_tokens = [[r["n_tokens"] for r in rs] for rs in by_model.values()]
    assert n_tokens[0] == n_tokens[1] == n_tokens[2] and sum(n_tokens[0]) > 50
    assert [r["bucket"] for r in rows[:5]] == [0, 1, 2, 3, 4] and sum(r["n_types"] for r in rows[:5]) == len(wp)
    # random models: every loss near log(V); the head is scored, bucket 0 holds the most tokens
    for r in rows:
        assert r["n_tokens"] == 0 or abs(r["loss"] - math.log(len(wp))) < 1.5
    assert n_tokens[0][0] == max(n_tokens[0])
    assert matplotlib.image.imread(out.with_suffix(".png")).shape[1] > 300
    assert "| focus | selfish |" in caplog.text
    # per held-out block: the cells add up to each model's bucket totals
    cells = io.read_parquet(blocks).to_pandas()
    assert io.read_parquet(blocks).schema == token_frequency_loss.BLOCKS_SCHEMA and cells["n_tokens"].min() > 0
    for (m, o, b), g in cells.groupby(["method", "objective", "bucket"]):
        row = next(r for r in rows if (r["method"], r["objective"], r["bucket"]) == (m, o, b))
        assert g["n_tokens"].sum() == row["n_tokens"]
        assert g["loss_sum"].sum() / g["n_tokens"].sum() == pytest.approx(row["loss"])
    # masked LMs: no bits per byte (null, and the log says why), their tokens and bytes per valid line counted
    lines = io.read_parquet(bpb)
    # the source and the three models
    assert lines.schema == token_frequency_loss.BPB_SCHEMA and lines.num_rows == 4 * 40
    per_line = lines.to_pandas()
    assert per_line["bits"].isna().all() and "bits per byte needs a causal LM" in caplog.text
    focus = per_line[per_line["objective"] == "standard"]
    assert focus["n_tokens"].tolist() == [len(x) for x in token_ids.TokenIds(pretok / "valid").lines()]
    assert focus["n_bytes"].tolist() == [len(x.encode("utf-8")) for x in text_lines("en", 40, start=2000)]

    # gradient_scenarios for the selfish job
    gout = tmp_path / "xx" / "gradients" / "focus" / "selfish" / "pseed1.parquet"
    gctx = make_ctx(
        "vocabtransfer.evaluate.gradient_scenarios:run",
        {"lang": "xx", "method": "focus", "objective": "selfish", "pseed": "1"},
        {"train_ids": pretok / "train", "init": init, "pretrain": pre["selfish"]},
        {"table": gout, "plot": gout.with_suffix(".png")},
        params,
    )
    gradient_scenarios.run(gctx)
    gt = io.read_parquet(gout)
    assert gt.schema == gradient_scenarios.SCHEMA and gt.num_rows == 2 * len(wp)
    d = gt.to_pandas()
    assert list(d["phase"].unique()) == ["start", "end"]
    start = d[d["phase"] == "start"]
    assert sorted(start["rank"]) == list(range(len(wp)))
    # input gradient exactly on the tokens of the sampled batches (after masking: [MASK] and random
    # replacements too), target gradient exactly on their targets
    batches = gradient_scenarios.sample_batches(
        wp, frequencies.read_ids(pretok / "train", wp), "masked", batches=2, batch_size=4, seq_len=64, seed=5
    )
    inputs_seen = set(torch.cat([b["input_ids"][b["attention_mask"] == 1] for b in batches]).tolist())  # no padding
    targets_seen = set(torch.cat([b["labels"][b["labels"] != -100] for b in batches]).tolist())
    assert set(start.loc[start["input_norm"] > 0, "token_id"]) == inputs_seen
    assert set(start.loc[start["output_target_norm"] > 0, "token_id"]) == targets_seen
    assert wp.mask_token_id in inputs_seen and len(targets_seen) > 20
    assert (start["output_nontarget_norm"] > 0).sum() > 150
    # the most frequent tokens collect more target-side gradient than the rarest seen ones
    seen = start[start["count"] > 0].sort_values("rank")
    assert seen["output_target_norm"].head(20).mean() > seen["output_target_norm"].tail(20).mean()
    assert matplotlib.image.imread(gout.with_suffix(".png")).shape[1] > 300
