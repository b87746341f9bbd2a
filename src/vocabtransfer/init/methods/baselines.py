"""Baseline initialisations (`random`, `overlap`, `mean`) and the helpers every method shares.

Shared helpers (imported by fvt.py, wechsel.py and any new method):

* `Ledger`           records how each target row was filled and why; its `stats()` is the
                     stats convention: {"copied", "combined", "random", "mean", "reasons"}.
* `random_matrix`    the seeded N(mean, std) draw for the whole target vocabulary (one call).
* `copy_overlap`     copies overlapping tokens and special tokens from the source rows.
* `token_surfaces`   the surface text of every token and whether it starts a word
                     (WordPiece `##`, SentencePiece `▁`, byte-level `Ġ`, or no markers).

random, overlap, mean, fvt and wechsel start from `random_matrix` (so a row that falls back to
random is the same row in each of them for one seed), overwrite what they can, and mark each row
in a Ledger. focus (`methods.focus.normal_rows`, deepfocus's per-token draws) and ofa / snmf
(`methods.ofa.random_coordinates`, in the low-rank coordinate space) draw their fallback rows
differently, so their random rows are not these.
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import torch

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.init.methods.registry import TransferProblem, TransferResult, register
from vocabtransfer.plan.method_options import MeanOptions, OverlapOptions, RandomOptions
from vocabtransfer.data.overlap import Scheme, checked_pairs
from vocabtransfer.init.moments import source_moments

log = logging.getLogger(__name__)

KINDS = ("copied", "combined", "random", "mean")
MAX_EXAMPLES = 10  # tokens listed per fallback reason in stats


# --------------------------------------------------------------------------- checks


def source_matrix(problem: TransferProblem) -> torch.Tensor:
    """The source embeddings as a float32 CPU tensor, checked against the source tokenizer."""
    emb = problem.source_embeddings
    if not isinstance(emb, torch.Tensor) or emb.dim() != 2 or emb.shape[0] == 0:
        raise VocabTransferError(
            f"source embeddings: expected a 2-D tensor (vocab x dim), got "
            f"{getattr(emb, 'shape', type(emb).__name__)}; pass the model's input embedding matrix"
        )
    if emb.shape[0] < len(problem.source_tokenizer):
        raise VocabTransferError(
            f"source embeddings: {emb.shape[0]} rows but the source tokenizer has {len(problem.source_tokenizer)} "
            "tokens; the tokenizer and the model come from different checkpoints"
        )
    return emb.detach().to("cpu", torch.float32)


def overlap_pairs(problem: TransferProblem, n_source: int) -> tuple[np.ndarray, np.ndarray]:
    """The overlap stage's aligned (target id, source id) arrays, checked."""
    return checked_pairs(
        problem.overlap_target_ids, problem.overlap_source_ids, problem.target_size, n_source, where="overlap"
    )


# --------------------------------------------------------------------------- ledger


class Ledger:
    """How each target row was filled (copied / combined / random / mean) and why."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.kind = np.full(len(tokenizer), -1, dtype=np.int8)
        self.reasons: dict[str, Counter] = defaultdict(Counter)
        self.examples: dict[str, list[str]] = {}

    def free(self) -> np.ndarray:
        """Target ids not filled yet (ascending)."""
        return np.flatnonzero(self.kind < 0)

    def fill(self, ids, kind: str, reason: str, *, fallback: bool = False) -> None:
        """Mark rows `ids` as filled by `kind`; `fallback` lists example tokens under the reason."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size == 0:
            return
        if (self.kind[ids] >= 0).any():  # a method must decide each row once
            raise RuntimeError(f"ledger: {int((self.kind[ids] >= 0).sum())} row(s) filled twice ({reason})")
        self.kind[ids] = KINDS.index(kind)
        self.reasons[kind][reason] += int(ids.size)
        if fallback:
            shown = self.examples.setdefault(reason, [])
            need = MAX_EXAMPLES - len(shown)
            if need > 0:
                shown += self.tokenizer.convert_ids_to_tokens(ids[:need].tolist())
            log.info("%d token(s) -> %s: %s (e.g. %s)", ids.size, kind, reason, ", ".join(map(repr, shown[:5])))

    def stats(self, **extra) -> dict:
        """The stats convention: counts per kind (adding up to the vocab size) and the reasons."""
        if (self.kind < 0).any():
            raise RuntimeError(f"ledger: {int((self.kind < 0).sum())} target row(s) never filled")
        counts = np.bincount(self.kind, minlength=len(KINDS))
        out: dict[str, Any] = {k: int(c) for k, c in zip(KINDS, counts)}
        out["target_size"] = int(self.kind.size)
        out["reasons"] = {k: dict(sorted(v.items())) for k, v in self.reasons.items() if v}
        if self.examples:
            out["examples"] = self.examples
        out.update(extra)
        return out


