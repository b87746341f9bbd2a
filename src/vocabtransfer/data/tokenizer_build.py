"""The steps of `data.tokenizer.train_tokenizer`: the target's special tokens and unknown token (the
source's head kept at its own ids for a SentencePiece-style BPE), an empty tokenizer in the source's
conventions, the family's trainer (WordPiece's continuation symbols handed over in sorted order), the
trained tokenizer finished (canonical Unigram vocabulary, byte tokens, the post-processor with remapped ids)
and the options of its transformers wrapper. What carries over from the source, and why: data.tokenizer's
docstring.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from tokenizers import AddedToken, models, pre_tokenizers, Tokenizer, trainers

from vocabtransfer.data.families import (
    _family_conventions,
    canonical_unigram,
    head_and_byte_tokens,
    insert_byte_tokens,
    source_head,
    source_special_tokens,
)
from vocabtransfer.errors import VocabTransferError

log = logging.getLogger(__name__)


def _empty_model(family: str, source_model: dict | None, unk: str | None) -> dict:
    """The serialized, untrained model: the source's options when it is the same family."""
    if source_model is not None:
        model = dict(source_model)
        if family == "unigram":
            model.update(vocab=[], unk_id=None)
        else:
            model["vocab"] = {}
            if family == "bpe":
                model["merges"] = []
        return model
    obj: models.Model
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


def special_tokens(source, src: dict, family: str, same: bool):
    """Step 1 of `train_tokenizer`: the special tokens (ids 0..k-1 in source order) and the unknown
    token; a same-family SentencePiece-style BPE keeps the source's head at its own ids instead.
    Returns (specials as AddedTokens, unk or None, the source's head or None)."""
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
    if (
        head is not None
    ):  # the source's head at its own ids (data.tokenizer's docstring): its added tokens are the trainer's
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


def empty_tokenizer(src: dict, family: str, src_family: str, style: str, unk: str | None):
    """Step 2 of `train_tokenizer`: an empty tokenizer with the source's normalizer / pre-tokenizer /
    decoder (another family: its own pre-tokenizer and decoder) and model options. Returns (the
    tokenizer, its model's options, the pre-tokenizer to restore after training)."""
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
    spec: dict[str, Any] = {
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
class Target:
    """What steps 1 and 2 of `train_tokenizer` settle: the target's family and style, whether the family is the
    source's (`same`), its special tokens as AddedTokens (ids 0..k-1), its unknown token, and the source's head
    kept at its own ids (None: no head kept)."""

    family: str
    style: str
    same: bool
    specials: list
    unk: str | None
    head: list[tuple[str, dict | None]] | None


def family_trainer(
    tok, batches, target: Target, model: dict, *, target_size: int, min_frequency: int, show_progress: bool
):
    """Step 3 of `train_tokenizer`: the family's trainer, for `target_size` entries. WordPiece (and a BPE
    with a continuing prefix) gets its continuation symbols up front, in sorted order (data.tokenizer's docstring).
    Returns (the trainer, those symbols)."""
    family, style, specials, unk = target.family, target.style, target.specials, target.unk
    prefix = (
        (model.get("continuing_subword_prefix") or "##")
        if family == "wordpiece"
        else model.get("continuing_subword_prefix")
    )
    if prefix and iter(batches) is batches:
        raise TypeError("train_tokenizer: `batches` must be re-iterable (a list or CorpusBatches), not an iterator")
    seeds = _continuation_symbols(tok, batches, prefix) if prefix else []
    common: dict[str, Any] = dict(
        vocab_size=target_size,
        show_progress=show_progress,
        special_tokens=specials + [AddedToken(t, special=True, normalized=False) for t in seeds],
    )
    if family == "wordpiece":
        return trainers.WordPieceTrainer(min_frequency=min_frequency, continuing_subword_prefix=prefix, **common), seeds
    if family == "unigram":
        return trainers.UnigramTrainer(unk_token=unk, **common), seeds
    extra: dict[str, Any] = {}
    if style == "byte_level":
        extra["initial_alphabet"] = pre_tokenizers.ByteLevel.alphabet()
    if prefix:
        extra["continuing_subword_prefix"] = prefix
    if model.get("end_of_word_suffix"):
        extra["end_of_word_suffix"] = model["end_of_word_suffix"]
    return trainers.BpeTrainer(min_frequency=min_frequency, **extra, **common), seeds


def finished_tokenizer(tok, src: dict, pre_tok, seeds: list[str], target: Target, byte_fallback: bool):
    """Step 4 of `train_tokenizer`: the trained tokenizer with the source's pre-tokenizer, without the
    seeded symbols as special tokens, its vocabulary in canonical order (unigram), the byte-fallback
    tokens, and the post-processor with remapped ids. Returns (the tokenizer, its vocabulary)."""
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


def wrapper_options(source, specials: list, head, vocab: dict) -> dict:
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
