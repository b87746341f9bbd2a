"""The `tokenizer` stage: train the target-language tokenizer in the source tokenizer's family
and conventions, with Hugging Face `tokenizers`, and save it as an HF fast-tokenizer directory.

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

import json
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from vocabtransfer import io
from vocabtransfer.data.families import (
    BYTE_TOKENS,
    FAMILIES,
    MODEL_TO_FAMILY,
    _backend_json,
    _family_conventions,
    _style,
    canonical_unigram,
    detect_family,
    head_and_byte_tokens,
    insert_byte_tokens,
    source_head,
    source_special_tokens,
)
from vocabtransfer.data.corpus_lines import CorpusBatches, SampledCorpus
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.model.hub import load_tokenizer, materialised_source
from vocabtransfer.pipeline.typed import option

log = logging.getLogger(__name__)


def set_threads(threads: int) -> None:
    """Let the Rust tokenizers use `threads` cores (read when its thread pool first starts)."""
    threads = max(1, int(threads))
    os.environ["RAYON_NUM_THREADS"] = str(threads)
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if threads > 1 else "false"


def _empty_model(family: str, source_model: dict | None, unk: str | None) -> dict:
    """The serialized, untrained model: the source's options when it is the same family."""
    from tokenizers import Tokenizer, models  # tokenizers: heavy, not at CLI start-up

    if source_model is not None:
        model = dict(source_model)
        if family == "unigram":
            model.update(vocab=[], unk_id=None)
        else:
            model["vocab"] = {}
            if family == "bpe":
                model["merges"] = []
        return model
    if family == "wordpiece":
        obj = models.WordPiece(unk_token=unk or "[UNK]", continuing_subword_prefix="##")
    elif family == "unigram":
        obj = models.Unigram()
    else:
        obj = models.BPE()
    return json.loads(Tokenizer(obj).to_str())["model"]


def _remap_ids(node, vocab: dict[str, int]):
    """Point the token ids inside a serialized post-processor at the new vocabulary."""
    if isinstance(node, dict):
        out = {k: _remap_ids(v, vocab) for k, v in node.items()}
        if isinstance(out.get("tokens"), list) and isinstance(out.get("ids"), list):
            missing = [t for t in out["tokens"] if t not in vocab]
            if missing:
                raise VocabTransferError(
                    f"source tokenizer: its post-processor uses {', '.join(missing)}, which is not a special token; "
                    "the target tokenizer cannot reproduce its template"
                )
            out["ids"] = [vocab[t] for t in out["tokens"]]
        return out
    if isinstance(node, list):
        # RobertaProcessing / BertProcessing store `cls` and `sep` as [token, id]
        if len(node) == 2 and isinstance(node[0], str) and isinstance(node[1], int) and node[0] in vocab:
            return [node[0], vocab[node[0]]]
        return [_remap_ids(v, vocab) for v in node]
    return node


def _without_byte_level(processor: dict | None) -> dict | None:
    if processor is None or processor.get("type") == "ByteLevel":
        return None
    if processor.get("type") == "Sequence":
        members = [p for p in processor.get("processors", []) if p.get("type") != "ByteLevel"]
        return {**processor, "processors": members} if members else None
    return processor


def _continuation_symbols(tok, batches, prefix: str) -> list[str]:
    """Every `prefix + char` symbol the BPE/WordPiece trainer will create, sorted.

    The trainer gives these symbols ids in hash-map order, and ids break ties between equally
    frequent merges, so the same corpus can give different vocabularies
    (huggingface/tokenizers#1794). Passing them to the trainer up front, in sorted order, fixes
    their ids and makes training deterministic; they are the same symbols the trainer would add.
    """
    normalizer, pre_tokenizer = tok.normalizer, tok.pre_tokenizer
    words: set[str] = set()
    for texts in batches:
        for text in texts:
            if normalizer is not None:
                text = normalizer.normalize_str(text)
            if pre_tokenizer is None:
                words.add(text)
            else:
                words.update(w for w, _ in pre_tokenizer.pre_tokenize_str(text))
    chars: set[str] = set()
    for word in words:
        chars.update(word[1:])
    return [prefix + c for c in sorted(chars)]


