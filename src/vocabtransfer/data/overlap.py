"""Source vs target vocabulary overlap on canonical token forms (the `overlap` stage).

Token forms and matching follow `deepfocus.vocab_helper` / `deepfocus.focus.get_overlapping_tokens`
(FOCUS, Dobler & de Melo 2023) exactly, so the overlap here is the one FOCUS uses:

1. Canonical form per token, by scheme (picked with deepfocus's "more than 100 tokens" heuristics):
   - sentencepiece (> 100 vocab entries start with ▁): the decoded token, left-stripped, with ▁
     prepended when the raw token starts with ▁; byte-fallback tokens `<0x..>` stay as they are;
   - wordpiece (> 100 entries start with ##): `##x` -> `x`, any other `x` -> `▁x`;
   - otherwise (byte-level BPE and the rest): like sentencepiece, with Ġ marking a word start.
   Fuzzy form = canonical form without ▁, lower-cased.
   With `match_bytes` (params `overlap.match_bytes`; not deepfocus's) the canonical form of a
   byte-level or SentencePiece-style token is the bytes it spells (`tokenizer.token_bytes`), a
   leading space written ▁: `Ġthe` and `▁the` give "▁the", `<0xC3>` and `Ã` (byte 0xC3) give
   the same form, `Ċ` and `<0x0A>` give "\n"; an added token is its own content (deepfocus strips
   whitespace, so all of Gemma's newline-run tokens would share the form ""). The form is a str that holds the
   bytes losslessly: UTF-8 text as itself, bytes that are no whole character as lone surrogates U+DC80-U+DCFF
   (Python's surrogateescape), so it never equals a text form by accident (deepfocus decodes such
   bytes to "�", and all of them then share one form). WordPiece forms are text already; added
   and special tokens keep their text form. "Byte tokens" (byte-fallback pieces and byte-level
   tokens that are part of a character) are counted apart in the stage's stats.
2. Views of the source vocabulary by canonical and by fuzzy form. Where several source tokens
   share a form, deepfocus keeps a list sorted by id with canonical-form entries moved first and
   uses its first element; `_pick_first` computes that element directly.
3. Per target token, in priority order: symbol match (numbers, punctuation, whitespace, special
   tokens; `match_symbols`), exact match (`exact_match_all`), fuzzy match (`fuzzy_match_all`).

Speed: one batched Rust decode and one `convert_ids_to_tokens` per vocabulary, then dict look-ups.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import re
import string
import time
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np
import pyarrow as pa

from vocabtransfer.errors import VocabTransferError
from vocabtransfer import io
from vocabtransfer.data.families import crossed_specials, is_byte_piece, role_pairs, special_token_clash
from vocabtransfer.data.families import spelling, token_bytes
from vocabtransfer.model.hub import load_tokenizer, materialised_source
from vocabtransfer.pipeline.stage_spec import Context

log = logging.getLogger(__name__)

SP_SPACE = "▁"  # SentencePiece word-start marker; the canonical word-start marker
BPE_SPACE = "Ġ"  # byte-level BPE word-start marker
WORDPIECE_PREFIX = "##"
_BYTE_FALLBACK = re.compile(r"<0x[0-9,A-F]{2}>")  # deepfocus's pattern, `re.match` semantics (prefix)
_PUNCTUATION = frozenset(string.punctuation)

# deepfocus's descriptors, "special_role" for an existing target's special token paired by role (families.role_pairs)
EXACT, FUZZY, SYMBOL, ROLE, NONE = "exact_match", "fuzzy_match", "numerical_symbol", "special_role", "none"
MATCH_KINDS = (EXACT, FUZZY, SYMBOL, ROLE, NONE)

# how a tokenizer marks word boundaries in its token strings ("plain": no markers); one vocabulary for
# `detect_scheme` (from the token strings) and `methods.baselines.tokenizer_markers` (from the backend)
Scheme = Literal["sentencepiece", "wordpiece", "bytelevel", "plain"]

SCHEMA = pa.schema(
    [
        pa.field("target_id", pa.int32(), nullable=False),
        pa.field("target_token", pa.string(), nullable=False),
        pa.field("source_id", pa.int32()),
        pa.field("source_token", pa.string()),
        pa.field("match", pa.string(), nullable=False),
    ]
)


@dataclass
class CanonicalVocab:
    """A tokenizer's vocabulary (`get_vocab()` entries) sorted by id, with canonical and fuzzy forms."""

    ids: np.ndarray  # (n,) int64, ascending (stable for ids shared by several entries)
    tokens: list[str]  # native forms
    canonical: list[str]
    fuzzy: list[str]
    scheme: Scheme
    byte: np.ndarray | None = (
        None  # (n,) bool: a byte token (byte-fallback piece, byte-level token that is no whole text)
    )

    def __len__(self) -> int:
        return len(self.tokens)


