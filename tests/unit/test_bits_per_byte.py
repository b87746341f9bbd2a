"""Bits per UTF-8 byte (vocabtransfer.evaluate.bits_per_byte): checked by hand against log_softmax on
tiny causal models, bytes per token on a word-level tokenizer, the share of the source's advantage
kept, no bits for a masked LM and a source without its LM head refused."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.evaluate import bits_per_byte
from vocabtransfer.model import modeling
from vocabtransfer.plan.params_root import Params
from vocabtransfer.plan import eval_plans

from helpers import bpe_tokenizer, make_ctx, save_dir, text_lines, tiny_bert, tiny_llama, wordpiece_tokenizer

LINES = [
    "Habari ya asubuhi, rafiki yangu.",
    "Ninapenda kusoma vitabu",
    "Mji wa Nairobi ni mkubwa sana na una watu wengi.",
]
WORDS = ["añb", "cd", "é", "xyz", "hello", "world"]


def word_tokenizer(*, eos: bool = True, bos: bool = False):
    """A word-level tokenizer (whitespace-split words, one token each): its counts are known by hand."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, "<s>": 3, **{w: i + 4 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if bos:
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 3)])
    kwargs = {"eos_token": "</s>"} if eos else {}
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", **({"bos_token": "<s>"} if bos else {}), **kwargs
    )


def by_hand(model, seq: list[int], scored: range) -> float:
    """Σ −log2 p(seq[p] | seq[:p]) over `scored`, from the model's full logits and torch's log_softmax."""
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=torch.tensor([seq])).logits[0].double(), dim=-1)
    return -sum(float(logp[p - 1, seq[p]]) for p in scored) / math.log(2)


@pytest.fixture(scope="module")
def bpe():
    return bpe_tokenizer("sw", 280)


def test_windows_score_every_position_once():
    assert bits_per_byte.windows(8, 1, 5) == [(0, 6, 1)]  # fits: one window, BOS at 0 not scored
    # 1 + 20 positions, seq_len 8, stride 4: 4 tokens of context before each next window, the last one
    # starts seq_len before the end
    assert bits_per_byte.windows(8, 1, 20) == [(0, 8, 1), (4, 12, 8), (8, 16, 12), (12, 20, 16), (13, 21, 20)]
    assert bits_per_byte.windows(8, 0, 3) == [(0, 3, 1)]  # no context: the first token is not scored
    for seq_len, n_context, n in ((5, 1, 37), (2, 0, 9), (9, 2, 50), (128, 1, 3)):
        scored = [p for _, end, first in bits_per_byte.windows(seq_len, n_context, n) for p in range(first, end)]
        assert scored == list(range(max(n_context, 1), n_context + n))
        assert all(end - begin <= seq_len for begin, end, _ in bits_per_byte.windows(seq_len, n_context, n))
    with pytest.raises(VocabTransferError, match="seq_len 1"):
        bits_per_byte.windows(1, 1, 4)


def test_bits_per_byte_by_hand_on_a_tiny_llama(bpe):
    """Three lines, each with the BOS the tokenizer adds as its context, scored in a padded batch of 2:
    the bits of each line are Σ −log2 softmax of the model's own logits, the bytes its UTF-8 bytes."""
    model = tiny_llama(len(bpe)).eval()
    assert bits_per_byte.context_ids(bpe) == [bpe.bos_token_id]
    got = bits_per_byte.score_lines(model, bpe, LINES, seq_len=128, batch_size=2)
    want, tokens = [], []
    for line in LINES:
        own = bpe(line, add_special_tokens=False)["input_ids"]
        seq = [bpe.bos_token_id] + own
        want.append(by_hand(model, seq, range(1, len(seq))))
        tokens.append(len(own))
    np.testing.assert_allclose(got.bits, want, rtol=1e-5)
    assert got.n_tokens.tolist() == tokens and got.n_scored.tolist() == tokens  # every token scored
    assert got.n_bytes.tolist() == [len(s.encode("utf-8")) for s in LINES]
    assert got.bits_per_byte == pytest.approx(sum(want) / sum(len(s.encode("utf-8")) for s in LINES), rel=1e-5)
    # a random model knows nothing: about log2 V bits per token
    assert got.bits.sum() / sum(tokens) == pytest.approx(math.log2(len(bpe)), abs=1.0)
    # a line on its own scores as it does beside the others (no cross-line context, padding ignored)
    alone = bits_per_byte.score_lines(model, bpe, LINES[1:2], seq_len=128, batch_size=1)
    assert alone.bits[0] == pytest.approx(got.bits[1], rel=1e-5)


