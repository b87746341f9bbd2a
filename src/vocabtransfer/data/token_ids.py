"""Pre-tokenised corpus splits as flat token-id arrays, read through a map, never loaded.

A split is a directory of three files:
  ids.npy      every line's token ids end to end, 1-D uint16 (vocabulary ≤ 65536) or uint32;
  offsets.npy  lines + 1 entries, line i is ids[offsets[i]:offsets[i + 1]]: uint32 while the split's
               tokens fit in 32 bits (4.29 billion; 4 bytes a line), else uint64 (the writer widens the
               file when a batch would pass the bound);
  meta.json    format, dtype, offsets_dtype, lines, tokens, and the tokenizer: vocabulary size and the
               SHA-256 of its token -> id map (`vocab_sha256`), so a reader with another tokenizer stops.
(Format 1, still read, had int64 offsets.)

Both arrays are plain `.npy` files: `np.load(path, mmap_mode="r")` maps them in any process (data-parallel
processes share the page cache, no copy each). `IdsWriter` streams them in one pass: numpy's own
header for an unknown length first, the batches appended, the header rewritten with the final length
at the end, all inside `io.atomic_output`, so a killed job leaves no split behind. Readers take
block-sized windows with `pread` (`TokenIds.read`), so a job's resident memory holds its windows and
not every page it has touched; whole-split passes go chunk by chunk (`TokenIds.chunks`).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Iterator

import numpy as np

from vocabtransfer import io
from vocabtransfer.errors import VocabTransferError, brief

FORMAT = 2
OFFSET_DTYPES = {1: ("int64",), 2: ("uint32", "uint64")}  # per format
OFFSET_BOUND = int(np.iinfo(np.uint32).max)  # offsets up to this stay uint32
IDS, OFFSETS, META = "ids.npy", "offsets.npy", "meta.json"
CHUNK = 1 << 22  # ids per chunk of a whole-split pass (8 MiB of uint16)


def ids_dtype(vocab_size: int) -> np.dtype:
    """uint16 where every id of the vocabulary fits, else uint32."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


def vocab_sha256(tokenizer) -> str:
    """SHA-256 of a tokenizer's token -> id map (added tokens included): equal maps, equal ids."""
    items = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    return hashlib.sha256(json.dumps(items, ensure_ascii=False).encode("utf-8")).hexdigest()


# ---------------------------------------------------------------------------------------------
# writing


class _NpyStream:
    """A 1-D .npy file written in pieces: numpy's header for length 0, the data, then the header again
    with the real length (a 1-D header is 128 bytes whatever the length, `_header` checks it)."""

    def __init__(self, path: Path, dtype: np.dtype):
        self._open(path, dtype)

    def _open(self, path: Path, dtype: np.dtype) -> None:
        self.file, self.dtype, self.length = open(path, "wb"), np.dtype(dtype), 0
        self.size = self._header(0)

    def _header(self, length: int) -> int:
        self.file.seek(0)
        np.lib.format.write_array_header_1_0(
            self.file, {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False, "shape": (length,)}
        )
        return self.file.tell()

    def append(self, values: np.ndarray) -> None:
        self.file.write(np.ascontiguousarray(values, dtype=self.dtype).tobytes())
        self.length += int(values.size)

    def widen(self, dtype: np.dtype, chunk: int = 1 << 22) -> None:
        """Rewrite the values written so far as `dtype`, a chunk at a time, and go on appending in it."""
        path, old, length = Path(self.file.name), self.dtype, self.length
        self.file.close()
        os.replace(path, path.with_name(path.name + ".narrow"))
        narrow = path.with_name(path.name + ".narrow")
        self._open(path, dtype)
        with open(narrow, "rb") as src:
            np.lib.format.read_magic(src)
            np.lib.format.read_array_header_1_0(src)
            for lo in range(0, length, chunk):
                self.append(np.frombuffer(src.read(min(chunk, length - lo) * old.itemsize), dtype=old))
        narrow.unlink()

    def close(self) -> None:
        end = self.file.tell()
        if self._header(self.length) != self.size:
            raise RuntimeError("numpy's .npy header changed length")
        self.file.seek(end)
        self.file.close()


