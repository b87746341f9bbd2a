"""The corpus stage: read a language's raw text, clean it and split it into train/valid (and dev).

Steps, line by line in source order (a "line" is one line of a text file or one record's
`text_column` of a table or dataset):

  1. read from the source (data.corpus_sources): a local file or directory, a URL with sha256
     (download.py), or a `datasets.load_dataset` spec (hub id or the text/json/csv/parquet builders);
  2. Unicode-normalise (corpus.normalization; `none` skips it) and strip whitespace;
  3. drop empty lines, lines shorter than corpus.min_chars and repeats of an earlier line;
  4. stop before the first line that would take the kept UTF-8 bytes over corpus.max_bytes
     (0 = no cap); a streamed source is read no further than that;
  5. split by a seeded hash of the line alone: blake2b(f"{seed}:{line}") mapped to [0, 1)
     goes to valid when below corpus.valid_fraction, so a line's split never depends on the
     other lines. With 2 or more lines neither split is left empty: if one is, the line with
     the most extreme hash value (smallest for valid, largest for train) moves over. A line whose
     value lies in [valid_fraction, valid_fraction + corpus.dev_fraction) goes to dev: the tuning
     split, which no stage trains on and the report never scores (docs/stages.md#corpus); with
     dev_fraction 0 (the default) it is empty and train and valid are what they were without it;
  6. write train.parquet, valid.parquet and dev.parquet (one string column `text`, source order)
     and stats.json.
"""

from __future__ import annotations

import contextlib
import logging
import time
import unicodedata
from collections import Counter
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator, cast

import pyarrow as pa
import pyarrow.parquet as pq

from vocabtransfer import io
from vocabtransfer.data.corpus_sources import describe, open_source
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.log import progress
from vocabtransfer.pipeline import names
from vocabtransfer.pipeline.stage_spec import Context
from vocabtransfer.plan.data_params import CorpusParams, Normalization

if TYPE_CHECKING:
    from tqdm import tqdm

log = logging.getLogger(__name__)

SCHEMA = pa.schema([pa.field("text", pa.string(), nullable=False)])
FLUSH_ROWS = 65_536  # rows per Parquet row group

# --- cleaning and splitting ---------------------------------------------------------------

LINE_DIGEST = 16  # bytes of a line's seeded hash (names.seeded_digest): it decides duplicates and the split


def split_value(text: str, seed: int) -> float:
    """A line's position in [0, 1); below valid_fraction means the validation split."""
    return names.unit_value(names.seeded_digest(text, seed, LINE_DIGEST))


def clean(
    records: Iterable[str],
    *,
    seed: int,
    normalization: Normalization = "NFC",
    min_chars: int = 1,
    max_bytes: int = 0,
    counts: Counter | None = None,
) -> Iterator[tuple[str, int, float]]:
    """Steps 2-4: yield (line, UTF-8 bytes, split value) for each kept line; tally drops in `counts`."""
    counts = counts if counts is not None else Counter()
    seen: set[bytes] = set()
    kept = 0
    for raw in records:
        counts["lines_read"] += 1
        text = raw if normalization == "none" else unicodedata.normalize(normalization, raw)
        text = text.strip()
        if not text:
            counts["empty_dropped"] += 1
            continue
        if len(text) < min_chars:
            counts["short_dropped"] += 1
            continue
        digest = names.seeded_digest(text, seed, LINE_DIGEST)
        if digest in seen:
            counts["duplicates_dropped"] += 1
            continue
        nbytes = len(text.encode("utf-8"))
        if max_bytes and kept + nbytes > max_bytes:
            counts["capped"] = 1
            return
        seen.add(digest)
        kept += nbytes
        yield text, nbytes, names.unit_value(digest)


