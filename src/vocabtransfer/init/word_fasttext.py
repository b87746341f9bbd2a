"""Stages `source_fasttext` and `word_fasttext`: word-level fastText for WECHSEL, one model on
source-language text (`init.wechsel.source_text`) and one per target language on its corpus's train
split, with the settings of `init.wechsel.fasttext` (threads as `fasttext.reproducible` says)."""

from __future__ import annotations


from vocabtransfer.data.fasttext_models import WordFasttextSettings, train_word_fasttext
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.io import read_parquet
from vocabtransfer.pipeline.paths import data_path
from vocabtransfer.pipeline.stage_spec import Context


def _train_words(ctx: Context, text) -> None:
    """`train_word_fasttext` of `text` (a file or lines) to the stage's model: model, dim, epochs, min_count and
    bucket from params `init.wechsel.fasttext` (the fields of WordFasttextOptions), WECHSEL's negatives and
    n-grams, one thread unless `fasttext.reproducible` is false."""
    threads = 1 if ctx.params.fasttext.reproducible else ctx.threads
    opts = ctx.params.init.wechsel.fasttext
    settings = WordFasttextSettings(model=opts.model, dim=opts.dim, epochs=opts.epochs, min_count=opts.min_count)
    train_word_fasttext(text, ctx.output["model"], settings, seed=ctx.seed, threads=threads, bucket=opts.bucket)


def run_source_words(ctx: Context) -> None:
    """Stage `source_fasttext`: word-level fastText on source-language text (init.wechsel.source_text)."""
    text = data_path(ctx.params.init.wechsel.source_text)
    if not text.is_file():
        raise VocabTransferError(
            f"{text}: source-language text not found (init.wechsel.source_text); "
            "fix the path (relative paths resolve against $VOCABTRANSFER_DATA)"
        )
    _train_words(ctx, text)


def run_target_words(ctx: Context) -> None:
    """Stage `word_fasttext`: word-level fastText on the target corpus's train split."""
    _train_words(ctx, read_parquet(ctx.input["train"], ["text"]).column("text").to_pylist())