class IdsWriter:
    """`with IdsWriter(path, tokenizer) as w: w.append(lengths, ids)`; the split appears at `path` on exit."""

    def __init__(self, path: str | os.PathLike, tokenizer):
        self.path, self.vocab_size = Path(path), len(tokenizer)
        self.vocab_sha256, self.dtype = vocab_sha256(tokenizer), ids_dtype(len(tokenizer))

    def __enter__(self) -> "IdsWriter":
        self._atomic = io.atomic_output(self.path, directory=True)
        self.tmp = self._atomic.__enter__()
        self.ids = _NpyStream(self.tmp / IDS, self.dtype)
        self.offsets = _NpyStream(self.tmp / OFFSETS, np.dtype(np.uint32))
        self.offsets.append(np.zeros(1, dtype=np.uint32))
        return self

    def append(self, lengths: np.ndarray, ids: np.ndarray) -> None:
        """One batch of lines: tokens per line and their ids end to end."""
        ends = self.ids.length + np.cumsum(lengths, dtype=np.int64)
        if ends.size and ends[-1] > OFFSET_BOUND and self.offsets.dtype == np.uint32:
            self.offsets.widen(np.dtype(np.uint64))
        self.offsets.append(ends)
        self.ids.append(ids)

    def __exit__(self, *exc) -> bool:
        try:
            self.ids.close()
            self.offsets.close()
            if exc[0] is None:
                io.write_json(self.meta(), self.tmp / META)
        except BaseException:
            self._atomic.__exit__(*sys.exc_info())  # removes the temporary directory
            raise
        return bool(self._atomic.__exit__(*exc))  # renames it into place, or removes it

    def meta(self) -> dict:
        return {
            "format": FORMAT,
            "dtype": self.dtype.name,
            "offsets_dtype": self.offsets.dtype.name,
            "lines": self.offsets.length - 1,
            "tokens": self.ids.length,
            "vocab_size": self.vocab_size,
            "vocab_sha256": self.vocab_sha256,
        }


def write_lines(path: str | os.PathLike, tokenizer, lines: list[list[int]]) -> None:
    """A split from lists of ids (tests, small tools)."""
    lengths = np.fromiter(map(len, lines), dtype=np.int64, count=len(lines))
    flat = np.fromiter((i for line in lines for i in line), dtype=np.int64, count=int(lengths.sum()))
    with IdsWriter(path, tokenizer) as w:
        w.append(lengths, flat)


# ---------------------------------------------------------------------------------------------
# reading

RERUN = "rerun the pretokenize stage"


class TokenIds:
    """A split opened for reading: `len` lines, `read(lo, hi)` ids, `line(i)`, `line_offsets(a, b)`."""

    def __init__(self, path: str | os.PathLike, tokenizer=None):
        self._open(path, tokenizer)

    def _open(self, path: str | os.PathLike, tokenizer=None) -> None:
        self.path = Path(path)
        self.meta = _read_meta(self.path)
        self.ids = _map(self.path / IDS, self.meta["dtype"], self.meta["tokens"])
        self.offsets = _map(self.path / OFFSETS, self.meta["offsets_dtype"], self.meta["lines"] + 1)
        if self.meta["lines"] and (self.offsets[0] != 0 or self.offsets[-1] != self.meta["tokens"]):
            raise VocabTransferError(
                f"{self.path / OFFSETS}: line offsets do not span {IDS} (0..{self.meta['tokens']}); "
                f"the split is corrupt, {RERUN}"
            )
        self.dtype = self.ids.dtype
        self._fds = {name: os.open(self.path / name, os.O_RDONLY) for name in (IDS, OFFSETS)}
        self._base = {IDS: self.ids.offset, OFFSETS: self.offsets.offset}
        if tokenizer is not None:
            self.check_tokenizer(tokenizer)

    def __len__(self) -> int:
        return self.meta["lines"]

    def __del__(self) -> None:
        for fd in getattr(self, "_fds", {}).values():
            os.close(fd)

    def __getstate__(self) -> dict:  # a data-loader worker reopens the files
        return {"path": self.path}

    def __setstate__(self, state: dict) -> None:
        self._open(state["path"])

    @property
    def tokens(self) -> int:
        return self.meta["tokens"]

    def check_tokenizer(self, tokenizer) -> None:
        """Stop when the split was written with another tokenizer than `tokenizer`."""
        size, digest = len(tokenizer), vocab_sha256(tokenizer)
        if size != self.meta["vocab_size"] or digest != self.meta["vocab_sha256"]:
            raise VocabTransferError(
                f"{self.path}: written with another tokenizer (vocabulary {self.meta['vocab_size']}, sha256 "
                f"{self.meta['vocab_sha256'][:12]}) than the model's (vocabulary {size}, sha256 {digest[:12]}); {RERUN}"
            )

    def _pread(self, name: str, dtype: np.dtype, lo: int, hi: int) -> np.ndarray:
        size = np.dtype(dtype).itemsize
        data = os.pread(self._fds[name], (hi - lo) * size, self._base[name] + lo * size)
        if len(data) != (hi - lo) * size:
            raise VocabTransferError(
                f"{self.path / name}: shorter than its header says; the split is truncated, {RERUN}"
            )
        return np.frombuffer(data, dtype=dtype)

    def read(self, lo: int, hi: int) -> np.ndarray:
        """ids[lo:hi], read from the file (nothing stays resident)."""
        return self._pread(IDS, self.dtype, lo, hi)

    def line_offsets(self, a: int, b: int) -> np.ndarray:
        """offsets[a:b + 1]: where lines a..b-1 start, and where line b-1 ends."""
        return self._pread(OFFSETS, self.offsets.dtype, a, b + 1).astype(np.int64)

    def line(self, i: int) -> np.ndarray:
        lo, hi = self.line_offsets(i, i + 1)
        return self.read(int(lo), int(hi))

    def lines(self, stop: int | None = None) -> Iterator[list[int]]:
        """Lines 0..stop-1 as lists of ints, in order."""
        for a, b in _spans(min(len(self), len(self) if stop is None else stop), 1 << 16):
            off = self.line_offsets(a, b)
            ids = self.read(int(off[0]), int(off[-1])).tolist()
            base = int(off[0])
            yield from (ids[int(lo) - base : int(hi) - base] for lo, hi in zip(off[:-1], off[1:]))

    def chunks(self, stop: int | None = None) -> Iterator[np.ndarray]:
        """ids[0:stop] in chunks of `CHUNK`, with every id checked against the vocabulary size."""
        stop = self.tokens if stop is None else stop
        for lo, hi in _spans(stop, CHUNK):
            chunk = self.read(lo, hi)
            if chunk.size and int(chunk.max()) >= self.meta["vocab_size"]:
                raise VocabTransferError(
                    f"{self.path / IDS}: token id {int(chunk.max())} is outside the tokenizer's "
                    f"{self.meta['vocab_size']} ids; the split is corrupt, {RERUN}"
                )
            yield chunk


