"""Bits per UTF-8 byte: a language-model measure that does not depend on the tokenizer.

A per-token loss compares models that share a tokenizer; across tokenizers it does not (a tokenizer
that cuts the text into fewer, longer tokens has a higher loss per token for the same model quality).
The code length of the text itself does: Σ −log2 p(text) over the bytes it spans. `init_eval` and
`token_frequency_loss` score every causal model this way, and the source model with its own tokenizer
on the same valid lines.

Definition (per valid line, the line alone, as `score_lines` computes it):

1. the line's own tokens t_1..t_n are `tokenizer(line, add_special_tokens=False)`; the context
   before them is what the causal LM sees in front of a line in this project's packed blocks
   (`lmdata.pack_lines`): the prefix the tokenizer adds (Llama, Gemma: BOS); without one, the
   end-of-sequence token, which closes every line of a packed block and so precedes the next line
   (GPT-2 style); without either, no context, and t_1 is not scored (its bytes still count, so such a
   tokenizer's bits per byte is a slight underestimate; `n_scored` says so);
2. bits of the line = Σ_i −log2 p(t_i | context, t_1..t_{i−1}) over its scored tokens; the
   end-of-sequence token after the line is not scored (it carries none of the line's bytes);
3. a line longer than `seq_len` tokens (context included) is scored in windows of `seq_len`: the
   first window scores tokens up to `seq_len`, each next one starts `seq_len − stride` tokens before
   the end of the last (the last window: `seq_len` tokens before the line's end) and scores the
   `stride = seq_len // 2` tokens (or fewer) after it, so every token is scored exactly once, with at
   least `seq_len − stride` tokens of context (the lines are never cut: the bytes counted are the
   bytes scored);
4. bytes of the line = len(line.encode("utf-8")).

Bits per byte of a model = Σ_lines bits / Σ_lines bytes; bytes per token of a tokenizer = Σ bytes /
Σ n (the line's own tokens, special tokens left out). A masked LM gets neither bits nor bits per byte
(`MASKED_REASON`): it keeps its per-token loss. The share of the source's advantage a method keeps is
measured from the best floor, a predictor without a model (`evaluate.bpb_floor`): (BPB_floor − BPB_method)
/ (BPB_floor − BPB_source) (`share_kept`); where the source does not beat the floor it has nothing to keep.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vocabtransfer import io
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.model import modeling
from vocabtransfer.model.lmdata import Kind, special_tokens_around

LN2 = math.log(2.0)
MASKED_REASON = ("bits per byte needs a causal LM: a masked LM predicts a few masked tokens from both sides, "
                 "a pseudo-likelihood that is no probability of the text, so it keeps its per-token loss")


def masked_reason(kind: Kind) -> str | None:
    """Why a model of this kind gets no bits per byte (None for a causal LM)."""
    return None if kind == "causal" else MASKED_REASON


def require_lm_head(directory: str | Path, loading: modeling.LoadingInfo, key: str) -> None:
    """A causal source scored in bits per byte must bring its LM head: a head that `load_source_model`
    had to initialise randomly gives a random model's bits. One line naming the file and what to do."""
    if loading.head_missing:
        weights = modeling.weights_file(Path(directory))
        raise VocabTransferError(
            f"{weights}: no LM head ({', '.join(loading.missing_keys)} not in the checkpoint), so its bits per byte "
            f"would be a random head's; give the source its head (the source_head stage trains one, "
            f"source_head.steps > 0) or set {key}: false")


@dataclass(frozen=True)
class LineScores:
    """Per valid line: bits (Σ −log2 p over its scored tokens; NaN for a masked LM), UTF-8 bytes, its own
    tokens and how many of them were scored."""

    bits: np.ndarray
    n_bytes: np.ndarray
    n_tokens: np.ndarray
    n_scored: np.ndarray

    @property
    def bits_per_byte(self) -> float:
        total = int(self.n_bytes.sum())
        return float(self.bits.sum() / total) if total else math.nan

    @property
    def bytes_per_token(self) -> float:
        return bytes_per_token(self.n_bytes, self.n_tokens)


def bytes_per_token(n_bytes, n_tokens) -> float:
    """Σ UTF-8 bytes / Σ tokens over the same lines (NaN without tokens)."""
    tokens = int(np.sum(n_tokens))
    return float(np.sum(n_bytes) / tokens) if tokens else math.nan


def share_kept(bpb_floor: float, bpb_method: float, bpb_source: float) -> float:
    """(BPB_floor − BPB_method) / (BPB_floor − BPB_source), the floor being the best predictor without a model:
    0 = no better than the floor, 1 = as good as the source with its own tokenizer. NaN when a value is
    missing or the source does not beat the floor (it then has no advantage to keep: `nothing_to_keep`)."""
    values = (bpb_floor, bpb_method, bpb_source)
    if any(v is None or not math.isfinite(float(v)) for v in values) or nothing_to_keep(bpb_floor, bpb_source):
        return math.nan
    return float((bpb_floor - bpb_method) / (bpb_floor - bpb_source))


