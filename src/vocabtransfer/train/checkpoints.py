"""The pretrain stage's checkpoints (the hypernet stage's too): which one to resume from
(`complete_checkpoints`), whether its files are whole (`check_checkpoint`), and the params and initialised model
they were written with (`check_resume_params`, `model_fingerprint`)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch.distributed as dist
import zipfile
from safetensors import safe_open


from vocabtransfer.errors import VocabTransferError, brief

ROWS_FILE = "vocabtransfer_metrics.json"  # in each checkpoint: the metrics rows up to it (also marks it complete)
PARAMS_FILE = "params.json"  # beside the checkpoints: the params leaves they were written with


def complete_checkpoints(directory: Path) -> list[tuple[int, Path]]:
    """(step, path) of the checkpoints whose metrics rows were written (so the whole checkpoint was), by step."""
    out = []
    for path in directory.glob("checkpoint-*"):
        suffix = path.name.split("-", 1)[1]
        if suffix.isdigit() and (path / ROWS_FILE).is_file():
            out.append((int(suffix), path))
    return sorted(out)


def every_rank_saved() -> None:
    """Wait until every process of a distributed run has written its part of the checkpoint (each rank writes its
    own RNG state, FSDP its shards): the metrics rows that mark the checkpoint complete are written after this, so a
    kill between one rank's files and another's leaves a checkpoint that is not taken for whole."""

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def check_checkpoint(path: Path) -> None:
    """Every file of the checkpoint to resume from is whole: safetensors (header and length), torch's zip archives
    (their CRCs), JSON. A file torn from outside (a copy cut short, a full disk) is one error naming it and what to
    delete, before the Trainer loads it."""

    for file in sorted(p for p in path.iterdir() if p.is_file()):
        try:
            if file.suffix == ".safetensors":
                with safe_open(str(file), "pt") as handle:
                    handle.keys()
            elif file.suffix in (".pt", ".pth", ".bin"):
                with zipfile.ZipFile(file) as archive:
                    bad = archive.testzip()
                if bad is not None:
                    raise ValueError(f"member {bad} fails its CRC")
            elif file.suffix == ".json":
                json.loads(file.read_text(encoding="utf-8"))
        except Exception as exc:
            raise VocabTransferError(
                f"{file}: torn checkpoint file ({brief(exc)}); delete {path} and run the same "
                "command: training resumes from the checkpoint before it, or from the start"
            ) from exc


def check_resume_params(directory: Path, expected: dict) -> None:
    stored = json.loads((directory / PARAMS_FILE).read_text(encoding="utf-8"))
    differing = sorted(k for k in set(stored) | set(expected) if stored.get(k, "<unset>") != expected.get(k, "<unset>"))
    if differing:
        raise VocabTransferError(
            f"{directory}: the checkpoints were written with other params ({', '.join(differing)}); "
            "restore those params to resume, or delete the directory to start afresh"
        )


def model_fingerprint(model_dir: Path) -> str:
    """sha256 of the initialised model's weight files (a checkpoint of another init is refused)."""
    digest = hashlib.sha256()
    for path in sorted(model_dir.glob("*.safetensors")):
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 22), b""):
                digest.update(chunk)
    return digest.hexdigest()
