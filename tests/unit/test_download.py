"""download.fetch against a local HTTP server that honours Range and can fail on purpose."""

from __future__ import annotations

import hashlib
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from vocabtransfer.data import download
from vocabtransfer.errors import VocabTransferError

PAYLOAD = ("Habari ya asubuhi\nNimefurahi kukuona\n" * 2000).encode("utf-8")  # ~74 kB
SHA = hashlib.sha256(PAYLOAD).hexdigest()


class Handler(BaseHTTPRequestHandler):
    """GET with `Range: bytes=N-` support; `fail` answers 503 and `truncate` cuts a body in half."""

    def do_GET(self):
        srv = self.server
        rng = self.headers.get("Range")
        srv.requests.append((self.path, rng))
        if srv.fail:
            srv.fail -= 1
            self.send_error(503, "try later")
            return
        data = srv.files.get(self.path)
        if data is None:
            self.send_error(404)
            return
        start = 0
        if rng:
            start = int(re.fullmatch(r"bytes=(\d+)-", rng).group(1))
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        body = data[start:]
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        if srv.truncate:
            srv.truncate -= 1
            self.wfile.write(body[: len(body) // 2])
            self.close_connection = True
            return
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.files, srv.requests, srv.fail, srv.truncate = {"/data/sw.txt": PAYLOAD}, [], 0, 0
    srv.url = lambda path="/data/sw.txt": f"http://127.0.0.1:{srv.server_address[1]}{path}"
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("VOCABTRANSFER_CACHE", str(root))
    monkeypatch.delenv("VOCABTRANSFER_MIRROR", raising=False)
    return root


def test_download_then_cache_hit(server, cache):
    got = download.fetch(server.url(), SHA, backoff=0)
    assert got.origin == "network"
    assert got.path == cache / "sha256" / SHA / "sw.txt"
    assert got.path.read_bytes() == PAYLOAD
    assert server.requests == [("/data/sw.txt", None)]
    again = download.fetch(server.url(), SHA, backoff=0)
    assert (again.origin, again.path) == ("cache", got.path)
    assert len(server.requests) == 1  # no second request


def test_checksum_mismatch_names_url_and_hashes_and_keeps_nothing(server, cache):
    wrong = "0" * 64
    with pytest.raises(VocabTransferError) as err:
        download.fetch(server.url(), wrong, backoff=0)
    msg = str(err.value)
    assert server.url() in msg and wrong in msg and SHA in msg and "\n" not in msg
    entry = cache / "sha256" / wrong
    assert not entry.exists() or list(entry.iterdir()) == []
    assert not (cache / "sha256" / SHA).exists()


def test_resume_partial_download_with_range(server, cache):
    part = download.cache_path(server.url(), SHA).with_name("sw.txt.part")
    part.parent.mkdir(parents=True)
    part.write_bytes(PAYLOAD[:30_000])
    got = download.fetch(server.url(), SHA, backoff=0)
    assert got.path.read_bytes() == PAYLOAD
    assert server.requests == [("/data/sw.txt", "bytes=30000-")]
    assert not part.exists()


def test_stale_partial_file_is_discarded_and_downloaded_again(server, cache):
    part = download.cache_path(server.url(), SHA).with_name("sw.txt.part")
    part.parent.mkdir(parents=True)
    part.write_bytes(b"X" * 1000)  # not a prefix of the payload
    got = download.fetch(server.url(), SHA, backoff=0)
    assert got.path.read_bytes() == PAYLOAD
    assert server.requests == [("/data/sw.txt", "bytes=1000-"), ("/data/sw.txt", None)]


def test_retry_after_a_failing_request(server, cache):
    server.fail = 1
    got = download.fetch(server.url(), SHA, backoff=0)
    assert got.path.read_bytes() == PAYLOAD
    assert [r for _, r in server.requests] == [None, None]


def test_dropped_connection_resumes_where_it_stopped(server, cache):
    server.truncate = 1
    got = download.fetch(server.url(), SHA, backoff=0)
    assert got.path.read_bytes() == PAYLOAD
    assert server.requests == [("/data/sw.txt", None), ("/data/sw.txt", f"bytes={len(PAYLOAD) // 2}-")]


def test_gives_up_after_retries_and_404_is_not_retried(server, cache):
    server.fail = 10
    with pytest.raises(VocabTransferError, match=r"download failed after 3 attempt\(s\) \(HTTP 503"):
        download.fetch(server.url(), SHA, retries=2, backoff=0)
    assert len(server.requests) == 3
    server.fail, server.requests[:] = 0, []
    with pytest.raises(VocabTransferError, match="HTTP 404"):
        download.fetch(server.url("/missing.txt"), SHA, backoff=0)
    assert len(server.requests) == 1


def test_mirror_is_checked_first_and_verified(server, cache, tmp_path, monkeypatch):
    mirror = tmp_path / "mirror"
    monkeypatch.setenv("VOCABTRANSFER_MIRROR", str(mirror))
    copy = mirror / "127.0.0.1" / "data" / "sw.txt"
    assert download.mirror_path(server.url(), mirror) == copy
    copy.parent.mkdir(parents=True)
    copy.write_bytes(PAYLOAD)
    got = download.fetch(server.url(), SHA, backoff=0)
    assert (got.origin, got.path) == ("mirror", copy)
    assert server.requests == []

    copy.write_bytes(PAYLOAD[:-1])
    expected = rf"mirror file {copy} \(for {server.url()}\): sha256 mismatch: expected {SHA}, got "
    with pytest.raises(VocabTransferError, match=expected):
        download.fetch(server.url(), SHA, backoff=0)
    assert server.requests == []

    copy.unlink()  # not in the mirror: downloaded
    assert download.fetch(server.url(), SHA, backoff=0).origin == "network"
    assert len(server.requests) == 1


def test_file_url(tmp_path, cache):
    path = tmp_path / "sw.txt"
    path.write_bytes(PAYLOAD)
    got = download.fetch(path.as_uri(), SHA)
    assert (got.origin, got.path) == ("file", path)
    with pytest.raises(VocabTransferError, match="sha256 mismatch"):
        download.fetch(path.as_uri(), "f" * 64)