class SplitWriter:
    """Step 5-6: stream lines into train/valid Parquet files in source order.

    A split's lines are held in memory until both splits have a line, so that the
    non-empty rule can still move one; after that they go out in row groups.
    """

    def __init__(self, paths: dict[str, Path]):
        self.writers = {s: pq.ParquetWriter(p, SCHEMA, compression="zstd") for s, p in paths.items()}
        self.buffers: dict[str, list[tuple[str, int, float]]] = {s: [] for s in paths}
        self.lines = dict.fromkeys(paths, 0)
        self.bytes = dict.fromkeys(paths, 0)
        self.moved: str | None = None

    def add(self, split: str, text: str, nbytes: int, value: float) -> None:
        buf = self.buffers[split]
        buf.append((text, nbytes, value))
        self.lines[split] += 1
        self.bytes[split] += nbytes
        if len(buf) >= FLUSH_ROWS and self.lines["train"] and self.lines["valid"]:  # dev may stay empty
            self._flush(split)

    def _flush(self, split: str) -> None:
        buf = self.buffers[split]
        if buf:
            texts = pa.array([t for t, _, _ in buf], type=pa.string())
            self.writers[split].write_table(pa.Table.from_arrays([texts], schema=SCHEMA))
            buf.clear()

    def _move(self, src: str, dst: str, pick) -> None:
        buf = self.buffers[src]  # nothing of it was flushed: the other split is empty
        i = pick(range(len(buf)), key=lambda j: buf[j][2])
        text, nbytes, value = buf.pop(i)
        self.add(dst, text, nbytes, value)
        self.lines[src] -= 1
        self.bytes[src] -= nbytes
        self.moved = f"{src}->{dst}"
        log.info("the %s split was empty: moved one line (hash value %.4f) from %s", dst, value, src)

    def finish(self) -> None:
        if sum(self.lines.values()) >= 2:
            if not self.lines["valid"]:
                self._move("train", "valid", min)
            elif not self.lines["train"]:
                self._move("valid", "train", max)
        for split in self.buffers:
            self._flush(split)

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close()


def split_of(value: float, valid_fraction: float, dev_fraction: float) -> str:
    """Step 5: the split of a line whose hash value is `value` (valid below valid_fraction, dev in the
    band of width dev_fraction above it, train elsewhere)."""
    if value < valid_fraction:
        return "valid"
    return "dev" if value < valid_fraction + dev_fraction else "train"


