"""vocabtransfer works from a wheel (a non-editable install): what it reads at run time is package data."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest

from conftest import REPO, SHARED_DATA

pytestmark = pytest.mark.slow


def test_validate_works_from_an_installed_wheel(tmp_path):
    python = sys.executable
    # build the wheel from a copy, so the checkout gets no build/ directory
    src = tmp_path / "src-copy"
    # the checkout's own directories go by name at its root only: src/vocabtransfer/data is a package, /data a link
    top = {".git", ".venv", "results", "logs", ".snakemake", "data", "build"}
    anywhere = shutil.ignore_patterns("*.egg-info", "__pycache__")
    shutil.copytree(
        REPO, src, ignore=lambda d, names: set(anywhere(d, names)) | (top & set(names) if d == str(REPO) else set())
    )
    subprocess.run(
        [
            python,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path / "dist"),
            str(src),
        ],
        check=True,
        capture_output=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    wheel = next((tmp_path / "dist").glob("vocabtransfer-*.whl"))
    # every module of the package is in the wheel (a subpackage left out fails only where it is imported)
    modules = {str(f.relative_to(REPO / "src")) for f in (REPO / "src" / "vocabtransfer").rglob("*.py")}
    assert modules <= set(zipfile.ZipFile(wheel).namelist()), modules - set(zipfile.ZipFile(wheel).namelist())
    # a fresh venv that sees the pinned dependencies of this one but not its vocabtransfer
    venv = tmp_path / "venv"
    subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (tmp_path / "venv" / purelib.split(str(venv) + "/", 1)[1] / "deps.pth").write_text(sysconfig.get_paths()["purelib"])
    # --ignore-installed: the dependencies' directory holds the checkout's editable install; never touch it
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run(
        [
            python,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--ignore-installed",
            str(wheel),
        ],
        check=True,
        capture_output=True,
        env=clean,
    )
    run_dir = tmp_path / "elsewhere"
    run_dir.mkdir()
    shutil.copy(REPO / "params.yaml", run_dir)
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "HF_HUB_OFFLINE": "1",
        "VOCABTRANSFER_DATA": str(SHARED_DATA),
    }
    proc = subprocess.run(
        [str(venv / "bin" / "vocabtransfer"), "validate", "--print", "--params", "params.yaml"],
        cwd=run_dir,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert "vocab_size: 16000" in proc.stdout and proc.stdout.splitlines()[-1].startswith("valid: params.yaml: ")
    where = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "from vocabtransfer.pipeline.config import SCHEMA_PATH; print(SCHEMA_PATH)",
        ],
        cwd=run_dir,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert where.startswith(str(venv))  # the installed copy, not the checkout
