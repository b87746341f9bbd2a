"""distill's unbiased chunks (`pretrain.distill.chunks: unbiased`): a common token end of the student's and
the teacher's tokenization ends a chunk only where the pair of tokens ending there is unbiased.

The definition is tokenkit's (bminixhofer/tokenkit at bcacdef: `scripts/compute_tokenizer_info.py`
`compute_cover_dict` / `compute_pair_bias`, `tokenkit/align.py` `get_unbiased_alignments`, threshold
`tokenizer_pair_bias_threshold`, 1e-4 in `configs/cross_tokenizer_distill.yaml`):

* the cover set of a token string x under a tokenizer: for every split x = x[:i] + x[i:] (i < len x), every
  vocabulary token b that starts with x[i:] and for which the tokenizer cuts x[:i] + b into exactly
  tokenize(x[:i]) followed by b: the text after x that b runs on into (its "continuation"; empty ones
  left out). These are the ways the tokenizer can put a token across the end of x;
* the bias of a (teacher token, student token) pair ending at the same byte: bias_T = the summed unigram
  probability (of the teacher's tokens; counts + smoothing × total, normalised) of the last token of each
  continuation the teacher's cover set has and the student's has not; bias_S the same the other way. A
  whitespace-only token on either side makes the pair biased (bias 1, as tokenkit does);
* the boundary ends a chunk iff bias_T <= threshold and bias_S <= threshold, or a special token follows on
  either side (it always does at a line's end). Else the chunk runs on to the next kept boundary.

Why: where one tokenizer can merge across the boundary and the other cannot, the teacher's probability of
the chunk ending there is not comparable with the student's (the next token may swallow the boundary on
one side only); such boundaries are dropped and the longer chunk is matched instead.

Here a token is its vocabulary string, tokenized by the tokenizer's model alone (`CoverSets`), continuations
are compared as bytes (so two tokenizers' alphabets, `Ġ` and `▁`, compare), and the unigram counts are
those of the lines the run trains on (`count_tokens`), with tokenkit's smoothing 1e-9.
Cover sets are computed per token when first met and cached: the cost grows with the distinct tokens at
chunk boundaries and, per token, with the vocabulary tokens starting with each of its suffixes.
"""

from __future__ import annotations

import bisect
from typing import Iterable, Sequence

import numpy as np

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.data.families import is_byte_piece, token_bytes

SMOOTHING = 1e-9  # tokenkit's additive_smoothing_constant (configs/compute_tokenizer_info.yaml)


class CoverSets:
    """The cover set of each token id of one tokenizer: {continuation bytes: id of its last token}.

    Works on vocabulary strings (`Ġza`, `▁za`) as tokenkit's byteified `backend_tokenize` does: a string is
    tokenized by the tokenizer's model alone (`backend_tokenizer.model.tokenize`, no normalizer or
    pre-tokenizer); a continuation is turned into bytes with `families.token_bytes`. Byte-fallback pieces
    (`<0xE2>`) and special tokens are never candidates."""

    def __init__(self, speller) -> None:
        self.speller, self.tokenizer, self.how = speller, speller.tokenizer, speller.how
        self._bytes = token_bytes
        self.model = self.tokenizer.backend_tokenizer.model
        vocab = sorted(
            (t, i)
            for t, i in self.tokenizer.get_vocab().items()
            if i not in speller.special and not is_byte_piece(t, self.how)
        )
        self.keys = [t for t, _ in vocab]
        self.ids = [i for _, i in vocab]
        self.cache: dict[int, dict[bytes, int] | None] = {}

    def starting_with(self, prefix: str) -> list[tuple[str, int]]:
        lo = bisect.bisect_left(self.keys, prefix)
        out = []
        for j in range(lo, len(self.keys)):
            if not self.keys[j].startswith(prefix):
                break
            out.append((self.keys[j], self.ids[j]))
        return out

    def tokenize(self, text: str) -> list[int]:
        return [t.id for t in self.model.tokenize(text)] if text else []

    def cover(self, token_id: int) -> dict[bytes, int] | None:
        """{continuation bytes: last token id} of `token_id`; None for a whitespace-only token or one without
        bytes of its own (always biased)."""
        if token_id in self.cache:
            return self.cache[token_id]
        x = self.tokenizer.convert_ids_to_tokens(int(token_id))
        spelled = self._bytes(x, self.how)
        if not spelled or not spelled.strip() or int(token_id) in self.speller.special:
            self.cache[token_id] = None
            return None
        out: dict[bytes, int] = {}
        for i in range(len(x) - 1, -1, -1):
            current = self.tokenize(x[:i])
            for b, bid in self.starting_with(x[i:]):
                joined = x[:i] + b
                if len(joined) > len(x) and self.tokenize(joined) == current + [bid]:
                    key = self._bytes(joined[len(x) :], self.how)
                    if key:
                        out[key] = bid
        self.cache[token_id] = out
        return out


def count_tokens(id_lists: Iterable[Sequence[int]], size: int) -> np.ndarray:
    """Unigram probabilities of a tokenizer's `size` ids over `id_lists`, counts + SMOOTHING × total."""
    counts = np.zeros(size, dtype=np.float64)
    for id_list in id_lists:
        ids = np.asarray(id_list, dtype=np.int64)
        counts += np.bincount(ids[(ids >= 0) & (ids < size)], minlength=size)
    counts += SMOOTHING * max(counts.sum(), 1.0)
    return counts / counts.sum()


class PairBias:
    """Whether a (teacher id, student id) pair ending at one byte is unbiased (module docstring)."""

    def __init__(
        self, teacher_speller, student_speller, teacher_probs: np.ndarray, student_probs: np.ndarray, threshold: float
    ):
        if not threshold >= 0:
            raise VocabTransferError(f"pretrain.distill.bias_threshold={threshold!r}: must be >= 0")
        self.teacher, self.student = CoverSets(teacher_speller), CoverSets(student_speller)
        self.t_probs, self.s_probs, self.threshold = teacher_probs, student_probs, threshold
        self.cache: dict[tuple[int, int], tuple[float, float]] = {}

    def bias(self, teacher_id: int, student_id: int) -> tuple[float, float]:
        """(bias_T, bias_S) of the pair."""
        key = (int(teacher_id), int(student_id))
        if key not in self.cache:
            t, s = self.teacher.cover(key[0]), self.student.cover(key[1])
            if t is None or s is None:
                self.cache[key] = (1.0, 1.0)
            else:
                self.cache[key] = (
                    float(sum(self.t_probs[t[c]] for c in t.keys() - s.keys())),
                    float(sum(self.s_probs[s[c]] for c in s.keys() - t.keys())),
                )
        return self.cache[key]

    def unbiased(self, teacher_id: int, student_id: int) -> bool:
        b_t, b_s = self.bias(teacher_id, student_id)
        return b_t <= self.threshold and b_s <= self.threshold
