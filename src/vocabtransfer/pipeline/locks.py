"""Stale Snakemake locks: a local run killed hard can be restarted with the same command.

Snakemake locks the working directory with files in `.snakemake/locks/` and deletes that
directory when a run ends. A run killed with SIGKILL (or a power loss) cannot, and every
later run stops with a LockException until `snakemake --unlock`. Snakemake itself cannot
tell a dead lock from a live one, so the workflow records who holds it:

* once a run holds the lock (the workflow's `onstart` hook, so never in a dry run), it
  writes its owner — host, pid and the process's start time — to
  `.snakemake/locks/owners/<host>-<pid>.json`; Snakemake deletes the record with the lock;
* when the workflow is loaded, before Snakemake locks, `release_stale` deletes the lock
  files only when every recorded owner is a process of this host that no longer exists
  (a pid now used by another process counts as gone, by its start time), and no lock file
  is newer than the newest record (a run that locked after it may not have recorded itself
  yet). Otherwise it leaves everything as it is, and Snakemake's own LockException and
  `--unlock` advice apply: a lock whose owner is alive, unknown or on another host is
  never released.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

if TYPE_CHECKING:
    from snakemake.workflow import Workflow  # snakemake: the workflow's, not the package's import

LOCK_DIR = Path(".snakemake") / "locks"
OWNERS = "owners"
# Snakemake's lock files: <n>.input.lock and <n>.output.lock
_LOCK_FILE = re.compile(r"\d+\.(input|output)\.lock")


def lock_files(lock_dir: Path = LOCK_DIR) -> list[Path]:
    lock_dir = Path(lock_dir)
    if not lock_dir.is_dir():
        return []
    return sorted(p for p in lock_dir.iterdir() if _LOCK_FILE.fullmatch(p.name) and p.is_file())


def _start_time(pid: int) -> float:
    return psutil.Process(pid).create_time()


def record_owner(lock_dir: Path = LOCK_DIR, pid: int | None = None) -> Path:
    """Record the process `pid` (this one by default) as the owner of the lock in `lock_dir`."""
    pid = os.getpid() if pid is None else pid
    host = socket.gethostname()
    start = _start_time(pid)
    record = {
        "host": host,
        "pid": pid,
        "start_time": start,
        "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(start)),
        "command": " ".join(psutil.Process(pid).cmdline()),
    }
    owners = Path(lock_dir) / OWNERS
    owners.mkdir(parents=True, exist_ok=True)
    path = owners / f"{host}-{pid}.json"
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def _read_owners(lock_dir: Path) -> list[tuple[Path, dict]] | None:
    """The owner records, or None when one cannot be read (then nothing is known)."""
    out = []
    for path in sorted((Path(lock_dir) / OWNERS).glob("*.json")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            int(record["pid"]), float(record["start_time"]), str(record["host"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        out.append((path, record))
    return out


def owner_alive(record: dict) -> bool:
    """Whether the recorded process still runs: same pid and same start time, not a zombie.
    A process of another host cannot be checked, so it counts as alive."""
    if record["host"] != socket.gethostname():
        return True
    try:
        proc = psutil.Process(int(record["pid"]))
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return abs(proc.create_time() - float(record["start_time"])) < 1.0
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True


def release_stale(lock_dir: Path = LOCK_DIR) -> str | None:
    """Delete the lock in `lock_dir` if every run that holds it is known to be gone.
    Returns a one-line notice when it released a lock, else None (nothing is touched)."""
    locks = lock_files(lock_dir)
    if not locks:
        return None
    owners = _read_owners(lock_dir)
    if not owners or any(owner_alive(record) for _, record in owners):
        return None
    newest_record = max(path.stat().st_mtime_ns for path, _ in owners)
    if any(lock.stat().st_mtime_ns > newest_record for lock in locks):
        return None
    for path in locks + [path for path, _ in owners]:
        path.unlink(missing_ok=True)
    runs = ", ".join(f"pid {r['pid']} started {r['started']}" for _, r in owners)
    return (
        f"Released the stale Snakemake lock in {lock_dir}: the run that held it ({runs} on "
        f"{owners[0][1]['host']}) no longer exists."
    )


def on_load(workflow: Workflow) -> None:
    """workflow/rules/common.smk calls this when Snakemake loads the workflow, before it
    locks: release a stale lock, in the main Snakemake process only (not in job processes)."""
    if workflow.remote_exec or workflow.subprocess_exec:
        return
    notice = release_stale()
    if notice:
        print(notice, file=sys.stderr)


def on_start(workflow: Workflow) -> None:
    """The workflow's `onstart` hook: Snakemake now holds the lock (never in a dry run)."""
    if workflow.execution_settings.lock and not (workflow.remote_exec or workflow.subprocess_exec):
        record_owner()
