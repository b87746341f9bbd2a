"""Fetch a file by URL and sha256 into a local cache: offline mirror first, then HTTP with
resume (Range), retries with exponential backoff, and a checksum check.

Cache layout (root: $VOCABTRANSFER_CACHE, default ~/.cache/vocabtransfer):

    <root>/sha256/<hex>/<name>        a complete, verified download (named after the URL's file name)
    <root>/sha256/<hex>/<name>.part   an interrupted download, resumed by the next attempt
    <root>/sha256/<hex>.lock          held while one process downloads it

A file appears under its final name only after its sha256 matched; a download whose hash
does not match is deleted. The offline mirror ($VOCABTRANSFER_MIRROR) serves
`https://host/a/b.txt` from `<mirror>/host/a/b.txt`, checked against the same sha256.
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from filelock import FileLock

from vocabtransfer.version import __version__
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.log import progress

log = logging.getLogger(__name__)

CHUNK = 1 << 20
RETRY_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class Fetched:
    """A verified local copy of a URL and where it came from."""

    path: Path
    origin: Literal["cache", "mirror", "network", "file"]
    seconds: float = 0.0


class _Retryable(Exception):
    """A transient failure (connection, timeout, 5xx): try again, resuming the partial file."""


def cache_dir() -> Path:
    """$VOCABTRANSFER_CACHE, else ~/.cache/vocabtransfer."""
    return Path(os.environ.get("VOCABTRANSFER_CACHE") or "~/.cache/vocabtransfer").expanduser()


def mirror_dir() -> Path | None:
    """$VOCABTRANSFER_MIRROR, or None when unset."""
    root = os.environ.get("VOCABTRANSFER_MIRROR")
    return Path(root).expanduser() if root else None


def _url_parts(url: str) -> tuple[str, list[str]]:
    parts = urllib.parse.urlsplit(url)
    segments = [urllib.parse.unquote(s) for s in parts.path.split("/") if s]
    if any(s in (".", "..") for s in segments):
        raise VocabTransferError(f"{url}: URL path contains '.' or '..' segments; give the file's canonical URL")
    return (parts.hostname or ""), segments


def file_name(url: str) -> str:
    """The file name a URL's download is stored under (its last path segment)."""
    _, segments = _url_parts(url)
    return segments[-1] if segments else "download"


def mirror_path(url: str, root: str | os.PathLike) -> Path:
    """Where the offline mirror keeps `url`: `<root>/<host>/<path>`."""
    host, segments = _url_parts(url)
    return Path(root, host, *segments)


def cache_path(url: str, sha256: str, root: str | os.PathLike | None = None) -> Path:
    """Where the verified download of `url` with this sha256 lives in the cache."""
    return Path(root if root is not None else cache_dir(), "sha256", sha256, file_name(url))


def sha256_file(path: str | os.PathLike) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _mismatch(what: str, expected: str, actual: str, fix: str) -> VocabTransferError:
    return VocabTransferError(f"{what}: sha256 mismatch: expected {expected}, got {actual}; {fix}")


def fetch(
    url: str,
    sha256: str,
    *,
    cache: str | os.PathLike | None = None,
    retries: int = 4,
    backoff: float = 1.0,
    timeout: float = 60.0,
) -> Fetched:
    """A verified local copy of `url`: from the cache, the offline mirror, a file:// path, or HTTP(S).

    HTTP downloads resume a partial file with a Range request and retry transient failures
    `retries` times, waiting `backoff * 2**attempt` seconds between attempts.
    """
    sha256 = sha256.lower()
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    start = time.perf_counter()

    # 1. a local file:// URL is used in place once its hash matches
    if scheme == "file":
        path = Path(urllib.request.url2pathname(urllib.parse.urlsplit(url).path))
        if not path.is_file():
            raise VocabTransferError(f"{url}: file not found; fix the URL or the file")
        actual = sha256_file(path)
        if actual != sha256:
            raise _mismatch(url, sha256, actual, "fix the sha256 in params or the file")
        return Fetched(path, "file", time.perf_counter() - start)
    if scheme not in ("http", "https"):
        raise VocabTransferError(f"{url}: unsupported URL scheme {scheme!r}; use http(s):// or file://")

    final = cache_path(url, sha256, cache)
    # 2. a complete cache entry was verified before it got its final name
    if final.is_file():
        log.debug("%s: cached at %s", url, final)
        return Fetched(final, "cache")

    # 3. the offline mirror, checked against the same hash
    mirror = mirror_dir()
    if mirror is not None:
        candidate = mirror_path(url, mirror)
        if candidate.is_file():
            actual = sha256_file(candidate)
            if actual != sha256:
                raise _mismatch(
                    f"mirror file {candidate} (for {url})",
                    sha256,
                    actual,
                    "replace or delete the mirror file, or fix the sha256 in params",
                )
            log.info("%s: served from the offline mirror %s", url, candidate)
            return Fetched(candidate, "mirror", time.perf_counter() - start)
        log.info("%s: not in the offline mirror (%s); downloading", url, candidate)

    # 4. HTTP(S), one process at a time per file
    final.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(final.parent) + ".lock"):
        if final.is_file():  # another process finished it while we waited
            return Fetched(final, "cache")
        _download(url, sha256, final, retries=retries, backoff=backoff, timeout=timeout, mirror=mirror)
    seconds = time.perf_counter() - start
    log.info("%s: downloaded %d bytes in %.1f s to %s", url, final.stat().st_size, seconds, final)
    return Fetched(final, "network", seconds)


