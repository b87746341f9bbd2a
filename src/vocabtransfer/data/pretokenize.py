"""The `pretokenize` stage: encode the corpus with the target tokenizer, and compare it with the
source tokenizer on the same text.

Outputs
  train_ids / valid_ids  a split directory (`data.token_ids`): every line's ids end to end in a flat
                         uint16 (uint32 above 65536 ids) `ids.npy`, line offsets in `offsets.npy`, and
                         `meta.json` naming the tokenizer; no special tokens (what
                         `tokenizer(text, add_special_tokens=False)` gives). Readers map it;
  text                   the train split as tokens for fastText: line i is
                         `" ".join(target.tokenize(line_i))` (exactly what deepfocus feeds fastText);
  stats                  JSON: per split and tokenizer, lines, words, tokens, fertility (tokens per
                         whitespace-separated word), unknown-token rate (share of tokens that are the
                         unk token) and the share of words split into more than one token; also
                         logged as a Markdown table. The source tokenizer is measured on the valid
                         split only (one extra pass over held-out text); the target on both.

The corpus is streamed in batches of `pretokenize.batch_size` lines; each batch goes to the Rust
tokenizer's `encode_batch`, which encodes it on `--threads` cores (RAYON_NUM_THREADS), and is appended
to the split's files: memory is bounded by the batch, not by the corpus.
"""

from __future__ import annotations

import contextlib
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from tokenizers import Tokenizer

from vocabtransfer import io
from vocabtransfer.data.token_ids import IdsWriter
from vocabtransfer.log import progress
from vocabtransfer.data.corpus_lines import corpus_rows, iter_text_batches
from vocabtransfer.data.tokenizer import load_target_tokenizer, set_threads
from vocabtransfer.model.hub import load_tokenizer, materialised_source
from vocabtransfer.pipeline.stage_spec import Context

log = logging.getLogger(__name__)

# what `\s` matches in a str pattern (str.isspace): words are `\S+` runs, found on code points with numpy
_SPACE = np.array([c for c in range(0x3100) if chr(c).isspace()], dtype=np.uint32)  # all are below U+3100


# ---------------------------------------------------------------------------------------------
# statistics


@dataclass
class TokenStats:
    """Running counts for fertility, unknown-token rate and split-word share of one tokenizer."""

    unk_id: int | None = None
    lines: int = 0
    words: int = 0
    tokens: int = 0
    unk: int = 0
    split_words: int = 0

    def update(self, texts: list[str], encodings: list) -> None:
        """Add a batch: the lines and their `tokenizers.Encoding`s (with offsets)."""
        self.update_flat(texts, *flatten(encodings))

    def update_flat(self, texts: list[str], lengths: np.ndarray, ids: np.ndarray, offsets: np.ndarray) -> None:
        """Add a batch given as `flatten(encodings)`; vectorised over the whole batch."""
        n = len(texts)
        self.lines += n
        self.tokens += int(ids.size)
        if self.unk_id is not None:
            self.unk += int(np.count_nonzero(ids == self.unk_id))
        # 1. whitespace words of the batch, as end positions in "\n".join(texts)
        text_lens = np.fromiter((len(t) for t in texts), dtype=np.int64, count=n)
        line_start = np.zeros(n, dtype=np.int64)
        np.cumsum(text_lens[:-1] + 1, out=line_start[1:])
        ends = word_ends("\n".join(texts))
        self.words += int(ends.size)
        if ends.size == 0 or ids.size == 0:
            return
        # 2. each token belongs to the word holding its last character (a bare `▁` or `Ġ`
        #    belongs to the word after it); tokens after their line's last word belong to none
        pos = np.where(offsets[:, 1] > offsets[:, 0], offsets[:, 1] - 1, offsets[:, 0])
        pos = pos + np.repeat(line_start, lengths)
        word = np.searchsorted(ends, pos, side="right")
        inside = word < ends.size
        inside[inside] &= ends[word[inside]] <= np.repeat(line_start + text_lens, lengths)[inside]
        # 3. words with two or more tokens are split
        counts = np.bincount(word[inside], minlength=ends.size)
        self.split_words += int(np.count_nonzero(counts > 1))

    def as_dict(self) -> dict:
        return {
            "lines": self.lines,
            "words": self.words,
            "tokens": self.tokens,
            "unk_tokens": self.unk,
            "fertility": _ratio(self.tokens, self.words),
            "unk_rate": _ratio(self.unk, self.tokens),
            "split_word_share": _ratio(self.split_words, self.words),
        }


