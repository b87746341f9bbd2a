"""Data-parallel pretraining (`pretrain.processes`): how a job is launched, and the checks that it was.

`launch_prefix(N)` (vocabtransfer.pipeline.stage_spec) is the command a pretrain job starts with: `vocabtransfer`
for one process, else accelerate's torchrun launcher for N processes on one node (`--multi_gpu`: DDP over N GPUs,
or over the CPU cores with gloo when the stage runs on CPU; `accelerate launch --cpu
--num_processes N` would start ONE process unless mpirun is set up; port 0: a free port, so jobs
sharing a node do not collide). `check_processes` refuses a job that asks for more processes than
devices, or that runs as another number of processes than params say.
"""

from __future__ import annotations

import os

import torch


from vocabtransfer.errors import VocabTransferError
from vocabtransfer.pipeline.stage_spec import launch_prefix


def check_processes(processes: int, device: str, world_size: int) -> None:
    """`pretrain.processes` must fit the devices present (GPUs when CUDA is used, else CPU cores) and
    be the number of processes this job was launched with."""

    gpu = device != "cpu" and torch.cuda.is_available()
    present = torch.cuda.device_count() if gpu else (os.cpu_count() or 1)
    if processes > present:
        raise VocabTransferError(
            f"pretrain.processes={processes}: only {present} {'GPU' if gpu else 'CPU core'}"
            f"{'s' if present != 1 else ''} present; lower pretrain.processes or ask the "
            f"cluster for {processes} {'GPUs' if gpu else 'cores'}"
        )
    if processes != world_size:
        raise VocabTransferError(
            f"pretrain.processes={processes} but this job runs as {world_size} process(es); "
            f"launch it as `{launch_prefix(processes)} pretrain …` (the Snakemake rule does), "
            f"or set pretrain.processes to {world_size}"
        )


def step_token_count(batches: list[dict], kind: str, accelerator, device):
    """Predicted tokens of a step's micro-batches (causal: labels shifted), summed over the processes."""

    labels = [b["labels"][:, 1:] if kind == "causal" else b["labels"] for b in batches]
    count = torch.tensor(sum(int((y != -100).sum()) for y in labels), device=device)
    return accelerator.gather(count).sum() if accelerator.num_processes > 1 else count
