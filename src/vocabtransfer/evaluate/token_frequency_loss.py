"""Stage `token_frequency_loss`: does the selfish objective help rare tokens and cost frequent ones?

For target language L, every pretrained model (results/L/pretrain/<method>/<objective>/pseed<k>/model:
each run of `availability.pretrain_runs`) and the initialised-only model each started from
(results/L/init/<method>/pseed<k>/model, objective `init` = step 0) are scored on the same held-out
tokens: the standard cross-entropy of each target token of the valid split, grouped by the
token's frequency rank in the train split.

1. Frequencies (`evaluate.frequencies`): token counts of the pre-tokenised train split plus the special
   tokens the model sees around every line (BERT: [CLS], [SEP]; causal models: the end-of-sequence token that
   closes each line). Rank 0 is the most frequent type; ties go to the smaller id.
2. Buckets over the token types that occur in train (S of them): `equal_types` cuts ranks
   0..S-1 into `buckets` runs of (nearly) equal type count; `log` cuts them at log-spaced ranks
   (bucket edges ~ S^(i/buckets)), so the head gets narrow buckets and the tail wide ones.
   Types never seen in train (rank S..V-1) form one extra bucket after the rarest, number
   `buckets` (fewer when S < buckets): their loss is reported, never mixed into the rare bucket.
3. Scoring: the first `max_lines` valid lines packed into blocks of `seq_len`; masked LMs get
   seeded masks (`modeling.LMCollator`), identical for every model since all share the target
   tokenizer, so the comparison is paired token by token.

4. Bits per byte (`bits_per_byte`, on by default): the same first `max_lines` valid lines as text,
   each line scored alone by every causal model and by the source model with its own tokenizer
   (`evaluate.bits_per_byte` has the exact definition): per line its bits, UTF-8 bytes and tokens, so
   the report resamples lines (the clusters) and pretraining seeds. The initialised models of the
   `init.methods` that are not pretrained (pretraining seed 1's) are scored here too, for bits per byte
   only, so every method's zero-shot bits per byte carries an interval. A masked LM gets no bits (null):
   it keeps its per-token loss. A causal source without its LM head is refused before any scoring. The
   floors, predictors without a model (`evaluate.bpb_floor`), are scored on the same lines, line by line.

Output: results/L/token_frequency_loss.parquet (one row per model × pretraining seed × bucket),
results/L/token_frequency_blocks.parquet (the summed loss and token count per model, bucket and
held-out block: what the report's nested bootstrap resamples), results/L/bits_per_byte.parquet (one
row per model × pretraining seed × valid line, the source as method and objective `source`, each floor as
method `floor` with its name as objective, pseed 0),
a PNG with one panel per method (loss per bucket: init, standard, selfish) and a Markdown table in
the log.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
import pyarrow as pa

from vocabtransfer import io
from vocabtransfer.evaluate import bits_per_byte, bpb_floor
from vocabtransfer.evaluate.frequencies import block_rows, bucket_losses, frequency_buckets, read_ids, rows_for
from vocabtransfer.evaluate.frequencies import token_counts
from vocabtransfer.evaluate.score_terms import seed_means
from vocabtransfer.model import modeling
from vocabtransfer.model.hub import load_tokenizer
from vocabtransfer.model.lmdata import Kind, lm_batches
from vocabtransfer.train.packing import PackedBlocks
from vocabtransfer.pipeline import paths
from vocabtransfer.pipeline.stage_spec import Context
from vocabtransfer.plan.params_root import Params
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.log import progress
from vocabtransfer.plan.eval_params import TokenFrequencyLossParams
from vocabtransfer.plan.eval_plans import (
    model_key,
    model_template,
    scored_models,
    zero_shot_models,
)

log = logging.getLogger(__name__)

SCHEMA = pa.schema(
    [
        ("lang", pa.string()),
        ("method", pa.string()),
        ("objective", pa.string()),
        ("pseed", pa.int32()),
        ("bucket", pa.int32()),
        ("rank_lo", pa.int64()),
        ("rank_hi", pa.int64()),
        ("n_types", pa.int64()),
        ("n_tokens", pa.int64()),
        ("loss", pa.float64()),
    ]
)
# per model, bucket and held-out block (the unit the report's bootstrap resamples); empty cells left out
BLOCKS_SCHEMA = pa.schema(
    [
        ("method", pa.string()),
        ("objective", pa.string()),
        ("pseed", pa.int32()),
        ("bucket", pa.int32()),
        ("block", pa.int32()),
        ("loss_sum", pa.float64()),
        ("n_tokens", pa.int64()),
    ]
)
# per model, pretraining seed and valid line (the report's bits-per-byte clusters); bits null for a masked LM
BPB_SCHEMA = pa.schema(
    [
        ("method", pa.string()),
        ("objective", pa.string()),
        ("pseed", pa.int32()),
        ("line", pa.int32()),
        ("bits", pa.float64()),
        ("n_bytes", pa.int64()),
        ("n_tokens", pa.int64()),
        ("n_scored", pa.int64()),
    ]
)
SOURCE = "source"  # method and objective of the source model's rows (pseed 0)


# ------------------------------------------------------------------------------ scoring


def line_rows(method: str, objective: str, pseed: int, scores: bits_per_byte.LineScores) -> dict[str, list]:
    """Columns of BPB_SCHEMA for one model's lines (bits None where not scored: a masked LM)."""
    n = len(scores.n_bytes)
    return {
        "method": [method] * n,
        "objective": [objective] * n,
        "pseed": [pseed] * n,
        "line": list(range(n)),
        "bits": [None if np.isnan(b) else float(b) for b in scores.bits],
        "n_bytes": scores.n_bytes.tolist(),
        "n_tokens": scores.n_tokens.tolist(),
        "n_scored": scores.n_scored.tolist(),
    }