# --------------------------------------------------------------------------- shared fills


def random_matrix(problem: TransferProblem, source: torch.Tensor) -> torch.Tensor:
    """(V_t, D) rows drawn from N(mean, std) of the source embeddings per dimension.

    One draw from a CPU generator seeded with `problem.seed`: byte-identical for one seed,
    and row i is the same whichever method uses it as its fallback.
    """
    mean, std = source_moments(source)
    gen = torch.Generator(device="cpu").manual_seed(int(problem.seed))
    out = torch.randn((problem.target_size, source.shape[1]), generator=gen, dtype=torch.float32)
    return out.mul_(std).add_(mean)


def special_pairs(problem: TransferProblem, n_source: int) -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray]:
    """Target special tokens matched to source rows: (target ids, source ids, how, unmatched ids).

    Matching order: the same string in the source vocabulary ([CLS] -> [CLS]); the overlap
    stage's pairing; the same role (cls_token, pad_token, ...) in both tokenizers (<s> -> [CLS]).
    """
    tgt_tok, src_tok = problem.target_tokenizer, problem.source_tokenizer
    src_vocab = src_tok.get_vocab()
    ov_t, ov_s = overlap_pairs(problem, n_source)
    via_overlap = dict(zip(ov_t.tolist(), ov_s.tolist()))
    src_roles = {role: tok for role, tok in src_tok.special_tokens_map.items() if isinstance(tok, str)}
    tgt_roles = {tok: role for role, tok in tgt_tok.special_tokens_map.items() if isinstance(tok, str)}
    t_ids, s_ids, how, unmatched = [], [], [], []
    special = problem.special_target_ids()
    for tid, tok in zip(special.tolist(), tgt_tok.convert_ids_to_tokens(special.tolist())):  # a handful
        role = tgt_roles.get(tok)
        if src_vocab.get(tok, n_source) < n_source:
            sid, why = src_vocab[tok], "same string"
        elif tid in via_overlap:
            sid, why = via_overlap[tid], "overlap"
        elif role in src_roles and src_vocab.get(src_roles[role], n_source) < n_source:
            sid, why = src_vocab[src_roles[role]], f"same role {role}"
        else:
            unmatched.append(tid)
            continue
        t_ids.append(tid)
        s_ids.append(sid)
        how.append(why)
    return (
        np.asarray(t_ids, dtype=np.int64),
        np.asarray(s_ids, dtype=np.int64),
        how,
        np.asarray(unmatched, dtype=np.int64),
    )