def build_corpus(
    source: dict,
    train_path: str | Path,
    valid_path: str | Path,
    *,
    seed: int,
    params: CorpusParams = CorpusParams(),
    key: str = "corpus source",
    desc: str = "corpus",
    dev_path: str | Path | None = None,
) -> dict:
    """Read, clean and split one source into train/valid (and dev) Parquet files; returns the stats.

    `params`: params `corpus` (normalization, min_chars, max_bytes, valid_fraction, dev_fraction; its
    `sources` are not read, `source` is the one to build); `key` names the source in messages, `desc` the
    progress bar. `params.dev_fraction` > 0 needs `dev_path`."""
    normalization, min_chars, max_bytes = params.normalization, params.min_chars, params.max_bytes
    valid_fraction, dev_fraction = params.valid_fraction, params.dev_fraction
    if dev_fraction and dev_path is None:
        raise VocabTransferError(f"corpus.dev_fraction={dev_fraction}: the dev split needs a dev path")
    if not 0 <= dev_fraction < 1 - valid_fraction:
        raise VocabTransferError(
            f"corpus.dev_fraction={dev_fraction}: must be in [0, 1 - valid_fraction) "
            f"(valid_fraction {valid_fraction}), so that some lines stay in train"
        )
    start = time.perf_counter()
    source_desc, records = open_source(source, key)
    counts: Counter = Counter()
    bar = progress(records, unit=" lines", desc=desc)
    with contextlib.ExitStack() as stack:
        tmp = {
            split: stack.enter_context(io.atomic_output(path))
            for split, path in (("train", train_path), ("valid", valid_path), ("dev", dev_path))
            if path is not None
        }
        writer = SplitWriter(tmp)
        try:
            lines = clean(
                bar, seed=seed, normalization=normalization, min_chars=min_chars, max_bytes=max_bytes, counts=counts
            )
            for text, nbytes, value in lines:
                writer.add(split_of(value, valid_fraction, dev_fraction), text, nbytes, value)
            if not sum(writer.lines.values()):
                raise VocabTransferError(_empty_message(describe(source_desc), counts, key, min_chars, max_bytes))
            writer.finish()
        finally:
            writer.close()
            cast("tqdm", bar).close()  # progress(records) is a tqdm, typed as the lines it yields
            close = getattr(records, "close", None)  # a generator over an open file
            if close is not None:
                close()
    if sum(writer.lines.values()) == 1:
        log.warning("%s: only one line survived cleaning; the valid split is empty", describe(source_desc))
    return {
        "source": source_desc,
        "seed": seed,
        "normalization": normalization,
        "min_chars": min_chars,
        "max_bytes": max_bytes,
        "valid_fraction": valid_fraction,
        "dev_fraction": dev_fraction,
        "lines_read": counts["lines_read"],
        "empty_dropped": counts["empty_dropped"],
        "short_dropped": counts["short_dropped"],
        "duplicates_dropped": counts["duplicates_dropped"],
        "lines_kept": sum(writer.lines.values()),
        "bytes_kept": sum(writer.bytes.values()),
        "capped": bool(counts["capped"]),
        "train_lines": writer.lines["train"],
        "train_bytes": writer.bytes["train"],
        "valid_lines": writer.lines["valid"],
        "valid_bytes": writer.bytes["valid"],
        "dev_lines": writer.lines.get("dev", 0),
        "dev_bytes": writer.bytes.get("dev", 0),
        "moved_line": writer.moved,
        "seconds": round(time.perf_counter() - start, 3),
    }


def _empty_message(name: str, counts: Counter, key: str, min_chars: int, max_bytes: int) -> str:
    if not counts["lines_read"]:
        return f"{name}: the corpus is empty (0 lines read); check the source in {key}"
    if counts["capped"]:
        return (
            f"{name}: no line fits in corpus.max_bytes = {max_bytes} (the first kept line is longer); "
            "raise corpus.max_bytes or set it to 0"
        )
    return (
        f"{name}: no text left after cleaning ({counts['lines_read']} lines read: {counts['empty_dropped']} empty, "
        f"{counts['short_dropped']} shorter than corpus.min_chars = {min_chars}, "
        f"{counts['duplicates_dropped']} duplicates); check the source in {key} and corpus.min_chars"
    )


def _versions() -> dict[str, str]:
    return {**io.versions(), "datasets": version("datasets")}


def run(ctx: Context) -> None:
    """The `corpus` stage: results/{lang}/corpus/{train,valid,dev}.parquet and stats.json."""
    opts = ctx.params.corpus
    key = f"corpus.sources.{ctx.lang}"
    stats = build_corpus(
        opts.sources[ctx.lang],
        ctx.output["train"],
        ctx.output["valid"],
        seed=ctx.seed,
        params=opts,
        key=key,
        desc=f"corpus {ctx.lang}",
        dev_path=ctx.output["dev"],
    )
    stats = {"lang": ctx.lang, **stats, "versions": _versions()}
    io.write_json(stats, ctx.output["stats"])
    log.info(
        "corpus %s: %d lines read from %s; dropped %d empty, %d short, %d duplicates; kept %d lines / %d bytes%s; "
        "train %d, valid %d, dev %d lines; %.1f s",
        ctx.lang,
        stats["lines_read"],
        describe(stats["source"]),
        stats["empty_dropped"],
        stats["short_dropped"],
        stats["duplicates_dropped"],
        stats["lines_kept"],
        stats["bytes_kept"],
        f" (capped at {stats['max_bytes']})" if stats["capped"] else "",
        stats["train_lines"],
        stats["valid_lines"],
        stats["dev_lines"],
        stats["seconds"],
    )