# ---------------------------------------------------------------------------------------------
# training


def _special_tokens(source, src: dict, family: str, same: bool):
    """Step 1 of `train_tokenizer`: the special tokens (ids 0..k-1 in source order) and the unknown
    token; a same-family SentencePiece-style BPE keeps the source's head at its own ids instead.
    Returns (specials as AddedTokens, unk or None, the source's head or None)."""
    from tokenizers import AddedToken  # tokenizers: heavy, not at CLI start-up

    specials = source_special_tokens(source)
    unk = None
    if same and family == "unigram":
        unk_id = src["model"].get("unk_id")
        unk = src["model"]["vocab"][unk_id][0] if unk_id is not None else None
    elif same:
        unk = src["model"].get("unk_token")
    elif family != "bpe":  # a byte-level BPE never needs an unknown token
        unk = source.unk_token
    if family in ("wordpiece", "unigram") and unk is None:
        raise VocabTransferError(
            f"source tokenizer: has no unknown token, which a {family} tokenizer needs; "
            "set `tokenizer.family: bpe` (byte-level, never unknown) or use a source with an unk token"
        )
    if unk is not None and unk not in {str(t.content) for t in specials}:
        specials.append(AddedToken(unk, special=True, normalized=False))
    head = source_head(src) if same and family == "bpe" else None
    if head is not None:  # the source's head at its own ids (module doc): its added tokens are the trainer's
        kept = {content for content, _ in head}
        dropped = [str(t.content) for t in specials if str(t.content) not in kept]
        specials = [
            AddedToken(
                c,
                single_word=e["single_word"],
                lstrip=e["lstrip"],
                rstrip=e["rstrip"],
                normalized=e["normalized"],
                special=e["special"],
            )
            for c, e in head
            if e is not None
        ]
        if dropped:
            log.info(
                "tokenizer: %d special token(s) the source has after its vocabulary left out (%s)",
                len(dropped),
                ", ".join(dropped[:4]) + (", …" if len(dropped) > 4 else ""),
            )
    return specials, unk, head


def _empty_tokenizer(src: dict, family: str, src_family: str, style: str, unk: str | None):
    """Step 2 of `train_tokenizer`: an empty tokenizer with the source's normalizer / pre-tokenizer /
    decoder (another family: its own pre-tokenizer and decoder) and model options. Returns (the
    tokenizer, its model's options, the pre-tokenizer to restore after training)."""
    from tokenizers import Tokenizer, pre_tokenizers  # tokenizers: heavy, not at CLI start-up

    same = family == src_family
    normalizer = src.get("normalizer")
    if same:
        pre_tok, decoder = src.get("pre_tokenizer"), src.get("decoder")
    else:
        pre_tok, decoder = _family_conventions(family)
        if normalizer is not None and "▁" in json.dumps(normalizer, ensure_ascii=False):
            log.warning("tokenizer: dropping the source's SentencePiece-style normalizer for a %s target", family)
            normalizer = None
        log.warning(
            "tokenizer: family %s differs from the source's (%s); using the %s pre-tokenizer and decoder",
            family,
            src_family,
            family,
        )
    model = _empty_model(family, src["model"] if same else None, unk)
    if family in ("wordpiece", "bpe") and model.get("unk_token") is None and unk is not None:
        model["unk_token"] = unk
    spec = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": normalizer,
        "pre_tokenizer": pre_tok,
        "post_processor": None,
        "decoder": decoder,
        "model": model,
    }
    tok = Tokenizer.from_str(json.dumps(spec))
    if style in ("unigram", "sentencepiece"):
        # SentencePiece trains on whitespace-split pieces (`▁word`) even where its HF conversion
        # encodes whole lines (Metaspace split=False, or a normalizer that writes `▁`): train with
        # a split at every `▁`, then restore the source's pre-tokenizer for encoding.
        split = pre_tokenizers.Split("▁", behavior="merged_with_next")
        tok.pre_tokenizer = pre_tokenizers.Sequence([tok.pre_tokenizer, split]) if tok.pre_tokenizer else split
    return tok, model, pre_tok


