"""The corpus stage: read a language's raw text, clean it and split it into train/valid (and dev).

Steps, line by line in source order (a "line" is one line of a text file or one record's
`text_column` of a table or dataset):

  1. read from the source: a local file or directory, a URL with sha256 (download.py), or a
     `datasets.load_dataset` spec (hub id or the text/json/csv/parquet builders);
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

import bz2
import contextlib
import gzip
import logging
import lzma
import time
import unicodedata
from collections import Counter
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Iterable, Iterator, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from vocabtransfer.data import download
from vocabtransfer import io
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.log import progress
from vocabtransfer.pipeline import names
from vocabtransfer.pipeline.paths import data_path
from vocabtransfer.pipeline.typed import option

log = logging.getLogger(__name__)

SCHEMA = pa.schema([pa.field("text", pa.string(), nullable=False)])
FLUSH_ROWS = 65_536  # rows per Parquet row group
BATCH = 1_000  # records per batch read from a datasets table

# file suffix -> format; anything else is read as plain text
FORMATS = {
    ".txt": "text",
    ".text": "text",
    ".json": "json",
    ".jsonl": "json",
    ".ndjson": "json",
    ".csv": "csv",
    ".tsv": "tsv",
    ".parquet": "parquet",
}
COMPRESSION = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}
# datasets builder and its keyword arguments for each table format
BUILDERS = {"json": ("json", {}), "csv": ("csv", {}), "tsv": ("csv", {"sep": "\t"}), "parquet": ("parquet", {})}
# load_dataset paths that name a packaged builder: their relative data_files are data paths
LOCAL_BUILDERS = frozenset({"text", "json", "csv", "parquet", "arrow", "pandas"})


# --- reading -----------------------------------------------------------------------------


def file_format(path: str | Path) -> str:
    """text, json, csv, tsv or parquet, from the file name (a .gz/.bz2/.xz suffix is looked through)."""
    path = Path(path)
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in COMPRESSION:
        suffixes = suffixes[:-1]
    return FORMATS.get(suffixes[-1] if suffixes else "", "text")


def read_text_file(path: str | Path) -> Iterator[str]:
    """The lines of a UTF-8 text file (optionally .gz/.bz2/.xz), split at LF; a CR before the LF is
    whitespace that `clean` strips, and a leading byte-order mark is dropped."""
    path = Path(path)
    opener = COMPRESSION.get(path.suffix.lower(), open)
    lineno = 0
    try:
        with opener(path, "rb") as f:
            for lineno, raw in enumerate(f, 1):
                line = raw.decode("utf-8")
                yield line.removeprefix("\ufeff") if lineno == 1 else line
    except UnicodeDecodeError as exc:
        raise VocabTransferError(
            f"{path}: not UTF-8 text at line {lineno} ({exc.reason} at byte {exc.start} of the line); "
            "re-encode the file as UTF-8"
        ) from exc
    except (OSError, EOFError) as exc:
        raise VocabTransferError(f"{path}: could not be read ({exc}); check the file") from exc


def iter_column(ds, column: str, name: str, key: str) -> Iterator[str]:
    """The values of one text column of a `datasets` Dataset or IterableDataset, in order."""
    columns = ds.column_names
    if columns is not None and column not in columns:
        raise VocabTransferError(
            f"{name}: no column {column!r} (columns: {', '.join(columns)}); "
            f"set {key}.text_column to the column holding the text"
        )
    if columns is not None and len(columns) > 1:
        ds = ds.select_columns([column])
    try:
        for batch in ds.iter(batch_size=BATCH):
            if column not in batch:
                raise VocabTransferError(
                    f"{name}: no column {column!r} (columns: {', '.join(batch)}); "
                    f"set {key}.text_column to the column holding the text"
                )
            for value in batch[column]:
                if value is None:
                    yield ""
                elif isinstance(value, str):
                    yield value
                else:
                    raise VocabTransferError(
                        f"{name}: column {column!r} holds {type(value).__name__} values, not "
                        f"text; set {key}.text_column to the column holding the text"
                    )
    except VocabTransferError:
        raise
    except Exception as exc:  # datasets/pyarrow/pandas raise many types for malformed files
        raise VocabTransferError(
            f"{name}: could not be read ({type(exc).__name__}: {_first_line(exc)}); check the file's format"
        ) from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def _load_dataset(path: str, key: str, **kwargs):
    import datasets  # datasets: heavy: hub datasets only

    try:
        return datasets.load_dataset(path, **kwargs)
    except Exception as exc:  # DatasetNotFoundError, FileNotFoundError, ConnectionError, ValueError (split) ...
        shown = ", ".join(f"{k}={v!r}" for k, v in kwargs.items() if v not in (None, False))
        raise VocabTransferError(
            f"{key}: load_dataset({path!r}, {shown}) failed ({type(exc).__name__}: {_first_line(exc)}); "
            "check path/name/split/data_files, and for a hub dataset the network or the local HF cache"
        ) from exc


def read_table_file(path: str | Path, fmt: str, column: str, key: str) -> Iterator[str]:
    """One column of a json/jsonl, csv, tsv or parquet file, streamed through the `datasets` builders."""
    builder, extra = BUILDERS[fmt]
    ds = _load_dataset(builder, key, data_files=str(path), split="train", streaming=True, **extra)
    return iter_column(ds, column, str(path), key)


def _read_file(path: Path, column: str, key: str) -> Iterator[str]:
    fmt = file_format(path)
    return read_text_file(path) if fmt == "text" else read_table_file(path, fmt, column, key)


def _resolve_data_files(data_files):
    """Relative local data_files (str, list or {split: str | list}) resolve against the data root."""
    if data_files is None:
        return None
    if isinstance(data_files, dict):
        return {k: _resolve_data_files(v) for k, v in data_files.items()}
    if isinstance(data_files, list):
        return [_resolve_data_files(v) for v in data_files]
    return data_files if "://" in data_files else str(data_path(data_files))


def open_source(source: dict, key: str = "corpus source") -> tuple[dict, Iterator[str]]:
    """Check a corpus source (a `$defs/corpus_source` mapping) and return its description and its raw lines.

    A missing file, a failed download or an unloadable dataset raises here, before any line is read.
    """
    column = source.get("text_column", "text")
    if "path" in source:
        path = data_path(source["path"])
        if path.is_dir():
            files = sorted(
                p
                for p in path.rglob("*")
                if p.is_file()
                and p.suffix.lower() in {*FORMATS, *COMPRESSION}
                and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
            if not files:
                raise VocabTransferError(
                    f"{path}: directory holds no {'/'.join(sorted(FORMATS))} files "
                    f"({key}.path); point it at the corpus files"
                )
        elif path.is_file():
            files = [path]
        else:
            raise VocabTransferError(
                f"{path}: corpus file not found ({key}.path = {source['path']!r}, relative paths "
                "resolve against $VOCABTRANSFER_DATA); fix the path or set VOCABTRANSFER_DATA"
            )
        desc = {
            "kind": "path",
            "path": str(path),
            "files": len(files),
            "formats": sorted({file_format(p) for p in files}),
        }
        return desc, (line for p in files for line in _read_file(p, column, key))

    if "url" in source:
        fetched = download.fetch(source["url"], source["sha256"])
        desc = {
            "kind": "url",
            "url": source["url"],
            "sha256": source["sha256"],
            "file": str(fetched.path),
            "origin": fetched.origin,
            "download_seconds": round(fetched.seconds, 3),
            "format": file_format(fetched.path),
        }
        return desc, _read_file(fetched.path, column, key)

    if "dataset" in source:
        spec = {"split": "train", **source["dataset"]}
        path = spec.pop("path")
        if path in LOCAL_BUILDERS:
            spec["data_files"] = _resolve_data_files(spec.get("data_files"))
        elif data_path(path).exists():  # a local dataset directory
            path = str(data_path(path))
        ds = _load_dataset(path, f"{key}.dataset", **spec)
        desc = {"kind": "dataset", "path": path, **spec, "text_column": column}
        name = f"dataset {path}" + (f" ({spec['name']})" if spec.get("name") else "")
        return desc, iter_column(ds, column, name, key)

    raise VocabTransferError(f"{key}: needs one of `path`, `url` with `sha256`, or `dataset`")


def describe(desc: dict) -> str:
    """A short name for a source in messages."""
    return f"dataset {desc['path']}" if desc["kind"] == "dataset" else desc[desc["kind"]]


# --- cleaning and splitting ---------------------------------------------------------------

LINE_DIGEST = 16  # bytes of a line's seeded hash (names.seeded_digest): it decides duplicates and the split


def split_value(text: str, seed: int) -> float:
    """A line's position in [0, 1); below valid_fraction means the validation split."""
    return names.unit_value(names.seeded_digest(text, seed, LINE_DIGEST))


