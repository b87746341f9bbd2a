"""Tokenizer families and how their vocabularies spell text.

* `detect_family`: the family of a source tokenizer (wordpiece, unigram, bpe) and its style, read
  from its backend `tokenizer.json`; the special tokens and family conventions a new tokenizer keeps.
* `spelling` / `token_bytes`: the bytes a vocabulary string stands for — byte-level BPE's printable
  alphabet (`Ġ`, `Ċ`, `Ã©`), SentencePiece's byte fallback (`<0xC3>`), `▁` or `##` word markers —
  so that the overlap can match byte strings whatever their spelling.
* `source_head` / `head_and_byte_tokens` / `insert_byte_tokens` / `canonical_unigram`: the layout of a
  trained target vocabulary (the source's head and byte tokens at the source's ids, SentencePiece's
  byte tokens after the specials, a Unigram model in an order free of the trainer's noise;
  `data.tokenizer` explains when each applies).
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from tokenizers import AddedToken, decoders, models, pre_tokenizers, Tokenizer

from vocabtransfer.errors import VocabTransferError

Family = Literal["wordpiece", "unigram", "bpe"]
FAMILIES: tuple[str, ...] = ("wordpiece", "unigram", "bpe")
MODEL_TO_FAMILY: dict[str, Family] = {"WordPiece": "wordpiece", "Unigram": "unigram", "BPE": "bpe"}
BYTE_TOKENS = [f"<0x{b:02X}>" for b in range(256)]  # SentencePiece's byte-fallback pieces


# ---------------------------------------------------------------------------------------------
# the source tokenizer's family and conventions


def _backend_json(tokenizer) -> dict:
    return json.loads(tokenizer.backend_tokenizer.to_str())


def _contains_type(node, type_name: str) -> bool:
    """Whether a serialized component (or any member of a Sequence) has this `type`."""
    if isinstance(node, dict):
        return node.get("type") == type_name or any(_contains_type(v, type_name) for v in node.values())
    if isinstance(node, list):
        return any(_contains_type(v, type_name) for v in node)
    return False


def detect_family(source) -> tuple[Family, str]:
    """The source tokenizer's family and style: (wordpiece, wordpiece), (unigram, unigram),
    (bpe, byte_level) or (bpe, sentencepiece)."""
    spec = _backend_json(source)
    model_type = spec["model"]["type"]
    family = MODEL_TO_FAMILY.get(model_type)
    if family is None:
        raise VocabTransferError(
            f"source tokenizer: model type {model_type!r} has no trainable family here; "
            f"set `tokenizer.family` to one of {', '.join(FAMILIES)}"
        )
    return family, _style(family, spec)


def _style(family: str, spec: dict) -> str:
    if family != "bpe":
        return family
    return "byte_level" if _contains_type(spec.get("pre_tokenizer"), "ByteLevel") else "sentencepiece"


def source_special_tokens(source) -> list:
    """The source's special tokens as AddedTokens (flags kept), in the order of their source ids."""
    by_content: dict[str, tuple[int, AddedToken]] = {}
    for idx, tok in source.added_tokens_decoder.items():
        if tok.special:
            by_content.setdefault(str(tok.content), (idx, tok))
    for attr in source.SPECIAL_TOKENS_ATTRIBUTES:
        value = getattr(source, attr, None)
        if value is not None and str(value) not in by_content:
            idx = source.convert_tokens_to_ids(str(value))
            by_content[str(value)] = (
                idx if isinstance(idx, int) else sys.maxsize,
                AddedToken(str(value), special=True, normalized=False),
            )
    ordered = sorted(by_content.values(), key=lambda item: item[0])
    return [
        AddedToken(
            t.content,
            single_word=t.single_word,
            lstrip=t.lstrip,
            rstrip=t.rstrip,
            normalized=t.normalized,
            special=True,
        )
        for _, t in ordered
    ]