@dataclass(frozen=True)
class _Target:
    """What steps 1 and 2 of `train_tokenizer` settle: the target's family and style, whether the family is the
    source's (`same`), its special tokens as AddedTokens (ids 0..k-1), its unknown token, and the source's head
    kept at its own ids (None: no head kept)."""

    family: str
    style: str
    same: bool
    specials: list
    unk: str | None
    head: list[tuple[str, dict | None]] | None


def _family_trainer(
    tok, batches, target: _Target, model: dict, *, target_size: int, min_frequency: int, show_progress: bool
):
    """Step 3 of `train_tokenizer`: the family's trainer, for `target_size` entries. WordPiece (and a BPE
    with a continuing prefix) gets its continuation symbols up front, in sorted order (module doc).
    Returns (the trainer, those symbols)."""
    from tokenizers import AddedToken, pre_tokenizers, trainers  # tokenizers: heavy, not at CLI start-up

    family, style, specials, unk = target.family, target.style, target.specials, target.unk
    prefix = (
        (model.get("continuing_subword_prefix") or "##")
        if family == "wordpiece"
        else model.get("continuing_subword_prefix")
    )
    if prefix and iter(batches) is batches:
        raise TypeError("train_tokenizer: `batches` must be re-iterable (a list or CorpusBatches), not an iterator")
    seeds = _continuation_symbols(tok, batches, prefix) if prefix else []
    common = dict(
        vocab_size=target_size,
        show_progress=show_progress,
        special_tokens=specials + [AddedToken(t, special=True, normalized=False) for t in seeds],
    )
    if family == "wordpiece":
        return trainers.WordPieceTrainer(min_frequency=min_frequency, continuing_subword_prefix=prefix, **common), seeds
    if family == "unigram":
        return trainers.UnigramTrainer(unk_token=unk, **common), seeds
    extra = {}
    if style == "byte_level":
        extra["initial_alphabet"] = pre_tokenizers.ByteLevel.alphabet()
    if prefix:
        extra["continuing_subword_prefix"] = prefix
    if model.get("end_of_word_suffix"):
        extra["end_of_word_suffix"] = model["end_of_word_suffix"]
    return trainers.BpeTrainer(min_frequency=min_frequency, **extra, **common), seeds


def _finished_tokenizer(tok, src: dict, pre_tok, seeds: list[str], target: _Target, byte_fallback: bool):
    """Step 4 of `train_tokenizer`: the trained tokenizer with the source's pre-tokenizer, without the
    seeded symbols as special tokens, its vocabulary in canonical order (unigram), the byte-fallback
    tokens, and the post-processor with remapped ids. Returns (the tokenizer, its vocabulary)."""
    from tokenizers import Tokenizer  # tokenizers: heavy, not at CLI start-up

    family, head, n_special = target.family, target.head, len(target.specials)
    spec = json.loads(tok.to_str())
    spec["pre_tokenizer"] = pre_tok
    if seeds:  # the seeded `##x` symbols stay in the vocabulary but are no special tokens
        seeded = set(seeds)
        spec["added_tokens"] = [t for t in spec["added_tokens"] if t["content"] not in seeded]
    if family == "unigram":
        spec = canonical_unigram(spec, n_special)
    if head is not None:
        spec = head_and_byte_tokens(spec, head)
    elif byte_fallback:
        spec = insert_byte_tokens(spec, n_special)
    processor = src.get("post_processor")
    if not (target.same and target.style == "byte_level"):
        processor = _without_byte_level(processor)
    vocab = spec["model"]["vocab"]
    vocab = dict(vocab) if isinstance(vocab, dict) else {p[0]: i for i, p in enumerate(vocab)}
    spec["post_processor"] = _remap_ids(processor, vocab) if processor is not None else None
    return Tokenizer.from_str(json.dumps(spec)), vocab