def test_a_long_line_is_scored_in_windows(bpe):
    """seq_len 8 on a line of many tokens: every token scored once, each window by hand."""
    model = tiny_llama(len(bpe), seed=1).eval()
    line = LINES[2] + " " + LINES[0]
    got = bits_per_byte.score_lines(model, bpe, [line], seq_len=8, batch_size=3)
    seq = [bpe.bos_token_id] + bpe(line, add_special_tokens=False)["input_ids"]
    assert len(seq) > 20
    want = 0.0
    for begin, end, first in bits_per_byte.windows(8, 1, len(seq) - 1):
        want += by_hand(model, seq[begin:end], range(first - begin, end - begin))
    assert got.bits[0] == pytest.approx(want, rel=1e-5)
    assert got.n_scored[0] == got.n_tokens[0] == len(seq) - 1 and got.n_bytes[0] == len(line.encode("utf-8"))
    # the windows do not cut the line: the full-context score differs, the bytes do not
    full = bits_per_byte.score_lines(model, bpe, [line], seq_len=128, batch_size=1)
    assert full.bits[0] == pytest.approx(by_hand(model, seq, range(1, len(seq))), rel=1e-5)
    assert full.n_bytes[0] == got.n_bytes[0] and full.n_scored[0] == got.n_scored[0]


def test_without_bos_the_eos_is_the_context_and_without_either_the_first_token_is_not_scored():
    lines = ["añb cd é", "xyz"]
    for eos in (True, False):
        tok = word_tokenizer(eos=eos)
        model = tiny_llama(len(tok), seed=2).eval()
        got = bits_per_byte.score_lines(model, tok, lines, seq_len=16, batch_size=2)
        assert got.n_bytes.tolist() == [len("añb cd é".encode()), 3] == [10, 3]  # ñ and é take 2 bytes
        assert got.n_tokens.tolist() == [3, 1]
        if eos:  # GPT-2 style: the line follows the end-of-sequence token of the previous one
            assert bits_per_byte.context_ids(tok) == [1] and got.n_scored.tolist() == [3, 1]
            want = [by_hand(model, [1, 4, 5, 6], range(1, 4)), by_hand(model, [1, 7], range(1, 2))]
        else:  # nothing to condition the first token on: not scored, its bytes counted anyway
            assert bits_per_byte.context_ids(tok) == [] and got.n_scored.tolist() == [2, 0]
            want = [by_hand(model, [4, 5, 6], range(1, 3)), 0.0]
        np.testing.assert_allclose(got.bits, want, rtol=1e-5)
        assert got.bits_per_byte == pytest.approx(sum(want) / 13, rel=1e-5)


def test_bytes_per_token_by_hand():
    tok = word_tokenizer(bos=True)
    lines = ["añb cd é", "hello world", "xyz xyz xyz"]
    ids, n_bytes, n_tokens = bits_per_byte.line_counts(tok, lines)
    assert n_bytes.tolist() == [10, 11, 11] and n_tokens.tolist() == [3, 2, 3]  # the BOS is not a token of the text
    assert ids[1] == [8, 9]
    assert bits_per_byte.bytes_per_token(n_bytes, n_tokens) == pytest.approx(32 / 8)
    assert math.isnan(bits_per_byte.bytes_per_token(np.array([3]), np.array([0])))
    model = tiny_llama(len(tok), seed=3).eval()
    got = bits_per_byte.score_lines(model, tok, lines, seq_len=16, batch_size=8)
    assert got.bytes_per_token == pytest.approx(32 / 8) and bits_per_byte.context_ids(tok) == [3]


