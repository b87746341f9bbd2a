"""A local run killed hard (kill -9 of its process group) in the middle of the fastText job
finishes with the same command: Snakemake through the default workflow profile
(`rerun-incomplete`) and vocabtransfer.pipeline.locks (the killed run's lock), DVC by itself. Only
the killed job reruns, and the artefacts equal those of an uninterrupted run byte for byte: the
session's shared workflow run (tests/conftest.py `workflow_run`, sw on tests/workflow/params.yaml),
whose bytes up to fastText were recorded when it finished."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from conftest import BIN, WORKFLOW_GROUP, WORKFLOW_UPSTREAM
from helpers import run_command, setup_workdir, snakemake_jobs, digest

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(WORKFLOW_GROUP)]
TARGET = "results/sw/fasttext/embeddings.safetensors"
FASTTEXT = ["results/sw/fasttext/model.bin", "results/sw/fasttext/embeddings.safetensors"]
# complete before the fastText job starts: must be neither rewritten nor changed by the rerun
UPSTREAM = [path for path in WORKFLOW_UPSTREAM if path not in FASTTEXT]
PROFILE_NOTICE = "Using workflow specific profile profiles/default for setting default command line arguments."


@pytest.fixture(scope="module")
def params(workflow_run) -> dict:
    assert workflow_run.params["languages"] == ["sw"]
    return workflow_run.params


@pytest.fixture(scope="module")
def reference(workflow_run) -> dict[str, str]:
    """The uninterrupted run's digests of UPSTREAM + FASTTEXT."""
    assert set(UPSTREAM + FASTTEXT) <= set(workflow_run.digests)
    return workflow_run.digests


def kill_when_fasttext_saved(cmd: list[str], work: Path, env: dict) -> int:
    """Start `cmd` in its own process group and kill -9 the group as soon as the fastText job
    has saved model.bin (and is still computing the token vectors). Returns the killed pid."""
    with open(work / "killed.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    model = work / "results/sw/fasttext/model.bin"
    deadline = time.monotonic() + 600
    while not model.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert model.exists(), f"the fastText job never saved its model:\n{(work / 'killed.log').read_text()[-3000:]}"
    return proc.pid


def mtimes(work: Path) -> dict[str, int]:
    return {path: (work / path).stat().st_mtime_ns for path in UPSTREAM}


def test_default_profile_applies_to_a_plain_run_and_slurm_profile_replaces_it(tmp_path, environment, params):
    setup_workdir(tmp_path, params, environment)
    snakemake = [str(BIN / "snakemake"), "-n", "--quiet", "host", "--forceall", TARGET]  # --quiet: list each job
    out = run_command(snakemake, tmp_path, environment)
    assert PROFILE_NOTICE in out
    # printshellcmds: true in the profile
    assert 'Shell command: vocabtransfer fasttext --lang sw --params "$VOCABTRANSFER_PARAMS"' in out
    assert snakemake_jobs(out) == {"corpus": 1, "source_model": 1, "tokenizer": 1, "pretokenize": 1, "fasttext": 1}
    without = run_command(snakemake + ["--workflow-profile", "none"], tmp_path, environment)
    assert "workflow specific profile" not in without and "Shell command:" not in without
    # the SLURM profile is used instead of (not together with) the default one
    slurm = run_command(snakemake + ["--workflow-profile", "workflow/profiles/slurm"], tmp_path, environment)
    notices = re.findall(r"^Using .*profile.*$", slurm, re.M)
    assert notices == [
        "Using workflow specific profile workflow/profiles/slurm for setting default command line arguments."
    ], notices
    # a dry run takes no lock and records no owner
    assert not (tmp_path / ".snakemake/locks/owners").exists()


def test_snakemake_killed_mid_job_finishes_with_the_same_command(reference, tmp_path, environment, params):
    setup_workdir(tmp_path, params, environment)
    cmd = [str(BIN / "snakemake"), "--cores", "2", TARGET]
    pid = kill_when_fasttext_saved(cmd, tmp_path, environment)
    # what the kill leaves: an unfinished job (model.bin marked incomplete), the lock, its owner
    assert list((tmp_path / ".snakemake/incomplete").iterdir())
    assert sorted(p.name for p in (tmp_path / ".snakemake/locks").glob("*.lock")) == ["0.input.lock", "0.output.lock"]
    assert [p.name for p in (tmp_path / ".snakemake/locks/owners").iterdir()] == [f"{socket.gethostname()}-{pid}.json"]
    before = mtimes(tmp_path)

    out = run_command(cmd, tmp_path, environment)
    assert PROFILE_NOTICE in out
    released = [line for line in out.splitlines() if line.startswith("Released the stale Snakemake lock")]
    assert len(released) == 1 and f"pid {pid} " in released[0], out[-3000:]
    assert "IncompleteFilesException" not in out and "LockException" not in out
    assert snakemake_jobs(out) == {"fasttext": 1}, out[-3000:]
    assert mtimes(tmp_path) == before
    for path in UPSTREAM + FASTTEXT:
        assert digest(tmp_path / path) == reference[path], path
    assert not (tmp_path / ".snakemake/locks").exists()
    # and the study is complete: nothing left to do
    assert snakemake_jobs(run_command([str(BIN / "snakemake"), "-n", TARGET], tmp_path, environment)) == {}


def test_dvc_repro_killed_mid_stage_finishes_with_the_same_command(reference, tmp_path, environment, params):
    setup_workdir(tmp_path, params, environment)
    cmd = [str(BIN / "dvc"), "repro", "fasttext@sw"]
    pid = kill_when_fasttext_saved(cmd, tmp_path, environment)
    # DVC had not recorded the stage, and its rwlock still names the killed process
    assert "fasttext@sw" not in (tmp_path / "dvc.lock").read_text()
    assert f'"pid": {pid}' in (tmp_path / ".dvc/tmp/rwlock").read_text()
    before = mtimes(tmp_path)

    out = run_command(cmd, tmp_path, environment)
    for stage in ("corpus@sw", "tokenizer@sw", "pretokenize@sw"):
        assert f"Stage '{stage}' didn't change, skipping" in out
    assert re.findall(r"Running stage '([^']+)'", out) == ["fasttext@sw"]
    # DVC drops the dead process from its rwlock by itself, with a warning per path
    assert f"with (Pid {pid}), in RWLock-file" in out and "had been killed. Auto removed it from the lock file." in out
    assert mtimes(tmp_path) == before
    for path in UPSTREAM + FASTTEXT:
        assert digest(tmp_path / path) == reference[path], path
    assert "up to date" in run_command([str(BIN / "dvc"), "status", "fasttext@sw"], tmp_path, environment).lower()
