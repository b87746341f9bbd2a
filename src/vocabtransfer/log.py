"""Logging set-up for the CLI, a tqdm wrapper that is quiet when stderr is not a terminal, and the one-line
progress of a long job (`Progress`: tokens seen, loss, tokens/s, time left)."""

from __future__ import annotations

import logging
import math
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar, overload

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


def duration_text(seconds: float | None) -> str:
    """`45 s`, `2 min 05 s`, `1 h 02 min`; `unknown` for None (no step measured yet)."""
    if seconds is None or not math.isfinite(seconds):
        return "unknown"
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class Progress:
    """The rate of a run of `total` steps and its time left, measured from where this process started it
    (`start_step`, `start_tokens`: a resumed run counts from its checkpoint): time left = the steps left × the
    seconds per step so far. `line` is the one log line a long job writes per evaluation. `clock`: seconds,
    time.monotonic by default (a test passes a fake one)."""

    def __init__(
        self,
        what: str,
        total: int,
        start_step: int = 0,
        start_tokens: int = 0,
        clock: Callable[[], float] | None = None,
    ):
        self.what, self.total, self.clock = what, total, clock or time.monotonic
        self.start = (self.clock(), start_step, start_tokens)

    def tokens_per_second(self, tokens: int) -> float:
        """Tokens seen since the start over the seconds since it (NaN before any time has passed)."""
        elapsed = self.clock() - self.start[0]
        return (tokens - self.start[2]) / elapsed if elapsed > 0 else math.nan

    def seconds_left(self, step: int) -> float | None:
        """(total − step) × the seconds per step since the start; None before a step was measured."""
        elapsed, done = self.clock() - self.start[0], step - self.start[1]
        if done <= 0 or elapsed <= 0:
            return None
        return max(0, self.total - step) * elapsed / done

    def line(self, step: int, tokens: int, loss: float, loss_name: str = "loss", extra: str = "") -> str:
        """`pretrain: step 40/100 (40 %), 163,840 tokens seen, valid loss 5.1234, 1,234 tokens/s, 2 min 05 s
        left`; `extra` (`, 1.2345 bits per byte`) follows the loss."""
        speed = self.tokens_per_second(tokens)
        share = f" ({100 * step / self.total:.0f} %)" if self.total > 0 else ""
        return (
            f"{self.what}: step {step}/{self.total}{share}, {tokens:,} tokens seen, {loss_name} {loss:.4f}{extra}, "
            + (f"{speed:,.0f} tokens/s" if math.isfinite(speed) else "– tokens/s")
            + f", {duration_text(self.seconds_left(step))} left"
        )


def progress_logged(
    items: Sequence[T], what: str, logger: logging.Logger, every: float = 60.0, clock: Callable[[], float] | None = None
) -> Iterator[T]:
    """`items` with a bar on a terminal and, where there is none (a job's log), one line at most every `every`
    seconds: `OMP (donor): block 40/936 (4 %), 1 h 02 min left`, the time left from the rate so far."""
    bar = tqdm(items, desc=what, unit="block", disable=not sys.stderr.isatty(), dynamic_ncols=True)
    meter = Progress(what, len(items), clock=clock)
    last = meter.start[0]
    for done, item in enumerate(bar, start=1):
        yield item
        if bar.disable and meter.clock() - last >= every:
            last = meter.clock()
            left = duration_text(meter.seconds_left(done))
            logger.info("%s: block %d/%d (%.0f %%), %s left", what, done, len(items), 100 * done / len(items), left)
