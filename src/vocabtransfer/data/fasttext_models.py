"""fastText models: training unsupervised fastText on a text file (FOCUS's defaults) or word-level fastText with
character n-grams on raw lines (WECHSEL's auxiliary space), and loading a .bin with its layout checked first.

Determinism: the seed and the thread count decide the result. fastText trains lock-free ("Hogwild") on `threads`
threads: with one thread the same seed gives the same vectors, byte for byte; with more threads they also depend on
thread scheduling and differ between runs. (The thread count also changes the initialisation: fastText 0.9.3
initialises `threads`/10 of the input matrix.) For byte-identical artefacts run the fasttext stage with one
thread (Snakemake: `--set-threads fasttext=1`).

fastText leaves the rest of its input matrix as malloc returns it. A fresh mapping reads as zeros, but in a
long-lived process (a test session, a notebook) the matrix can land on freed heap memory, and its old bytes become
starting vectors: the result then depends on what ran before, and bytes that read as NaN abort training with
"Encountered NaN". `train_fasttext` has glibc zero every allocation while fastText trains (`zeroed_allocations`), so
training sees zeros, as in a fresh process, wherever the memory comes from.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import os
import struct
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Literal

import fasttext
from fasttext import FastText as ft_impl


from vocabtransfer.errors import VocabTransferError, brief
from vocabtransfer.io import atomic_output

log = logging.getLogger(__name__)

_MAGIC, _VERSION = 793712314, 12  # fastText's .bin signature (FASTTEXT_FILEFORMAT_MAGIC_INT32, FASTTEXT_VERSION)


def _nonempty_text(path: Path) -> None:
    """Raise unless `path` is a readable file with at least one non-whitespace byte."""
    if not path.is_file():
        raise VocabTransferError(f"{path}: training text not found; run the stage that produces it first")
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            if chunk.strip():
                return
    raise VocabTransferError(
        f"{path}: training text is empty (no words); check the corpus and rerun the stage that wrote it"
    )


@contextmanager
def zeroed_allocations():
    """While active, every glibc malloc returns zeroed memory (mallopt M_PERTURB; see the module docstring).

    M_PERTURB=b fills allocations with b ^ 0xff and freed memory with b, so b=0xff zeroes what is
    allocated. Without glibc's mallopt (macOS, musl) this does nothing, and fastText may again start
    from old heap bytes in a long-lived process.
    """
    M_PERTURB = -6  # malloc.h
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    zeroing = mallopt is not None and bool(mallopt(M_PERTURB, 0xFF))
    if not zeroing:
        log.debug("mallopt(M_PERTURB) unavailable: fastText's input matrix may start from old heap bytes")
    try:
        yield
    finally:
        if zeroing and mallopt is not None:
            mallopt(M_PERTURB, 0)


def _train_unsupervised(seed: int, kwargs: dict):
    """`fasttext.train_unsupervised(seed=seed, **kwargs)`, also where the wrapper lacks `seed`."""

    try:
        return fasttext.train_unsupervised(seed=seed, **kwargs)
    except TypeError as exc:  # fasttext <= 0.9.3's Python wrapper does not forward `seed` ...
        if "seed" not in str(exc):
            raise
    # ... although the C++ trainer has it: build the args the way train_unsupervised does, plus seed.
    args, manual = ft_impl.read_args((), kwargs, list(kwargs), ft_impl.unsupervised_default)
    args["seed"] = seed
    manual.add("seed")
    a = ft_impl._build_args(args, manual)
    ft = ft_impl._FastText(args=a)
    ft_impl.fasttext.train(ft.f, a)
    ft.set_args(ft.f.getArgs())
    return ft


def train_fasttext(
    text_path: str | os.PathLike,
    *,
    model: Literal["cbow", "skipgram"] = "cbow",
    dim: int = 100,
    epochs: int = 3,
    min_count: int = 10,
    neg: int = 10,
    seed: int = 42,
    threads: int = 1,
    **fasttext_args,
):
    """Train unsupervised fastText on a whitespace-separated text file (FOCUS's defaults).

    `fasttext_args` go to fastText unchanged (e.g. `minn`, `maxn`, `ws`, `lr`, `bucket`).
    With `threads=1` the same seed gives identical vectors; see the module docstring.
    """
    path = Path(text_path)
    _nonempty_text(path)
    kwargs = dict(
        input=str(path),
        model=model,
        dim=dim,
        epoch=epochs,
        minCount=min_count,
        neg=neg,
        thread=threads,
        verbose=2 if log.isEnabledFor(logging.DEBUG) else 0,
        **fasttext_args,
    )
    start = time.perf_counter()
    try:
        with zeroed_allocations():
            ft = _train_unsupervised(seed, kwargs)
    except ValueError as exc:  # "Empty vocabulary. Try a smaller -minCount value."
        raise VocabTransferError(
            f"{path}: fastText training failed ({brief(exc)}); no word occurs min_count={min_count} "
            "times: lower fasttext.min_count or add text"
        ) from exc
    except RuntimeError as exc:  # "Encountered NaN."
        raise VocabTransferError(
            f"{path}: fastText training failed ({brief(exc)}); the vectors diverged: train with a "
            "lower learning rate (train_fasttext(..., lr=...); fastText's default is 0.05)"
        ) from exc
    log.info(
        "fastText %s dim=%d epochs=%d min_count=%d on %s: %d words in %.1fs (seed %d, %d thread(s))",
        model,
        dim,
        epochs,
        min_count,
        path,
        len(ft.get_words(on_unicode_error="replace")),
        time.perf_counter() - start,
        seed,
        threads,
    )
    return ft


@dataclass(frozen=True)
class WordFasttextSettings:
    """How `train_word_fasttext` trains; by default WECHSEL's: skipgram, dim 300 as the pretrained cc.*.300.bin (either
    can stand in for the other), 5 epochs, minCount 5, 5 negatives, character n-grams of `minn` to `maxn` characters.
    The word_fasttext stages set model, dim, epochs and min_count from params `init.wechsel.fasttext`."""

    model: Literal["cbow", "skipgram"] = "skipgram"
    dim: int = 300
    epochs: int = 5
    min_count: int = 5
    neg: int = 5
    minn: int = 3
    maxn: int = 6


def train_word_fasttext(
    text: str | os.PathLike | Iterable[str],
    out_path: str | os.PathLike,
    settings: WordFasttextSettings = WordFasttextSettings(),
    *,
    seed: int = 42,
    threads: int = 1,
    **fasttext_args,
):
    """Word-level fastText with character n-grams (WECHSEL's auxiliary space), saved atomically.

    `text` is a file of raw lines or an iterable of lines; case is kept and words are split on whitespace, as
    fastText does. `settings`: model, dimension, epochs, minCount, negatives and n-gram lengths; `seed` and
    `threads` as `train_fasttext`'s; `fasttext_args` go to fastText unchanged (e.g. `bucket`). Returns the model."""
    out_path = Path(out_path)
    kwargs = dict(asdict(settings), seed=seed, threads=threads, **fasttext_args)
    if isinstance(text, (str, os.PathLike)):
        ft = train_fasttext(text, **kwargs)
    else:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(
            "w", encoding="utf-8", suffix=".txt", dir=out_path.parent, prefix=f".{out_path.name}.text-", delete=False
        ) as tmp:
            for line in text:
                tmp.write(line.replace("\n", " ").replace("\r", " ") + "\n")
        try:
            ft = train_fasttext(tmp.name, **kwargs)
        finally:
            os.unlink(tmp.name)
    with atomic_output(out_path) as tmp_out:
        ft.save_model(str(tmp_out))
    return ft


def _check_bin(path: Path) -> None:
    """Walk a .bin's layout (header, dictionary, matrix shapes) so that a truncated or foreign file
    fails here instead of hanging or loading garbage in fastText's C++ loader."""
    size = path.stat().st_size
    bad = f"{path}: not a complete fastText .bin"
    fix = "re-download or retrain it (delete it and rerun its stage)"
    if size < 92:
        raise VocabTransferError(f"{bad} ({size} bytes); {fix}")
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        magic, version = struct.unpack_from("<ii", mm, 0)
        if magic != _MAGIC or version > _VERSION:
            raise VocabTransferError(f"{bad} (wrong file signature); {fix}")
        n_entries, _, _, _, n_pruned = struct.unpack_from("<iiiqq", mm, 64)  # after 12 int32 + 1 double of args
        pos = 92
        for _ in range(n_entries):  # entry: word bytes, NUL, int64 count, int8 type
            end = mm.find(b"\0", pos)
            if end < 0:
                raise VocabTransferError(f"{bad} (dictionary cut off); {fix}")
            pos = end + 10
        pos += 8 * max(n_pruned, 0)
        for _ in range(2):  # input then output matrix: bool quantised, int64 rows, int64 cols, float32 data
            if pos + 17 > size:
                raise VocabTransferError(f"{bad} (matrix cut off); {fix}")
            if mm[pos]:
                return  # quantised (.ftz-style) matrices: leave the layout to fastText
            rows, cols = struct.unpack_from("<qq", mm, pos + 1)
            pos += 17 + 4 * rows * cols
        if pos != size:
            raise VocabTransferError(f"{bad} ({size} bytes, its header says {pos}); {fix}")


def load_fasttext(path: str | os.PathLike):
    """Load a fastText .bin; a missing, truncated or foreign file is one clear VocabTransferError."""

    path = Path(path)
    if not path.is_file():
        raise VocabTransferError(
            f"{path}: fastText model not found; run the stage that produces it first or fix the path"
        )
    _check_bin(path)
    try:
        return fasttext.load_model(str(path))
    except Exception as exc:
        raise VocabTransferError(f"{path}: fastText cannot load it ({brief(exc)}); re-download or retrain it") from exc
