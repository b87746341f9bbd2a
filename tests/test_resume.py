"""A local run killed hard (kill -9 of its process group) in the middle of the fastText job
finishes with the same command: Snakemake through the default workflow profile
(`rerun-incomplete`) and vocabtransfer.pipeline.locks (the killed run's lock), DVC by itself. Only
the killed job reruns, and the artefacts equal those of an uninterrupted run byte for byte.
sw only, up to fastText, on the small end-to-end config of tests/workflow/params.yaml."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from conftest import BIN, REPO
from helpers import digest, run_command, setup_workdir, snakemake_jobs

pytestmark = pytest.mark.slow
TARGET = "results/sw/fasttext/embeddings.safetensors"
# complete before the fastText job starts: must be neither rewritten nor changed by the rerun
UPSTREAM = [
    "results/sw/corpus/train.parquet",
    "results/sw/corpus/valid.parquet",
    "results/sw/tokenizer/tokenizer.json",
    "results/sw/pretokenized/train/ids.npy",
    "results/sw/pretokenized/train/offsets.npy",
    "results/sw/pretokenized/train/meta.json",
    "results/sw/pretokenized/valid/ids.npy",
    "results/sw/pretokenized/valid/offsets.npy",
    "results/sw/pretokenized/valid/meta.json",
    "results/sw/pretokenized/train.tokens.txt",
]
FASTTEXT = ["results/sw/fasttext/model.bin", "results/sw/fasttext/embeddings.safetensors"]
PROFILE_NOTICE = "Using workflow specific profile profiles/default for setting default command line arguments."


@pytest.fixture(scope="module")
def params() -> dict:
    from vocabtransfer.pipeline.config import merge_overlay, read_yaml

    merged = merge_overlay(read_yaml(REPO / "params.yaml"), read_yaml(REPO / "tests" / "workflow" / "params.yaml"))
    return {**merged, "languages": ["sw"]}


@pytest.fixture(scope="module")
def reference(tmp_path_factory, environment, params) -> Path:
    """An uninterrupted run."""
    work = tmp_path_factory.mktemp("uninterrupted")
    setup_workdir(work, params, environment)
    run_command([str(BIN / "snakemake"), "--cores", "2", TARGET], work, environment)
    return work


def kill_when_fasttext_saved(cmd: list[str], work: Path, env: dict) -> int:
    """Start `cmd` in its own process group and kill -9 the group as soon as the fastText job
    has saved model.bin (and is still computing the token vectors). Returns the killed pid."""
    with open(work / "killed.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
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


def test_default_profile_applies_to_a_plain_run_and_slurm_profile_replaces_it(reference, environment):
    snakemake = [str(BIN / "snakemake"), "-n", "--forceall", TARGET]
    out = run_command(snakemake, reference, environment)
    assert PROFILE_NOTICE in out
    # printshellcmds: true in the profile
    assert "Shell command: vocabtransfer fasttext --lang sw --params \"$VOCABTRANSFER_PARAMS\"" in out
    assert snakemake_jobs(out) == {"corpus": 1, "source_model": 1, "tokenizer": 1, "pretokenize": 1, "fasttext": 1}
    without = run_command(snakemake + ["--workflow-profile", "none"], reference, environment)
    assert "workflow specific profile" not in without and "Shell command:" not in without
    # the SLURM profile is used instead of (not together with) the default one
    slurm = run_command(snakemake + ["--workflow-profile", "workflow/profiles/slurm"], reference, environment)
    notices = re.findall(r"^Using .*profile.*$", slurm, re.M)
    assert notices == ["Using workflow specific profile workflow/profiles/slurm for setting default command "
                       "line arguments."], notices
    # a dry run takes no lock and records no owner
    assert not (reference / ".snakemake/locks/owners").exists()


def test_snakemake_killed_mid_job_finishes_with_the_same_command(reference, tmp_path, environment, params):
    setup_workdir(tmp_path, params, environment)
    cmd = [str(BIN / "snakemake"), "--cores", "2", TARGET]
    pid = kill_when_fasttext_saved(cmd, tmp_path, environment)
    # what the kill leaves: an unfinished job (model.bin marked incomplete), the lock, its owner
    assert list((tmp_path / ".snakemake/incomplete").iterdir())
    assert sorted(p.name for p in (tmp_path / ".snakemake/locks").glob("*.lock")) == ["0.input.lock",
                                                                                      "0.output.lock"]
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
        assert digest(tmp_path / path) == digest(reference / path), path
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
        assert digest(tmp_path / path) == digest(reference / path), path
    assert "up to date" in run_command([str(BIN / "dvc"), "status", "fasttext@sw"], tmp_path, environment).lower()
