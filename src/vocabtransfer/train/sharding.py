"""`pretrain.sharding: fsdp`: torch FSDP2 (`torch.distributed.fsdp.fully_shard`) over the job's processes.

Data-parallel processes (`train.parallel`) each hold a full replica; with `fsdp` each holds 1/P of every
parameter, gradient and AdamW moment, and gathers a unit's parameters only while it computes:

1. units (`shard_model`): each layer of the model's stack of decoder or encoder layers (its largest
   `nn.ModuleList`) is one unit, then the root unit holds the rest: the input embeddings, the final norm
   and the LM head (tied or not: a tied weight is one parameter, so it must sit in one unit). The root
   unit stays gathered from its forward to its backward (`reshard_after_forward=False`, FSDP2's default
   for the root), so the fused head (`heads.head_loss`) reads the head's whole weight as a plain tensor and
   its gradient is reduce-scattered with the root's at the end of the backward pass;
2. precision: fp32 on CPU; with bf16 (a GPU) the gathered parameters are bf16 and gradients are reduced
   in fp32 (`MixedPrecisionPolicy`); the stored shards and AdamW stay fp32;
3. gradients are averaged over the processes (reduce-scatter), as DDP does, so the stage's loss scaling
   (x P) is the same;
4. checkpoints (`save_checkpoint` / `load_checkpoint`): the model's and the optimiser's shards in one
   torch distributed checkpoint (`torch.distributed.checkpoint`, directory `sharded/` in each Trainer
   checkpoint): each process writes its own shards, and the job resumed (with the same params, so the same
   number of processes: `pretrain.processes` and `pretrain.sharding` are resume keys) reads them back;
5. the final model (`full_state_dict`): the full state dict gathered to process 0, on the CPU, to be
   loaded into an ordinary model and saved as a Hugging Face directory.

The Trainer is told not to wrap the sharded model in DDP (`ObjectiveTrainer`), and the engine is
torch's: nothing here shards, gathers or reduces by hand.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch.nn as nn
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
    StateDictOptions,
)


from vocabtransfer.errors import VocabTransferError
from vocabtransfer.model import modeling

log = logging.getLogger(__name__)

SHARDED_DIR = "sharded"  # in each Trainer checkpoint: the model's and optimiser's shards (DCP)


def check_options(sharding: str, processes: int, *, embeddings_only_steps: int, factorized: bool) -> None:
    """What `fsdp` does not combine with, in one line each."""
    if sharding != "fsdp":
        return
    if processes < 2:
        raise VocabTransferError(
            "pretrain.sharding: fsdp shards the model over pretrain.processes, which is 1; set "
            "pretrain.processes to the number of GPUs (≥ 2) or pretrain.sharding to none"
        )
    if embeddings_only_steps:
        raise VocabTransferError(
            "pretrain.embeddings_only_steps: not available with pretrain.sharding: fsdp (FSDP2 "
            "fixes which parameters train when it first gathers them); set it to 0 or use "
            "pretrain.sharding: none"
        )
    if factorized:
        raise VocabTransferError(
            "pretrain.factorized: not available with pretrain.sharding: fsdp; set "
            "pretrain.factorized to false or pretrain.sharding to none"
        )


def layer_stack(model):
    """The model's stack of decoder/encoder layers: its `nn.ModuleList` with the most parameters."""

    stacks = [m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m)]
    if not stacks:
        raise VocabTransferError(
            f"{type(model).__name__}: no stack of layers (nn.ModuleList) to shard; use "
            "pretrain.sharding: none with this model"
        )
    return max(stacks, key=lambda s: sum(p.numel() for p in s.parameters()))


def shard_model(model, device, bf16: bool):
    """`fully_shard` each layer of the stack, then the root (embeddings, final norm, head); in place."""

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    policy = (
        MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else MixedPrecisionPolicy()
    )
    model.to(device)
    layers = layer_stack(model)
    for layer in layers:
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    # the root kept gathered from its forward to its backward: the fused head reads the head's whole weight
    fully_shard(model, mesh=mesh, mp_policy=policy, reshard_after_forward=False)
    log.info(
        "fsdp: %d layer units + the root (embeddings, head) sharded over %d processes%s",
        len(layers),
        mesh.size(),
        ", bf16 compute" if bf16 else "",
    )
    return model


def _state(model, optimizer):

    model_state, optim_state = get_state_dict(model, optimizer)
    return {"model": model_state, "optimizer": optim_state}


def save_checkpoint(model, optimizer, directory: str | Path) -> None:
    """The model's and the optimiser's shards into `directory/sharded` (every process writes its own)."""

    dcp.save(_state(model, optimizer), checkpoint_id=str(Path(directory) / SHARDED_DIR))


def load_checkpoint(model, optimizer, directory: str | Path) -> None:
    """Read back what `save_checkpoint` wrote into the sharded model and its optimiser."""

    path = Path(directory) / SHARDED_DIR
    if not path.is_dir():
        raise VocabTransferError(
            f"{directory}: no sharded checkpoint ({SHARDED_DIR}/) in it; it was written without "
            "pretrain.sharding: fsdp; delete the checkpoints to start afresh"
        )
    state = _state(model, optimizer)
    dcp.load(state, checkpoint_id=str(path))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])


def full_state_dict(model) -> dict:
    """The whole model's state dict on process 0, on the CPU ({} on the other processes); collective."""

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def unsharded_copy(state: dict, model_dir: Path):
    """An ordinary (unsharded, fp32, CPU) model of `model_dir`'s class with the weights of `state`."""

    plain, _ = modeling.load_source_model(model_dir, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(state, strict=False)
    tied = set(missing) & set(getattr(plain, "_tied_weights_keys", None) or ())
    if unexpected or set(missing) - tied:
        raise VocabTransferError(
            f"{model_dir}: the sharded model's weights do not fit its class (missing "
            f"{sorted(set(missing) - tied)[:3]}, unexpected {sorted(unexpected)[:3]})"
        )
    plain.tie_weights()
    return plain
