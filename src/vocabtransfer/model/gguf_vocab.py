"""A target tokenizer as GGUF metadata (`tokenizer.ggml.*`), in the two forms llama.cpp and transformers' GGUF
loader rebuild a BPE tokenizer from:

* `gpt2`: byte-level BPE (GPT-2's alphabet `Ġ`, `Ċ`; pre-tokenizer `gpt-2`, its split regex): the vocabulary and the
  merges as the tokenizer spells them;
* `llama`: SentencePiece-style BPE (`▁` word marker, `<0xNN>` byte-fallback pieces typed BYTE; pre-tokenizer
  `default`): the vocabulary and the merges too (transformers reads them as they are), and a score per token,
  minus the rank of the merge that makes it, so that llama.cpp, which merges by score, merges in the same order.

Each token gets its type (CONTROL for special tokens, UNKNOWN for the unknown token, BYTE for byte pieces,
USER_DEFINED for added tokens that are not special); the special tokens' ids and whether the tokenizer adds a
beginning or an end of sequence token come from the tokenizer itself. Rows of the embedding matrix beyond the
vocabulary (a vocabulary padded to a multiple) get placeholder tokens typed UNUSED: llama.cpp wants one token per
row.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from vocabtransfer.errors import VocabTransferError

BYTE_PIECE = re.compile(r"<0x[0-9A-F]{2}>")
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6  # gguf.TokenType


@dataclass
class Vocab:
    """What `write` puts under `tokenizer.ggml.*` (gguf's key names)."""

    model: str  # tokenizer.ggml.model: gpt2 or llama
    pre: str  # tokenizer.ggml.pre
    tokens: list[str]
    types: list[int]
    merges: list[str]
    scores: list[float] = field(default_factory=list)  # llama only
    special_ids: dict[str, int] = field(default_factory=dict)  # bos, eos, unk, pad -> id
    add_bos: bool = False
    add_eos: bool = False
    add_space_prefix: bool = False


def _backend(tokenizer) -> dict:
    return json.loads(tokenizer.backend_tokenizer.to_str())


def _has(node, type_name: str, **attrs) -> bool:
    """Whether a serialized component (or a member of a Sequence) has this type (and these attributes)."""
    if isinstance(node, dict):
        if node.get("type") == type_name and all(node.get(k) == v for k, v in attrs.items()):
            return True
        return any(_has(v, type_name, **attrs) for v in node.values())
    if isinstance(node, list):
        return any(_has(v, type_name, **attrs) for v in node)
    return False


def _merges(model: dict) -> list[str]:
    out = []
    for merge in model.get("merges") or []:
        left, right = merge if isinstance(merge, list) else merge.split(" ", 1)
        if " " in left or " " in right:
            raise VocabTransferError(
                f"export.gguf: the tokenizer's merge {left!r} + {right!r} holds a space, which GGUF's merge list "
                "cannot spell; export without GGUF (export.gguf: none)"
            )
        out.append(f"{left} {right}")
    return out


def _adds(tokenizer) -> tuple[bool, bool]:
    """(adds a beginning of sequence token, adds an end of sequence token) when encoding with special tokens."""
    plain = tokenizer("a b", add_special_tokens=False)["input_ids"]
    full = tokenizer("a b")["input_ids"]
    bos = tokenizer.bos_token_id is not None and len(full) > len(plain) and full[0] == tokenizer.bos_token_id
    eos = tokenizer.eos_token_id is not None and len(full) > len(plain) and full[-1] == tokenizer.eos_token_id
    return bos, eos


def vocab(tokenizer, n_rows: int) -> Vocab:
    """The GGUF tokenizer metadata of `tokenizer` for a model with `n_rows` embedding rows."""
    spec = _backend(tokenizer)
    model = spec["model"]
    if model.get("type") != "BPE":
        raise VocabTransferError(
            f"export.gguf: the target tokenizer is a {model.get('type')} model; GGUF export writes BPE tokenizers "
            "(byte-level or SentencePiece-style), the ones trained for decoder sources; set export.gguf: none"
        )
    byte_level = _has(spec.get("pre_tokenizer"), "ByteLevel")
    ids = {str(t): i for t, i in tokenizer.get_vocab().items()}
    size = max(max(ids.values()) + 1, n_rows)
    if len(tokenizer) > n_rows:
        raise VocabTransferError(
            f"export.gguf: the tokenizer has {len(tokenizer)} tokens but the model {n_rows} embedding rows; "
            "the exported run is not one model with its tokenizer: rerun its pretrain job"
        )
    tokens = [f"[PAD{i}]" for i in range(size)]
    types = [UNUSED] * size
    for token, i in ids.items():
        tokens[i], types[i] = token, NORMAL
    special = {str(t) for t in tokenizer.all_special_tokens}
    for i, added in tokenizer.added_tokens_decoder.items():
        types[i] = CONTROL if added.special or str(added.content) in special else USER_DEFINED
    for token in special:
        if token in ids:
            types[ids[token]] = CONTROL
    if tokenizer.unk_token_id is not None:
        types[tokenizer.unk_token_id] = UNKNOWN
    merges = _merges(model)
    out = Vocab(
        model="gpt2" if byte_level else "llama",
        pre="gpt-2" if byte_level else "default",
        tokens=tokens,
        types=types,
        merges=merges,
        special_ids={
            role: i
            for role, i in (
                ("bos", tokenizer.bos_token_id),
                ("eos", tokenizer.eos_token_id),
                ("unk", tokenizer.unk_token_id),
                ("pad", tokenizer.pad_token_id),
            )
            if i is not None
        },
    )
    out.add_bos, out.add_eos = _adds(tokenizer)
    if not byte_level:
        for i, token in enumerate(tokens):
            if BYTE_PIECE.fullmatch(token) and types[i] == NORMAL:
                types[i] = BYTE
        rank = {merge.replace(" ", ""): r for r, merge in reversed(list(enumerate(merges)))}
        out.scores = [-float(rank[t]) if t in rank else 0.0 for t in tokens]
        pre = spec.get("pre_tokenizer")
        out.add_space_prefix = _has(pre, "Metaspace") and not _has(pre, "Metaspace", prepend_scheme="never")
        out.add_space_prefix |= _has(spec.get("normalizer"), "Prepend")
    return out


def add_to(writer, v: Vocab) -> None:
    """Write `v` under `tokenizer.ggml.*` with the gguf writer `writer`."""
    writer.add_tokenizer_model(v.model)
    writer.add_tokenizer_pre(v.pre)
    writer.add_token_list(v.tokens)
    writer.add_token_types(v.types)
    if v.scores:
        writer.add_token_scores(v.scores)
    writer.add_token_merges(v.merges)
    for role, add in (
        ("bos", writer.add_bos_token_id),
        ("eos", writer.add_eos_token_id),
        ("unk", writer.add_unk_token_id),
        ("pad", writer.add_pad_token_id),
    ):
        if role in v.special_ids:
            add(v.special_ids[role])
    writer.add_add_bos_token(v.add_bos)
    writer.add_add_eos_token(v.add_eos)
    if v.model == "llama":
        writer.add_add_space_prefix(v.add_space_prefix)
