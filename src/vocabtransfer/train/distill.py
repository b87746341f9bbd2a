"""The `distill` objective: the source model, reading the same text through its own tokenizer, teaches
the student (the model being pretrained with the target tokenizer) by cross-tokenizer likelihood matching.

Both tokenizations of a text are cut into the shortest byte spans ("chunks") at whose ends both have a
token boundary; a chunk's log-likelihood is the sum of its tokens' log-probabilities (each read off the
fused LM head as minus the standard cross-entropy of the observed token: never the N x V distribution).
Per chunk, with y = exp(log p_chunk / tau) (teacher T, student S),

    binary_ce(y_T, y_S) = -[y_T log y_S + (1 - y_T) log(1 - y_S)]
    loss_chunk          = binary_ce(y_T, y_S) - binary_ce(y_T, y_T)          (>= 0, = 0 iff y_S = y_T)

the second term being the teacher's own (constant) binary entropy: the gradient is binary_ce's, the value
is zero when the student matches the teacher. The objective is `alpha * mean over chunks + (1 - alpha) *
the standard LM loss` (docs/objectives.md says where this departs from ALM and what that costs).

Steps:
  1. `Speller`: the bytes each token of a tokenizer stands for (`data.families.token_bytes`: byte-level
     alphabet, `▁`, `<0xE2>` byte-fallback pieces); special tokens have none; a tokenizer whose tokens do
     not spell the text's bytes back (lossy normalisation, WordPiece) is refused in one line;
  2. `chunk_ids`: the common token ends of two tokenizations (byte offsets) and each token's chunk;
  3. `pack_pairs`: the student's training blocks exactly as `lmdata.pack_ids` packs them, beside the
     teacher's tokenization of the same lines, with each position's chunk (-1 outside every chunk);
     a chunk counts only where every token of it is predicted on both sides (a causal LM does not
     predict its block's first token);
  4. `chunk_log_likelihoods`, `chunk_loss`: the per-chunk sums and the loss above.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Iterable, Sequence

import numpy as np
import torch

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.data.families import spelling, token_bytes
from vocabtransfer.model import heads
from vocabtransfer.model.lmdata import special_tokens_around
from vocabtransfer.train.chunk_bias import PairBias, count_tokens
from vocabtransfer.train.packing import PackedBlocks

LOG_EPS = 1e-6  # chunk log-likelihoods / tau are clamped to <= -LOG_EPS: log(1 - y) stays finite
Line = Sequence[int] | np.ndarray  # a pre-tokenised line's ids: a list, or a slice of the split (`PackedBlocks.lines`)


# ---------------------------------------------------------------------------------------------
# 1. the bytes of each token


class Speller:
    """The UTF-8 bytes each token id of a fast tokenizer stands for.

    `lengths(ids, first=True)`: byte length per id (0 for special tokens), the space a Metaspace or
    byte-level tokenizer writes before a text's first word left out when `first`; `encode(text)`: the ids
    (no special tokens) and their lengths, checked to spell the text's bytes back.
    """

    def __init__(self, tokenizer, role: str = "tokenizer"):
        self.tokenizer, self.role = tokenizer, role
        self.how = spelling(tokenizer)
        self._token_bytes = token_bytes
        self.special = set(tokenizer.all_special_ids)
        self._cache: dict[int, bytes | None] = {}
        probe = tokenizer("a", add_special_tokens=False)["input_ids"]
        first = self.token(probe[0]) if probe else None
        self.prepends_space = first is not None and first.startswith(b" ")

    def token(self, i: int) -> bytes | None:
        """The bytes of token `i` (b"" for a special token; None where its spelling gives no bytes)."""
        if i not in self._cache:
            if i in self.special:
                self._cache[i] = b""
            else:
                self._cache[i] = self._token_bytes(self.tokenizer.convert_ids_to_tokens(int(i)), self.how)
        return self._cache[i]

    def spell(self, ids: Sequence[int], *, first: bool = True) -> list[bytes]:
        """Each id's bytes; with `first`, the space the tokenizer puts before a text's first word dropped."""
        out = []
        for i in ids:
            b = self.token(int(i))
            if b is None:
                raise VocabTransferError(
                    f"{self.role} {self.tokenizer.name_or_path}: token "
                    f"{self.tokenizer.convert_ids_to_tokens(int(i))!r} "
                    f"does not spell bytes ({self.how.kind} vocabulary); distill needs tokenizers whose tokens "
                    "spell the text's bytes (byte-level BPE, or SentencePiece with byte fallback)"
                )
            out.append(b)
        if first and self.prepends_space:
            for k, b in enumerate(out):
                if b:
                    out[k] = b[1:] if b.startswith(b" ") else b
                    break
        return out

    def encode(self, text: str) -> tuple[list[int], list[int]]:
        """(ids without special tokens, byte length of each) of `text`; a tokenization that does not spell
        the text's bytes back is a VocabTransferError (lossy normalisation)."""
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        pieces = self.spell(ids)
        if b"".join(pieces) != text.encode("utf-8"):
            raise VocabTransferError(
                f"{self.role} {self.tokenizer.name_or_path}: its tokens spell {b''.join(pieces)[:40]!r} for the text "
                f"{text[:40]!r}; it does not reproduce the text's bytes (lossy normalisation), so chunk "
                "likelihoods cannot be matched; use a lossless tokenizer or another objective"
            )
        return ids, [len(b) for b in pieces]