def test_share_kept():
    """(floor − method) / (floor − source), the floor being the best predictor without a model."""
    assert bits_per_byte.share_kept(4.0, 3.0, 2.0) == pytest.approx(0.5)
    assert bits_per_byte.share_kept(4.0, 4.0, 2.0) == 0.0 and bits_per_byte.share_kept(4.0, 2.0, 2.0) == 1.0
    assert bits_per_byte.share_kept(4.0, 1.0, 2.0) == pytest.approx(1.5)  # better than the source
    assert bits_per_byte.share_kept(4.0, 5.0, 2.0) == pytest.approx(-0.5)  # worse than the floor
    # the source does not beat the floor (nothing to keep), or a value is missing
    for bad in ((2.0, 1.0, 2.0), (2.0, 1.0, 3.0), (math.nan, 1.0, 0.5), (3.0, None, 1.0)):
        assert math.isnan(bits_per_byte.share_kept(*bad)), bad


def test_a_masked_lm_gets_no_bits():
    wp = wordpiece_tokenizer("en")
    got = bits_per_byte.score_lines(tiny_bert(len(wp)), wp, LINES[:2], seq_len=64, batch_size=2, kind="masked")
    assert np.isnan(got.bits).all() and math.isnan(got.bits_per_byte)
    assert got.n_tokens.min() > 0 and got.bytes_per_token > 0  # its tokenizer is still counted
    assert "causal LM" in bits_per_byte.MASKED_REASON


def test_a_source_without_its_lm_head_is_refused(tmp_path, bpe):
    """A bare LlamaModel (no lm_head, untied) loads with a random head: asked for bits per byte, it is
    refused in one line naming the file and the way out."""
    from transformers import LlamaModel

    body = LlamaModel(tiny_llama(len(bpe)).config)
    directory = save_dir(body, bpe, tmp_path / "source" / "model")
    _, kind, loading = modeling.load_source_model(directory, output_loading_info=True)
    assert kind == "causal" and loading.head_missing
    with pytest.raises(VocabTransferError) as err:
        bits_per_byte.require_lm_head(directory, loading, "init_eval.bits_per_byte")
    message = str(err.value)
    assert "\n" not in message and message.startswith(str(directory / "model.safetensors"))
    assert "lm_head.weight" in message and "init_eval.bits_per_byte: false" in message
    _, _, complete = modeling.load_source_model(
        save_dir(tiny_llama(len(bpe)), bpe, tmp_path / "full"), output_loading_info=True
    )
    bits_per_byte.require_lm_head(tmp_path / "full", complete, "init_eval.bits_per_byte")  # a head: nothing to say


# ------------------------------------------------------------------ after pretraining: token_frequency_loss


def tfl_study(tmp_path, source_model, source_tok, tok):
    """Pre-tokenised splits, valid text, a source and the focus init + standard model of two pretraining seeds."""
    import pyarrow as pa

    from vocabtransfer import io

    from vocabtransfer.data import token_ids

    def encode(lines, path):
        token_ids.write_lines(path, tok, tok(lines, add_special_tokens=False)["input_ids"])

    xx = tmp_path / "xx"
    encode(text_lines("sw", 60), xx / "pretokenized" / "train")
    io.write_parquet(pa.table({"text": text_lines("sw", 60)}), xx / "corpus" / "train.parquet")
    valid = text_lines("sw", 12, start=2000) + [LINES[2] * 4]  # the last one is longer than seq_len
    encode(valid, xx / "pretokenized" / "valid")
    io.write_parquet(pa.table({"text": valid}), xx / "corpus" / "valid.parquet")
    params = {
        "seed": 5,
        "languages": ["xx"],
        "init": {"methods": ["focus", "mean"]},  # mean: not pretrained
        "pretrain": {"methods": ["focus"], "objectives": ["standard"], "seeds": 2},
        "token_frequency_loss": {
            "buckets": 2,
            "scheme": "equal_types",
            "max_lines": 13,
            "seq_len": 32,
            "batch_size": 4,
            "bits_per_byte": True,
        },
    }
    models = {}
    scored = eval_plans.scored_models(Params(params), "xx") + eval_plans.zero_shot_models(Params(params), "xx")
    for k, (m, o, s) in enumerate(scored):
        sub = f"init/{m}/pseed{s}" if o == "init" else f"pretrain/{m}/{o}/pseed{s}"
        models[(m, o, s)] = tiny_llama(len(tok), seed=10 + k)
        save_dir(models[(m, o, s)], tok, xx / sub / "model")
    inputs = {
        "train_ids": xx / "pretokenized" / "train",
        "valid_ids": xx / "pretokenized" / "valid",
        "valid_text": xx / "corpus" / "valid.parquet",
        "train_text": xx / "corpus" / "train.parquet",
        "source_model": save_dir(source_model, source_tok, tmp_path / "source" / "model"),
        **{
            eval_plans.model_key(*key): xx
            / (f"init/{key[0]}/pseed{key[2]}" if key[1] == "init" else f"pretrain/{key[0]}/{key[1]}/pseed{key[2]}")
            for key in models
        },
    }
    out = {
        "table": xx / "tfl.parquet",
        "blocks": xx / "blocks.parquet",
        "bits_per_byte": xx / "bits_per_byte.parquet",
        "plot": xx / "tfl.png",
    }
    return (
        make_ctx("vocabtransfer.evaluate.token_frequency_loss:run", {"lang": "xx"}, inputs, out, params),
        models,
        valid,
        out,
    )


