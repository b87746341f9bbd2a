"""A job's code as one input file for Snakemake: the sha256 of every module it runs (`Stage.code`, the
entry modules and what they import), in `sha256sum` format, instead of twenty module paths.

The file is rewritten only when a module's bytes change, and its mtime is set to the newest module's,
so Snakemake's mtime trigger reruns exactly the jobs it would rerun with the modules themselves as
inputs; `sha256sum -c <file>` (from src/vocabtransfer/..) checks it by hand. dvc.yaml keeps the modules
as deps: DVC hashes a dep itself and needs it to exist before any stage runs.
"""

from __future__ import annotations

import hashlib
import os
from functools import lru_cache
from pathlib import Path

from vocabtransfer.pipeline.stage_spec import PACKAGE
from vocabtransfer.io import atomic_output

# where Snakemake's jobs find their code fingerprints (beside the merged params file)
DIRECTORY = ".snakemake/vocabtransfer/code"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def text(modules: tuple[str, ...]) -> str:
    """`<sha256>  src/vocabtransfer/<module>` per module, sorted: what the fingerprint file holds."""
    return "".join(f"{_digest(PACKAGE / m)}  src/vocabtransfer/{m}\n" for m in sorted(modules))


@lru_cache(maxsize=None)
def write(stage: str, modules: tuple[str, ...], directory: str = DIRECTORY) -> str:
    """The fingerprint file of `stage`'s job that runs `modules` (paths under src/vocabtransfer), written
    if absent or changed, with the newest module's mtime; its path, named by the stage and the set of
    modules (an init job of another method, with other modules, has its own file)."""
    names = hashlib.sha256("\n".join(sorted(modules)).encode()).hexdigest()[:10]
    path = Path(directory) / f"{stage}-{names}.sha256"
    content = text(modules)
    if not path.is_file() or path.read_text(encoding="utf-8") != content:
        with atomic_output(path) as tmp:
            tmp.write_text(content, encoding="utf-8")
    newest = max((PACKAGE / m).stat().st_mtime_ns for m in modules)
    os.utime(path, ns=(newest, newest))
    return str(path)