# ---------------------------------------------------------------------------------------------
# 2. the chunks


def chunk_ids(lengths_a: Sequence[int], lengths_b: Sequence[int], keep=None) -> tuple[np.ndarray, np.ndarray, int]:
    """The chunk of each token of two tokenizations of one byte string (token byte lengths; 0 for special
    tokens): chunk j spans the bytes (c_j, c_{j+1}] between consecutive common token ends c_0 = 0 < c_1 <
    ...; a token belongs to the chunk its end falls in. Zero-length tokens, and tokens ending after the
    last common end (when one side covers more bytes), get -1. Returns (chunks_a, chunks_b, n_chunks).

    `keep(i, j)` (unbiased chunks, `chunk_bias`): whether the common end where token i of a and token j of b
    end (the last token ending there on each side: a special token when one follows) ends a chunk; the
    last common end always does. None: every common end does (exact chunks)."""
    ends_a = np.cumsum(np.asarray(lengths_a, dtype=np.int64))
    ends_b = np.cumsum(np.asarray(lengths_b, dtype=np.int64))
    common = np.intersect1d(ends_a, ends_b)
    common = np.union1d(common[common > 0], [0])
    if keep is not None and len(common) > 2:
        inner = common[1:-1]
        ia = np.searchsorted(ends_a, inner, side="right") - 1
        ib = np.searchsorted(ends_b, inner, side="right") - 1
        kept = np.array([keep(int(i), int(j)) for i, j in zip(ia, ib)], dtype=bool)
        common = np.concatenate([common[:1], inner[kept], common[-1:]])
    last = common[-1]

    def assign(lengths, ends):
        lengths = np.asarray(lengths, dtype=np.int64)
        out = np.searchsorted(common, ends, side="left") - 1
        out[(lengths == 0) | (ends > last)] = -1
        return out

    return assign(lengths_a, ends_a), assign(lengths_b, ends_b), len(common) - 1


def chunk_spans(text: str, speller_a: Speller, speller_b: Speller) -> list[bytes]:
    """The chunks of `text` under two tokenizers, as byte strings (for reading and tests)."""
    _, la = speller_a.encode(text)
    _, lb = speller_b.encode(text)
    ca, _, n = chunk_ids(la, lb)
    data, ends = text.encode("utf-8"), np.cumsum(la)
    bounds = [0] + [int(ends[np.nonzero(ca == j)[0][-1]]) for j in range(n)]
    return [data[s:e] for s, e in zip(bounds, bounds[1:])]


# ---------------------------------------------------------------------------------------------
# 3. the training blocks of both tokenizers


@dataclass(frozen=True)
class PairBlock:
    """One training block: the student's ids (as `lmdata.pack_ids` packs them), the teacher's ids of the
    same lines, and each position's chunk (-1: in no counted chunk); `n_chunks` chunks counted."""

    input_ids: list[int]
    teacher_ids: list[int]
    chunks: list[int]
    teacher_chunks: list[int]
    n_chunks: int
    teacher_ll: tuple[float, ...] | None = None  # the teacher's chunk log-likelihoods, when cached


