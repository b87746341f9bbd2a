"""Stage `init_eval`: how good is each initialisation before any training?

For target language L and every method in params `init.methods` (results/L/init/<method>/model):

(a) language-model loss on the held-out target text (results/L/corpus/valid.parquet, the first
    `init_eval.max_lines` lines, packed into blocks of `seq_len` tokens): masked-LM loss for
    encoders, causal-LM loss for decoders, and its perplexity. The masking is seeded and every
    method shares the target tokenizer, so all methods are scored on the same masked tokens
    (a paired comparison). Next to it the temperature-calibrated loss: the same logits divided by
    the one temperature that minimises the loss (`calibrated_loss`, `temperature`). Right after
    initialisation the encoder has never seen the target language, so the raw loss mixes how well
    a method ranks the right token with how over-confident its logits are; the calibrated loss
    measures the ranking alone (see `lm_loss.evaluate_lm`);
(b) encoders only: parallel-sentence retrieval on XNLI dev premises (`evaluate.retrieval`). N distinct
    source-language premises (`init_eval.xnli` with lang = `init_eval.source_lang`) are embedded by the source
    model, the same rows of the target-language file by the initialised model (mean pooling of the
    last hidden state over the attention mask); top-1 accuracy of the cosine-similarity matrix
    both ways (`retrieval_en2xx`: source sentence -> its translation, `retrieval_xx2en` back).

(c) a measure that does not depend on the tokenizer (`init_eval.bits_per_byte`): bits per UTF-8
    byte of the same valid lines, each line scored alone (`evaluate.bits_per_byte`, where the exact
    definition is), for every causal model and for the source model with its own tokenizer;
    `bytes_per_token` of each model's tokenizer on those lines (what the target tokenizer saves); beside
    them the floors, predictors without a model on the same tokens (`evaluate.bpb_floor`: the unigrams
    of the target and the source tokenizer fitted on the train split, the uniform guess over the target
    vocabulary; rows `floor:<name>`, kind `floor`), and `share_kept` = (BPB_floor − BPB_method) /
    (BPB_floor − BPB_source) from the best (lowest) floor, null where the source does not beat it. A
    masked LM keeps its per-token loss: its bits per byte and share are null, no bits-per-byte floor is
    scored, and the log says why. A causal source without its LM head is refused.

(d) the floor every method must beat to use any context (row `floor:unigram-target`, kind `floor`, for
    masked and causal models; a causal model's row also holds its bits per byte): the add-one unigram of the train
    split's target ids scoring exactly the tokens the methods are scored on (the same blocks and masks), its loss in
    nats per token like theirs.

Every loss row keeps its summed loss and predicted tokens per valid block (`block_loss`, `block_tokens`):
the report pairs two methods, or a method and the floor, block by block (its family "Right after
initialisation"), with a bootstrap interval over the blocks.

A reference row (method `source`, lang = the source language) gives the source model's loss on
held-out source text (the last lines of `source_head.text`, which source_head never trained on)
and, as the no-transfer baseline for retrieval, the source model with its own tokenizer on the
target-language sentences; its `bits_per_byte`, `bytes_per_token` and `n_bytes`, like every row's,
are on the target-language valid lines. Output: results/L/init_eval.parquet, a Markdown table in
the log, and results/L/init_eval.png: loss per method against the source reference, and retrieval
both ways.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path

import pyarrow as pa

from vocabtransfer import io
from vocabtransfer.evaluate import bits_per_byte, bpb_floor, init_eval_plot
from vocabtransfer.evaluate.retrieval import read_xnli_premises, retrieval_accuracy, sentence_embeddings
from vocabtransfer.plan import availability
from vocabtransfer.model import lm_loss, modeling
from vocabtransfer.model.hub import load_tokenizer
from vocabtransfer.model.lmdata import Kind, lm_batches, pack_lines, read_lines, target_labels
from vocabtransfer.pipeline import paths
from vocabtransfer.pipeline.stage_spec import Context
from vocabtransfer.plan.params_root import Params
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.plan.eval_params import InitEvalParams
from vocabtransfer.plan.eval_plans import input_key
from vocabtransfer.train.pretrain_outputs import unigram_block_sums

log = logging.getLogger(__name__)


SCHEMA = pa.schema(
    [
        ("lang", pa.string()),
        ("method", pa.string()),
        ("kind", pa.string()),
        ("loss", pa.float64()),
        ("perplexity", pa.float64()),
        ("calibrated_loss", pa.float64()),
        ("temperature", pa.float64()),
        ("n_eval_tokens", pa.int64()),
        ("n_eval_lines", pa.int64()),
        ("bits_per_byte", pa.float64()),
        ("bytes_per_token", pa.float64()),
        ("n_bytes", pa.int64()),
        ("share_kept", pa.float64()),
        ("retrieval_en2xx", pa.float64()),
        ("retrieval_xx2en", pa.float64()),
        ("n_sentences", pa.int64()),
        ("model", pa.string()),
        ("seconds", pa.float64()),
        # the summed loss and the predicted tokens of every valid block (the report's paired bootstrap resamples them)
        ("block_loss", pa.list_(pa.float64())),
        ("block_tokens", pa.list_(pa.int64())),
    ]
)


def lm_eval(model, tokenizer, kind: Kind, lines: list[str], *, seq_len: int, batch_size: int, seed: int) -> dict:
    blocks = pack_lines(tokenizer, lines, seq_len, kind=kind)
    if not blocks:
        raise VocabTransferError("init_eval: no text to evaluate on (empty valid split or max_lines = 0)")
    return lm_loss.evaluate_lm(model, lm_batches(tokenizer, blocks, kind, batch_size, seed), kind, calibrate=True)


def loss_columns(res: dict) -> dict:
    """The loss columns of an init_eval row from `lm_eval`'s result."""
    return {
        "loss": res["loss"],
        "perplexity": res["perplexity"],
        "calibrated_loss": res["calibrated_loss"],
        "temperature": res["temperature"],
        "n_eval_tokens": res["n_tokens"],
        "block_loss": res["block_loss"],
        "block_tokens": res["block_tokens"],
    }


