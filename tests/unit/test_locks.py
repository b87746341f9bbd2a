"""vocabtransfer.pipeline.locks on hand-made Snakemake lock directories: a lock is released only when
every recorded owner is a process of this host that is gone."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

from vocabtransfer.pipeline import locks


def make_lock(lock_dir: Path) -> list[Path]:
    """Lock files as Snakemake writes them (<n>.input.lock / <n>.output.lock: one path per line)."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    files = [lock_dir / "0.input.lock", lock_dir / "0.output.lock"]
    files[0].write_text("results/sw/pretokenized/train.tokens.txt\n")
    files[1].write_text("results/sw/fasttext/model.bin\n")
    return files


def age(path: Path, seconds: float) -> None:
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns - int(seconds * 1e9)))


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_lock_whose_owner_is_gone_is_released_with_one_notice(tmp_path):
    lock_dir = tmp_path / ".snakemake" / "locks"
    files = make_lock(lock_dir)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        record = locks.record_owner(lock_dir, pid=proc.pid)
        for f in files:
            age(f, 1)
        # the owner still runs: nothing is touched
        assert locks.release_stale(lock_dir) is None
        assert all(f.exists() for f in files) and record.exists()
    finally:
        proc.kill()
        proc.wait()
    notice = locks.release_stale(lock_dir)
    assert notice is not None and "\n" not in notice
    assert f"pid {proc.pid}" in notice and "no longer exists" in notice
    assert not any(f.exists() for f in files) and not record.exists()
    assert locks.lock_files(lock_dir) == []
    assert locks.release_stale(lock_dir) is None  # nothing left to release


def test_a_zombie_owner_counts_as_gone(tmp_path):
    """A killed Snakemake that its parent has not reaped yet holds nothing."""
    lock_dir = tmp_path / "locks"
    files = make_lock(lock_dir)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    locks.record_owner(lock_dir, pid=proc.pid)
    for f in files:
        age(f, 1)
    proc.kill()
    try:
        deadline = time.monotonic() + 30
        while psutil.Process(proc.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.05)
        assert psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE
        assert locks.release_stale(lock_dir) is not None
    finally:
        proc.wait()


def test_the_lock_of_this_live_process_is_never_released(tmp_path):
    lock_dir = tmp_path / "locks"
    files = make_lock(lock_dir)
    for f in files:
        age(f, 1)
    locks.record_owner(lock_dir)
    assert locks.release_stale(lock_dir) is None
    assert all(f.exists() for f in files)


def test_a_reused_pid_counts_as_gone(tmp_path):
    """The recorded pid now belongs to another process (this one, started at another time)."""
    lock_dir = tmp_path / "locks"
    files = make_lock(lock_dir)
    record = locks.record_owner(lock_dir)
    data = json.loads(record.read_text())
    data["start_time"] -= 3600
    record.write_text(json.dumps(data))
    for f in files:
        age(f, 1)
    assert locks.release_stale(lock_dir) is not None
    assert not any(f.exists() for f in files)


def test_locks_that_cannot_be_attributed_are_left_to_snakemake(tmp_path):
    lock_dir = tmp_path / "locks"
    files = make_lock(lock_dir)
    # no owner record at all (a run killed before it recorded itself, or with --no-hooks)
    assert locks.release_stale(lock_dir) is None
    # an owner on another host cannot be checked
    owners = lock_dir / locks.OWNERS
    owners.mkdir()
    other = {"host": "some-other-host", "pid": dead_pid(), "start_time": 1.0, "started": "x", "command": "snakemake"}
    (owners / "some-other-host-1.json").write_text(json.dumps(other))
    for f in files:
        age(f, 1)
    assert locks.release_stale(lock_dir) is None
    # an unreadable record
    (owners / "some-other-host-1.json").write_text("{not json")
    assert locks.release_stale(lock_dir) is None
    assert all(f.exists() for f in files)


def test_a_lock_newer_than_every_record_is_kept(tmp_path):
    """A run that locked after the dead owner recorded itself may not have recorded itself yet."""
    lock_dir = tmp_path / "locks"
    files = make_lock(lock_dir)
    pid = dead_pid()
    record = lock_dir / locks.OWNERS / f"{socket.gethostname()}-{pid}.json"
    record.parent.mkdir()
    record.write_text(
        json.dumps(
            {"host": socket.gethostname(), "pid": pid, "start_time": 1.0, "started": "x", "command": "snakemake"}
        )
    )
    age(record, 5)
    assert locks.release_stale(lock_dir) is None
    assert all(f.exists() for f in files)
    age(record, -10)  # the record is now newer than the lock files
    assert locks.release_stale(lock_dir) is not None