def test_token_frequency_loss_writes_bits_per_line_for_every_model_and_the_source(tmp_path, bpe, caplog):
    from vocabtransfer import io
    from vocabtransfer.evaluate import bpb_floor, token_frequency_loss

    en = bpe_tokenizer("en")
    source = tiny_llama(len(en), seed=7)
    ctx, models, valid, out = tfl_study(tmp_path, source, en, bpe)
    with caplog.at_level("INFO", logger="vocabtransfer.evaluate.token_frequency_loss"):
        token_frequency_loss.run(ctx)
    table = io.read_parquet(out["bits_per_byte"])
    assert table.schema == token_frequency_loss.BPB_SCHEMA
    df = table.to_pandas()
    keys = list(dict.fromkeys(zip(df["method"], df["objective"], df["pseed"])))
    floors = [("floor", name, 0) for name in bpb_floor.NAMES]  # beside the models, line by line
    assert keys == [
        ("source", "source", 0),
        *floors,
        ("focus", "init", 1),
        ("focus", "init", 2),
        ("focus", "standard", 1),
        ("focus", "standard", 2),
        ("mean", "init", 1),
    ]  # mean, only initialised: bits per byte only
    frequency = io.read_parquet(out["table"]).to_pandas()
    assert "mean" not in set(frequency["method"])  # not in the frequency-bucket table
    n_bytes = [len(s.encode("utf-8")) for s in valid]
    want_floors = bpb_floor.floor_scores(bpe, ctx.input["train_ids"], en, ctx.input["train_text"], valid)
    for name, want in want_floors.items():
        g = df[(df["method"] == "floor") & (df["objective"] == name)]
        np.testing.assert_allclose(g["bits"].to_numpy(), want.bits)
        assert g["n_scored"].tolist() == want.n_scored.tolist() and g["n_bytes"].tolist() == want.n_bytes.tolist()
    df = df[df["method"] != "floor"]
    for (m, o, s), g in df.groupby(["method", "objective", "pseed"], sort=False):
        model, tok = (source, en) if m == "source" else (models[(m, o, s)], bpe)
        want = bits_per_byte.score_lines(model.eval(), tok, valid, seq_len=32, batch_size=4)
        assert g["line"].tolist() == list(range(len(valid))) and g["n_bytes"].tolist() == n_bytes
        np.testing.assert_allclose(g["bits"].to_numpy(), want.bits, rtol=1e-5)
        assert (g["n_scored"] == g["n_tokens"]).all()  # a BOS before every line: every token scored
    long = df[(df["method"] == "focus") & (df["line"] == len(valid) - 1)]
    assert (long["n_tokens"] > 32).all()  # scored in windows, not cut
    assert "source model, own tokenizer:" in caplog.text and "bits per byte" in caplog.text


def test_token_frequency_loss_refuses_a_source_without_its_lm_head(tmp_path, bpe):
    from transformers import LlamaModel

    from vocabtransfer.evaluate import token_frequency_loss

    ctx, _, _, out = tfl_study(tmp_path, LlamaModel(tiny_llama(len(bpe)).config), bpe, bpe)
    with pytest.raises(
        VocabTransferError, match=r"model\.safetensors: no LM head .*token_frequency_loss\.bits_per_byte: false"
    ):
        token_frequency_loss.run(ctx)
    assert not any(path.exists() for path in out.values())  # nothing partial
