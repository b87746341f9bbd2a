"""The `tokenizer` stage: train the target-language tokenizer in the source tokenizer's family
and conventions, with Hugging Face `tokenizers`, and save it as an HF fast-tokenizer directory; or, with
`tokenizer.from`, copy an existing tokenizer as it is (`copy_existing`, vocabtransfer.model.tokenizer_from).

What carries over from the source tokenizer (read from its backend `tokenizer.json`):
  * the special tokens: same strings and AddedToken flags, placed first with ids 0, 1, … in the
    order of their source ids (BERT: [PAD] [UNK] [CLS] [SEP] [MASK]; XLM-R: <s> <pad> </s> <unk> <mask>);
  * the normalizer (e.g. BERT lowercasing and accent handling), the pre-tokenizer, the decoder and
    the model's options (unk token, `##` prefix, byte_fallback, …);
  * the post-processor (e.g. BERT's [CLS] … [SEP] template) with its token ids remapped to the
    new vocabulary; the special-token attributes (cls/sep/pad/mask/unk/bos/eos) and model_max_length.
  Not carried over: the source's truncation/padding settings (they are per-use, and a fixed padding
  in tokenizer.json would pad every encoding) and added tokens that are not special.

Families (`tokenizer.family`; `auto` takes the source backend's model type):
  wordpiece  WordPieceTrainer with the `##` continuing prefix (BERT, MiniLM).
  unigram    UnigramTrainer on the source's `▁` Metaspace pipeline (XLM-R, T5, ALBERT).
             `tokenizer.min_frequency` does not apply (the Unigram trainer has no such option).
  bpe        byte-level (GPT-2, RoBERTa, Llama-3: a ByteLevel pre-tokenizer): BpeTrainer with the 256
             ByteLevel characters as initial alphabet, so no input is ever unknown.
             SentencePiece-style (Llama-2, Mistral, Gemma: `▁` and byte_fallback): BpeTrainer on
             the source's `▁` pipeline with byte_fallback kept; the 256 `<0x00>`…`<0xFF>` byte tokens
             are put right after the special tokens, as SentencePiece does, and count in vocab_size.
             Where the source's own byte tokens are contiguous at ids h…h+255, the target keeps the
             source's whole head, ids 0…h−1, at the same ids (`source_head`): Llama-2's <unk> <s> </s>;
             Gemma's 238 (<pad> <eos> <bos> <unk> <mask>, <start_of_turn>/<end_of_turn>, the unused
             control tokens, and the non-special newline runs, `▁` runs and HTML tags, with their flags),
             then the bytes at the source's ids. Special tokens the source has only after its vocabulary
             (Gemma's image tokens and <unused99>…<unused6241> at ids 255,968+) are left out: keeping them
             would spend a fifth of a 32k target vocabulary on tokens no text contains.
  A family other than the source's keeps the source's normalizer and post-processor but takes the
  family's own pre-tokenizer and decoder (wordpiece: BertPreTokenizer + `##`; unigram: Metaspace `▁`;
  bpe: byte-level); a SentencePiece-style normalizer (one that writes `▁`) is dropped then.

The directory holds tokenizer.json, tokenizer_config.json (class `TokenizersBackend`, i.e.
transformers' PreTrainedTokenizerFast: tokenizer.json is the whole truth, no model-specific class
rebuilds the pipeline) and vocabtransfer_stats.json (family, vocab size reached, seconds).

Reproducibility: the same corpus and params give a byte-identical tokenizer.json for WordPiece
and BPE. (WordPiece needs help: the trainer numbers its `##x` symbols in hash-map order, which
changes tie-breaks between merges, huggingface/tokenizers#1794; we hand it those symbols up front
in sorted order, one extra pass over the corpus.) The Unigram trainer has run-to-run noise we can
only reduce: its pieces are put in canonical order with scores rounded to 1e-6, but on rare ties
in its pruning a piece can still differ between runs.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import time
from pathlib import Path
from typing import Literal

from tokenizers import Tokenizer
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from vocabtransfer import io
from vocabtransfer.data.families import (
    BYTE_TOKENS,
    FAMILIES,
    MODEL_TO_FAMILY,
    _backend_json,
    _style,
    detect_family,
)
from vocabtransfer.data.corpus_lines import CorpusBatches, SampledCorpus
from vocabtransfer.data.tokenizer_build import (
    Target,
    empty_tokenizer,
    family_trainer,
    finished_tokenizer,
    special_tokens,
    wrapper_options,
)
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.model.hub import load_tokenizer, materialised_source
from vocabtransfer.pipeline.stage_spec import Context
from vocabtransfer.plan.data_params import TokenizerParams

log = logging.getLogger(__name__)


def set_threads(threads: int) -> None:
    """Let the Rust tokenizers use `threads` cores (read when its thread pool first starts)."""
    threads = max(1, int(threads))
    os.environ["RAYON_NUM_THREADS"] = str(threads)
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if threads > 1 else "false"


# ---------------------------------------------------------------------------------------------
# training (its steps: data.tokenizer_build)


def train_tokenizer(
    source,
    batches,
    *,
    family: Literal["auto", "wordpiece", "unigram", "bpe"] = "auto",
    vocab_size: int = 16000,
    min_frequency: int = 2,
    length: int | None = None,
    show_progress: bool = False,
):
    """Train a target tokenizer in the source's conventions on `batches` and return it as a
    transformers fast tokenizer (a `PreTrainedTokenizerFast`).

    `batches` is an iterable of lists of lines that can be iterated more than once (a list, or
    `CorpusBatches`): WordPiece reads it twice to make training deterministic.
    """
    src = _backend_json(source)
    src_family, src_style = detect_family(source)
    family = src_family if family == "auto" else family
    if family not in FAMILIES:
        raise VocabTransferError(
            f"tokenizer.family: {family!r} is not allowed; allowed values: auto, {', '.join(FAMILIES)}"
        )
    same = family == src_family
    style = src_style if same else ("byte_level" if family == "bpe" else family)
    # 1. special tokens and the unknown token; 2. an empty tokenizer in the source's conventions
    specials, unk, head = special_tokens(source, src, family, same)
    n_special = len(specials)
    tok, model, pre_tok = empty_tokenizer(src, family, src_family, style, unk)

    # 3. the family's trainer
    byte_fallback = family == "bpe" and bool(model.get("byte_fallback"))
    target_size = vocab_size - (len(BYTE_TOKENS) if byte_fallback else 0)
    if head is not None:  # the head's plain vocabulary entries (Gemma's `▁` runs) take room too
        target_size -= len(head) - n_special
    if target_size <= n_special:
        raise VocabTransferError(
            f"tokenizer.vocab_size: {vocab_size} leaves no room beyond the {n_special} special tokens"
            + (f" and {len(BYTE_TOKENS)} byte tokens" if byte_fallback else "")
            + "; raise it"
        )
    target = Target(family, style, same, specials, unk, head)
    trainer, seeds = family_trainer(
        tok, batches, target, model, target_size=target_size, min_frequency=min_frequency, show_progress=show_progress
    )
    start = time.perf_counter()
    tok.train_from_iterator(batches, trainer=trainer, length=length)
    log.info(
        "tokenizer: trained a %s (%s) vocabulary of %d in %.1f s",
        family,
        style,
        tok.get_vocab_size(),
        time.perf_counter() - start,
    )

    # 4. byte-fallback tokens, then the post-processor with remapped ids; 5. the transformers wrapper
    tok, vocab = finished_tokenizer(tok, src, pre_tok, seeds, target, byte_fallback)
    return PreTrainedTokenizerFast(tokenizer_object=tok, **wrapper_options(source, specials, head, vocab))


# ---------------------------------------------------------------------------------------------
# loading a saved target tokenizer


def load_target_tokenizer(path: str | os.PathLike):
    """Load the target tokenizer directory; a missing or corrupt one is one clear error."""

    path = Path(path)
    if not path.is_dir():
        raise VocabTransferError(
            f"{path}: tokenizer directory not found; run `vocabtransfer tokenizer` for this language first"
        )
    tokenizer_json = path / "tokenizer.json"
    if not tokenizer_json.is_file():
        raise VocabTransferError(
            f"{tokenizer_json}: file missing, so {path} is no complete tokenizer; delete it and rerun the tokenizer "
            "stage"
        )
    try:
        Tokenizer.from_file(str(tokenizer_json))
    except Exception as exc:
        cause = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise VocabTransferError(
            f"{tokenizer_json}: corrupt tokenizer file ({cause}); delete {path} and rerun the tokenizer stage"
        ) from exc
    try:
        tok = AutoTokenizer.from_pretrained(str(path))
    except Exception as exc:
        cause = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise VocabTransferError(
            f"{path}: cannot load the tokenizer ({type(exc).__name__}: {cause}); delete it and rerun the tokenizer "
            "stage"
        ) from exc
    if not getattr(tok, "is_fast", False):
        raise VocabTransferError(f"{path}: loaded a slow {type(tok).__name__}; delete it and rerun the tokenizer stage")
    return tok


# --------------------------------------------------------------------------------------------- the stage


def run(ctx: Context) -> None:
    set_threads(ctx.threads)
    source_name = ctx.params.source_model
    train_path, opts = ctx.input["train"], ctx.params.tokenizer
    if opts.from_ is not None:
        copy_existing(ctx, opts)
        return
    source = load_tokenizer(materialised_source(ctx.input["source"]))
    corpus = (
        CorpusBatches(train_path) if not opts.sample_bytes else SampledCorpus(train_path, opts.sample_bytes, ctx.seed)
    )
    lines = corpus.rows
    if lines == 0:
        raise VocabTransferError(
            f"{train_path}: the corpus has no lines; check `corpus.sources.{ctx.lang}` and rerun the corpus stage"
        )
    family_param, vocab_size, min_frequency = opts.family, opts.vocab_size, opts.min_frequency

    start = time.perf_counter()
    target = train_tokenizer(
        source,
        corpus,
        family=family_param,
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        length=lines,
        show_progress=sys.stderr.isatty(),
    )
    seconds = time.perf_counter() - start
    family, style = _detect_saved_family(target)
    reached = len(target)
    if reached < vocab_size:
        log.warning("tokenizer: reached %d of the %d tokens asked for (the corpus is too small)", reached, vocab_size)
    stats = {
        "source_model": source_name,
        "family": family,
        "style": style,
        "family_param": family_param,
        "vocab_size": vocab_size,
        "vocab_size_reached": reached,
        "min_frequency": min_frequency,
        "special_tokens": {str(t): target.convert_tokens_to_ids(str(t)) for t in target.all_special_tokens},
        "train_lines": lines,
        "sample_bytes": opts.sample_bytes,
        "seconds": round(seconds, 3),
        "threads": ctx.threads,
        "versions": io.versions(),
    }
    with io.atomic_output(ctx.output["tokenizer"], directory=True) as tmp:
        target.save_pretrained(str(tmp))
        reloaded = load_target_tokenizer(tmp)  # the directory loads with AutoTokenizer alone
        if len(reloaded) != reached:
            raise VocabTransferError(
                f"{tmp}: saved tokenizer has {len(reloaded)} tokens, expected {reached}; report this as a bug"
            )
    io.write_json(stats, ctx.output["stats"])  # beside the directory: its timings must not change the dir's hash
    log.info(
        "tokenizer: %s %s tokenizer with %d tokens written to %s in %.1f s",
        family,
        style,
        reached,
        ctx.output["tokenizer"],
        seconds,
    )


def copy_existing(ctx: Context, opts: TokenizerParams) -> None:
    """`tokenizer.from`: the existing tokenizer it names, saved as the target (its own size, family and special
    tokens), with where it came from and its fingerprint in the stats (model.tokenizer_from)."""
    # torch (model.gguf): the corpus, floor and report jobs load this module without it
    from vocabtransfer.model import tokenizer_from

    assert opts.from_ is not None
    start = time.perf_counter()
    target, origin = tokenizer_from.load(opts.from_)
    log.info(
        "tokenizer: tokenizer.from is set, so the target is %s (%s) as it is; tokenizer.vocab_size (%d), family (%s), "
        "min_frequency and sample_bytes are not used",
        opts.from_,
        origin["route"],
        opts.vocab_size,
        opts.family,
    )
    with io.atomic_output(ctx.output["tokenizer"], directory=True) as tmp:
        target.save_pretrained(str(tmp))
        reloaded = load_target_tokenizer(tmp)  # the directory loads with AutoTokenizer alone
        if reloaded.get_vocab() != target.get_vocab():
            raise VocabTransferError(
                f"{tmp}: the saved copy of tokenizer.from {opts.from_!r} reloads with another vocabulary "
                f"({len(reloaded)} tokens, not {len(target)}); report this as a bug"
            )
        saved_sha256 = hashlib.sha256((tmp / "tokenizer.json").read_bytes()).hexdigest()
    family, style = _detect_saved_family(reloaded)
    stats = {
        "source_model": ctx.params.source_model,
        "from": origin,
        "family": family,
        "style": style,
        "family_param": opts.family,
        "vocab_size": len(reloaded),
        "vocab_size_reached": len(reloaded),
        "vocab_size_param": opts.vocab_size,  # not used: the tokenizer has its own size
        "special_tokens": {str(t): reloaded.convert_tokens_to_ids(str(t)) for t in reloaded.all_special_tokens},
        "tokenizer_json_sha256": saved_sha256,
        "seconds": round(time.perf_counter() - start, 3),
        "versions": io.versions(),
    }
    io.write_json(stats, ctx.output["stats"])
    log.info(
        "tokenizer: %s %s tokenizer with %d tokens copied from %s to %s",
        family,
        style,
        len(reloaded),
        opts.from_,
        ctx.output["tokenizer"],
    )


def _detect_saved_family(tokenizer) -> tuple[str, str]:
    spec = _backend_json(tokenizer)
    model_type = spec["model"]["type"]
    family = MODEL_TO_FAMILY.get(model_type, model_type.lower())  # an existing WordLevel tokenizer: `wordlevel`
    return family, _style(family, spec)
