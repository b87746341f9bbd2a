"""The rules generated from the stage table schedule exactly the jobs of the planner (`Stage.jobs`), under
Snakemake and in dvc.yaml, and as many jobs of each rule as the params say, counted by hand."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import BIN, REPO
from vocabtransfer.plan.params_root import Params


def snakemake_jobs(shared_data: Path, *args: str) -> set[str]:
    """`<rule> <sorted outputs>` of every job `snakemake -n -p --forceall` schedules (the `all` rule aside;
    -p: a dry run lists each job)."""
    env = {**os.environ, "VOCABTRANSFER_DATA": str(shared_data), "PATH": f"{BIN}:{os.environ['PATH']}"}
    proc = subprocess.run(
        [str(BIN / "snakemake"), "-n", "-p", "--forceall", "--cores", "2", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs, rule = set(), None
    for line in proc.stdout.splitlines():
        if m := re.match(r"(?:local)?rule (\w+):", line):
            rule = m.group(1)
        elif (m := re.match(r"    output: (.*)", line)) and rule:
            jobs.add(f"{rule} {' '.join(sorted(m.group(1).split(', ')))}")
    return jobs


def table_jobs(params: dict) -> set[str]:
    """The same, from the stage table: every job `Stage.jobs` gives, its outputs filled in."""
    from vocabtransfer.pipeline.paths import fill
    from vocabtransfer.plan.stages import STAGES

    out = set()
    for stage in STAGES.values():
        for lang in params["languages"] if "lang" in stage.wildcards else [None]:
            for wc in stage.jobs(Params(params), lang):
                out.add(f"{stage.name} {' '.join(sorted(fill(t, **wc) for t in stage.outputs.values()))}")
    return out


def dvc_jobs(params: dict) -> set[str]:
    """The same, from the generated dvc.yaml: matrix and foreach stages expanded per language."""
    from vocabtransfer.app import dvcgen
    from vocabtransfer.plan.stages import STAGES

    out = set()
    for name, entry in yaml.safe_load(dvcgen.generate(params))["stages"].items():
        stage = max((s for s in STAGES if name == s or name.startswith(s + "_")), key=len)
        body = entry.get("do", entry)
        paths = body["outs"] + [next(iter(m)) for m in body.get("metrics", [])]
        langs = (
            entry["matrix"]["lang"] if "matrix" in entry else list(entry["foreach"]) if "foreach" in entry else [None]
        )
        if langs == "${languages}":
            langs = params["languages"]
        for lang in langs:
            filled = [p.replace("${item.lang}", lang) if lang else p for p in paths]
            out.add(f"{stage} {' '.join(sorted(filled))}")
    return out


def params_with(*overlays: str) -> dict:
    from vocabtransfer.app.params import validate_params
    from vocabtransfer.pipeline.config import merge_overlay, read_yaml

    params = read_yaml(REPO / "params.yaml")
    for overlay in overlays:
        params = merge_overlay(params, read_yaml(REPO / overlay))
    return validate_params(params)


@pytest.mark.parametrize("overlay", [None, "tests/workflow/params.yaml", "config/study.yaml", "config/gemma.yaml"])
def test_snakemake_and_dvc_yaml_schedule_exactly_the_stage_tables_jobs(shared_data, monkeypatch, overlay):
    monkeypatch.setenv("VOCABTRANSFER_DATA", str(shared_data))
    params = params_with(*([overlay] if overlay else []))
    expected = table_jobs(params)
    assert len(expected) > 35
    assert snakemake_jobs(shared_data, *(["--configfile", overlay] if overlay else [])) == without_export(expected)
    assert dvc_jobs(params) == expected  # DVC has no `all`: `dvc repro` builds the export too


def test_the_distill_study_runs_focus_with_three_objectives_and_three_seeds_in_german(shared_data, monkeypatch):
    """config/gemma-distill.yaml over config/gemma.yaml: German only, focus pretrained with standard, distill
    and alm, 3 pretraining seeds, and nothing downstream; Snakemake schedules the stage table's jobs."""
    monkeypatch.setenv("VOCABTRANSFER_DATA", str(shared_data))
    overlays = ("config/gemma.yaml", "config/gemma-distill.yaml")
    params = params_with(*overlays)
    expected = table_jobs(params)
    runs = sorted(j.split("/pretrain/")[1] for j in expected if j.startswith("pretrain "))
    assert runs == [f"focus/{o}/pseed{s}" for o in ("alm", "distill", "standard") for s in (1, 2, 3)]
    assert not any(j.startswith(("finetune_eval ", "lm_eval ")) for j in expected)
    assert params["languages"] == ["de"] and params["pretrain"]["steps"] == 200
    assert snakemake_jobs(shared_data, "--configfile", *overlays) == without_export(expected)


def without_export(jobs: set[str]) -> set[str]:
    """The jobs of Snakemake's `all`: every job but the exports (results/<lang>/export, a target of its own)."""
    return {j for j in jobs if not j.startswith("export ")}