def _valid_utf8_prefix(data: bytes) -> str:
    """The longest prefix of `data` that is whole UTF-8 characters (a line cut between a character's bytes)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(data) - 3:
            raise VocabTransferError(
                f"the student's tokens spell bytes that are not UTF-8 text ({data[:40]!r}); "
                "the pre-tokenised split does not come from this tokenizer"
            ) from exc
        return data[: exc.start].decode("utf-8")


class _Pairing:
    """A line's ids on both sides, and blocks of such pairs (step 3 of the module docstring). `student`,
    `teacher`: tokenizers."""

    def __init__(self, student, teacher, seq_len: int):
        self.s_spell, self.t_spell = Speller(student, "student tokenizer"), Speller(teacher, "teacher tokenizer")
        self.bias: PairBias | None = None  # unbiased chunks (`unbiased`); None: exact chunks
        self.s_pre, self.s_suf = special_tokens_around(student)
        self.t_pre, self.t_suf = special_tokens_around(teacher)
        self.seq_len, self.room = seq_len, seq_len - len(self.s_pre) - len(self.s_suf)
        if self.room < 1:
            raise VocabTransferError(f"seq_len {seq_len} leaves no room for tokens between the special tokens")
        self.s_eos, self.t_eos = student.eos_token_id, teacher.eos_token_id

    def line_pair(self, line: Line) -> tuple[list[int], list[int], list[int], list[int]]:
        """(student ids, their byte lengths, teacher ids, their byte lengths) of one pre-tokenised line."""
        s_ids = self.s_pre + [int(i) for i in line[: self.room]] + self.s_suf
        if self.s_eos is not None and (not s_ids or s_ids[-1] != self.s_eos):
            s_ids = s_ids[: self.seq_len - 1] + [self.s_eos]
        pieces = self.s_spell.spell(s_ids)
        text = _valid_utf8_prefix(b"".join(pieces))
        t_text_ids, t_lengths = self.t_spell.encode(text)
        t_ids = self.t_pre + t_text_ids + self.t_suf
        t_lengths = [0] * len(self.t_pre) + t_lengths + [0] * len(self.t_suf)
        if self.t_eos is not None and t_ids[-1:] != [self.t_eos]:
            t_ids, t_lengths = t_ids + [self.t_eos], t_lengths + [0]
        return s_ids, [len(b) for b in pieces], t_ids, t_lengths

    def unbiased(self, lines: Iterable[Line], threshold: float) -> None:
        """Unbiased chunks from here on (`chunk_bias`), with unigram probabilities from `lines`' both sides."""
        pairs = [self.line_pair(line) for line in lines]
        self.bias = PairBias(
            self.t_spell,
            self.s_spell,
            count_tokens((p[2] for p in pairs), len(self.t_spell.tokenizer)),
            count_tokens((p[0] for p in pairs), len(self.s_spell.tokenizer)),
            threshold,
        )

    def block(self, pairs: list[tuple]) -> PairBlock:
        """One block of line pairs, with the chunk of every position of both sides."""
        s_ids = [i for p in pairs for i in p[0]]
        s_len = [n for p in pairs for n in p[1]]
        t_ids = [i for p in pairs for i in p[2]]
        t_len = [n for p in pairs for n in p[3]]
        keep = None
        if self.bias is not None:  # a special token ending there on either side keeps the boundary
            bias = self.bias

            def keep(i: int, j: int) -> bool:
                return s_len[i] == 0 or t_len[j] == 0 or bias.unbiased(t_ids[j], s_ids[i])

        ca, cb, n = chunk_ids(s_len, t_len, keep)
        # a chunk counts when each of its tokens is predicted on both sides: not a block's first position
        bad = set(ca[:1].tolist()) | set(cb[:1].tolist())
        counted = np.array([j not in bad for j in range(n)], dtype=bool)
        renumber = np.full(n + 1, -1, dtype=np.int64)  # index n: the -1 of tokens in no chunk
        renumber[:n][counted] = np.arange(int(counted.sum()))
        return PairBlock(s_ids, t_ids, renumber[ca].tolist(), renumber[cb].tolist(), int(counted.sum()))


def pack_pairs(
    student, teacher, lines: Iterable[Line], seq_len: int, *, unbiased: float | None = None
) -> list[PairBlock]:
    """Causal training blocks of the pre-tokenised `lines` (student ids without special tokens), packed
    as `lmdata.pack_ids(student, lines, seq_len, kind="causal")` packs them, each beside the teacher's
    tokenization of the same text (its own special tokens around every line, an end-of-sequence token
    closing it; not cut to seq_len) and the chunk of every position of both (step 3 of the module
    docstring). `student`, `teacher`: tokenizers; `unbiased`: the bias threshold of unbiased chunks (unigram
    counts from `lines`), None for exact chunks."""
    pairing = _Pairing(student, teacher, seq_len)
    lines = list(lines)
    if unbiased is not None:
        pairing.unbiased(lines, unbiased)
    blocks: list[PairBlock] = []
    current: list[tuple] = []
    for line in lines:
        pair = pairing.line_pair(line)
        if current and sum(len(p[0]) for p in current) + len(pair[0]) > seq_len:
            blocks.append(pairing.block(current))
            current = []
        current.append(pair)
    if current:
        blocks.append(pairing.block(current))
    return blocks


