"""The SLURM profile against a real SLURM (`make test-cluster`; not part of `make test`).

Needs the one-node test cluster of tests/cluster/slurm.sh (partitions `cpu` and `gpu`, one
schedulable GPU, accounting through slurmdbd). On the small test config for sw it runs

1. the workflow locally (`snakemake --cores 2`), for reference;
2. the same workflow with `--workflow-profile workflow/profiles/slurm`, cancelling (`scancel`)
   the fastText job while it runs, so that this first run fails;
3. the same command again, which must finish the study;

and checks from SLURM's accounting (`sacct`) that every job ran as a SLURM job, that the GPU
stages (Stage.gpu) went to the `gpu` partition with one GPU and the others to `cpu` without,
that the second run resubmitted only what the first left incomplete, and that the artefacts
equal the local run's byte for byte.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from conftest import PRETOKENIZED, REPO
from vocabtransfer.plan import stages

BIN = Path(sys.executable).parent
CANCELLED_RULE = "fasttext"
# the test config of tests/workflow/test_workflow.py, for sw only, with a few methods (snmf brings in the
# source_snmf GPU stage) and a short LM-head training
OVERLAY = {
    "languages": ["sw"],
    "source_head": {"steps": 60, "eval_every": 30, "train_blocks": 256, "eval_lines": 100},
    "init": {"methods": ["random", "fvt", "focus", "snmf"]},
}
# artefacts that a local run and a SLURM run must give byte for byte (both on CPU, 2 threads)
IDENTICAL = [
    "results/sw/corpus/train.parquet",
    "results/sw/corpus/valid.parquet",
    "results/sw/tokenizer/tokenizer.json",
    *(f.format(lang="sw") for f in PRETOKENIZED),
    "results/sw/fasttext/embeddings.safetensors",
    "results/sw/overlap/overlap.parquet",
    "results/source/model/model.safetensors",
    "results/source/snmf.safetensors",
] + [
    f"results/sw/init/{m}/{f}"
    for m in OVERLAY["init"]["methods"]
    for f in ("embeddings.safetensors", "model/model.safetensors")
]
SACCT_FIELDS = ["JobID", "JobName", "Comment", "Partition", "ReqTRES", "State", "Elapsed", "WorkDir"]


def merge(base: dict, overlay: dict) -> dict:
    out = dict(base)
    for key, value in overlay.items():
        out[key] = merge(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return out


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def checkout(work: Path, params: dict) -> Path:
    """A checkout-like directory whose params.yaml is the full merged test config."""
    work.mkdir(parents=True)
    shutil.copy(REPO / "Snakefile", work)
    shutil.copytree(REPO / "workflow", work / "workflow")
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return work


def slurm_command(work: Path) -> list[str]:
    """snakemake with the SLURM profile; the paper-scale job sizes shrunk to the 2-core test node."""
    profile = yaml.safe_load((work / "workflow/profiles/slurm/config.yaml").read_text())
    small = [
        f"{rule}:{res}={3000 if res == 'mem_mb' else 30}"
        for rule, resources in profile["set-resources"].items()
        for res in resources
    ]
    return [
        str(BIN / "snakemake"),
        "--workflow-profile",
        "workflow/profiles/slurm",
        "--max-threads",
        "2",
        "--default-resources",
        "mem_mb=3000",
        "runtime=30",
        "--set-resources",
        *small,
        "--slurm-init-seconds-before-status-checks",
        "5",
    ]


def sacct(work: Path, since: str) -> list[dict]:
    out = subprocess.run(
        ["sacct", "-a", "-X", "-P", "-n", "-S", since, "-o", ",".join(SACCT_FIELDS)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = [dict(zip(SACCT_FIELDS, line.split("|"))) for line in out.splitlines() if line.strip()]
    rows = [r for r in rows if Path(r["WorkDir"]).resolve() == work.resolve()]
    for r in rows:
        m = re.fullmatch(r"rule_(.+?)(?:_wildcards_(.*))?", r["Comment"])
        assert m, f"SLURM job {r['JobID']} has no snakemake rule in its comment: {r['Comment']!r}"
        r["rule"], r["wildcards"] = m.group(1), m.group(2) or ""
    return rows


def cancel_while_running(rule: str, work: Path, proc: subprocess.Popen, cancelled: list[str]) -> None:
    """scancel every attempt of `rule`'s job a few seconds after it starts running."""
    while proc.poll() is None:
        out = subprocess.run(["squeue", "-h", "-t", "RUNNING", "-o", "%i|%k|%Z"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            jobid, comment, workdir = line.split("|")
            if (
                comment.startswith(f"rule_{rule}_")
                and Path(workdir).resolve() == work.resolve()
                and jobid not in cancelled
            ):
                time.sleep(3)
                subprocess.run(["scancel", jobid], check=True)
                cancelled.append(jobid)
        time.sleep(1)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, shared_data):
    if shutil.which("sbatch") is None or subprocess.run(["scontrol", "ping"], capture_output=True).returncode:
        raise RuntimeError("no SLURM controller answers: start one with `tests/cluster/slurm.sh start`")
    env = {
        **os.environ,
        "VOCABTRANSFER_DATA": str(shared_data),
        "PATH": f"{BIN}:{os.environ['PATH']}",
        "PYTHONPATH": str(REPO / "src"),
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "VOCABTRANSFER_SLURM_PARTITION": "cpu",
        "VOCABTRANSFER_SLURM_GPU_PARTITION": "gpu",
    }
    base = yaml.safe_load((REPO / "params.yaml").read_text())
    params = merge(merge(base, yaml.safe_load((REPO / "tests/workflow/params.yaml").read_text())), OVERLAY)
    root = tmp_path_factory.mktemp("cluster")

    local = checkout(root / "local", params)
    started = time.time()
    with open(root / "local.log", "w") as log:
        done = subprocess.run(
            [str(BIN / "snakemake"), "--cores", "2"], cwd=local, env=env, stdout=log, stderr=subprocess.STDOUT
        )
    assert done.returncode == 0, (root / "local.log").read_text()[-8000:]
    local_seconds = time.time() - started

    work = checkout(root / "slurm", params)
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 5))
    started = time.time()
    with open(root / "first.log", "w") as log:
        first = subprocess.Popen(slurm_command(work), cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
        cancelled: list[str] = []
        watcher = threading.Thread(target=cancel_while_running, args=(CANCELLED_RULE, work, first, cancelled))
        watcher.start()
        first.wait()
        watcher.join()
    first_jobs = sacct(work, since)
    second = subprocess.run(slurm_command(work), cwd=work, env=env, capture_output=True, text=True)
    slurm_seconds = time.time() - started
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-8000:]
    time.sleep(2)  # accounting of the last job
    jobs = sacct(work, since)
    first_ids = {r["JobID"] for r in first_jobs}
    for r in jobs:
        r["run"] = 1 if r["JobID"] in first_ids else 2
    print_table(jobs, local_seconds, slurm_seconds)
    return {
        "local": local,
        "work": work,
        "jobs": jobs,
        "cancelled": cancelled,
        "first_rc": first.returncode,
        "first_log": (root / "first.log").read_text(),
        "params": params,
    }


