"""A corpus split's lines: all of them in batches, or a seeded sample.

The corpus stage writes each split as Parquet with a `text` column; the tokenizer and pretokenize
stages stream it in batches (`iter_text_batches`, `CorpusBatches`), never whole.

`tokenizer.sample_bytes` and `fasttext.sample_bytes` (0 = every line, the default) train the target
tokenizer and fastText on a seeded sample of about that many UTF-8 bytes, as tokenizer training in
practice uses a few GB of a larger corpus (`SampledCorpus`, `sampled_text`). Each line is kept with
probability p = sample_bytes / the input's bytes, by one uniform draw per line from
`np.random.default_rng(seed)` in line order: a sample is one streaming pass (memory bounded by a
batch), the same seed gives the same lines, and a larger budget keeps a superset of a smaller one's.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from vocabtransfer.errors import VocabTransferError, brief

TEXT_COLUMN = "text"


# ---------------------------------------------------------------------------------------------
# every line


def corpus_rows(path: str | os.PathLike) -> int:
    """Number of lines in a corpus Parquet file (from its metadata, nothing is read)."""
    return _open_corpus(path).metadata.num_rows


def iter_text_batches(path: str | os.PathLike, batch_size: int = 1000) -> Iterator[list[str]]:
    """Stream the `text` column of a corpus Parquet file as lists of `batch_size` lines (the last one shorter)."""
    rows: list[str] = []
    for column in _row_groups(path):
        rows = rows[len(rows) - len(rows) % batch_size :] if rows else []  # the lines not yet handed out
        rows += [t if t is not None else "" for t in column.to_pylist()]
        yield from (rows[i : i + batch_size] for i in range(0, len(rows) - batch_size + 1, batch_size))
    if len(rows) % batch_size:
        yield rows[len(rows) - len(rows) % batch_size :]


def _row_groups(path: str | os.PathLike):
    """The `text` column of each row group in turn: memory bounded by one row group (pyarrow's
    `iter_batches` kept ~0.45 GB more at the end of a 1 GB corpus than at its start)."""
    pf = _open_corpus(path)
    for group in range(pf.num_row_groups):
        yield pf.read_row_group(group, columns=[TEXT_COLUMN]).column(0)


def _open_corpus(path: str | os.PathLike):
    path = Path(path)
    if not path.is_file():
        raise VocabTransferError(f"{path}: corpus file not found; run `vocabtransfer corpus` for this language first")
    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:
        raise VocabTransferError(
            f"{path}: not a readable Parquet file ({brief(exc)}); delete it and rerun the corpus stage"
        ) from exc
    names = pf.schema_arrow.names
    if TEXT_COLUMN not in names:
        raise VocabTransferError(
            f"{path}: no `{TEXT_COLUMN}` column (has {', '.join(names)}); rerun the corpus stage to rewrite it"
        )
    return pf


class CorpusBatches:
    """A re-iterable view of a corpus file's lines in batches (each iteration streams it anew)."""

    def __init__(self, path: str | os.PathLike, batch_size: int = 1000):
        self.path, self.batch_size = Path(path), batch_size
        self.rows = corpus_rows(self.path)

    def __iter__(self) -> Iterator[list[str]]:
        return iter_text_batches(self.path, self.batch_size)

    def __len__(self) -> int:
        return -(-self.rows // self.batch_size)


# ---------------------------------------------------------------------------------------------
# a seeded sample


def keep_probability(sample_bytes: int, total_bytes: int) -> float:
    """The share of lines to keep for about `sample_bytes` of `total_bytes` (1.0: all)."""
    if sample_bytes <= 0 or total_bytes <= sample_bytes:
        return 1.0
    return sample_bytes / total_bytes


class SampledCorpus:
    """A re-iterable seeded sample of a corpus Parquet file's lines, in batches (as `CorpusBatches`)."""

    def __init__(self, path: str | os.PathLike, sample_bytes: int, seed: int, batch_size: int = 1000):
        self.path, self.seed, self.batch_size = Path(path), seed, batch_size

        total = sum(int(pc.sum(pc.binary_length(column)).as_py() or 0) for column in _row_groups(self.path))
        self.p = keep_probability(sample_bytes, total)
        self.rows = self.bytes = 0
        for batch in self:
            self.rows += len(batch)
            self.bytes += sum(len(t.encode("utf-8")) for t in batch)

    def __iter__(self) -> Iterator[list[str]]:
        rng = np.random.default_rng(self.seed)
        for texts in iter_text_batches(self.path, self.batch_size):
            keep = rng.random(len(texts)) < self.p
            kept = [t for t, k in zip(texts, keep) if k]
            if kept:
                yield kept

    def __len__(self) -> int:
        return -(-self.rows // self.batch_size)


@contextlib.contextmanager
def sampled_text(
    path: str | os.PathLike, sample_bytes: int, seed: int, directory: str | os.PathLike
) -> Iterator[tuple[Path, dict]]:
    """A seeded sample of a text file's lines, as a temporary file in `directory` (removed on exit);
    `path` itself when sample_bytes is 0 or the file is no larger. Yields (path, counts)."""
    path = Path(path)
    Path(directory).mkdir(parents=True, exist_ok=True)
    total = path.stat().st_size
    p = keep_probability(sample_bytes, total)
    if p >= 1.0:
        yield path, {"lines_kept": None, "bytes_kept": total, "bytes": total}
        return
    rng = np.random.default_rng(seed)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.sample-", dir=directory)
    kept = lines = 0
    try:
        with open(path, "rb") as src, os.fdopen(fd, "wb") as out:
            while chunk := src.readlines(1 << 24):
                keep = rng.random(len(chunk)) < p
                lines += len(chunk)
                picked = [line for line, k in zip(chunk, keep) if k]
                kept += len(picked)
                out.writelines(picked)
        yield Path(name), {"lines_kept": kept, "lines": lines, "bytes_kept": os.path.getsize(name), "bytes": total}
    finally:
        Path(name).unlink(missing_ok=True)