class PairBlocks:
    """distill's training blocks of a mapped split, built when drawn: block b holds the lines of
    `packing.PackedBlocks`' block b (`pack_pairs` packs as `pack_ids`, so the boundaries are the same)
    beside the teacher's tokenization of their text; `cache` holds the blocks `cache_teacher` gave the
    teacher's chunk log-likelihoods (the run's visited blocks, not the corpus)."""

    def __init__(self, split, student, teacher, seq_len: int):
        self.packed = PackedBlocks(split, student, seq_len, kind="causal")
        self.pairing = _Pairing(student, teacher, seq_len)
        self.cache: dict[int, PairBlock] = {}

    def __len__(self) -> int:
        return len(self.packed)

    def unbiased(self, indices: Iterable[int], threshold: float) -> None:
        """Unbiased chunks (`chunk_bias`) in every block built from here on, the unigram probabilities
        counted on the lines of the blocks at `indices` (the run's visited blocks)."""
        self.pairing.unbiased((line for b in sorted(set(indices)) for line in self.packed.lines(b)), threshold)

    def __getitem__(self, b: int) -> PairBlock:
        if b in self.cache:
            return self.cache[b]
        return self.pairing.block([self.pairing.line_pair(line) for line in self.packed.lines(b)])

    def item(self, b: int) -> dict:
        """A training sample's fields (`batches.StepBlocks`): the student's ids and the pair block."""
        block = self[b]
        return {"input_ids": block.input_ids, "pair": block}


def collate_teacher(blocks: Sequence[PairBlock], pad_id: int) -> dict:
    """The teacher's side of a batch: padded ids, attention mask and labels, the chunk of each position
    for both sides (batch-wide chunk numbers: block k's chunks after those of blocks 0..k-1) and the
    number of chunks."""
    width = max(len(b.teacher_ids) for b in blocks)
    s_width = max(len(b.input_ids) for b in blocks)
    ids = torch.full((len(blocks), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(blocks), width), dtype=torch.long)
    t_chunks = torch.full((len(blocks), width), -1, dtype=torch.long)
    s_chunks = torch.full((len(blocks), s_width), -1, dtype=torch.long)
    offset = 0
    for k, b in enumerate(blocks):
        n = len(b.teacher_ids)
        ids[k, :n] = torch.tensor(b.teacher_ids, dtype=torch.long)
        mask[k, :n] = 1
        tc, sc = torch.tensor(b.teacher_chunks), torch.tensor(b.chunks)
        t_chunks[k, :n] = torch.where(tc >= 0, tc + offset, tc)
        s_chunks[k, : len(b.chunks)] = torch.where(sc >= 0, sc + offset, sc)
        offset += b.n_chunks
    out = {
        "teacher_input_ids": ids,
        "teacher_attention_mask": mask,
        "teacher_labels": ids.masked_fill(mask == 0, -100),
        "chunks": s_chunks,
        "teacher_chunks": t_chunks,
        "n_chunks": torch.tensor(offset),
    }
    cached = [b.teacher_ll for b in blocks if b.teacher_ll is not None]
    if len(cached) == len(blocks):  # cached: the teacher need not run
        out["teacher_chunk_ll"] = torch.tensor([x for ll in cached for x in ll], dtype=torch.float32)
    return out


def cache_teacher(teacher, blocks: PairBlocks, indices: Iterable[int], *, batch_size: int, pad_id: int, device) -> None:
    """Fills `blocks.cache` with the blocks at `indices`, each with the teacher's chunk log-likelihoods
    (`teacher_ll`): one forward of the frozen teacher per block, in batches, before training
    (`pretrain.distill.teacher: cached`)."""
    head = heads.head_parts(teacher)
    order = sorted(set(int(i) for i in indices))
    for s in range(0, len(order), batch_size):
        part = [blocks[i] for i in order[s : s + batch_size]]
        batch = collate_teacher(part, pad_id)
        ll = teacher_chunk_ll(teacher, head, batch, device)
        sizes = [b.n_chunks for b in part]
        for i, block, values in zip(order[s : s + batch_size], part, torch.split(ll.cpu(), sizes)):
            blocks.cache[i] = replace(block, teacher_ll=tuple(values.tolist()))