def print_table(jobs: list[dict], local_seconds: float, slurm_seconds: float) -> None:
    head = ("run", "job", "stage", "wildcards", "partition", "resources asked", "state", "elapsed")
    rows = [
        (str(r["run"]), r["JobID"], r["rule"], r["wildcards"], r["Partition"], r["ReqTRES"], r["State"], r["Elapsed"])
        for r in jobs
    ]
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]

    def line(cells):
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"

    print("\n" + "\n".join([line(head), line(["-" * w for w in widths]), *map(line, rows)]))
    print(f"local run {local_seconds:.0f} s; SLURM runs (first, cancelled, and second) {slurm_seconds:.0f} s")


def expected_jobs(params: dict) -> set[tuple[str, str]]:
    """(rule, wildcards) of every job of the study params give, as the plugin names them (the
    wildcard values in the order of the output path, joined by `_`)."""
    from vocabtransfer.app.params import validate_params
    from vocabtransfer.plan.params_root import Params

    params = Params(validate_params(params))
    jobs = set()
    for stage in stages.STAGES.values():
        order = dict.fromkeys(re.findall(r"\{(\w+)\}", next(iter(stage.outputs.values()))))
        for lang in params.languages if "lang" in stage.wildcards else [None]:
            for wc in stage.jobs(params, lang):
                jobs.add((stage.name, "_".join(str(wc[k]) for k in order)))
    return jobs


def test_every_job_ran_as_a_slurm_job(runs):
    done = {(r["rule"], r["wildcards"]) for r in runs["jobs"] if r["State"] == "COMPLETED"}
    assert done == expected_jobs(runs["params"])
    assert (runs["work"] / "results/sw/init_eval.parquet").is_file() and (runs["work"] / "results/report.md").is_file()


def test_gpu_stages_ran_in_the_gpu_partition_with_one_gpu(runs):
    for r in runs["jobs"]:
        if stages.STAGES[r["rule"]].gpu:
            assert r["Partition"] == "gpu" and "gres/gpu=1" in r["ReqTRES"], r
        else:
            assert r["Partition"] == "cpu" and "gpu" not in r["ReqTRES"], r
    ran = {r["rule"] for r in runs["jobs"]}
    assert {r["rule"] for r in runs["jobs"] if r["Partition"] == "gpu"} == {n for n in ran if stages.STAGES[n].gpu}
    assert {"source_head", "init", "pretrain", "finetune_eval"} <= ran and "report" in ran


def test_cancelled_job_fails_the_run_and_the_rerun_resubmits_only_what_was_incomplete(runs):
    jobs, cancelled = runs["jobs"], runs["cancelled"]
    assert cancelled, f"no {CANCELLED_RULE} job was seen running"
    states = {r["JobID"]: r["State"] for r in jobs}
    assert all(states[j].startswith("CANCELLED") for j in cancelled), states
    assert all(r["rule"] == CANCELLED_RULE for r in jobs if r["JobID"] in cancelled)
    assert runs["first_rc"] != 0, runs["first_log"][-3000:]
    first_done = {(r["rule"], r["wildcards"]) for r in jobs if r["run"] == 1 and r["State"] == "COMPLETED"}
    second = [(r["rule"], r["wildcards"]) for r in jobs if r["run"] == 2]
    # the second run submits each job once, never one the first run completed, and the cancelled one
    assert len(second) == len(set(second)) and not first_done & set(second), (first_done, second)
    assert (CANCELLED_RULE, "sw") in second
    assert first_done | set(second) == expected_jobs(runs["params"])


def test_artefacts_equal_those_of_a_local_run(runs):
    for path in IDENTICAL:
        assert digest(runs["work"] / path) == digest(runs["local"] / path), path
    assert not list(runs["work"].glob("results/**/.*.tmp-*"))