def unigram_loss(tokenizer, kind: Kind, lines: list[str], counts, *, seq_len: int, batch_size: int, seed: int) -> dict:
    """The loss columns of the unigram floor: each predicted token of `lm_eval`'s blocks (the same blocks and
    masks as every method's, seeded alike) scored by the add-one unigram of the train split's ids (`counts`),
    in nats; a model below it uses no context."""

    batches = lm_batches(tokenizer, pack_lines(tokenizer, lines, seq_len, kind=kind), kind, batch_size, seed)
    sums = unigram_block_sums(batches, kind, counts)
    tokens = [int(n) for b in batches for n in (target_labels(b, kind) != -100).sum(1)]
    total, count = math.fsum(sums), sum(tokens)
    return {
        "loss": total / count if count else math.nan,
        "n_eval_tokens": count,
        "block_loss": sums,
        "block_tokens": tokens,
    }


def bpb_columns(model, tokenizer, kind: Kind, lines: list[str], *, asked: bool, seq_len: int, batch_size: int) -> dict:
    """`bits_per_byte` (causal LMs, when asked), `bytes_per_token` and `n_bytes` of a model on the valid lines
    (each line tokenised once: scored, or only counted)."""
    if asked and kind == "causal":
        scores = bits_per_byte.score_lines(model, tokenizer, lines, seq_len=seq_len, batch_size=batch_size)
        bits, n_bytes, n_tokens = scores.bits_per_byte, scores.n_bytes, scores.n_tokens
    else:
        (_, n_bytes, n_tokens), bits = bits_per_byte.line_counts(tokenizer, lines), None
    return {
        "bits_per_byte": bits,
        "bytes_per_token": bits_per_byte.bytes_per_token(n_bytes, n_tokens),
        "n_bytes": int(n_bytes.sum()),
    }


def floor_rows(lang: str, scores: dict[str, bits_per_byte.LineScores]) -> list[dict]:
    """One row per floor (kind `floor`): its bits per byte and bytes per token on the valid lines."""
    out = []
    for name, sc in scores.items():
        row = dict.fromkeys(SCHEMA.names)
        row.update(
            lang=lang,
            method=f"{bpb_floor.FLOOR}:{name}",
            kind=bpb_floor.FLOOR,
            n_eval_lines=len(sc.n_bytes),
            bits_per_byte=sc.bits_per_byte,
            bytes_per_token=sc.bytes_per_token,
            n_bytes=int(sc.n_bytes.sum()),
            seconds=0.0,
        )
        out.append(row)
    return out


def add_share_kept(rows: list[dict]) -> None:
    """`share_kept` of every method row, from the best floor row and the source row (null without either, or
    where the source does not beat the floor)."""
    source = next((r["bits_per_byte"] for r in rows if r["method"] == "source"), None)
    best = bpb_floor.best({r["method"]: r["bits_per_byte"] for r in rows if r["kind"] == bpb_floor.FLOOR})
    for r in rows:
        r["share_kept"] = None
        if (
            r["method"] != "source"
            and r["kind"] != bpb_floor.FLOOR
            and source is not None
            and best is not None
            and r["bits_per_byte"] is not None
        ):
            share = bits_per_byte.share_kept(best.bits_per_byte, r["bits_per_byte"], source)
            r["share_kept"] = None if math.isnan(share) else share