def word_ends(text: str) -> np.ndarray:
    """End positions of the `\\S+` runs of `text` (each `m.end()` of `re.finditer(r"\\S+", text)`), vectorised."""
    codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    space = np.isin(codes, _SPACE)
    last = ~space & np.append(space[1:], True)  # a word character followed by a space or the end
    return np.flatnonzero(last) + 1


def flatten(encodings: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A batch of encodings as (tokens per line, all ids, all (start, end) char offsets)."""
    id_lists = [e.ids for e in encodings]  # each access builds a Python list: once only
    lengths = np.fromiter(map(len, id_lists), dtype=np.int64, count=len(id_lists))
    total = int(lengths.sum())
    ids = np.fromiter(chain.from_iterable(id_lists), dtype=np.int64, count=total)
    offsets = np.fromiter(
        chain.from_iterable(chain.from_iterable(e.offsets for e in encodings)), dtype=np.int64, count=2 * total
    ).reshape(total, 2)
    return lengths, ids, offsets


def _ratio(a: int, b: int) -> float | None:
    return round(a / b, 6) if b else None


def markdown_table(rows: list[tuple[str, str, dict]]) -> str:
    """(split, tokenizer, TokenStats.as_dict()) rows as a Markdown table."""

    def fmt(x, spec):
        return "–" if x is None else format(x, spec)

    out = [
        "| split | tokenizer | lines | words | tokens | fertility | unk rate | words split |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for split, name, s in rows:
        out.append(
            f"| {split} | {name} | {s['lines']} | {s['words']} | {s['tokens']} | "
            f"{fmt(s['fertility'], '.3f')} | {fmt(s['unk_rate'], '.4%')} | {fmt(s['split_word_share'], '.2%')} |"
        )
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# encoding


def encoder(tokenizer):
    """A copy of a fast tokenizer's Rust backend with padding and truncation off (a source's
    tokenizer.json may pad or truncate every encoding, e.g. MiniLM's fixed 128)."""
    backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
    backend.no_padding()
    backend.no_truncation()
    return backend


def encode_batches(backend, batches: Iterable[list[str]]) -> Iterator[tuple[list[str], list]]:
    """(lines, encodings) per batch, without special tokens; encode_batch runs on all Rayon threads.

    The next batch is encoded in a background thread while the caller handles this one
    (`encode_batch` releases the GIL), so the caller's Python work overlaps the encoding: two batches
    in memory at most."""

    def encode(texts):
        return texts, backend.encode_batch(texts, add_special_tokens=False)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="encode") as pool:
        pending = None
        for texts in batches:
            submitted = pool.submit(encode, texts)
            if pending is not None:
                yield pending.result()
            pending = submitted
        if pending is not None:
            yield pending.result()


