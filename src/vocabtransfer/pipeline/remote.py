"""`vocabtransfer remote <dir or URL>` (`make remote REMOTE=…`): make a DVC remote the default one,
so that `dvc push` shares a run's artefacts and a colleague's `dvc pull` fetches them.

1. the checkout must be a git repository; DVC is initialised there if it is not yet (`dvc init`);
2. a local directory must exist and be writable; a URL's scheme must be one the installed DVC can
   reach (s3, gs, azure, ssh, http(s), … need the matching extra: `pip install "dvc[s3]"`);
3. `dvc remote add --default --force <name> <url>` writes it to .dvc/config (commit that file, so
   that everyone who clones gets the same default remote).

Each check fails with one line naming the remote and what to do.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlparse

from vocabtransfer.errors import VocabTransferError

# URL scheme -> the DVC plugin package that reaches it, and the extra that installs it
SCHEMES = {
    "s3": ("dvc_s3", "dvc[s3]"),
    "gs": ("dvc_gs", "dvc[gs]"),
    "gcs": ("dvc_gs", "dvc[gs]"),
    "azure": ("dvc_azure", "dvc[azure]"),
    "ssh": ("dvc_ssh", "dvc[ssh]"),
    "hdfs": ("dvc_hdfs", "dvc[hdfs]"),
    "webdav": ("dvc_webdav", "dvc[webdav]"),
    "webdavs": ("dvc_webdav", "dvc[webdav]"),
    "http": (None, "dvc"),
    "https": (None, "dvc"),
}


def _dvc() -> str:
    found = shutil.which("dvc")
    if not found:
        raise VocabTransferError("dvc is not on PATH; run `make venv` (or `source .venv/bin/activate`) first")
    return found


def check_url(url: str) -> str:
    """The remote as DVC will store it: an absolute directory, or a URL whose scheme DVC can reach."""
    if not url:
        raise VocabTransferError(
            "remote: no directory or URL given; use e.g. `make remote REMOTE=/shared/dvc-store` "
            "or `make remote REMOTE=s3://bucket/vocabtransfer`"
        )
    scheme = urlparse(url).scheme
    if scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt"):
        path = Path(urlparse(url).path if scheme == "file" else url).expanduser().resolve()
        if not path.is_dir():
            raise VocabTransferError(f"remote {url}: {path} is not a directory; create it (mkdir -p) or give a URL")
        if not os.access(path, os.W_OK):
            raise VocabTransferError(f"remote {url}: {path} is not writable; choose a directory you can write to")
        return str(path)
    if scheme not in SCHEMES:
        raise VocabTransferError(
            f"remote {url}: DVC has no remote type {scheme!r}; use a directory or one of {', '.join(sorted(SCHEMES))}"
        )
    module, extra = SCHEMES[scheme]
    if module and importlib.util.find_spec(module) is None:
        raise VocabTransferError(
            f'remote {url}: {scheme} needs the DVC plugin {module}; `pip install "{extra}"` in this environment first'
        )
    return url


def add_remote(url: str, name: str = "origin", root: Path | str = ".") -> str:
    """Check the remote, initialise DVC when needed and make the remote the default; returns it."""
    root = Path(root)
    target = check_url(url)
    if not (root / ".git").exists():
        raise VocabTransferError(
            f"{root.resolve()}: not a git checkout; DVC remotes are set up in the repository (clone it first)"
        )
    dvc = _dvc()
    if not (root / ".dvc").is_dir():
        subprocess.run([dvc, "init", "-q"], cwd=root, check=True)
    done = subprocess.run(
        [dvc, "remote", "add", "--default", "--force", name, target], cwd=root, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise VocabTransferError(f"remote {url}: `dvc remote add` failed: {done.stderr.strip().splitlines()[-1]}")
    return target
