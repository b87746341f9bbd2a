"""Stages `source_fasttext` and `word_fasttext`: word-level fastText for WECHSEL, one model on
source-language text (`init.wechsel.source_text`) and one per target language on its corpus's train
split, with the settings of `init.wechsel.fasttext` (threads as `fasttext.reproducible` says)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vocabtransfer.data.auxiliary import FasttextParams, train_word_fasttext
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.io import read_parquet
from vocabtransfer.pipeline.paths import data_path

if TYPE_CHECKING:
    from vocabtransfer.pipeline.stage_spec import Context


def _word_fasttext_options(ctx: "Context") -> dict:
    threads = 1 if ctx.section("fasttext", FasttextParams).reproducible else ctx.threads
    # model, dim, epochs, min_count, bucket: the fields of WordFasttextOptions
    return dict(ctx.param("init.wechsel.fasttext"), seed=ctx.seed, threads=threads)


def run_source_words(ctx: "Context") -> None:
    """Stage `source_fasttext`: word-level fastText on source-language text (init.wechsel.source_text)."""
    text = data_path(ctx.param("init.wechsel.source_text"))
    if not text.is_file():
        raise VocabTransferError(f"{text}: source-language text not found (init.wechsel.source_text); "
                                 "fix the path (relative paths resolve against $VOCABTRANSFER_DATA)")
    train_word_fasttext(text, ctx.output["model"], **_word_fasttext_options(ctx))


def run_target_words(ctx: "Context") -> None:
    """Stage `word_fasttext`: word-level fastText on the target corpus's train split."""
    lines = read_parquet(ctx.input["train"], ["text"]).column("text").to_pylist()
    train_word_fasttext(lines, ctx.output["model"], **_word_fasttext_options(ctx))


# ---------------------------------------------------------------- the stages (vocabtransfer.app.stages)
# From the import of `Stage` on, the module plans its jobs: not their code (stage_spec.code_statements).
from vocabtransfer.pipeline.stage_spec import Stage
from vocabtransfer.init import availability
from vocabtransfer.pipeline import config, paths


def _word_leaves(params: dict, wc: dict) -> list[str]:
    """init.wechsel.fasttext.*: the leaves of WordFasttextOptions (imported here: its package imports torch)."""
    from vocabtransfer.init.methods.options import WordFasttextOptions  # imports torch: not at CLI start-up

    return config.field_leaves(WordFasttextOptions, "init.wechsel.fasttext", params["init"]["wechsel"]["fasttext"])


TARGET_WORDS = Stage(
    name="word_fasttext", run=run_target_words, help="word-level fastText on the target corpus (WECHSEL)",
    inputs={"train": paths.CORPUS_TRAIN}, outputs={"model": paths.WORD_FASTTEXT},
    params=("seed", "fasttext.reproducible"), extra_params=_word_leaves,
    code=("init/word_fasttext.py",), parallel=True, one_thread_if="fasttext.reproducible",
    skip_reason=lambda params, wc: availability.needed_by(params, "wechsel", wc["lang"]),
)
SOURCE_WORDS = Stage(
    name="source_fasttext", run=run_source_words, help="word-level fastText on source-language text (WECHSEL)",
    wildcards=(), outputs={"model": paths.SOURCE_WORD_FASTTEXT},
    params=TARGET_WORDS.params,
    extra_params=lambda params, wc: _word_leaves(params, wc) + ["init.wechsel.source_text"],
    code=("init/word_fasttext.py",), parallel=True, one_thread_if="fasttext.reproducible",
    skip_reason=lambda params, wc: availability.needed_by(params, "wechsel"),
    data=lambda params, wc: {"data_text": paths.data_path(params["init"]["wechsel"]["source_text"])},
)
