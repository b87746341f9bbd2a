"""Embedding initialisation methods: a registry, one module per method.

A method is a function `(problem: TransferProblem) -> TransferResult` registered with
`@register("name")`. Adding a method = one module + one import line at the bottom of
this file. Factorised variants (`focus+svd`, `fvt+snmf`, …) are composed by
`get_method`: the base method runs inside the low-rank space of the factorisation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch

from vocabtransfer.errors import VocabTransferError


@dataclass
class TransferProblem:
    """Everything a method may use. Rows of `source_embeddings` are indexed by source token id."""

    source_embeddings: torch.Tensor  # (V_s, D) float32, checked finite and len(source_tokenizer) rows
    source_tokenizer: Any  # transformers fast tokenizer
    target_tokenizer: Any  # transformers fast tokenizer
    overlap_target_ids: np.ndarray  # (n,) int64 target ids that overlap a source token
    overlap_source_ids: np.ndarray  # (n,) int64 the matching source ids (same order)
    auxiliary: torch.Tensor | None = None  # (V_t, d) fastText vectors aligned to target ids
    auxiliary_mask: torch.Tensor | None = None  # (V_t,) bool: the token has a fastText vector
    options: dict = field(default_factory=dict)  # the params section init.<method>
    seed: int = 42
    device: str = "cpu"
    lang: str = ""
    resources: dict = field(default_factory=dict)  # extra inputs by name (e.g. fastText .bin paths)
    # precomputed factorisations of source_embeddings by kind ("snmf": (W, H, stats)), e.g. from
    # the source_snmf stage; a method factorises on its own where its kind is absent
    factors: dict = field(default_factory=dict)

    @property
    def target_size(self) -> int:
        return len(self.target_tokenizer)

    def special_target_ids(self) -> np.ndarray:
        return np.asarray(sorted(set(self.target_tokenizer.all_special_ids)), dtype=np.int64)


@dataclass
class TransferResult:
    embeddings: torch.Tensor  # (V_t, D) float32 on CPU
    stats: dict  # counts of copied / combined / random rows and the reasons
    extra: dict[str, torch.Tensor] = field(default_factory=dict)  # e.g. coordinates, primitives


Method = Callable[[TransferProblem], TransferResult]
METHODS: dict[str, Method] = {}


def register(name: str) -> Callable[[Method], Method]:
    def deco(fn: Method) -> Method:
        METHODS[name] = fn
        return fn

    return deco


def available() -> list[str]:
    return sorted(METHODS)


def get_method(name: str) -> Method:
    """The method called `name`; `base+svd` / `base+snmf` run `base` inside a low-rank space."""
    _load_all()
    if name in METHODS:
        return METHODS[name]
    if "+" in name:
        from vocabtransfer.init.methods.variants import resolve

        return resolve(name)  # one-line VocabTransferError naming the bad part
    raise VocabTransferError(
        f"unknown method {name!r}; available: {', '.join(available())}, or <method>+svd / <method>+snmf "
        "for any of them except ofa and snmf (e.g. focus+svd)"
    )


def _load_all() -> None:
    """Import every method module so its @register lines run (one line per module)."""
    import importlib

    for module in ("baselines", "fvt", "focus", "ofa", "omp", "snmf", "wechsel"):
        importlib.import_module(f"vocabtransfer.init.methods.{module}")
