"""The options of the initialisation methods, typed: params `init` as `InitParams`, and each method's
section `init.<name>` as a frozen dataclass (`OmpOptions` for `init.omp`, …).

The init stage builds `InitParams` once from the validated params (`ctx.section("init", InitParams)`)
and hands a method its options (`problem.options`, e.g. `OmpOptions`) and, for `<base>+svd` /
`<base>+snmf`, the factorisation's (`problem.factorization`). A method reads them through
`init_options`, which returns typed options as they are and turns a mapping (a call from Python,
`options={"k": 8}`) into them over the schema's defaults, validated by the schema: the defaults and
the checks live in one place, workflow/schemas/params.schema.yaml. So `init.omp.k` goes params.yaml
→ schema → `OmpOptions.k` → `omp`. The dataclasses have no defaults and mirror the schema
(tests/test_config.py); an init job's rerun keys are the leaves of the options it takes.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, is_dataclass
from typing import Any, Literal

from vocabtransfer.pipeline.config import typed_section


@dataclass(frozen=True)
class NoOptions:
    """A method that takes no options (init.random, init.overlap, init.mean, init.fvt)."""


@dataclass(frozen=True)
class FocusOptions:
    block_size: int
    topk: int


@dataclass(frozen=True)
class OmpOptions:
    k: int
    block_size: int
    norm: Literal["combination", "atoms"]


@dataclass(frozen=True)
class OfaOptions:
    keep_dim: int
    neighbors: int
    temperature: float


@dataclass(frozen=True)
class SnmfOptions:
    rank: int
    max_iter: int
    tol: float
    init: Literal["kmeans", "svd"]
    clusters: int
    neighbors: int
    temperature: float


@dataclass(frozen=True)
class SvdOptions:
    keep_dim: int


@dataclass(frozen=True)
class WordFasttextOptions:
    model: Literal["cbow", "skipgram"]
    dim: int
    epochs: int
    min_count: int
    bucket: int


@dataclass(frozen=True)
class WechselOptions:
    neighbors: int
    temperature: float
    copy_overlap: bool
    dictionary_in_vocab_only: bool
    dictionaries: dict[str, str]  # {lang: english<TAB>target file, relative to $VOCABTRANSFER_DATA}
    source_text: str  # read by the source_fasttext stage
    fasttext: WordFasttextOptions  # read by the source_fasttext / word_fasttext stages


@dataclass(frozen=True)
class InitParams:
    """params `init`: the methods to run and each one's options (`svd` and `snmf` are also the
    factorisations of `<method>+svd` / `<method>+snmf`)."""

    methods: tuple[str, ...]
    random: NoOptions
    overlap: NoOptions
    mean: NoOptions
    fvt: NoOptions
    focus: FocusOptions
    omp: OmpOptions
    ofa: OfaOptions
    snmf: SnmfOptions
    svd: SvdOptions
    wechsel: WechselOptions


def options_class(name: str) -> type | None:
    """The dataclass of `init.<name>` (`OmpOptions` for omp), None for a name the schema lacks."""
    hint = typing.get_type_hints(InitParams).get(name)
    return hint if is_dataclass(hint) else None


def init_options(name: str, options: Any = None):
    """The typed options of `init.<name>`: `options` itself when it is typed (what the init stage
    passes), else the mapping `options` (or None) over the schema's defaults, validated by the schema
    (one line naming the key for a bad value or an unknown key): a method's entry for a call from Python."""
    cls = options_class(name)
    return options if isinstance(options, cls) else typed_section(cls, f"init.{name}", options)
