"""Artefact I/O: atomic writes, Parquet tables, safetensors tensors, JSON stats.

Every writer goes through `atomic_output`: the artefact is written under a temporary
name beside its final path and renamed at the end, so a failed or killed job never
leaves a file or directory that looks complete.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Mapping

import pyarrow as pa
import pyarrow.parquet as pq

from vocabtransfer.errors import VocabTransferError, brief

if TYPE_CHECKING:  # annotations only: io is read at CLI start-up, torch when a stage writes tensors
    import torch


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, *, directory: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it to `path` only if the block succeeds.

    With `directory=True` the temporary path is an (empty, existing) directory. An existing
    artefact at `path` is replaced only after the new one is complete.
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.tmp-{uuid.uuid4().hex[:8]}")
    if directory:
        tmp.mkdir()
    try:
        yield tmp
        if directory and final.is_dir():
            old = final.with_name(f".{final.name}.old-{uuid.uuid4().hex[:8]}")
            final.rename(old)
            tmp.rename(final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            if tmp.is_file():  # some writers (safetensors) create 0600 files; artefacts are shared
                os.chmod(tmp, 0o666 & ~_umask())
            os.replace(tmp, final)
    except BaseException:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists():
            tmp.unlink()
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_parquet(table: pa.Table, path: str | os.PathLike) -> None:
    with atomic_output(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")


def read_parquet(path: str | os.PathLike, columns: list[str] | None = None) -> pa.Table:
    """Read a Parquet artefact; a missing, corrupted or incomplete file is one clear error."""
    path = Path(path)
    if not path.is_file():
        raise VocabTransferError(f"{path}: file not found; run the stage that produces it first")
    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types for corrupt files
        raise VocabTransferError(
            f"{path}: not a readable Parquet file ({brief(exc)}); delete it and rerun its stage"
        ) from exc
    if columns:
        missing = [c for c in columns if c not in table.column_names]
        if missing:
            raise VocabTransferError(
                f"{path}: missing column(s) {', '.join(missing)} (has {', '.join(table.column_names)}); "
                "it was written by another version or stage, rerun its stage"
            )
        table = table.select(columns)
    return table


def save_tensors(tensors: Mapping[str, torch.Tensor], path: str | os.PathLike, metadata: dict | None = None) -> None:
    from safetensors.torch import save_file  # safetensors: heavy, not at CLI start-up

    # safetensors writes metadata keys in hash-map order, which changes between processes;
    # one key holding sorted JSON keeps the file byte-identical for identical inputs
    meta = {"vocabtransfer": json.dumps(metadata, sort_keys=True, default=str)} if metadata else None
    with atomic_output(path) as tmp:
        save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, str(tmp), metadata=meta)


def tensor_metadata(path: str | os.PathLike) -> dict:
    """The metadata that `save_tensors` stored."""
    from safetensors import safe_open  # safetensors: heavy, not at CLI start-up

    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
    return json.loads(meta["vocabtransfer"]) if "vocabtransfer" in meta else meta


def load_tensors(path: str | os.PathLike, keys: list[str] | None = None) -> dict:
    """Load named tensors from a safetensors file, checking that the expected keys exist."""
    from safetensors.torch import load_file  # safetensors: heavy, not at CLI start-up

    path = Path(path)
    if not path.is_file():
        raise VocabTransferError(f"{path}: file not found; run the stage that produces it first")
    try:
        tensors = load_file(str(path))
    except Exception as exc:
        raise VocabTransferError(
            f"{path}: not a readable safetensors file ({brief(exc)}); delete it and rerun its stage"
        ) from exc
    missing = [k for k in keys or [] if k not in tensors]
    if missing:
        raise VocabTransferError(f"{path}: missing tensor(s) {', '.join(missing)} (has {', '.join(sorted(tensors))})")
    return tensors


def write_json(obj, path: str | os.PathLike) -> None:
    with atomic_output(path) as tmp:
        tmp.write_text(
            json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False, default=str) + "\n", encoding="utf-8"
        )


def read_text(path: str | os.PathLike, missing: str) -> str:
    """A UTF-8 file's text, or one error line: `<path>: <missing>`."""
    path = Path(path)
    if not path.is_file():
        raise VocabTransferError(f"{path}: {missing}")
    return path.read_text(encoding="utf-8")


def read_json(path: str | os.PathLike) -> dict:
    text = read_text(path, "file not found; run the stage that produces it first")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise VocabTransferError(f"{path}: not valid JSON ({brief(exc)}); delete it and rerun its stage") from exc


def versions() -> dict[str, str]:
    """Library versions recorded in every stats.json."""
    out = {}
    for pkg in ("vocabtransfer", "torch", "transformers", "tokenizers", "fasttext", "pyarrow"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return out


def pyplot():
    """matplotlib's pyplot on the Agg backend (files, no display): every figure of the package is drawn with it."""
    import matplotlib  # matplotlib: plots only, and its backend is chosen before pyplot is imported

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # matplotlib: plots only, after the backend above

    return plt


def save_png(fig, path: str | os.PathLike, dpi: int) -> Path:
    """Write a matplotlib figure as a PNG atomically (no `Software` metadata, so the same figure gives
    the same bytes) and close it."""
    with atomic_output(path) as tmp:
        fig.savefig(tmp, format="png", dpi=dpi, metadata={"Software": None})
    pyplot().close(fig)
    return Path(path)