@contextlib.contextmanager
def gc_paused():
    """Pause the garbage collector: building ~10^5 small lists triggers full collections over
    the large heap that torch and transformers leave, which costs more than the work itself."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def detect_scheme(tokens) -> Scheme:
    """deepfocus's heuristics: > 100 tokens starting with ▁ -> sentencepiece, > 100 with ## -> wordpiece."""
    tokens = list(tokens)
    if sum(1 for t in tokens if t[:1] == SP_SPACE) > 100:
        return "sentencepiece"
    if sum(1 for t in tokens if t[:2] == WORDPIECE_PREFIX) > 100:
        return "wordpiece"
    return "bytelevel"


def decode_each(tokenizer, ids) -> list[str]:
    """`[tokenizer.decode(i) for i in ids]`, computed with one batched call into the Rust tokenizer.

    Tokenizers whose `_decode` is the standard fast-tokenizer one are decoded with the backend's
    `decode_batch` plus the same clean-up step transformers applies; any other tokenizer goes
    through `tokenizer.batch_decode`, which is the per-id `decode` by definition.
    """
    ids = [[i] for i in np.asarray(ids, dtype=np.int64).reshape(-1).tolist()]
    if not ids:
        return []
    try:
        from transformers.tokenization_utils_tokenizers import TokenizersBackend  # absent from older transformers
    except ImportError:  # older transformers
        TokenizersBackend = None
    if TokenizersBackend is None or type(tokenizer)._decode is not TokenizersBackend._decode:
        return tokenizer.batch_decode(ids)
    texts = tokenizer.backend_tokenizer.decode_batch(ids, skip_special_tokens=False)
    # the clean-up that TokenizersBackend._decode applies (never to BPE models, unless forced)
    if tokenizer.clean_up_tokenization_spaces and not (
        type(tokenizer.backend_tokenizer.model).__name__ == "BPE"
        and not getattr(tokenizer, "clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output", False)
    ):
        texts = [tokenizer.clean_up_tokenization(t) for t in texts]
    return texts


def canonicalize(tokenizer, *, match_bytes: bool = False) -> CanonicalVocab:
    """Canonical and fuzzy forms of every vocabulary entry (deepfocus.vocab_helper.canonicalize_vocab;
    with `match_bytes` byte-level and SentencePiece-style entries by the bytes they spell, module doc)."""
    vocab = tokenizer.get_vocab()
    unsorted = np.fromiter(vocab.values(), dtype=np.int64, count=len(vocab))
    order = np.argsort(unsorted, kind="stable")  # by id; ties keep dict order (deepfocus's sorted())
    keys = list(vocab)
    tokens = [keys[i] for i in order.tolist()]
    ids = unsorted[order]
    scheme = detect_scheme(tokens)
    decoded = decode_each(tokenizer, ids)
    # deepfocus inspects convert_ids_to_tokens(id), which can differ from the vocab key
    raw = tokenizer.convert_ids_to_tokens(ids.tolist())
    if scheme == "wordpiece":
        canonical = [d[2:] if d.startswith(WORDPIECE_PREFIX) else SP_SPACE + d for d in decoded]
    else:
        marker = SP_SPACE if scheme == "sentencepiece" else BPE_SPACE
        canonical = []
        for d, r in zip(decoded, raw):
            if scheme == "sentencepiece" and _BYTE_FALLBACK.match(r):
                canonical.append(r)
            elif r.startswith(marker):
                canonical.append(SP_SPACE + d.lstrip())
            else:
                canonical.append(d.lstrip())
    spelled, byte = spelled_bytes(tokenizer, raw)
    if match_bytes:  # an added token (Gemma's `\n` runs, <start_of_turn>) is its own content, whitespace included
        added = set(tokenizer.added_tokens_encoder)
        canonical = [r if r in added else c if b is None else byte_form(b) for c, b, r in zip(canonical, spelled, raw)]
    fuzzy = [c.replace(SP_SPACE, "").lower() for c in canonical]
    return CanonicalVocab(ids=ids, tokens=tokens, canonical=canonical, fuzzy=fuzzy, scheme=scheme, byte=byte)