def rule_counts(shared_data: Path, *args: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for job in snakemake_jobs(shared_data, *args):
        counts[job.split(" ")[0]] = counts.get(job.split(" ")[0], 0) + 1
    return counts


@pytest.mark.parametrize("overlay", [None, "config/study.yaml"])
def test_the_number_of_jobs_of_each_rule_follows_from_the_params_by_hand(shared_data, monkeypatch, overlay):
    """Counted from the params as a reader would: one job per language for each per-language stage, one per
    language × init method, language × method × objective × seed for pretraining, language × task × model ×
    fine-tuning seed for downstream evaluation, one floor per language and enabled task (where the task has data
    for the language); an init method is
    initialised once per pretraining seed when it is pretrained and has random rows (every method but `mean`),
    once otherwise."""
    monkeypatch.setenv("VOCABTRANSFER_DATA", str(shared_data))
    params = params_with(*([overlay] if overlay else []))
    langs = len(params["languages"])
    tasks = [t for t, opts in params["eval"]["tasks"].items() if opts["enabled"]]
    runs = (
        len(params["pretrain"]["pairs"])
        if params["pretrain"]["pairs"]  # the pairs named, else every pair
        else len(params["pretrain"]["methods"]) * len(params["pretrain"]["objectives"])
    )
    pretrained = runs * params["pretrain"]["seeds"]
    # eval.models: `pretrained` is every pretrained run, `<method>-<objective>` every pretraining seed of it,
    # `source` and a name with its `-pseed<k>` one model
    # `init` the initialisation of each pretraining seed of each pretrained method (one for `mean`: no random rows)
    inits = sum(1 if m == "mean" else params["pretrain"]["seeds"] for m in params["pretrain"]["methods"])
    models = sum(
        pretrained
        if m == "pretrained"
        else inits
        if m == "init"
        else 1
        if m == "source" or "-pseed" in m
        else params["pretrain"]["seeds"]
        for m in params["eval"]["models"]
    )
    task_langs = sum(lang in params["eval"]["tasks"][t]["data"] for t in tasks for lang in params["languages"])
    wechsel = "wechsel" in params["init"]["methods"]
    snmf = any("snmf" in m for m in params["init"]["methods"])
    expected = {
        "source_model": 1,
        "source_head": 1,
        "source_fasttext": 1 if wechsel else None,
        "source_snmf": 1 if snmf else None,
        "word_fasttext": langs if wechsel else None,
        **{
            rule: langs
            for rule in (
                "corpus",
                "tokenizer",
                "overlap",
                "pretokenize",
                "fasttext",
                "init_eval",
                "token_frequency_loss",
            )
        },
        "init": langs
        * sum(
            params["pretrain"]["seeds"] if m in params["pretrain"]["methods"] and m != "mean" else 1
            for m in params["init"]["methods"]
        ),
        "pretrain": langs * pretrained,
        # pretrain.tune: one job per language × pretrained method × objective (the teacher objectives excepted)
        "pretrain_tune": langs
        * sum(1 for p in params["pretrain"]["pairs"] or [] if not p.endswith(("-distill", "-alm")))
        if params["pretrain"]["tune"]["learning_rates"]
        else None,
        "gradient_scenarios": langs * runs,  # the first pretraining seed of each method × objective
        "floor": task_langs,  # one per language and enabled task with data there
        "finetune_eval": task_langs * models * params["eval"]["seeds"],
        "report": 1,
    }
    assert rule_counts(shared_data, *(["--configfile", overlay] if overlay else [])) == {
        rule: n for rule, n in expected.items() if n is not None
    }


def test_the_demos_dry_run_is_a_plan_a_person_can_read(shared_data):
    """`snakemake -n` on the demo's params.yaml prints the jobs per stage, not a dozen lines per job (at
    most 400 lines); `-p` lists every job, each with its code as one fingerprint input, not twenty modules."""
    env = {**os.environ, "VOCABTRANSFER_DATA": str(shared_data), "PATH": f"{BIN}:{os.environ['PATH']}"}
    proc = subprocess.run(
        [str(BIN / "snakemake"), "-n", "--forceall"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = (proc.stdout + proc.stderr).splitlines()
    assert len(lines) <= 400, len(lines)
    table = dict(re.findall(r"^(\w+)\s+(\d+)\s*$", proc.stdout + proc.stderr, re.M))
    assert table["total"] == str(1 + sum(int(n) for job, n in table.items() if job not in ("total", "all")))
    assert "snakemake -n -p` lists every job" in proc.stderr


def test_explicit_targets_plan_from_a_fresh_checkout(shared_data, tmp_path):
    """`snakemake <outputs of a few jobs>` in a checkout where no job's code fingerprint was written yet: the
    jobs reached only through those targets' inputs find their fingerprints (written before the DAG is built,
    not by the input functions while Snakemake caches what the directory holds)."""
    import shutil

    for name in ("Snakefile", "params.yaml", "workflow", "config", "profiles"):
        (shutil.copytree if (REPO / name).is_dir() else shutil.copy)(REPO / name, tmp_path / name)
    env = {**os.environ, "VOCABTRANSFER_DATA": str(shared_data), "PATH": f"{BIN}:{os.environ['PATH']}"}
    targets = ["results/sw/pretrain/focus/standard/pseed3", "results/de/pretrain/random/standard/pseed1"]
    proc = subprocess.run(
        [str(BIN / "snakemake"), "-n", "--cores", "2", *targets, "--configfile", "config/study.yaml"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    table = dict(re.findall(r"^(\w+)\s+(\d+)\s*$", proc.stdout + proc.stderr, re.M))
    # the two runs' inits, and pretraining seed 1's of sw focus, which its pretrain_tune job trains at each rate
    assert table["pretrain"] == "2" and table["pretrain_tune"] == "2" and table["init"] == "3"