def _family_conventions(family: str) -> tuple[dict, dict]:
    """Pre-tokenizer and decoder a family uses when it is not the source's own."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    if family == "wordpiece":
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece(prefix="##")
    elif family == "unigram":
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
    spec = json.loads(tok.to_str())
    return spec["pre_tokenizer"], spec["decoder"]


# ---------------------------------------------------------------------------------------------
# spellings: the bytes a vocabulary string stands for

_BYTE_PIECE = re.compile(r"<0x([0-9A-F]{2})>")  # SentencePiece's byte-fallback pieces (BYTE_TOKENS), fullmatch


@dataclass(frozen=True)
class Spelling:
    """How a tokenizer's vocabulary strings spell text.

    kind: `byte_level` (GPT-2's printable alphabet, one character per byte, `Ġ` = a space byte),
    `metaspace` (text with `marker`, usually `▁`, for a space), `wordpiece` (text; `##` marks a
    continuation) or `text`; byte_fallback: `<0x00>` … `<0xFF>` are single bytes (Llama-2, Mistral).
    """

    kind: Literal["byte_level", "metaspace", "wordpiece", "text"]
    marker: str
    byte_fallback: bool


def spelling(tokenizer) -> Spelling:
    """The spelling of a fast tokenizer, read from its backend's model, normalizer, pre-tokenizer and decoder."""
    spec = _backend_json(tokenizer)
    model = spec.get("model") or {}
    parts = [spec.get(key) for key in ("normalizer", "pre_tokenizer", "decoder")]
    byte_fallback = bool(model.get("byte_fallback")) or _contains_type(spec.get("decoder"), "ByteFallback")
    if model.get("type") == "WordPiece":
        return Spelling("wordpiece", model.get("continuing_subword_prefix") or "##", byte_fallback)
    if any(_contains_type(part, "ByteLevel") for part in parts):
        return Spelling("byte_level", "Ġ", byte_fallback)
    replacement = _metaspace_replacement(parts)
    if replacement:
        return Spelling("metaspace", replacement, byte_fallback)
    return Spelling("text", "", byte_fallback)


def _metaspace_replacement(node) -> str | None:
    """The `replacement` of a Metaspace component, or the `▁` that a Replace normalizer writes (Llama-2's
    tokenizer.json spells spaces that way, without a Metaspace pre-tokenizer)."""
    if isinstance(node, dict):
        if node.get("type") == "Metaspace":
            return node.get("replacement") or "▁"
        if node.get("type") == "Replace" and node.get("content") == "▁":
            return "▁"
        node = list(node.values())
    if isinstance(node, list):
        return next((r for r in map(_metaspace_replacement, node) if r), None)
    return None


@lru_cache(maxsize=1)
def byte_level_alphabet() -> dict[str, int]:
    """GPT-2's printable character of each byte, inverted: `Ġ` -> 0x20, `Ċ` -> 0x0A, `Ã` -> 0xC3."""
    from transformers.convert_slow_tokenizer import (
        bytes_to_unicode,
    )  # transformers (0.6 s): the NER task's floor and report jobs load this module for `spelling` alone

    return {char: byte for byte, char in bytes_to_unicode().items()}


def token_bytes(token: str, how: Spelling) -> bytes | None:
    """The bytes a vocabulary string spells, a word-start space included: `Ġthe` and `▁the` -> b" the",
    `Ã` and `<0xC3>` -> b"\xc3", `Ċ` and `<0x0A>` -> b"\n". None where the string is text in the usual
    sense (wordpiece and plain vocabularies), and for a byte-level string outside the byte alphabet (an
    added token)."""
    if how.byte_fallback and (piece := _BYTE_PIECE.fullmatch(token)):
        return bytes([int(piece.group(1), 16)])
    if how.kind == "byte_level":
        alphabet = byte_level_alphabet()
        return bytes(alphabet[c] for c in token) if all(c in alphabet for c in token) else None
    if how.kind == "metaspace":
        return token.replace(how.marker, " ").encode("utf-8")
    return None


def is_byte_piece(token: str, how: Spelling) -> bool:
    """A byte-fallback piece `<0xXX>` of a tokenizer that has byte fallback."""
    return how.byte_fallback and _BYTE_PIECE.fullmatch(token) is not None


# ---------------------------------------------------------------------------------------------
# a trained vocabulary's layout: the source's head and byte tokens, a canonical Unigram order


def source_head(src: dict) -> list[tuple[str, dict | None]] | None:
    """The source vocabulary's entries before its byte tokens, in id order, when it is a byte-fallback BPE
    whose 256 `<0xXX>` tokens are contiguous at ids h..h+255: (content, its added-token entry or None for
    a plain vocabulary entry). None when the source has no such layout."""
    model = src.get("model") or {}
    vocab = model.get("vocab")
    if model.get("type") != "BPE" or not model.get("byte_fallback") or not isinstance(vocab, dict):
        return None
    ids = [vocab.get(t) for t in BYTE_TOKENS]
    if ids[0] is None or ids != list(range(ids[0], ids[0] + len(BYTE_TOKENS))):
        return None
    added = {int(a["id"]): a for a in src.get("added_tokens") or []}
    by_id = {i: t for t, i in vocab.items() if i < ids[0]}
    by_id.update({i: a["content"] for i, a in added.items() if i < ids[0]})
    if sorted(by_id) != list(range(ids[0])):
        return None
    return [(by_id[i], added.get(i)) for i in range(ids[0])]


def head_and_byte_tokens(spec: dict, head: list[tuple[str, dict | None]]) -> dict:
    """The source's head at its own ids, then the 256 byte tokens, then the trained tokens (module doc)."""
    vocab: dict[str, int] = spec["model"]["vocab"]
    first = [content for content, _ in head] + BYTE_TOKENS
    taken = set(first)
    rest = [t for t in sorted(vocab, key=vocab.__getitem__) if t not in taken]
    spec["model"]["vocab"] = {t: i for i, t in enumerate(first + rest)}  # the trainer left room for `first`
    keys = ("content", "single_word", "lstrip", "rstrip", "normalized", "special")
    spec["added_tokens"] = [
        {"id": i, **{k: entry[k] for k in keys}} for i, (_, entry) in enumerate(head) if entry is not None
    ]
    return spec


def insert_byte_tokens(spec: dict, n_special: int) -> dict:
    """Put the 256 `<0xXX>` byte-fallback tokens right after the special tokens (ids shift by 256)."""
    vocab: dict[str, int] = spec["model"]["vocab"]
    ordered = sorted(vocab, key=vocab.__getitem__)
    head, rest = ordered[:n_special], [t for t in ordered[n_special:] if t not in BYTE_TOKENS]
    spec["model"]["vocab"] = {t: i for i, t in enumerate(head + BYTE_TOKENS + rest)}
    return spec


def canonical_unigram(spec: dict, n_special: int) -> dict:
    """Make a trained Unigram model independent of the trainer's run-to-run noise.

    The UnigramTrainer (a) gives the required characters it had to add the scores
    min_score + k·1e-4 in hash-set order and (b) sums EM counts in parallel, so scores differ in
    the last bits between runs. Here (a) the added characters get those scores in sorted order,
    (b) scores are rounded to 1e-6 (SentencePiece itself stores float32 scores) and (c) pieces
    after the special tokens are ordered by (score descending, piece).
    """
    model = spec["model"]
    pieces = [list(p) for p in model["vocab"]]
    unk = pieces[model["unk_id"]][0] if model.get("unk_id") is not None else None
    head, rest = pieces[:n_special], pieces[n_special:]
    if rest:
        # (a) the scores the trainer hands out, computed exactly as it does (repeated addition)
        lowest, penalty, ladder = min(p[1] for p in rest), 0.0, []
        chars = [p for p in rest if len(p[0]) == 1]
        for _ in chars:
            ladder.append(lowest + penalty)
            penalty += 0.0001
        on_ladder = set(ladder)
        added = sorted((p for p in chars if p[1] in on_ladder), key=lambda p: p[0])
        for p, score in zip(added, ladder):
            p[1] = score
        for p in rest:  # (b)
            p[1] = round(p[1], 6)
        rest.sort(key=lambda p: (-p[1], p[0]))  # (c)
    pieces = head + rest
    model["vocab"] = pieces
    if unk is not None:
        model["unk_id"] = [p[0] for p in pieces].index(unk)
    return spec


# ---------------------------------------------------------------------------------------------
# the target's special tokens against the source's


def special_token_clash(target, source) -> str | None:
    """Why the target tokenizer's special tokens clash with the source's, or None when they do not.

    A clash: (a) a special token of one side is an ordinary vocabulary entry of the other (the overlap
    would give a control token a word's row, or the reverse); (b) both vocabularies have the
    byte-fallback layout `source_head` reads, the target's head is not the source's, token for token
    at the same ids (what the tokenizer stage trains for such a source: a tokenizer trained for another
    source, or edited, would put Gemma's `<eos>` where the model's config says something else)."""

    def specials(tok) -> dict[str, int]:
        return {t.content: i for i, t in tok.added_tokens_decoder.items() if t.special}

    t_special, s_special = specials(target), specials(source)
    for mine, theirs, side, other in ((t_special, source, "target", "source"), (s_special, target, "source", "target")):
        vocab, special = theirs.get_vocab(), specials(theirs)
        for content, i in sorted(mine.items(), key=lambda kv: kv[1]):
            if content in vocab and content not in special:
                return (
                    f"the {side}'s special token {content!r} (id {i}) is an ordinary token of the {other} "
                    f"(id {vocab[content]})"
                )
    s_head = source_head(_backend_json(source))
    t_head = source_head(_backend_json(target)) if s_head else None
    if s_head is not None and t_head is not None and [c for c, _ in t_head] != [c for c, _ in s_head]:
        at = next((i for i, (a, b) in enumerate(zip(t_head, s_head)) if a[0] != b[0]), min(len(t_head), len(s_head)))
        in_target = repr(t_head[at][0]) if at < len(t_head) else "a byte token"
        in_source = repr(s_head[at][0]) if at < len(s_head) else "a byte token"
        return (
            f"the target does not keep the source's {len(s_head)} head tokens at their ids: id {at} is {in_target} "
            f"in the target and {in_source} in the source"
        )
    return None


def crossed_specials(target, source, target_ids: list[int], source_ids: list[int | None]) -> list[int]:
    """The positions of the matched pairs (target id, source id; None: no match) in which a special token of one
    side is an ordinary token of the other: what `special_token_clash` refuses for a trained target, and what an
    existing target (`tokenizer.from`, whose special tokens are its own) leaves unmatched instead."""

    def special_ids(tok) -> set[int]:
        return {i for i, t in tok.added_tokens_decoder.items() if t.special} | set(tok.all_special_ids)

    t_special, s_special = special_ids(target), special_ids(source)
    return [
        pos
        for pos, (t, s) in enumerate(zip(target_ids, source_ids))
        if s is not None and (t in t_special) != (s in s_special)
    ]


# a role one side fills whose stand-in the other side fills: BERT's [CLS] starts and its [SEP] ends a sequence as
# Gemma's <bos> and <eos> do
ROLE_STAND_INS = {
    "bos_token": "cls_token",
    "cls_token": "bos_token",
    "eos_token": "sep_token",
    "sep_token": "eos_token",
}


def role_pairs(target, source) -> dict[int, int]:
    """Target special-token id -> source special-token id, by role (`special_tokens_map`): the same role first (mask,
    pad, unk, bos, ...), then a stand-in for a role the source lacks (`ROLE_STAND_INS`). What an existing target
    (`tokenizer.from`) whose special tokens are spelled otherwise than the source's gets in the overlap, so that a
    masked source reads the target's `<mask>` with its own `[MASK]` row in every method."""

    def roles(tok) -> dict[str, str]:
        return {role: name for role, name in tok.special_tokens_map.items() if isinstance(name, str)}

    t_roles, s_roles = roles(target), roles(source)
    pairs: dict[int, int] = {}
    for stand_in in (False, True):
        for role, name in t_roles.items():
            theirs = s_roles.get(ROLE_STAND_INS.get(role, "") if stand_in else role)
            tid = target.convert_tokens_to_ids(name)
            if theirs is not None and tid not in pairs and name in target.get_vocab():
                pairs[tid] = source.convert_tokens_to_ids(theirs)
    return pairs