def spelled_bytes(tokenizer, raw: list[str]) -> tuple[list[bytes | None], np.ndarray]:
    """The bytes each raw token string spells (None: text, or an added token; `tokenizer.token_bytes`)
    and which of them are byte tokens: byte-fallback pieces, and byte-level tokens that are no whole text."""
    how = spelling(tokenizer)
    added = set(tokenizer.added_tokens_encoder)
    spelled = [None if r in added else token_bytes(r, how) for r in raw]
    byte = np.fromiter(
        (b is not None and (is_byte_piece(r, how) or not _is_text(b)) for b, r in zip(spelled, raw)),
        dtype=bool,
        count=len(raw),
    )
    return spelled, byte


def _is_text(spelled: bytes) -> bool:
    try:
        spelled.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def byte_form(spelled: bytes) -> str:
    """The canonical form of a spelled byte string: a leading space byte as ▁, bytes that are no UTF-8
    text as lone surrogates (surrogateescape), so equal bytes give equal forms and no text form collides."""
    text = spelled.decode("utf-8", "surrogateescape")
    return SP_SPACE + text[1:] if text.startswith(" ") else text


def _pick_first(vocab: CanonicalVocab, keys: list[str]) -> dict[str, int]:
    """form -> position in `vocab` of the entry deepfocus's `construct_vocab_view(...)[form][0]` holds.

    deepfocus walks the entries by id: the first one with a form starts its list, a later one is
    inserted at the front when the form is its canonical form and appended otherwise. So the front
    is the last (highest-id) entry whose canonical form equals the form, or else the first entry.
    """
    first: dict[str, int] = {}
    for pos, key in enumerate(keys):
        if key not in first or key == vocab.canonical[pos]:
            first[key] = pos
    return first


def is_numerical_symbol_etc(form: str, special_tokens: frozenset[str]) -> bool:
    """deepfocus.vocab_helper.is_numerical_symbol_etc (an empty form counts, as there)."""
    if form in special_tokens:
        return True
    return form.isnumeric() or all(c in _PUNCTUATION for c in form) or form.isspace()


def compute_overlap(
    target_tokenizer,
    source_tokenizer,
    *,
    exact_match_all: bool = True,
    fuzzy_match_all: bool = False,
    match_symbols: bool = False,
    match_bytes: bool = False,
) -> pa.Table:
    """One row per target vocabulary entry (sorted by target id) with its source match, if any.

    Columns: target_id (int32), target_token, source_id (int32, null = no match), source_token
    (null = no match), match (exact_match / fuzzy_match / numerical_symbol / none; `run` adds
    special_role).
    The same pairs and descriptors as `deepfocus.focus.get_overlapping_tokens`; with `match_bytes`,
    byte-level and SentencePiece-style tokens are compared by the bytes they spell (module doc).
    """
    with gc_paused():
        return _compute_overlap(
            target_tokenizer, source_tokenizer, exact_match_all, fuzzy_match_all, match_symbols, match_bytes
        )


def byte_counts(table: pa.Table, target_tokenizer, source_tokenizer) -> dict[str, int]:
    """Byte tokens (byte-fallback pieces, byte-level tokens that are part of a character) of each
    vocabulary, and how many of the target's have a match in `table`."""
    byte_ids = {}
    for side, tokenizer in (("target", target_tokenizer), ("source", source_tokenizer)):
        ids = sorted(set(tokenizer.get_vocab().values()))
        _, byte = spelled_bytes(tokenizer, tokenizer.convert_ids_to_tokens(ids))
        byte_ids[side] = np.asarray(ids, dtype=np.int64)[byte]
    matched = table.column("target_id").to_numpy()[table.column("source_id").is_valid().to_numpy(zero_copy_only=False)]
    return {
        "target": int(byte_ids["target"].size),
        "source": int(byte_ids["source"].size),
        "matched": int(np.isin(byte_ids["target"], matched).sum()),
    }