def encode_split(
    target, corpus: Path, ids_path: Path, *, text_path: Path | None = None, batch_size: int = 1000, desc: str = ""
) -> tuple[TokenStats, dict]:
    """Encode one corpus split with the target tokenizer into a split of flat ids (and the
    token-joined text file), streaming; returns the target's statistics and the split's header."""
    backend = encoder(target)
    stats = TokenStats(unk_id=target.unk_token_id)
    total = corpus_rows(corpus)
    bad_lines = 0
    with contextlib.ExitStack() as stack:
        # exits in reverse: the text file closes, then both artefacts are renamed into place
        writer = stack.enter_context(IdsWriter(ids_path, target))
        text_file = None
        if text_path is not None:
            text_tmp = stack.enter_context(io.atomic_output(text_path))
            text_file = stack.enter_context(open(text_tmp, "w", encoding="utf-8", newline="\n"))
        bar = stack.enter_context(progress(total=total, unit="lines", desc=desc or corpus.name))
        for texts, encs in encode_batches(backend, iter_text_batches(corpus, batch_size)):
            lengths, ids, offsets = flatten(encs)
            writer.append(lengths, ids)
            if text_file is not None:
                joined = "\n".join(" ".join(e.tokens) for e in encs) + "\n"
                bad_lines += joined.count("\n") - len(encs)
                text_file.write(joined)
            stats.update_flat(texts, lengths, ids, offsets)
            bar.update(len(encs))
    if bad_lines:
        log.warning(
            "%s: %d token(s) contain a line break, so %s has more lines than the corpus", corpus, bad_lines, text_path
        )
    return stats, writer.meta()


def measure(tokenizer, corpus: Path, batch_size: int = 1000) -> TokenStats:
    """A tokenizer's statistics on a corpus split (nothing written)."""
    backend = encoder(tokenizer)
    stats = TokenStats(unk_id=tokenizer.unk_token_id)
    for texts, encs in encode_batches(backend, iter_text_batches(corpus, batch_size)):
        stats.update(texts, encs)
    return stats


# ---------------------------------------------------------------------------------------------
# the stage


def run(ctx: Context) -> None:
    set_threads(ctx.threads)
    batch_size = ctx.params.pretokenize.batch_size
    source_name = ctx.params.source_model
    target = load_target_tokenizer(ctx.input["tokenizer"])
    source = load_tokenizer(materialised_source(ctx.input["source"]))
    for split in ("train", "valid"):
        corpus_rows(ctx.input[split])  # a missing or malformed split fails before any work

    seconds: dict[str, float] = {}
    start = time.perf_counter()
    train, train_ids = encode_split(
        target,
        ctx.input["train"],
        ctx.output["train_ids"],
        text_path=ctx.output["text"],
        batch_size=batch_size,
        desc="train",
    )
    seconds["train"] = time.perf_counter() - start
    start = time.perf_counter()
    valid, valid_ids = encode_split(
        target, ctx.input["valid"], ctx.output["valid_ids"], batch_size=batch_size, desc="valid"
    )
    seconds["valid"] = time.perf_counter() - start
    start = time.perf_counter()
    valid_source = measure(source, ctx.input["valid"], batch_size)
    seconds["valid_source"] = time.perf_counter() - start

    source_label = f"source ({Path(str(source_name)).name})"
    rows = [
        ("valid", source_label, valid_source.as_dict()),
        ("valid", "target", valid.as_dict()),
        ("train", "target", train.as_dict()),
    ]
    table = markdown_table(rows)
    log.info("pretokenize: %s\n%s", ctx.lang, table)
    if valid_source.words and valid.words:
        log.info(
            "pretokenize: target fertility %.3f vs source %.3f on valid",
            valid.as_dict()["fertility"],
            valid_source.as_dict()["fertility"],
        )

    io.write_json(
        {
            "lang": ctx.lang,
            "source_model": source_name,
            "tokenizer": str(ctx.input["tokenizer"]),
            "target_vocab_size": len(target),
            "source_vocab_size": len(source),
            "unk_token": {"source": source.unk_token, "target": target.unk_token},
            "stats": {
                "valid": {"source": valid_source.as_dict(), "target": valid.as_dict()},
                "train": {"target": train.as_dict()},
            },
            "ids": {"train": train_ids, "valid": valid_ids},
            "table": table,
            "batch_size": batch_size,
            "threads": ctx.threads,
            "seconds": {k: round(v, 3) for k, v in seconds.items()},
            "versions": io.versions(),
        },
        ctx.output["stats"],
    )