def counts_of(chunks, vocab: int, where: str) -> np.ndarray:
    """Occurrences of every id 0..vocab-1 over chunks of ids; an id outside the vocabulary is refused."""
    counts = np.zeros(vocab, dtype=np.int64)
    for chunk in chunks:
        chunk = np.asarray(chunk, dtype=np.int64)
        if chunk.size and (int(chunk.max()) >= vocab or int(chunk.min()) < 0):
            raise VocabTransferError(
                f"{where}: token id {int(chunk.max())} is outside the tokenizer's {vocab} ids; "
                "the text and the tokenizer do not match"
            )
        counts += np.bincount(chunk, minlength=vocab)
    return counts


def unigram_counts(path: str | os.PathLike, tokenizer) -> np.ndarray:
    """Occurrences of every id of `tokenizer` in the pre-tokenised split at `path` (checked against it), chunk
    by chunk: the unigram the floors are fitted on."""
    return counts_of(TokenIds(path, tokenizer).chunks(), len(tokenizer), str(path))


def _spans(n: int, step: int) -> Iterator[tuple[int, int]]:
    return ((lo, min(lo + step, n)) for lo in range(0, n, step))


def _read_meta(path: Path) -> dict:
    meta_path = path / META
    if not meta_path.is_file():
        hint = " (a Parquet file of an older version)" if path.with_suffix(".parquet").is_file() else ""
        raise VocabTransferError(f"{path}: no pre-tokenised split here{hint}; {RERUN}")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        meta.setdefault("offsets_dtype", "int64")
        ok = (
            meta["format"] in OFFSET_DTYPES
            and np.dtype(meta["dtype"]) in (np.uint16, np.uint32)
            and meta["offsets_dtype"] in OFFSET_DTYPES[meta["format"]]
        )
        for key in ("lines", "tokens", "vocab_size"):
            meta[key] = int(meta[key])
        meta["vocab_sha256"] = str(meta["vocab_sha256"])
    except Exception as exc:
        raise VocabTransferError(f"{meta_path}: not a readable split header ({brief(exc)}); {RERUN}") from exc
    if not ok:
        raise VocabTransferError(
            f"{meta_path}: format {meta.get('format')} / dtype {meta.get('dtype')} / offsets "
            f"{meta.get('offsets_dtype')} is not one this version reads ({FORMAT}, uint16 or "
            f"uint32, uint32 or uint64 offsets); {RERUN}"
        )
    return meta


def _map(path: Path, dtype: str, length: int) -> np.memmap:
    """A read-only map of a 1-D .npy array, checked against the header's dtype and length."""
    try:
        array = np.load(path, mmap_mode="r")
    except FileNotFoundError:
        raise VocabTransferError(f"{path}: file not found; {RERUN}") from None
    except Exception as exc:  # numpy raises ValueError / OSError for short or garbled files
        raise VocabTransferError(
            f"{path}: not a readable .npy array, truncated or corrupt ({brief(exc)}); {RERUN}"
        ) from exc
    if array.ndim != 1 or array.dtype != np.dtype(dtype) or array.size != length:
        raise VocabTransferError(
            f"{path}: holds {array.dtype}{list(array.shape)}, its header says {dtype}[{length}]; "
            f"the split is corrupt, {RERUN}"
        )
    return array