def _compute_overlap(target_tokenizer, source_tokenizer, exact_match_all, fuzzy_match_all, match_symbols, match_bytes):
    tgt = canonicalize(target_tokenizer, match_bytes=match_bytes)
    src = canonicalize(source_tokenizer, match_bytes=match_bytes)
    log.debug("canonicalisation: target %s, source %s", tgt.scheme, src.scheme)
    exact_view = _pick_first(src, src.canonical)
    fuzzy_view = _pick_first(src, src.fuzzy)
    specials = frozenset(target_tokenizer.all_special_tokens)

    # with match_bytes, of the source entries that spell the same bytes the one with the target token's own
    # string comes first (Gemma's <0x01> is its <0x01>, not the plain "\x01" piece deepfocus's order picks)
    same_piece = {token: pos for pos, token in enumerate(src.tokens)} if match_bytes else {}
    n = len(tgt)
    source_pos = np.full(n, -1, dtype=np.int64)
    kinds = [NONE] * n
    for i, (canon, fuzz) in enumerate(zip(tgt.canonical, tgt.fuzzy)):
        hit = exact_view.get(canon)
        own = same_piece.get(tgt.tokens[i])
        if own is not None and src.canonical[own] == canon:
            hit = own
        if match_symbols and is_numerical_symbol_etc(fuzz, specials):
            sym = hit if hit is not None else fuzzy_view.get(fuzz)
            if sym is not None:
                source_pos[i], kinds[i] = sym, SYMBOL
                continue
        if exact_match_all and hit is not None:
            source_pos[i], kinds[i] = hit, EXACT
        elif fuzzy_match_all and (hit := fuzzy_view.get(fuzz)) is not None:
            source_pos[i], kinds[i] = hit, FUZZY

    matched = source_pos >= 0
    source_ids = np.where(matched, src.ids[np.maximum(source_pos, 0)], 0)
    source_tokens = [src.tokens[p] if p >= 0 else None for p in source_pos.tolist()]
    return pa.table(
        {
            "target_id": pa.array(tgt.ids, pa.int32()),
            "target_token": pa.array(tgt.tokens, pa.string()),
            "source_id": pa.array(source_ids, pa.int32(), mask=~matched),
            "source_token": pa.array(source_tokens, pa.string()),
            "match": pa.array(kinds, pa.string()),
        },
        schema=SCHEMA,
    )


def rematched(table: pa.Table, rows: dict[int, int | None], source_tokenizer) -> pa.Table:
    """The overlap table with these rows' matches set: row -> a source id (match `special_role`) or None (no match)."""
    columns = table.to_pydict()
    for row, sid in rows.items():
        columns["source_id"][row] = sid
        columns["source_token"][row] = None if sid is None else source_tokenizer.convert_ids_to_tokens(sid)
        columns["match"][row] = NONE if sid is None else ROLE
    return pa.table(columns, schema=SCHEMA)