def clean(
    records: Iterable[str],
    *,
    seed: int,
    normalization: str = "NFC",
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


@dataclass(frozen=True)
class CorpusParams:
    """the target-language corpora: where each comes from, how it is cleaned and split"""

    sources: dict[str, dict] = option(
        {},
        "one source per language (keys are language codes)",
        propertyNames={"$ref": "#/$defs/lang"},
        additionalProperties={"$ref": "#/$defs/corpus_source"},
    )
    normalization: Literal["NFC", "NFKC", "NFD", "NFKD", "none"] = option(
        "NFC", "Unicode normal form applied to every line"
    )
    max_bytes: int = option(0, "cap on UTF-8 bytes kept (train + valid) per language; 0 keeps everything", minimum=0)
    valid_fraction: float = option(
        0.05,
        "share of lines held out as the validation split (chosen by a seeded hash of the line)",
        exclusiveMinimum=0,
        exclusiveMaximum=0.5,
    )
    dev_fraction: float = option(
        0.0,
        "share of lines set aside as the dev (tuning) split, by the same hash (the band above valid_fraction, "
        "taken from what would be train); no stage trains on it and the report never scores it; 0 leaves it empty "
        "and train and valid unchanged",
        minimum=0,
        exclusiveMaximum=0.5,
    )
    min_chars: int = option(1, "lines shorter than this (after stripping) are dropped", minimum=1)


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
            bar.close()
            if hasattr(records, "close"):
                records.close()
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


def run(ctx) -> None:
    """The `corpus` stage: results/{lang}/corpus/{train,valid,dev}.parquet and stats.json."""
    opts = ctx.section("corpus", CorpusParams)  # params corpus, typed
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
