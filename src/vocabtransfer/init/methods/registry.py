"""What an init method gets and returns, and how it registers: `TransferProblem` (the source embeddings, both
tokenizers, the overlap, the auxiliary vectors, …), `TransferResult` (the target embeddings and their stats) and
`@register("name")` on its function, which fulfils the lazy reference of its name in
vocabtransfer.plan.methods.METHODS (a built-in's `run`, in its entry in vocabtransfer.plan.method_catalog). What
planning knows about a method (`MethodInfo`, that entry) is read there without importing any method."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import numpy as np

from vocabtransfer.plan.methods import INFO, METHODS, MethodInfo

if TYPE_CHECKING:  # annotations only: the methods' modules import torch themselves
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
    seed: int = 42
    device: str = "cpu"
    lang: str = ""
    resources: dict = field(default_factory=dict)  # extra inputs by name (e.g. fastText .bin paths)
    # which of the source model's matrices source_embeddings is: "input", or "output" (an untied LM head's; the init
    # stage runs a method once per matrix), e.g. for omp in a donor's space to code in the donor's matching one
    matrix: str = "input"
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
    # (V_t,) bool: the rows drawn at random, the ones the init stage rescales for `scale: calibrated`
    # (random, overlap: `RandomRowsOptions`); None: the method marks none
    random_rows: np.ndarray | None = None
    # (V_t,) float64: log-probabilities the init stage adds to the output bias with a fitted weight
    # (fvt_prior, vocabtransfer.init.output_bias); None: the bias is transferred as for every method
    output_prior: np.ndarray | None = None


# a method: (the problem, its typed options `init.<name>`, e.g. an `OmpOptions`) -> its result
Method = Callable[[TransferProblem, Any], TransferResult]
MethodT = TypeVar("MethodT", bound=Method)  # one method's own signature (its options' default), kept by @register


def register(name: str, **metadata: Any) -> Callable[[MethodT], MethodT]:
    """`@register("name")`: the method's function (a name registered twice is an error). A built-in method's
    `MethodInfo` is its entry in vocabtransfer.plan.method_catalog; one registered at run time (a plugin, a test's
    throwaway method) declares it here, `@register("name", inputs=..., deterministic=...)`, or gets the defaults."""
    info = MethodInfo(name, **metadata)  # an unknown keyword is a TypeError at import

    def deco(fn: MethodT) -> MethodT:
        METHODS.register(name)(fn)
        if metadata or name not in INFO:  # metadata beside a catalog entry: registered twice, an error
            INFO.register(name)(info)
        return fn

    return deco


def discover() -> tuple[str, ...]:
    """Every method's module imported (its @register run): the names, in the order they are declared (what a
    check of every method's function needs; planning reads `INFO` alone)."""
    METHODS.load()
    return tuple(METHODS)