def markdown(rows: list[dict]) -> str:
    cols = [
        "lang",
        "method",
        "loss",
        "perplexity",
        "calibrated_loss",
        "temperature",
        "retrieval_en2xx",
        "retrieval_xx2en",
        "n_eval_tokens",
        "bits_per_byte",
        "bytes_per_token",
        "share_kept",
    ]

    def fmt(v):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "–"
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def _shared_inputs(ctx: Context, opts: InitEvalParams, methods: list[str]):
    """The texts every row reads: the target valid lines, the source text's lines held out by
    source_head, and the XNLI premise pairs of the retrieval (none where it cannot run)."""
    valid = bits_per_byte.valid_lines(ctx.input["valid"], opts.max_lines)
    source_text = paths.data_path(ctx.params.source_head.text)
    n_ref = min(opts.max_lines, ctx.params.source_head.eval_lines)
    source_lines = read_lines(source_text)[-n_ref:]  # held out by source_head
    no_retrieval = availability.retrieval_reason(ctx.params, ctx.lang)
    if no_retrieval:
        log.info("init_eval %s: no retrieval (%s)", ctx.lang, no_retrieval)
        src_sent: list[str] = []
        tgt_sent: list[str] = []
    else:
        src_sent, tgt_sent = read_xnli_premises(opts.xnli, opts.source_lang, ctx.lang, opts.retrieval_sentences)
    log.info(
        "init_eval %s: %d valid lines, %d held-out %s lines, %d XNLI premise pairs, methods %s",
        ctx.lang,
        len(valid),
        len(source_lines),
        opts.source_lang,
        len(src_sent),
        ", ".join(methods),
    )
    return valid, source_lines, src_sent, tgt_sent


def _source_row(
    ctx: Context,
    opts: InitEvalParams,
    source_lines: list[str],
    valid: list[str],
    src_sent: list[str],
    tgt_sent: list[str],
):
    """The reference row: the source model on its held-out lines (bits per byte on the target valid lines,
    with its own tokenizer; retrieval from its own target sentence embeddings). Returns (the row, the
    source sentence embeddings for the methods' retrieval or None, the source tokenizer)."""
    seq_len, batch_size, bpb, source_lang = opts.seq_len, opts.batch_size, opts.bits_per_byte, opts.source_lang
    start = time.perf_counter()
    source_dir = Path(ctx.input["source_model"])
    source, source_kind, loading = modeling.load_source_model(source_dir, output_loading_info=True)
    if bpb and source_kind == "causal":
        bits_per_byte.require_lm_head(source_dir, loading, "init_eval.bits_per_byte")
    source.to(ctx.device)
    source_tok = load_tokenizer(source_dir)
    ref = lm_eval(source, source_tok, source_kind, source_lines, seq_len=seq_len, batch_size=batch_size, seed=ctx.seed)
    row = {
        "lang": source_lang,
        "method": "source",
        "kind": source_kind,
        **loss_columns(ref),
        "n_eval_lines": len(source_lines),
        "retrieval_en2xx": None,
        "retrieval_xx2en": None,
        "n_sentences": None,
        "model": str(source_dir),
        # on the target-language valid lines, with the source's own tokenizer
        **bpb_columns(source, source_tok, source_kind, valid, asked=bpb, seq_len=seq_len, batch_size=batch_size),
    }
    src_vecs = None
    if source_kind == "masked" and src_sent:
        src_vecs = sentence_embeddings(
            source, source_tok, src_sent, batch_size=batch_size, max_length=seq_len, desc=f"{source_lang} sentences"
        )
        base = sentence_embeddings(
            source,
            source_tok,
            tgt_sent,
            batch_size=batch_size,
            max_length=seq_len,
            desc=f"{ctx.lang} sentences, source model",
        )
        row["retrieval_en2xx"], row["retrieval_xx2en"] = retrieval_accuracy(src_vecs, base)
        row["n_sentences"] = len(src_sent)
    row["seconds"] = time.perf_counter() - start
    log.info(
        "%s/source: loss %.4f on %d held-out %s lines, bits per byte %s on the %s valid lines (its own tokenizer), "
        "%.0f s",
        ctx.lang,
        row["loss"],
        len(source_lines),
        source_lang,
        "n/a" if row["bits_per_byte"] is None else f"{row['bits_per_byte']:.4f}",
        ctx.lang,
        row["seconds"],
    )
    return row, src_vecs, source_tok