def source_scores(
    ctx: Context, kind: Kind, lines: list[str], seq_len: int, batch_size: int
) -> bits_per_byte.LineScores:
    """The source model with its own tokenizer on the valid lines; a causal source must have its LM head
    (checked before any model is scored); a masked one only has its tokens counted."""
    directory = Path(ctx.input["source_model"])
    tokenizer = load_tokenizer(directory)
    if kind != "causal":
        return bits_per_byte.score_lines(None, tokenizer, lines, seq_len=seq_len, batch_size=batch_size, kind=kind)
    model, _, loading = modeling.load_source_model(directory, "causal", output_loading_info=True)
    bits_per_byte.require_lm_head(directory, loading, "token_frequency_loss.bits_per_byte")
    model.to(ctx.device)
    return bits_per_byte.score_lines(model, tokenizer, lines, seq_len=seq_len, batch_size=batch_size)


def markdown(rows: list[dict], n_seen_buckets: int) -> str:
    """The loss per bucket, averaged over pretraining seeds (the report gives the intervals)."""
    spans = sorted({(r["bucket"], r["rank_lo"], r["rank_hi"]) for r in rows})
    head = [f"{'unseen ' if b >= n_seen_buckets else ''}{lo}–{hi}" for b, lo, hi in spans]
    models = list(dict.fromkeys((r["method"], r["objective"]) for r in rows))
    means = seed_means(rows)
    lines = ["| method | objective | " + " | ".join(head) + " |", "|---|---|" + "---|" * len(head)]
    for m, o in models:
        cells = [means[(m, o, b)][0] for b, _, _ in spans]
        lines.append(f"| {m} | {o} | " + " | ".join("–" if math.isnan(c) else f"{c:.3f}" for c in cells) + " |")
    return "\n".join(lines)


STYLE = {"init": ("tab:gray", "--", "o"), "standard": ("tab:blue", "-", "s"), "selfish": ("tab:orange", "-", "^")}