def teacher_chunk_ll(teacher, teacher_head, batch: dict, device) -> torch.Tensor:
    """The teacher's chunk log-likelihoods of a batch of `collate_teacher` (no gradients)."""
    teacher_batch = {
        "input_ids": batch["teacher_input_ids"],
        "attention_mask": batch["teacher_attention_mask"],
        "labels": batch["teacher_labels"],
    }
    with torch.no_grad():
        hidden, targets = heads.predicted_hidden(teacher, teacher_batch, "causal", teacher_head)
        rows = heads.head_loss(teacher_head, hidden, targets, objective="standard", reduction="none")
    labels = batch["teacher_labels"].to(rows.device)[:, 1:]
    chunks = batch["teacher_chunks"].to(rows.device)[:, 1:][labels != -100]
    return chunk_log_likelihoods(-rows, chunks, int(batch["n_chunks"])).to(device)


# ---------------------------------------------------------------------------------------------
# 4. chunk likelihoods and the loss


def chunk_log_likelihoods(token_log_probs: torch.Tensor, chunks: torch.Tensor, n_chunks: int) -> torch.Tensor:
    """Sum of the tokens' log-probabilities per chunk (tokens with chunk -1 left out): (n_chunks,)."""
    keep = chunks >= 0
    out = token_log_probs.new_zeros(n_chunks)
    return out.index_add(0, chunks[keep], token_log_probs[keep])


def _log1mexp(x: torch.Tensor) -> torch.Tensor:
    """log(1 - exp(x)) for x < 0, accurate on both sides of -log 2."""
    return torch.where(x > -math.log(2), torch.log(-torch.expm1(x)), torch.log1p(-torch.exp(x)))


def binary_ce(ll_teacher: torch.Tensor, ll_student: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Per chunk: -[y_T log y_S + (1 - y_T) log(1 - y_S)], y = exp(ll / temperature) (ALM's `binary_ce`)."""
    a = (ll_student / temperature).clamp(max=-LOG_EPS)
    b = (ll_teacher / temperature).clamp(max=-LOG_EPS)
    y = b.exp()
    return -(y * a + (1 - y) * _log1mexp(a))


def chunk_loss(ll_teacher: torch.Tensor, ll_student: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Per chunk: binary_ce(y_T, y_S) - binary_ce(y_T, y_T), the binary KL divergence of the student's
    chunk probability from the teacher's (same gradient as `binary_ce`; 0 where they are equal)."""
    check_temperature(temperature)
    a = (ll_student / temperature).clamp(max=-LOG_EPS)
    b = (ll_teacher / temperature).clamp(max=-LOG_EPS)
    y = b.exp()
    return y * (b - a) + (1 - y) * (_log1mexp(b) - _log1mexp(a))


def check_temperature(temperature: float) -> None:
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float))
        or not temperature > 0
        or not math.isfinite(temperature)
    ):
        raise VocabTransferError(
            f"pretrain.distill.temperature={temperature!r}: must be a finite number > 0 "
            "(chunk probabilities are exp(log p / temperature))"
        )


def loss_terms(model, teacher, batch: dict, *, head, teacher_head, temperature: float):
    """(sum of the student's standard cross-entropy over its predicted tokens, sum of `chunk_loss` over the
    batch's chunks) of one batch of `collate_teacher`'s fields beside the student's causal batch.

    The student's per-token log-probabilities of the observed tokens come from the fused head (one pass,
    `reduction="none"`: they give both terms); the teacher's chunk log-likelihoods are the batch's
    `teacher_chunk_ll` when cached, else the frozen teacher runs here, without gradients, the same way.
    `model` may be DDP-wrapped; `head`/`teacher_head`: `heads.head_parts` of the unwrapped models.
    """
    hidden, targets = heads.predicted_hidden(model, batch, "causal", head)
    rows = heads.head_loss(head, hidden, targets, objective="standard", reduction="none")
    device = rows.device
    s_chunks = batch["chunks"].to(device)[:, 1:][batch["labels"].to(device)[:, 1:] != -100]
    n = int(batch["n_chunks"])
    if "teacher_chunk_ll" in batch:  # cached before training
        ll_t = batch["teacher_chunk_ll"].to(device)
    else:
        ll_t = teacher_chunk_ll(teacher, teacher_head, batch, device)
    ll_s = chunk_log_likelihoods(-rows, s_chunks, n)
    return rows.sum(), chunk_loss(ll_t.to(ll_s.dtype).detach(), ll_s, temperature).sum()