def _wrapper_options(source, specials: list, head, vocab: dict) -> dict:
    """Step 5 of `train_tokenizer`: the options of the transformers wrapper: the source's special-token
    attributes (with the trained AddedToken flags), lengths and sides."""
    kwargs = {
        "model_max_length": source.model_max_length,
        "padding_side": source.padding_side,
        "truncation_side": source.truncation_side,
    }
    flags = {str(t.content): t for t in specials}
    for attr in source.SPECIAL_TOKENS_ATTRIBUTES:
        value = getattr(source, attr, None)
        if value is not None:
            kwargs[attr] = flags.get(str(value), str(value))
    extra_specials = [str(t) for t in (getattr(source, "extra_special_tokens", None) or [])]
    if head is not None:  # the ones left out with the source's tail stay out (they would be appended as new ids)
        extra_specials = [t for t in extra_specials if t in vocab]
    if extra_specials:
        kwargs["extra_special_tokens"] = extra_specials
    return kwargs


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
    from transformers import PreTrainedTokenizerFast  # transformers: heavy, not at CLI start-up

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
    specials, unk, head = _special_tokens(source, src, family, same)
    n_special = len(specials)
    tok, model, pre_tok = _empty_tokenizer(src, family, src_family, style, unk)

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
    target = _Target(family, style, same, specials, unk, head)
    trainer, seeds = _family_trainer(
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
    tok, vocab = _finished_tokenizer(tok, src, pre_tok, seeds, target, byte_fallback)
    return PreTrainedTokenizerFast(tokenizer_object=tok, **_wrapper_options(source, specials, head, vocab))


# ---------------------------------------------------------------------------------------------
# loading a saved target tokenizer


def load_target_tokenizer(path: str | os.PathLike):
    """Load the target tokenizer directory; a missing or corrupt one is one clear error."""
    from tokenizers import Tokenizer  # tokenizers: heavy, not at CLI start-up
    from transformers import AutoTokenizer  # transformers: heavy, not at CLI start-up

    path = Path(path)
    if not path.is_dir():
        raise VocabTransferError(
            f"{path}: tokenizer directory not found; run `vocabtransfer tokenizer` for this language first"
        )
    tokenizer_json = path / "tokenizer.json"
    if not tokenizer_json.is_file():
        raise VocabTransferError(
            f"{tokenizer_json}: file missing, so {path} is no complete tokenizer; delete it and rerun the tokenizer stage"
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
            f"{path}: cannot load the tokenizer ({type(exc).__name__}: {cause}); delete it and rerun the tokenizer stage"
        ) from exc
    if not getattr(tok, "is_fast", False):
        raise VocabTransferError(f"{path}: loaded a slow {type(tok).__name__}; delete it and rerun the tokenizer stage")
    return tok


# --------------------------------------------------------------------------------------------- the stage


@dataclass(frozen=True)
class TokenizerParams:
    """training of the target-language tokenizer"""

    family: Literal["auto", "wordpiece", "unigram", "bpe"] = option(
        "auto", "model family of the target tokenizer; auto takes the source tokenizer's"
    )
    vocab_size: int = option(16000, "target vocabulary size", minimum=100)
    min_frequency: int = option(2, "minimum count of a merge/word piece (WordPiece, BPE)", minimum=1)
    sample_bytes: int = option(
        0,
        "train the tokenizer on a seeded sample of about this many UTF-8 bytes of the train split (each line kept "
        "with probability sample_bytes / the split's bytes); 0 trains on every line",
        minimum=0,
    )


def run(ctx) -> None:
    set_threads(ctx.threads)
    source_name = ctx.param("source_model")
    source = load_tokenizer(materialised_source(ctx.input["source"]))
    train_path, opts = ctx.input["train"], ctx.section("tokenizer", TokenizerParams)  # params tokenizer, typed
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


def _detect_saved_family(tokenizer) -> tuple[str, str]:
    spec = _backend_json(tokenizer)
    family = MODEL_TO_FAMILY[spec["model"]["type"]]
    return family, _style(family, spec)
