"""The method registry: what a method gets (`TransferProblem`), what it returns (`TransferResult`)
and `@register("name")`. Method modules import this module; the package (`get_method`) imports them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch


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