def nothing_to_keep(bpb_floor: float, bpb_source: float) -> bool:
    """Whether the source fails to beat the best floor (needs as many bits per byte or more): then it has
    nothing to keep on this language and no share is given."""
    return not bpb_source < bpb_floor


def context_ids(tokenizer) -> list[int]:
    """Step 1: the ids before a line's own tokens: the tokenizer's prefix (BOS), else [EOS], else []."""
    prefix, _ = special_tokens_around(tokenizer)
    if prefix:
        return prefix
    return [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []


def windows(seq_len: int, n_context: int, n_ids: int) -> list[tuple[int, int, int]]:
    """Step 3: (begin, end, first scored position) of each window over the sequence context + ids;
    the window's input is positions begin..end−1 and it scores positions first..end−1. Every position
    from max(n_context, 1) on is scored exactly once."""
    if seq_len < 2:
        raise VocabTransferError(f"seq_len {seq_len}: bits per byte needs windows of at least 2 tokens")
    total, stride = n_context + n_ids, max(1, seq_len // 2)
    keep = seq_len - stride
    out, begin, scored = [], 0, max(n_context, 1)
    while scored < total:
        end = min(begin + seq_len, total)
        out.append((begin, end, scored))
        scored, begin = end, max(0, min(end - keep, total - seq_len))  # the last window: as much context as fits
    return out


def valid_lines(path: str | Path, max_lines: int) -> list[str]:
    """The first `max_lines` non-empty lines of a corpus split's `text` column, stripped (the corpus stage
    wrote them so: the same lines as the first rows of the pre-tokenised split); what init_eval and
    token_frequency_loss score."""
    text = io.read_parquet(path, ["text"]).column("text").to_pylist()
    return [s.strip() for s in text if s and s.strip()][:max_lines]


def line_counts(tokenizer, lines: list[str]) -> tuple[list[list[int]], np.ndarray, np.ndarray]:
    """(each line's own ids, UTF-8 bytes per line, tokens per line)."""
    ids = tokenizer(list(lines), add_special_tokens=False)["input_ids"] if lines else []
    n_bytes = np.array([len(s.encode("utf-8")) for s in lines], dtype=np.int64)
    return ids, n_bytes, np.array([len(x) for x in ids], dtype=np.int64)


def score_lines(model, tokenizer, lines: list[str], *, seq_len: int, batch_size: int,
                kind: Kind = "causal") -> LineScores:
    """Steps 1–4 for every line (module docstring). A masked LM is not scored: its bits are NaN
    (`MASKED_REASON`); its bytes and tokens are counted all the same."""
    import torch  # torch: heavy, not at CLI start-up

    ids, n_bytes, n_tokens = line_counts(tokenizer, lines)
    context = context_ids(tokenizer)
    bits = np.zeros(len(lines), dtype=np.float64)
    n_scored = np.zeros(len(lines), dtype=np.int64)
    if kind != "causal":
        return LineScores(np.full(len(lines), math.nan), n_bytes, n_tokens, n_scored)
    # every window of every line: (line, input ids, labels); sorted by length so batches pad little
    rows = []
    for i, own in enumerate(ids):
        seq = context + list(own)
        for begin, end, first in windows(seq_len, len(context), len(own)):
            labels = [-100] * (first - begin) + seq[first:end]
            rows.append((i, seq[begin:end], labels))
            n_scored[i] += end - first
    rows.sort(key=lambda r: -len(r[1]))  # stable: equal lengths keep line order
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        for k in range(0, len(rows), batch_size):
            chunk = rows[k: k + batch_size]
            width = len(chunk[0][1])
            input_ids = torch.full((len(chunk), width), pad, dtype=torch.long)
            labels = torch.full((len(chunk), width), -100, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for j, (_, x, y) in enumerate(chunk):
                input_ids[j, : len(x)] = torch.tensor(x)
                labels[j, : len(y)] = torch.tensor(y)
                mask[j, : len(x)] = 1
            batch = {"input_ids": input_ids, "attention_mask": mask, "labels": labels}
            row_of = (labels[:, 1:] != -100).nonzero()[:, 0].numpy()  # the order token_losses returns
            losses, _ = modeling.token_losses(model, batch, "causal", objective="standard")
            line_of = np.array([r[0] for r in chunk], dtype=np.int64)[row_of]
            bits += np.bincount(line_of, weights=losses.double().cpu().numpy() / LN2, minlength=len(lines))
    model.train(was_training)
    return LineScores(bits, n_bytes, n_tokens, n_scored)
