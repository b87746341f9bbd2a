"""Logging set-up for the CLI and a tqdm wrapper that is quiet when stderr is not a terminal."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any, Iterable, TypeVar, overload

from tqdm.auto import tqdm

T = TypeVar("T")
FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


def setup_logging(log_file: str | None = None, level: int = logging.INFO) -> None:
    """Log to stderr, and to `log_file` too when given (Snakemake's per-job log)."""
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_file:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(log_file, mode="w", encoding="utf-8"))
    logging.basicConfig(level=level, format=FORMAT, handlers=handlers, force=True)
    for noisy in ("urllib3", "filelock", "httpx", "httpcore", "huggingface_hub", "datasets", "fsspec"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def report_error(message: str) -> None:
    """Each line of `message` as `error: <line>` on stderr, as Snakemake (and the workflow's own checks) print
    theirs, and as an ERROR record in the log file when there is one (a job's log keeps why it failed)."""
    for line in message.splitlines():
        sys.stderr.write(f"error: {line}\n")
        record = logging.LogRecord("vocabtransfer", logging.ERROR, __file__, 0, line, None, None)
        for handler in logging.getLogger().handlers:
            if isinstance(handler, logging.FileHandler):
                handler.handle(record)
    sys.stderr.flush()


@overload
def progress(iterable: Iterable[T], **kwargs: Any) -> Iterable[T]: ...


@overload
def progress(iterable: None = None, **kwargs: Any) -> tqdm: ...  # a bar updated by hand: `with`, .update(n)


def progress(iterable: Iterable[T] | None = None, **kwargs: Any) -> Iterable[T] | tqdm:
    """tqdm progress bar, shown only on a terminal (no bar noise in job logs)."""
    kwargs.setdefault("disable", not sys.stderr.isatty())
    kwargs.setdefault("dynamic_ncols", True)
    return tqdm(iterable, **kwargs)
