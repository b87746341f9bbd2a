"""Every broken overlay of tests/overlays/broken.yaml, laid over params.yaml as a user would, is refused before any
job, the same way by `vocabtransfer validate --params params.yaml X` and by `snakemake -n --configfile X`: one
`error:` line per problem (the file, the key, the cause and the fix), no traceback, and nothing planned.

The matrix is data, kept apart from this code: a case is added there, not here."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import BIN, REPO

CASES = yaml.safe_load((REPO / "tests/overlays/broken.yaml").read_text(encoding="utf-8"))


def _errors(stderr: str, overlay: Path) -> list[str]:
    """The `error:` lines, with the overlay's path (absolute, or relative as Snakemake names it) as OVERLAY."""
    relative = os.path.relpath(overlay, REPO)
    return [
        line.replace(relative, "OVERLAY").replace(str(overlay), "OVERLAY")
        for line in stderr.splitlines()
        if line.startswith("error:")
    ]


@pytest.fixture
def env(shared_data):
    out = {**os.environ, "VOCABTRANSFER_DATA": str(shared_data), "PATH": f"{BIN}:{os.environ['PATH']}"}
    out.pop("HF_HUB_OFFLINE", None)  # set only by the cases about it: planning reads no model file
    return out


def test_the_matrix_covers_what_the_issue_found():
    """The cases found by trying a new user's mistakes: an unknown harness task, a teacher objective on a masked
    source, a hub source kept out by HF_HUB_OFFLINE, a missing corpus, a model no stage produces, a YAML syntax
    error, QA trained and tested on one file, a requested method's missing data, a baseline not pretrained; every
    case names what to fix."""
    names = " | ".join(case["name"] for case in CASES)
    for found in (
        "unknown lm_eval task",
        "distill on a masked source",
        "HF_HUB_OFFLINE",
        "missing corpus file",
        "eval.models names no model",
        "YAML syntax error",
        "trained and tested on the same file",
        "WECHSEL dictionary typo",
        "baseline that is not pretrained",
    ):
        assert found in names
    assert len(CASES) >= 25 and all(case["expect"] and case["fix"] for case in CASES)


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_a_broken_overlay_is_refused_before_any_job_alike_by_validate_and_a_dry_run(
    case, env, tmp_path, monkeypatch, capsys
):
    from vocabtransfer.app import cli

    overlay = tmp_path / "my.yaml"
    overlay.write_text(case["text"] if "text" in case else yaml.safe_dump(case["overlay"]), encoding="utf-8")
    env = {**env, **case.get("env", {})}
    monkeypatch.chdir(REPO)  # `vocabtransfer validate` in-process (the same main() as the command), then the dry run
    for name in ("VOCABTRANSFER_DATA", "HF_HUB_OFFLINE"):
        monkeypatch.setenv(name, env[name]) if name in env else monkeypatch.delenv(name, raising=False)
    code = cli.main(["validate", "--params", "params.yaml", str(overlay)])
    validate = capsys.readouterr()
    lines = _errors(validate.err, overlay)
    assert code == 1 and "Traceback" not in validate.err, validate.err[-2000:]
    assert len(lines) == case.get("lines", 1), lines
    assert "valid:" not in validate.out
    said = " ".join(lines)
    for expected in case["expect"]:
        assert expected in said, (expected, lines)
    assert case["fix"] in said, (case["fix"], lines)
    assert all(line.startswith(("error: params.yaml + OVERLAY: ", "error: OVERLAY:")) for line in lines), lines

    dry = subprocess.run(
        [str(BIN / "snakemake"), "-n", "--configfile", str(overlay)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert dry.returncode == 1 and "Traceback" not in dry.stderr, dry.stderr[-2000:]
    assert "Job stats" not in dry.stdout  # nothing planned
    if "snakemake" in case:  # Snakemake reads a --configfile itself before the workflow's code runs
        assert case["snakemake"] in dry.stdout + dry.stderr, dry.stderr[-2000:]
    else:
        assert _errors(dry.stderr, overlay) == lines, dry.stderr[-2000:]