def _download(
    url: str, sha256: str, final: Path, *, retries: int, backoff: float, timeout: float, mirror: Path | None
) -> None:
    part = final.with_name(final.name + ".part")
    restarted = False
    while True:
        resumed = part.is_file() and part.stat().st_size > 0
        for attempt in range(retries + 1):
            try:
                _get(url, part, timeout)
                break
            except _Retryable as exc:
                if attempt == retries:
                    where = f"put the file at {mirror_path(url, mirror or '$VOCABTRANSFER_MIRROR')}"
                    raise VocabTransferError(
                        f"{url}: download failed after {retries + 1} attempt(s) ({exc}); check the URL and "
                        f"the network, or {where}"
                    ) from exc
                wait = backoff * 2**attempt
                log.warning("%s: %s; retrying in %.1f s (attempt %d of %d)", url, exc, wait, attempt + 2, retries + 1)
                time.sleep(wait)
        actual = sha256_file(part)
        if actual == sha256:
            os.replace(part, final)
            return
        part.unlink()
        if resumed and not restarted:  # the earlier partial file may be stale: start once from zero
            log.warning("%s: resumed download has the wrong sha256; downloading it again from the start", url)
            restarted = True
            continue
        raise _mismatch(
            url, sha256, actual, "the download was deleted; check that the URL and the sha256 in params belong together"
        )


def _get(url: str, part: Path, timeout: float) -> None:
    """One HTTP request: append to `part` from where it ends (Range), or rewrite it."""
    have = part.stat().st_size if part.is_file() else 0
    headers = {"User-Agent": f"vocabtransfer/{__version__}"}
    if have:
        headers["Range"] = f"bytes={have}-"
    try:
        resp = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and have:  # nothing left to fetch: the partial file is whole (the hash decides)
            return
        if exc.code in RETRY_STATUS:
            raise _Retryable(f"HTTP {exc.code} {exc.reason}") from exc
        raise VocabTransferError(f"{url}: HTTP {exc.code} {exc.reason}; check the URL") from exc
    except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
        raise _Retryable(f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}") from exc

    with resp:
        if have and resp.status == 206 and resp.headers.get("Content-Range", "").startswith(f"bytes {have}-"):
            mode = "ab"
            log.info("%s: resuming at byte %d", url, have)
        else:  # no partial file, or the server ignored the Range header: start over
            mode, have = "wb", 0
        length = resp.headers.get("Content-Length")
        expected = int(length) if length is not None and length.isdigit() else None
        got = 0
        with (
            open(part, mode) as f,
            progress(
                total=None if expected is None else have + expected,
                initial=have,
                unit="B",
                unit_scale=True,
                desc=file_name(url),
            ) as bar,
        ):
            while True:
                try:
                    chunk = resp.read(CHUNK)
                except (http.client.HTTPException, OSError) as exc:
                    raise _Retryable(f"connection lost after {have + got} bytes ({type(exc).__name__})") from exc
                if not chunk:
                    break
                f.write(chunk)
                got += len(chunk)
                bar.update(len(chunk))
    if expected is not None and got < expected:
        raise _Retryable(f"connection closed after {have + got} of {have + expected} bytes")
