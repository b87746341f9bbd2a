"""The precision a training stage computes in: `auto`, `fp32` or `bf16` (`pretrain.precision`).

`auto` is bf16 where the hardware multiplies bf16 natively, else fp32:
* a CUDA GPU that supports bf16 (`torch.cuda.is_bf16_supported`);
* a CPU with AMX (`amx_bf16`) or AVX-512 bf16 (`avx512_bf16`) instructions, read from the CPU's
  features through torch (`torch.cpu._is_amx_tile_supported`, `_is_avx512_bf16_supported`). Without
  them bf16 products are emulated and slower than fp32, so `auto` keeps fp32.
bf16 is mixed precision: the weights, gradients' sums and optimiser state stay fp32 (the master
copy), the matrix products run in bf16 under `torch.autocast`, softmax and losses in fp32.
`fp32` computes everything in fp32: the numbers of a run before bf16 existed, bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

Precision = Literal["auto", "fp32", "bf16"]


@dataclass(frozen=True)
class Choice:
    """The precision a job runs in and the one line its log gives for it."""

    bf16: bool
    reason: str

    @property
    def name(self) -> str:
        return "bf16" if self.bf16 else "fp32"


def cpu_bf16_features() -> list[str]:
    """The CPU's native bf16 matrix instructions that torch sees: `amx_bf16`, `avx512_bf16` (maybe none)."""

    found = []
    if getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)():
        found.append("amx_bf16")
    if getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)():
        found.append("avx512_bf16")
    return found


def resolve(precision: Precision, *, use_cpu: bool) -> Choice:
    """`auto` / `fp32` / `bf16` for a job on the CPU (`use_cpu`) or on CUDA, with the reason."""

    if precision == "fp32":
        return Choice(False, "fp32: set by precision: fp32")
    if use_cpu or not torch.cuda.is_available():
        features = cpu_bf16_features()
        native = (
            f"this CPU multiplies bf16 natively ({', '.join(features)})"
            if features
            else ("this CPU has neither amx_bf16 nor avx512_bf16, so bf16 products would be emulated")
        )
        if precision == "bf16":
            return Choice(True, f"bf16 (autocast, fp32 master weights): set by precision: bf16; {native}")
        if features:
            return Choice(True, f"bf16 (autocast, fp32 master weights): precision auto, {native}")
        return Choice(False, f"fp32: precision auto, {native} (slower than fp32)")
    if precision == "bf16" or torch.cuda.is_bf16_supported():
        how = "set by precision: bf16" if precision == "bf16" else "precision auto, the GPU supports bf16"
        return Choice(True, f"bf16 (autocast, fp32 master weights): {how}")
    return Choice(False, "fp32: precision auto, the GPU does not support bf16")