def copy_overlap(
    problem: TransferProblem,
    target: torch.Tensor,
    ledger: Ledger | None = None,
    *,
    source: torch.Tensor | None = None,
    overlap: bool = True,
) -> np.ndarray:
    """Copy source rows into `target` (in place) for overlapping tokens and special tokens.

    With `overlap=False` only the special tokens are copied. Returns the target special ids
    that have no source counterpart (left for the caller to fill). `ledger` records the copies.
    """
    source = source_matrix(problem) if source is None else source
    ledger = Ledger(problem.target_tokenizer) if ledger is None else ledger
    done = np.zeros(problem.target_size, dtype=bool)
    if overlap:
        t, s = overlap_pairs(problem, source.shape[0])
        target[torch.from_numpy(t)] = source[torch.from_numpy(s)]
        ledger.fill(t, "copied", "overlap")
        done[t] = True
    t, s, how, unmatched = special_pairs(problem, source.shape[0])
    keep = ~done[t]
    if keep.any():
        target[torch.from_numpy(t[keep])] = source[torch.from_numpy(s[keep])]
        for why, ids in _group(t[keep], [h for h, k in zip(how, keep) if k]).items():
            ledger.fill(ids, "copied", f"special token ({why})")
    unmatched = unmatched[~done[unmatched]] if unmatched.size else unmatched
    if unmatched.size:
        log.warning(
            "special token(s) %s have no source counterpart (by string, overlap or role)",
            ", ".join(problem.target_tokenizer.convert_ids_to_tokens(unmatched.tolist())),
        )
    return unmatched


def _group(ids: np.ndarray, labels: list[str]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    for i, label in zip(ids.tolist(), labels):
        out[label].append(i)
    return out


# --------------------------------------------------------------------------- token surfaces

SPECIAL_NO_SOURCE = "special token without a source counterpart"


@dataclass(frozen=True)
class Markers:
    """How a tokenizer marks word boundaries in its token strings."""

    kind: Scheme  # "wordpiece" (continuation prefix), "bytelevel" (Ġ word start), "sentencepiece" (▁), "plain"
    marker: str = ""  # "##" / "Ġ" / "▁" / ""


def tokenizer_markers(tokenizer) -> Markers:
    """Detect the marker convention from the backend tokenizer's model, pre-tokenizer and decoder."""
    backend = tokenizer.backend_tokenizer
    prefix = getattr(backend.model, "continuing_subword_prefix", None)
    parts = []
    for comp in (backend.pre_tokenizer, backend.decoder, backend.normalizer):
        if comp is not None:
            try:
                parts.append(comp.__getstate__().decode("utf-8", "replace"))
            except Exception:  # an exotic component without a JSON state
                parts.append(type(comp).__name__)
    desc = " ".join(parts)
    if type(backend.model).__name__ == "WordPiece" or prefix:
        return Markers("wordpiece", prefix or "##")
    if "ByteLevel" in desc:
        return Markers("bytelevel", "Ġ")
    if "Metaspace" in desc or "\u2581" in desc or "\\u2581" in desc:
        match = re.search(r'"replacement":\s*"([^"]+)"', desc)
        return Markers("sentencepiece", json.loads(f'"{match.group(1)}"') if match else "\u2581")
    return Markers("plain", "")


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's printable-character alphabet for the 256 bytes, inverted (char -> byte)."""
    keep = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars, n = keep[:], 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(keep, chars)}


_BYTE_FALLBACK = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def token_surfaces(tokenizer) -> tuple[list[str | None], np.ndarray]:
    """For every token id: its surface text without word markers (None for special tokens and
    byte pieces that are not valid text) and whether it begins a word.

    WordPiece: "habari" starts a word, "##ari" continues one. SentencePiece / byte-level:
    "▁habari" / "Ġhabari" start a word, "ari" continues one. Without markers every token
    counts as a word start. (A string loop: no batched API gives the raw pieces' text.)
    """
    scheme = tokenizer_markers(tokenizer)
    tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    special = set(tokenizer.all_special_ids)
    texts: list[str | None] = []
    start = np.ones(len(tokens), dtype=bool)
    m = scheme.marker
    bytemap = _byte_decoder() if scheme.kind == "bytelevel" else None
    for i, tok in enumerate(tokens):
        if i in special or tok is None:
            texts.append(None)
            continue
        if scheme.kind == "wordpiece":
            cont = tok.startswith(m) and len(tok) > len(m)
            start[i] = not cont
            texts.append(tok[len(m) :] if cont else tok)
        elif scheme.kind == "bytelevel":
            assert bytemap is not None  # set above for a byte-level scheme
            text: str | None
            try:
                text = bytes(bytemap[c] for c in tok).decode("utf-8")
            except (KeyError, UnicodeDecodeError):  # a partial UTF-8 sequence or a non-byte added token
                text = tok if any(c not in bytemap for c in tok) else None
            if text is not None and text.startswith(" "):
                start[i], text = True, text[1:]
            else:
                start[i] = False
            texts.append(text)
        elif scheme.kind == "sentencepiece":
            hit = _BYTE_FALLBACK.match(tok)
            if hit:
                b = int(hit.group(1), 16)
                texts.append(chr(b) if b < 0x80 else None)
                start[i] = False
                continue
            start[i] = tok.startswith(m)
            texts.append(tok[len(m) :].replace(m, " ") if start[i] else tok.replace(m, " "))
        else:
            texts.append(tok)
    return texts, start