def plot(rows: list[dict], path: str | Path, lang: str, n_seen_buckets: int) -> None:
    """One panel per method: the loss per bucket for init, standard and selfish, the mean over
    pretraining seeds with the band from the lowest to the highest seed."""
    plt = io.pyplot()

    methods = list(dict.fromkeys(r["method"] for r in rows))
    means = seed_means(rows)
    n_seeds = len({r["pseed"] for r in rows})
    fig, axes = plt.subplots(1, len(methods), figsize=(4.2 * len(methods) + 0.8, 3.8), sharey=True, squeeze=False)
    for ax, method in zip(axes[0], methods):
        for objective in dict.fromkeys(r["objective"] for r in rows if r["method"] == method):
            pts = sorted((b, *v) for (m, o, b), v in means.items() if m == method and o == objective)
            color, style, marker = STYLE.get(objective, ("black", "-", "."))
            x = [p[0] for p in pts]
            ax.plot(x, [p[1] for p in pts], color=color, linestyle=style, marker=marker, markersize=4, label=objective)
            if n_seeds > 1:
                ax.fill_between(x, [p[2] for p in pts], [p[3] for p in pts], color=color, alpha=0.15, linewidth=0)
        if any(r["bucket"] >= n_seen_buckets for r in rows):
            ax.axvspan(n_seen_buckets - 0.5, n_seen_buckets + 0.5, color="0.92", zorder=0)
        ax.set_title(method)
        ax.set_xlabel("frequency bucket (0 = most frequent; shaded: unseen in train)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"mean cross-entropy on held-out {lang} tokens")
    axes[0][0].legend(fontsize=8)
    seeds = f" ({n_seeds} pretraining seeds: mean, band from lowest to highest)" if n_seeds > 1 else ""
    fig.suptitle(f"{lang}: loss by token frequency, standard vs selfish pretraining{seeds}")
    fig.tight_layout()
    io.save_png(fig, path, dpi=110)


def model_dir(ctx: Context, method: str, objective: str, pseed: int) -> Path:
    key = model_key(method, objective, pseed)
    if key in ctx.input:
        return Path(ctx.input[key]) / "model"
    return Path(paths.fill(model_template(method, objective, pseed), lang=ctx.lang)) / "model"


def same_tokenizer(a, b, where: Path) -> None:
    if a.get_vocab() != b.get_vocab():
        raise VocabTransferError(
            f"{where}: its tokenizer differs from the other models' of this language; every "
            "model scored here must use the target tokenizer"
        )


def _reference_lines(
    ctx: Context, opts: TokenFrequencyLossParams, tokenizer, kind: Kind, lines: list[str], lines_out: dict[str, list]
) -> None:
    """The bits-per-byte rows of the references, appended to `lines_out`: the source model with its own
    tokenizer and, for a causal LM, the floors with the target tokenizer (`bpb_floor`)."""
    if opts.bits_per_byte:  # the source first: a causal source without its LM head stops the job before any scoring
        source = source_scores(ctx, kind, lines, opts.seq_len, opts.batch_size)
        for name, values in line_rows(SOURCE, SOURCE, 0, source).items():
            lines_out[name] += values
        if kind == "causal":
            log.info(
                "source model, own tokenizer: %.4f bits per byte on %d valid lines (%.3f bytes per token)",
                source.bits_per_byte,
                len(lines),
                source.bytes_per_token,
            )
            for name, scores in bpb_floor.floor_scores(
                tokenizer,
                ctx.input["train_ids"],
                load_tokenizer(Path(ctx.input["source_model"])),
                ctx.input["train_text"],
                lines,
            ).items():  # the floors
                for column, values in line_rows(bpb_floor.FLOOR, name, 0, scores).items():
                    lines_out[column] += values
                log.info("floor %s: %.4f bits per byte", name, scores.bits_per_byte)
        else:
            log.info("token_frequency_loss %s: no bits per byte (%s)", ctx.lang, bits_per_byte.MASKED_REASON)
    else:
        log.info("token_frequency_loss %s: no bits per byte (token_frequency_loss.bits_per_byte is false)", ctx.lang)


def _zero_shot_lines(
    ctx: Context, opts: TokenFrequencyLossParams, tokenizer, lines: list[str], lines_out: dict[str, list]
) -> None:
    """The bits-per-byte rows of the other methods' initialised models (`zero_shot_models`, causal), appended
    to `lines_out`."""
    for method, objective, pseed in progress(
        zero_shot_models(ctx.params, ctx.lang), desc="zero-shot models", unit="model"
    ):
        path = model_dir(ctx, method, objective, pseed)
        same_tokenizer(tokenizer, load_tokenizer(path), path)
        model, _ = modeling.load_source_model(path, "causal")
        model.to(ctx.device)
        scores = bits_per_byte.score_lines(
            model, tokenizer, lines, seq_len=opts.seq_len, batch_size=opts.batch_size, kind="causal"
        )
        for name, values in line_rows(method, objective, pseed, scores).items():
            lines_out[name] += values
        log.info("%s/%s/pseed%d: %.4f bits per byte (zero-shot only)", method, objective, pseed, scores.bits_per_byte)
        del model


def _write_outputs(
    ctx: Context, rows: list[dict], cells: dict[str, list], lines_out: dict[str, list], n_seen_buckets: int
):
    """The three tables, the plot, and the loss per bucket as a Markdown table in the log."""
    io.write_parquet(pa.Table.from_pylist(rows, schema=SCHEMA), ctx.output["table"])
    io.write_parquet(pa.table(cells, schema=BLOCKS_SCHEMA), ctx.output["blocks"])
    io.write_parquet(pa.table(lines_out, schema=BPB_SCHEMA), ctx.output["bits_per_byte"])
    plot(rows, ctx.output["plot"], ctx.lang, n_seen_buckets)
    log.info(
        "mean cross-entropy per frequency bucket (columns: train frequency ranks; mean over pretraining seeds), %s\n%s",
        ctx.lang,
        markdown(rows, n_seen_buckets),
    )


def run(ctx: Context[Params]) -> None:
    opts = ctx.params.token_frequency_loss
    seq_len, batch_size, bpb = opts.seq_len, opts.batch_size, opts.bits_per_byte
    models = scored_models(ctx.params, ctx.lang)
    if not models:
        raise VocabTransferError(
            "token_frequency_loss: params ask for no pretrained models (pretrain.methods × "
            "pretrain.objectives is empty); nothing to compare"
        )

    # 1. the target tokenizer, frequencies and buckets, fixed valid batches
    first = model_dir(ctx, *models[0])
    tokenizer = load_tokenizer(first)
    model, kind = modeling.load_source_model(first)
    counts = token_counts(read_ids(ctx.input["train_ids"], tokenizer), tokenizer, kind)
    bucket, spans = frequency_buckets(counts, opts.buckets, opts.scheme)
    n_seen_buckets = len(spans) - (1 if spans and (counts == 0).any() else 0)
    valid = read_ids(ctx.input["valid_ids"], tokenizer)
    blocks = list(PackedBlocks(valid, tokenizer, seq_len, kind=kind, lines=opts.max_lines))
    if not blocks:
        raise VocabTransferError(f"{ctx.input['valid_ids']}: no held-out tokens to score")
    batches = lm_batches(tokenizer, blocks, kind, batch_size, ctx.seed)
    lines = bits_per_byte.valid_lines(ctx.input["valid_text"], opts.max_lines) if bpb else []
    lines_out: dict[str, list] = {name: [] for name in BPB_SCHEMA.names}
    _reference_lines(ctx, opts, tokenizer, kind, lines, lines_out)
    log.info(
        "token_frequency_loss %s: %d train token types seen of %d, %d buckets (%s), %d valid blocks, %d models",
        ctx.lang,
        int((counts > 0).sum()),
        len(counts),
        len(spans),
        opts.scheme,
        len(blocks),
        len(models),
    )

    # 2. every model on the same tokens
    rows: list[dict] = []
    cells: dict[str, list] = {name: [] for name in BLOCKS_SCHEMA.names}
    for i, (method, objective, pseed) in enumerate(progress(models, desc="models", unit="model")):
        path = model_dir(ctx, method, objective, pseed)
        if i:
            same_tokenizer(tokenizer, load_tokenizer(path), path)
            model, _ = modeling.load_source_model(path, kind)
        model.to(ctx.device)
        sums, n = bucket_losses(model, batches, kind, bucket, len(spans))
        rows += rows_for(ctx.lang, method, objective, pseed, spans, sums.sum(0), n.sum(0))
        for name, values in block_rows(method, objective, pseed, sums, n).items():
            cells[name] += values
        bits = ""
        if bpb:
            scores = bits_per_byte.score_lines(
                model, tokenizer, lines, seq_len=seq_len, batch_size=batch_size, kind=kind
            )
            for name, values in line_rows(method, objective, pseed, scores).items():
                lines_out[name] += values
            bits = f", {scores.bits_per_byte:.4f} bits per byte" if kind == "causal" else ""
        log.info(
            "%s/%s/pseed%d: mean loss %.4f over %d tokens%s",
            method,
            objective,
            pseed,
            sums.sum() / max(1, n.sum()),
            n.sum(),
            bits,
        )
        del model

    # 3. the other methods' initialised models: bits per byte only (a masked LM has none to give)
    if bpb and kind == "causal":
        _zero_shot_lines(ctx, opts, tokenizer, lines, lines_out)
    _write_outputs(ctx, rows, cells, lines_out, n_seen_buckets)
