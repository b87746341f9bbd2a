"""The rules generated from the stage table schedule exactly the jobs of the table, under Snakemake and
in dvc.yaml, and for the default params exactly the jobs the hand-written rules scheduled before
(tests/data/jobs_before_generated_rules.txt: `snakemake -n --forceall` of a6306cc, before pretraining
seeds put `pseed1` into the paths, the frequency analysis wrote its per-block and bits-per-byte tables
and the tasks' floors became jobs of their own)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO

BIN = Path(sys.executable).parent
BEFORE = REPO / "tests" / "data" / "jobs_before_generated_rules.txt"
# written since by token_frequency_loss, beside the table they detail
NEW_OUTPUTS = ("token_frequency_blocks.parquet", "bits_per_byte.parquet")
NEW_STAGES = ("floor", "source_model")  # stages added since: floor one job per language and task, source_model one


def snakemake_jobs(shared_data: Path, *args: str) -> set[str]:
    """`<rule> <sorted outputs>` of every job `snakemake -n --forceall` schedules (the `all` rule aside)."""
    env = {**os.environ, "VOCABTRANSFER_DATA": str(shared_data), "PATH": f"{BIN}:{os.environ['PATH']}"}
    proc = subprocess.run([str(BIN / "snakemake"), "-n", "--forceall", "--cores", "2", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs, rule = set(), None
    for line in proc.stdout.splitlines():
        if m := re.match(r"(?:local)?rule (\w+):", line):
            rule = m.group(1)
        elif (m := re.match(r"    output: (.*)", line)) and rule:
            jobs.add(f"{rule} {' '.join(sorted(m.group(1).split(', ')))}")
    return jobs


def table_jobs(params: dict) -> set[str]:
    """The same, from the stage table: every job `plan.jobs` gives, its outputs filled in."""
    from vocabtransfer.pipeline import paths as P
    from vocabtransfer.pipeline.plan import jobs
    from vocabtransfer.pipeline.stages import STAGES

    out = set()
    for stage in STAGES.values():
        for lang in params["languages"] if "lang" in stage.wildcards else [None]:
            for wc in jobs(params, stage, lang):
                out.add(f"{stage.name} {' '.join(sorted(P.fill(t, **wc) for t in stage.outputs.values()))}")
    return out


def dvc_jobs(params: dict) -> set[str]:
    """The same, from the generated dvc.yaml: matrix and foreach stages expanded per language."""
    from vocabtransfer.pipeline import dvcgen
    from vocabtransfer.pipeline.stages import STAGES

    out = set()
    for name, entry in yaml.safe_load(dvcgen.generate(params))["stages"].items():
        stage = max((s for s in STAGES if name == s or name.startswith(s + "_")), key=len)
        body = entry.get("do", entry)
        paths = body["outs"] + [next(iter(m)) for m in body.get("metrics", [])]
        langs = (entry["matrix"]["lang"] if "matrix" in entry else list(entry["foreach"]) if "foreach" in entry
                 else [None])
        if langs == "${languages}":
            langs = params["languages"]
        for lang in langs:
            filled = [p.replace("${item.lang}", lang) if lang else p for p in paths]
            out.add(f"{stage} {' '.join(sorted(filled))}")
    return out


def params_with(*overlays: str) -> dict:
    from vocabtransfer.pipeline.config import merge_overlay, read_yaml, validate_params

    params = read_yaml(REPO / "params.yaml")
    for overlay in overlays:
        params = merge_overlay(params, read_yaml(REPO / overlay))
    return validate_params(params)


@pytest.mark.parametrize("overlay", [None, "tests/workflow/params.yaml", "config/study.yaml", "config/gemma.yaml"])
def test_snakemake_and_dvc_yaml_schedule_exactly_the_stage_tables_jobs(shared_data, monkeypatch, overlay):
    monkeypatch.setenv("VOCABTRANSFER_DATA", str(shared_data))
    params = params_with(*([overlay] if overlay else []))
    expected = table_jobs(params)
    assert len(expected) > 50
    assert snakemake_jobs(shared_data, *(["--configfile", overlay] if overlay else [])) == expected
    assert dvc_jobs(params) == expected


def test_the_default_jobs_are_those_of_the_hand_written_rules(shared_data):
    before = set(BEFORE.read_text().splitlines())
    now = snakemake_jobs(shared_data)
    unchanged = set()
    assert {job for job in now if job.split(" ")[0] in NEW_STAGES} == {
        f"floor results/{lang}/eval/{task}/floor.json" for lang in ("sw", "de") for task in ("nli", "qa", "ner")} | {
        "source_model results/source/base results/source/base_stats.json"}
    for job in (job for job in now if job.split(" ")[0] not in NEW_STAGES):
        paths = [p for p in job.split(" ")[1:] if not p.endswith(NEW_OUTPUTS)]
        unchanged.add(" ".join([job.split(" ")[0]] + sorted(re.sub(r"(/|-)pseed1\b", "", p) for p in paths)))
    assert len(before) == 102 and unchanged == before