# --------------------------------------------------------------------------- methods


@register("random")
def random_init(problem: TransferProblem, options: RandomOptions = RandomOptions()) -> TransferResult:
    """Every row from N(mean, std) of the source embeddings; special tokens copied.

    `options.scale` (params `init.random.scale`): `source` leaves the drawn rows at the source's spread;
    `calibrated` has the init stage shrink the drawn rows (`TransferResult.random_rows`, never the copied
    special tokens) toward the source mean by one factor α ≤ 1, μ + α (e − μ): N(μ, (α σ)²) instead of
    N(μ, σ²), α measured on the source model with the target vocabulary (`vocabtransfer.init.calibrate`).
    Why: with logits z_i = h·e_i over V tokens, the expected loss is about ln V + Var(z)/2, and Var(z) ≈
    σ²‖h‖². Through a tied head (Gemma: the output layer is the input matrix) rows of the source's spread
    give Var(z) ≫ 1: the model starts confidently wrong, ~6 nats above the uniform guess ln V, a strawman
    baseline. α is the largest factor on the grid 2^(-k/8) whose model scores at most `calibration_margin`
    nats above the same model with every drawn row at μ (zero spread), on a few training lines: measured,
    not derived from the final norm's weights (the inputs change with α too).
    The method itself draws the same rows for either setting.
    """
    return _copy_then_random(problem, "random", overlap=False, reason="random method")


@register("overlap")
def overlap_init(problem: TransferProblem, options: OverlapOptions = OverlapOptions()) -> TransferResult:
    """Overlapping and special tokens copied; every other row as in `random`, scaled as
    `init.overlap.scale` says (see `random_init`: only the drawn rows, never the copied ones)."""
    return _copy_then_random(problem, "overlap", overlap=True, reason="not in the source vocabulary")


def _copy_then_random(problem: TransferProblem, method: str, *, overlap: bool, reason: str) -> TransferResult:
    """Special tokens (and, with `overlap`, overlapping tokens) copied; every other row random (marked in
    `random_rows`)."""
    source = source_matrix(problem)
    ledger = Ledger(problem.target_tokenizer)
    target = random_matrix(problem, source)
    unmatched = copy_overlap(problem, target, ledger, source=source, overlap=overlap)
    ledger.fill(unmatched, "random", SPECIAL_NO_SOURCE, fallback=True)
    ledger.fill(ledger.free(), "random", reason)
    return TransferResult(
        embeddings=target,
        stats=ledger.stats(method=method, seed=int(problem.seed)),
        random_rows=ledger.kind == KINDS.index("random"),
    )


@register("mean")  # deterministic (catalog.py): every row a copy or the mean
def mean_init(problem: TransferProblem, options: MeanOptions = MeanOptions()) -> TransferResult:
    """Overlapping and special tokens copied; every other row the mean source embedding."""
    source = source_matrix(problem)
    ledger = Ledger(problem.target_tokenizer)
    mean, _ = source_moments(source)
    target = mean.expand(problem.target_size, -1).clone()
    unmatched = copy_overlap(problem, target, ledger, source=source)
    ledger.fill(unmatched, "mean", SPECIAL_NO_SOURCE, fallback=True)
    ledger.fill(ledger.free(), "mean", "not in the source vocabulary")
    return TransferResult(embeddings=target, stats=ledger.stats(method="mean", seed=int(problem.seed)))
