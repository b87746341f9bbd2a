"""Reading a corpus source, step 1 of the corpus stage: a local file or directory (text, json/jsonl, csv,
tsv or parquet, optionally .gz/.bz2/.xz), a URL with its sha256 (data.download), or a `datasets.load_dataset`
spec (a hub id or a packaged builder, its relative data_files resolved against the data root), each as its
description and its raw lines in source order; a source that cannot be read is one error naming it.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
from pathlib import Path
from typing import Any, Callable, Iterator

from vocabtransfer.data import download
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.pipeline.paths import data_path

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
COMPRESSION: dict[str, Callable[..., Any]] = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}
# datasets builder and its keyword arguments for each table format
BUILDERS = {"json": ("json", {}), "csv": ("csv", {}), "tsv": ("csv", {"sep": "\t"}), "parquet": ("parquet", {})}
# load_dataset paths that name a packaged builder: their relative data_files are data paths
LOCAL_BUILDERS = frozenset({"text", "json", "csv", "parquet", "arrow", "pandas"})


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
    opener: Callable[..., Any] = COMPRESSION.get(path.suffix.lower(), open)
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
        dataset: str = spec.pop("path")
        if dataset in LOCAL_BUILDERS:
            spec["data_files"] = _resolve_data_files(spec.get("data_files"))
        elif data_path(dataset).exists():  # a local dataset directory
            dataset = str(data_path(dataset))
        ds = _load_dataset(dataset, f"{key}.dataset", **spec)
        desc = {"kind": "dataset", "path": dataset, **spec, "text_column": column}
        name = f"dataset {dataset}" + (f" ({spec['name']})" if spec.get("name") else "")
        return desc, iter_column(ds, column, name, key)

    raise VocabTransferError(f"{key}: needs one of `path`, `url` with `sha256`, or `dataset`")


def describe(desc: dict) -> str:
    """A short name for a source in messages."""
    return f"dataset {desc['path']}" if desc["kind"] == "dataset" else desc[desc["kind"]]
