"""A data file whose modification time changes but whose bytes do not (a data folder copied again, a
checkout restored) reruns nothing under the project's Snakemake profiles: they record the checksum of
every input up to 1 GB (`max-checksum-file-size`), above Snakemake's 1 MB default, which a real corpus
exceeds. An input whose bytes change still reruns its job."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from conftest import BIN, REPO

SNAKEFILE = """\
rule all:
    input: "out.txt"
rule copy:
    input: "corpus.txt"
    output: "out.txt"
    shell: "cp {input} {output}"
"""


def dry_run(work, profile) -> str:
    out = subprocess.run(
        [str(BIN / "snakemake"), "-n", "--cores", "1", "--workflow-profile", str(profile)],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout + out.stderr


@pytest.mark.parametrize("profile", ["default", "slurm"])
def test_a_touched_corpus_with_the_same_bytes_reruns_nothing(tmp_path, profile):
    config = REPO / "workflow" / "profiles" / profile / "config.yaml"
    local = tmp_path / "profile"  # the profile's checksum setting, run locally (no SLURM executor here)
    local.mkdir()
    size = re.search(r"^max-checksum-file-size: (\d+)$", config.read_text(encoding="utf-8"), re.M)
    assert size and int(size.group(1)) >= 10**9, f"{config}: max-checksum-file-size"
    (local / "config.yaml").write_text(f"max-checksum-file-size: {size.group(1)}\nprintshellcmds: true\n")
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(b"jambo dunia\n" * 250_000)  # 3 MB: above Snakemake's default checksum limit
    subprocess.run(
        [str(BIN / "snakemake"), "--cores", "1", "--workflow-profile", str(local)],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        timeout=300,
    )
    later = os.stat(tmp_path / "out.txt").st_mtime + 60
    os.utime(corpus, (later, later))  # newer than the output, the same bytes
    assert "Nothing to be done" in dry_run(tmp_path, local)
    # without the setting (Snakemake's default), the same touch reruns the job: the check can fail
    assert "Updated input files: corpus.txt" in dry_run(tmp_path, "none")
    corpus.write_bytes(b"habari dunia\n" * 250_000)  # new bytes: the job reruns
    os.utime(corpus, (later, later))
    assert "Updated input files: corpus.txt" in dry_run(tmp_path, local)
