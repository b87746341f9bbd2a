"""The pretrain stage's params and its checkpoints (its transformers `Trainer` and callback,
`ObjectiveTrainer` and `MetricsCallback`, are in `train.objective_trainer`, which imports transformers
and is imported only where a run trains).

* `PretrainParams` (with `SelfishOptions`, `DistillOptions`): params `pretrain`, typed, as the stage
  reads them once at its entry (fields and types as in the schema, which holds the defaults).
* checkpoints: which one to resume from (`complete_checkpoints`), and the params they were written
  with (`check_resume_params`, `model_fingerprint`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.pipeline.config import NO_RERUN


@dataclass(frozen=True)
class SelfishOptions:
    margin: float


@dataclass(frozen=True)
class DistillOptions:
    temperature: float
    alpha: float
    teacher: Literal["cached", "on_the_fly"]
    chunks: Literal["exact", "unbiased"]
    bias_threshold: float


@dataclass(frozen=True)
class PretrainParams:
    """params `pretrain`: which runs (methods × objectives or pairs × seeds) and how each trains. NO_RERUN
    fields do not change a run's model or metrics; `objective` marks the options of one objective."""

    methods: tuple[str, ...] = field(metadata=NO_RERUN)
    objectives: tuple[Literal["standard", "selfish", "distill", "alm"], ...] = field(metadata=NO_RERUN)
    pairs: tuple[str, ...] | None = field(metadata=NO_RERUN)
    seeds: int = field(metadata=NO_RERUN)
    steps: int
    batch_size: int
    gradient_accumulation_steps: int
    processes: int
    seq_len: int
    learning_rate: float
    schedule: Literal["linear", "constant_with_warmup"]
    warmup_steps: int
    weight_decay: float
    max_grad_norm: float
    precision: Literal["auto", "fp32", "bf16"]
    eval_every: int
    eval_lines: int
    eval_batch_size: int
    log_every: int
    save_every: int
    keep_checkpoints: bool = field(metadata=NO_RERUN)
    selfish: SelfishOptions = field(metadata={"objective": "selfish"})
    distill: DistillOptions = field(metadata={"objective": "distill"})  # and alm's: every teacher objective
    factorized: bool
    train_primitives: bool
    embeddings_only_steps: int
    gradient_checkpointing: bool = field(metadata=NO_RERUN)
    sharding: Literal["none", "fsdp"]


# distill's metrics columns (pretrain.DISTILL_METRICS_SCHEMA): each term's gradient norm and the whole step's
DISTILL_COLUMNS = ("grad_norm_distill", "grad_norm_lm", "grad_norm_total")
ROWS_FILE = "vocabtransfer_metrics.json"  # in each checkpoint: the metrics rows up to it (also marks it complete)
PARAMS_FILE = "params.json"  # beside the checkpoints: the params leaves they were written with


# ---------------------------------------------------------------------------------------------
# Checkpoints: which one to resume from, and the params they were written with
# ---------------------------------------------------------------------------------------------

def complete_checkpoints(directory: Path) -> list[tuple[int, Path]]:
    """(step, path) of the checkpoints whose metrics rows were written (so the whole checkpoint was), by step."""
    out = []
    for path in directory.glob("checkpoint-*"):
        suffix = path.name.split("-", 1)[1]
        if suffix.isdigit() and (path / ROWS_FILE).is_file():
            out.append((int(suffix), path))
    return sorted(out)


def check_resume_params(directory: Path, expected: dict) -> None:
    stored = json.loads((directory / PARAMS_FILE).read_text(encoding="utf-8"))
    differing = sorted(k for k in set(stored) | set(expected) if stored.get(k, "<unset>") != expected.get(k, "<unset>"))
    if differing:
        raise VocabTransferError(f"{directory}: the checkpoints were written with other params ({', '.join(differing)}); "
                                 "restore those params to resume, or delete the directory to start afresh")


def model_fingerprint(model_dir: Path) -> str:
    """sha256 of the initialised model's weight files (a checkpoint of another init is refused)."""
    digest = hashlib.sha256()
    for path in sorted(model_dir.glob("*.safetensors")):
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 22), b""):
                digest.update(chunk)
    return digest.hexdigest()