def overlap_pairs(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """The matched (target_ids, source_ids) of an overlap table, as int64 arrays in target-id order."""
    source = table.column("source_id")
    valid = source.is_valid().to_numpy(zero_copy_only=False)
    target_ids = table.column("target_id").to_numpy().astype(np.int64)[valid]
    source_ids = source.fill_null(0).to_numpy().astype(np.int64)[valid]
    return target_ids, source_ids


def checked_pairs(
    target_ids, source_ids, n_target: int, n_source: int, *, where: str, allow_empty: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Aligned (target ids, source ids) as int64 arrays, checked against both vocabularies:
    the same length, in range, each target id once, and (unless `allow_empty`) at least one pair.
    `where` (a file or params section) starts every error line."""
    t = np.asarray(target_ids, dtype=np.int64).reshape(-1)
    s = np.asarray(source_ids, dtype=np.int64).reshape(-1)
    fix = "rerun the overlap stage for this target tokenizer and source model"
    if t.shape != s.shape:
        raise VocabTransferError(f"{where}: overlap has {t.size} target ids but {s.size} source ids; {fix}")
    if t.size == 0 and not allow_empty:
        raise VocabTransferError(
            f"{where}: the target tokenizer shares no tokens with the source tokenizer (e.g. another script), "
            "so there is nothing to copy or combine; use a method that needs no overlap (random) "
            "or enable overlap.fuzzy_match_all / overlap.match_symbols"
        )
    for ids, n, what, owner in (
        (t, n_target, "target_id", "target tokenizer"),
        (s, n_source, "source_id", "source model"),
    ):
        if ids.size and (ids.min() < 0 or ids.max() >= n):
            bad = int(ids.max() if ids.max() >= n else ids.min())
            raise VocabTransferError(f"{where}: {what} {bad} is outside the {owner}'s vocabulary (size {n}); {fix}")
    if np.unique(t).size != t.size:
        raise VocabTransferError(f"{where}: a target_id appears more than once; {fix}")
    return t, s


def match_counts(table: pa.Table) -> dict[str, int]:
    kinds = table.column("match").to_pylist()
    return {kind: kinds.count(kind) for kind in MATCH_KINDS}


def markdown_counts(counts: dict[str, int], total: int) -> str:
    lines = ["| match | tokens | share |", "|---|---:|---:|"]
    for kind in MATCH_KINDS:
        lines.append(f"| {kind} | {counts[kind]} | {counts[kind] / max(total, 1):.1%} |")
    lines.append(f"| total | {total} | 100.0% |")
    return "\n".join(lines)


def run(ctx: Context) -> None:
    """The `overlap` stage: target tokenizer (stage input) vs the source model's tokenizer."""
    start = time.perf_counter()
    source_model = ctx.params.source_model
    target_tokenizer = load_tokenizer(ctx.input["tokenizer"])
    source_tokenizer = load_tokenizer(materialised_source(ctx.input["source"]))
    existing = ctx.params.tokenizer.from_ is not None  # tokenizer.from: its own special tokens
    clash = None if existing else special_token_clash(target_tokenizer, source_tokenizer)
    if clash:
        raise VocabTransferError(
            f"{ctx.input['tokenizer']}: its special tokens clash with those of the source model {source_model}: "
            f"{clash}; "
            "it was trained for another source or edited: retrain it with the tokenizer stage "
            "(snakemake --forcerun tokenizer, or dvc repro --force tokenizer)"
        )
    options = asdict(ctx.params.overlap)
    table = compute_overlap(target_tokenizer, source_tokenizer, **options)
    pairs = (table["target_id"].to_pylist(), table["source_id"].to_pylist()) if existing else ([], [])
    # an existing target: a control token and a word are not the same token (families.crossed_specials), and its
    # special tokens take the source's of their role (<mask> the source's [MASK], <bos> its [CLS]: families.role_pairs)
    crossed = crossed_specials(target_tokenizer, source_tokenizer, *pairs)
    fixes: dict[int, int | None] = dict.fromkeys(crossed)
    roles = role_pairs(target_tokenizer, source_tokenizer) if existing else {}
    if roles:
        kinds = table["match"].to_pylist()
        fixes |= {
            row: roles[t] for row, t in enumerate(pairs[0]) if t in roles and (kinds[row] == NONE or row in fixes)
        }
    by_role = sum(sid is not None for sid in fixes.values())
    if fixes:
        table = rematched(table, fixes, source_tokenizer)
        log.info("overlap: %d special token(s) left unmatched, %d paired by role", len(fixes) - by_role, by_role)
    seconds = time.perf_counter() - start
    byte_tokens = byte_counts(table, target_tokenizer, source_tokenizer)

    counts = match_counts(table)
    total = table.num_rows
    overlapping = total - counts[NONE]
    if overlapping == 0:
        log.warning(
            "%s: no target token overlaps the source vocabulary of %s; overlap-based methods "
            "(overlap, fvt, focus) will have nothing to copy",
            ctx.input["tokenizer"],
            source_model,
        )
    io.write_parquet(table, ctx.output["overlap"])
    io.write_json(
        {
            "lang": ctx.lang,
            "source_model": source_model,
            "n_target_tokens": total,
            "n_source_tokens": len(source_tokenizer.get_vocab()),
            "n_overlapping": overlapping,
            "overlap_share": overlapping / total if total else 0.0,
            "counts": counts,
            "byte_tokens": byte_tokens,
            "crossed_specials_unmatched": len(fixes) - by_role,
            "specials_by_role": by_role,
            "options": options,
            "schemes": {
                "target": detect_scheme(table.column("target_token").to_pylist()),
                "source": detect_scheme(source_tokenizer.get_vocab()),
            },
            "seconds": round(seconds, 3),
            "versions": io.versions(),
        },
        ctx.output["stats"],
    )
    log.info(
        "overlap %s vs %s (%.1f s):\n%s\nbyte tokens: %d of the target's matched; %d in the target, %d in the source",
        ctx.lang,
        source_model,
        seconds,
        markdown_counts(counts, total),
        byte_tokens["matched"],
        byte_tokens["target"],
        byte_tokens["source"],
    )
