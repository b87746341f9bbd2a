"""The method registry: what a method gets (`TransferProblem` and its typed options), what it returns
(`TransferResult`), `@register("name")` on its function, and what the pipeline needs to know about it
(`MethodInfo`: its options class, extra inputs, whether its rows depend on the seed, …). Two registries
(`vocabtransfer.registry.Registry`) of lazy references: `METHODS` to each method's function, imported when a
job runs it, and `INFO` to its `MethodInfo` in `catalog.py`, which imports no method code, so planning starts
without torch. Adding a method is its module, its line in `METHODS`, its entry in `catalog.py` and its section
in params.yaml (the schema's `init.<name>` is generated from its options class, `declared_sections`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, TypeVar

import numpy as np

from vocabtransfer.pipeline.typed import NoOptions, Params
from vocabtransfer.registry import Registry

if TYPE_CHECKING:  # annotations only: planning (the CLI, Snakemake) reads the registry without torch
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
Condition = Callable[[Params, str], "str | None"]  # (params, lang) -> why the method cannot run for lang
DataFiles = Callable[[Params, str], "dict[str, Path | None]"]  # (params, lang) -> {"data_<key>": local file}


@dataclass(frozen=True)
class MethodInfo:
    """What the pipeline needs to know about a method besides its function, declared in its entry in
    catalog.py (or at its `@register`, for one registered at run time). A name registered without metadata (or
    not registered) gets these defaults; a factorised variant `base+svd` / `base+snmf` has its base's."""

    name: str
    # the frozen dataclass of its params section `init.<name>` (vocabtransfer.pipeline.typed): the
    # schema's section is generated from it, and the init stage hands the method one built from params
    options: type = NoOptions
    # pipeline artefacts the init job reads besides the core ones (ctx.input key -> path template
    # of vocabtransfer.pipeline.paths); they reach the method as `problem.resources[key]`
    inputs: Mapping[str, str] = field(default_factory=dict)
    # every row is a copy or a mean: the seed changes nothing, so its pretraining seeds share one
    # initialisation (pseed 1)
    deterministic: bool = False
    # target tokens outside the overlap get a row from their fastText vector (a random row when they
    # have none): the init stats count where the rows came from (`target_rows`)
    auxiliary_rows: bool = False
    # precomputed factorisations of the source embeddings it reads (`problem.factors`): "snmf" is
    # the shared one of the source_snmf stage
    factors: tuple[str, ...] = ()
    # keys of `init.<name>` that other stages read; the method never sees them
    stage_options: tuple[str, ...] = ()
    # why the method cannot run for a language (None when it can); None: it always can. A job it rules out is
    # skipped with this reason: only for what params do not name (e.g. no dictionary entry for the language)
    condition: Condition | None = None
    # what params name for the method that is not there (e.g. a dictionary path with a typo): one line with the
    # key, the file and the fix, refused before any job (vocabtransfer.app.plan.preflight), as the user asked for
    # the method by name in init.methods; None when nothing named is missing
    refusal: Condition | None = None
    # the local data files its init job reads (Snakemake inputs, dvc.yaml deps), by `data_<key>`
    data: DataFiles | None = None
    # False for a method that factorises on its own: `name+svd` / `name+snmf` make no sense
    factorizable: bool = True


# every method, by a lazy reference to its function (vocabtransfer.registry): its module is imported the first
# time the method is looked up, and its @register fulfils the reference. Adding a method is its module, its
# line here, its entry in catalog.py and its section in params.yaml (the schema's `init.<name>`).
_PACKAGE = __name__.rpartition(".")[0]
METHODS: Registry[Method] = Registry(
    "init method",
    lazy={
        name: f"{_PACKAGE}.{reference}"
        for name, reference in (
            ("random", "baselines:random_init"),
            ("overlap", "baselines:overlap_init"),
            ("mean", "baselines:mean_init"),
            ("focus", "focus:focus"),
            ("fvt", "fvt:fvt"),
            ("fvt_prior", "fvt_prior:fvt_prior"),
            ("hypernet", "hypernet:hypernet"),
            ("ofa", "ofa:ofa"),
            ("omp", "omp:omp"),
            ("snmf", "snmf:snmf"),
            ("wechsel", "wechsel:wechsel"),
        )
    },
    check=lambda fn: None if callable(fn) else "an init method is a function (problem, options) -> TransferResult",
)
# each method's MethodInfo: a built-in's by a lazy reference to catalog.py (`<NAME>`), which imports no method code
INFO: Registry[MethodInfo] = Registry(
    "init method's metadata",
    lazy={name: f"{_PACKAGE}.catalog:{name.upper()}" for name in METHODS},
    check=lambda i: None if isinstance(i, MethodInfo) else "not a MethodInfo",
)


def register(name: str, **metadata: Any) -> Callable[[MethodT], MethodT]:
    """`@register("name")`: the method's function (a name registered twice is an error). A built-in method's
    `MethodInfo` is its entry in `catalog.py`; one registered at run time (a plugin, a test's throwaway method)
    declares it here, `@register("name", inputs=..., deterministic=..., ...)`, or gets the defaults."""
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


def info(method: str) -> MethodInfo:
    """The metadata of a method, `base` or `base+fact` (its base's); the defaults for a name
    registered without any (or not registered)."""
    base = method.partition("+")[0]
    return INFO.get(base) or MethodInfo(base)


def declared_sections() -> dict[str, type]:
    """{method: its options class}, in the order they register: the typed sections `init.<name>` the
    schema is completed with (vocabtransfer.app.params.schema)."""
    return {name: INFO[name].options for name in METHODS if name in INFO}
