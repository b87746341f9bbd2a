"""Data-parallel pretraining: `accelerate launch --multi_gpu --num_processes 2` runs the pretrain stage as
real DDP on the CPU cores (gloo: the stage asks the Trainer for the CPU, so accelerate sets up
MULTI_CPU; `accelerate launch --cpu --num_processes 2` would start ONE process, accelerate 1.15 needs
mpirun for that, and the stage refuses it: pretrain.processes=2 but 1 process), with tiny
random-weight models (dropout off: each process draws its own dropout masks, so only a dropout-free
run can equal a one-process run) and real Swahili text.

1. Two processes with batch b each equal one process with batch 2b: the same samples and masks per
   step (masks are seeded per sample), the loss is the mean over the step's predicted tokens of all
   processes, DDP averages the gradients. Loss curves and final weights agree to TOLERANCE (float32
   round-off of the all-reduce and of the split matrix products, carried through AdamW).
2. A two-process run killed (SIGKILL of the process group) after a checkpoint and started again
   equals the uninterrupted two-process run.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from vocabtransfer.train import parallel
from vocabtransfer.pipeline.stage_spec import launch_prefix
from vocabtransfer.train.checkpoints import complete_checkpoints
from vocabtransfer.errors import VocabTransferError

from helpers import (
    assert_same_run as same_run,
    bpe_tokenizer,
    finish,
    killed,
    launch,
    pretrain_outputs,
    pretrain_project,
    run_pretrain,
    tiny_model,
    wordpiece_tokenizer,
)

pytestmark = pytest.mark.slow
# fp32: the equivalences below are exact in fp32 (bf16 runs against fp32: tests/stage/test_precision.py)
STEPS = {"steps": 12, "eval_every": 4, "save_every": 4, "log_every": 2, "learning_rate": 0.003, "precision": "fp32"}


@pytest.fixture(scope="module")
def tokenizers():
    return {"masked": wordpiece_tokenizer("sw", vocab_size=250), "causal": bpe_tokenizer("sw", vocab_size=280)}


def weights(root: Path, kind: str) -> dict:
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    auto = AutoModelForMaskedLM if kind == "masked" else AutoModelForCausalLM
    return auto.from_pretrained(str(pretrain_outputs(root, objective="selfish")[0] / "model")).state_dict()


def assert_same_run(a: Path, b: Path, kind: str) -> None:
    ma = same_run(
        a,
        b,
        "selfish",
        weights(a, kind),
        weights(b, kind),
        ("train_loss", "valid_loss", "learning_rate"),
        exact=("step", "tokens_seen"),
    )
    assert not any(math.isnan(v) for v in ma.column("valid_loss").to_pylist()[-1:])


@pytest.fixture(scope="module")
def ddp_runs(tmp_path_factory, tokenizers):
    """An uninterrupted two-process run (batch 4 per process) per kind, launched side by side."""
    roots, procs = {}, {}
    for kind in ("masked", "causal"):
        root = tmp_path_factory.mktemp(f"ddp_{kind}")
        pretrain_project(
            root, tiny_model(kind, len(tokenizers[kind])), tokenizers[kind], batch_size=4, processes=2, **STEPS
        )
        roots[kind], procs[kind] = root, launch(root, 2)
    for kind in procs:
        log = finish(procs[kind])
        assert "2 process(es)" in log
    return roots


@pytest.mark.parametrize("kind", ["masked", "causal"])
def test_ddp_two_processes_equal_one_process_with_twice_the_batch(
    kind, ddp_runs, tokenizers, tmp_path, monkeypatch, one_thread
):
    monkeypatch.chdir(tmp_path)
    params = pretrain_project(
        tmp_path, tiny_model(kind, len(tokenizers[kind])), tokenizers[kind], batch_size=8, **STEPS
    )
    run_pretrain(params, objective="selfish")
    assert pretrain_outputs(ddp_runs[kind], objective="selfish")[2]["processes"] == 2
    assert pretrain_outputs(tmp_path, objective="selfish")[2]["processes"] == 1
    assert_same_run(ddp_runs[kind], tmp_path, kind)


def test_ddp_killed_after_a_checkpoint_and_resumed_equals_uninterrupted(ddp_runs, tokenizers, tmp_path):
    kind = "masked"
    pretrain_project(
        tmp_path,
        tiny_model(kind, len(tokenizers[kind])),
        tokenizers[kind],
        batch_size=4,
        processes=2,
        keep_checkpoints=True,
        **STEPS,
    )
    killed(launch(tmp_path, 2, kill_after=4))
    ckpt = tmp_path / "checkpoints/sw/pretrain/focus/selfish/pseed1"
    killed_at = max(s for s, _ in complete_checkpoints(ckpt))
    assert killed_at == 4 and not (tmp_path / "results/sw/pretrain/focus/selfish").exists()
    finish(launch(tmp_path, 2))
    stats = pretrain_outputs(tmp_path, objective="selfish")[2]
    assert stats["resumed_from_step"] is not None and stats["resumed_from_step"] >= killed_at
    assert_same_run(ddp_runs[kind], tmp_path, kind)


def test_processes_beyond_the_devices_or_the_launch_are_errors():
    with pytest.raises(VocabTransferError, match=r"^pretrain.processes=4096: only \d+ CPU cores? present") as err:
        parallel.check_processes(4096, "cpu", 1)
    assert "\n" not in str(err.value)
    with pytest.raises(
        VocabTransferError,
        match=r"^pretrain.processes=2 but this job runs as 1 process.*"
        r"accelerate launch --multi_gpu --num_processes 2",
    ):
        parallel.check_processes(2, "cpu", 1)
    parallel.check_processes(1, "cpu", 1)


def test_launch_prefix_is_what_the_tests_launch():
    assert launch_prefix(1) == "vocabtransfer"
    prefix = " ".join(launch_prefix(2).split())
    assert prefix.startswith("accelerate launch --multi_gpu --num_processes 2 ")
    assert prefix.endswith(" -m vocabtransfer")
    assert "--main_process_port 0" in prefix and "--cpu" not in prefix