def _method_row(ctx: Context, opts: InitEvalParams, method: str, valid: list[str], tgt_sent: list[str], src_vecs):
    """One initialised model's row: its loss and bits per byte on the valid lines, and retrieval against
    the source's sentence embeddings (masked models). Returns (the row, the model's tokenizer)."""
    seq_len, batch_size = opts.seq_len, opts.batch_size
    start = time.perf_counter()
    model_dir = (
        Path(ctx.input.get(input_key(method)) or paths.fill(paths.INIT_DIR, lang=ctx.lang, method=method, pseed=1))
        / "model"
    )
    model, kind = modeling.load_source_model(model_dir)
    model.to(ctx.device)
    tok = load_tokenizer(model_dir)
    res = lm_eval(model, tok, kind, valid, seq_len=seq_len, batch_size=batch_size, seed=ctx.seed)
    row = {
        "lang": ctx.lang,
        "method": method,
        "kind": kind,
        **loss_columns(res),
        "n_eval_lines": len(valid),
        "retrieval_en2xx": None,
        "retrieval_xx2en": None,
        "n_sentences": None,
        "model": str(model_dir),
        **bpb_columns(model, tok, kind, valid, asked=opts.bits_per_byte, seq_len=seq_len, batch_size=batch_size),
    }
    if kind == "masked" and src_vecs is not None:
        vecs = sentence_embeddings(
            model, tok, tgt_sent, batch_size=batch_size, max_length=seq_len, desc=f"{ctx.lang} sentences, {method}"
        )
        row["retrieval_en2xx"], row["retrieval_xx2en"] = retrieval_accuracy(src_vecs, vecs)
        row["n_sentences"] = len(tgt_sent)
    row["seconds"] = time.perf_counter() - start
    log.info(
        "%s/%s: loss %.4f (perplexity %.1f; %.4f at temperature %.2f), retrieval %s, bits per byte %s, %.0f s",
        ctx.lang,
        method,
        row["loss"],
        row["perplexity"],
        row["calibrated_loss"],
        row["temperature"],
        "n/a" if row["retrieval_en2xx"] is None else f"{row['retrieval_en2xx']:.3f} / {row['retrieval_xx2en']:.3f}",
        "n/a" if row["bits_per_byte"] is None else f"{row['bits_per_byte']:.4f}",
        row["seconds"],
    )
    return row, tok


def run(ctx: Context[Params]) -> None:
    opts = ctx.params.init_eval
    bpb = opts.bits_per_byte
    methods = availability.methods(ctx.params, ctx.lang)
    skipped = [m for m in ctx.params.init.methods if m not in methods]
    if skipped:
        log.info(
            "init_eval %s: %s skipped (%s)",
            ctx.lang,
            ", ".join(skipped),
            # each skipped method has a reason (availability.methods keeps those without one)
            "; ".join(str(availability.method_reason(ctx.params, ctx.lang, m)) for m in skipped),
        )

    # the shared inputs: target text, source text, XNLI sentences
    valid, source_lines, src_sent, tgt_sent = _shared_inputs(ctx, opts, methods)
    # reference row: the source model; then one row per initialised model
    row, src_vecs, source_tok = _source_row(ctx, opts, source_lines, valid, src_sent, tgt_sent)
    rows = [row]
    for method in methods:
        row, tok = _method_row(ctx, opts, method, valid, tgt_sent, src_vecs)
        rows.append(row)
    kind = rows[-1]["kind"]  # the methods' (source: when there is none)

    if bpb and methods and kind == "causal":  # the floors, with the target tokenizer (every method's)
        rows += floor_rows(
            ctx.lang, bpb_floor.floor_scores(tok, ctx.input["train_ids"], source_tok, ctx.input["train_text"], valid)
        )
    if methods:  # the unigram floor in nats on the predicted tokens (a row of its own, or the bits-per-byte one's)
        floor = unigram_loss(
            tok,
            kind,
            valid,
            bpb_floor.target_counts(ctx.input["train_ids"], tok),
            seq_len=opts.seq_len,
            batch_size=opts.batch_size,
            seed=ctx.seed,
        )
        unigram = next((r for r in rows if r["method"] == bpb_floor.UNIGRAM_ROW), None)
        if unigram is None:
            unigram = dict.fromkeys(SCHEMA.names) | {
                "lang": ctx.lang,
                "method": bpb_floor.UNIGRAM_ROW,
                "kind": bpb_floor.FLOOR,
                "n_eval_lines": len(valid),
                "seconds": 0.0,
            }
            rows.append(unigram)
        unigram.update(floor)
    add_share_kept(rows)
    masked = [r["method"] for r in rows if r["kind"] == "masked"]
    if bpb and masked:
        log.info("init_eval %s: no bits per byte for %s (%s)", ctx.lang, ", ".join(masked), bits_per_byte.MASKED_REASON)
    io.write_parquet(pa.Table.from_pylist(rows, schema=SCHEMA), ctx.output["init_eval"])
    init_eval_plot.plot(rows, ctx.output["plot"], ctx.lang)
    log.info(
        "initialisation without training, %s (loss: masked-/causal-LM loss on held-out text; retrieval: "
        "top-1 on %d XNLI premises; bits per byte and bytes per token: on the %d valid lines, the source with "
        "its own tokenizer)\n%s",
        ctx.lang,
        len(src_sent),
        len(valid),
        markdown(rows),
    )
