"""The typed params root: the validated params of one run, read by attribute. Every planner and job above
`pipeline/` takes a `Params` and reads what it uses as typed attributes, never by a dotted string:

    params.languages, params.seed, params.source_model       # the top-level leaves
    params.pretrain.precision                                 # a section: its frozen dataclass (PretrainParams)
    params.init.methods, params.init.omp.k                    # init: its methods, each method's options (OmpOptions)
    params.init.options(base)                                 # the options of a method named at run time
    params.eval.tasks.qa.epochs                               # a nested section

Each section is built once from the validated tree (`typed.from_dict`) when first read. The root's sections, in
params.yaml's order, are the schema's (`SECTIONS`: vocabtransfer.app.params generates each from its class), and
`init.<name>` of every method is the options class its catalog entry declares (plan/method_catalog.py).

A stage declares the params its jobs read (`Stage.reads`: names of the root's sections and leaves, such as
`pretrain` or `init.{method}`), and its rerun keys are their leaves (`rerun_leaves`): every leaf of a declared
section but the `rerun=False` ones and those of a subsection for another objective or schedule.
"""

from __future__ import annotations

import dataclasses
import typing
from functools import cached_property
from typing import Any, Iterable, Mapping

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.pipeline.typed import ParamsTree, field_leaves, from_dict, key_of, named_child
from vocabtransfer.plan.data_params import (
    CorpusParams,
    FasttextParams,
    OverlapParams,
    PretokenizeParams,
    TokenizerParams,
)
from vocabtransfer.plan.eval_params import (
    GradientScenariosParams,
    InitEvalParams,
    LmEvalParams,
    TokenFrequencyLossParams,
)
from vocabtransfer.plan.init_params import SourceHeadParams
from vocabtransfer.plan.method_options import FACTORIZATIONS
from vocabtransfer.plan.methods import METHODS, info
from vocabtransfer.plan.pretrain_params import PretrainParams
from vocabtransfer.plan.report_params import ExportParams, ReportParams
from vocabtransfer.plan.task_options import EvalParams


def options_class(name: str) -> type:
    """The options class of `init.<name>`: the method's (its MethodInfo), else the factorisation's."""
    return info(name).options if name in METHODS or name not in FACTORIZATIONS else FACTORIZATIONS[name]


class InitParams:
    """params `init`: the initialisations asked for (`methods`) and the options of each registered method and
    factorisation, typed (`init.omp` as OmpOptions, built once), by attribute (`params.init.omp`) or by name
    (`options(name)`, for a method named at run time: the init job's wildcard, a method registered by a plugin)."""

    def __init__(self, tree: Mapping[str, Any]):
        self._tree = tree
        self._options: dict[str, Any] = {}

    @property
    def methods(self) -> tuple[str, ...]:
        """`init.methods`: the initialisations asked for, `method` or `method+factorisation`."""
        return tuple(self._tree["methods"])

    @named_child()
    def options(self, name: str) -> Any:
        """The options of method or factorisation `name` (`init.<name>`) as the class it declares."""
        if name not in self._options:
            if name not in self._tree:
                raise VocabTransferError(f"params: init.{name} not found; is init method {name} registered?")
            self._options[name] = from_dict(options_class(name), self._tree[name])
        return self._options[name]

    def __getattr__(self, name: str) -> Any:
        """`init.<name>` of a registered method or a factorisation, by attribute (`params.init.omp.k`): `options(name)`,
        typed by the options class its catalog entry declares (mypy sees Any: the methods are a registry)."""
        if name.startswith("_") or (name not in METHODS and name not in FACTORIZATIONS):
            raise AttributeError(
                f"params init has no {name!r}: no init method nor factorisation of that name is registered "
                f"(methods: {', '.join(METHODS)}; factorisations: {', '.join(FACTORIZATIONS)})"
            )
        return self.options(name)


class Params(ParamsTree):
    """The typed params root (this module's docstring): the top-level leaves and every section by attribute, each
    section its frozen dataclass, built once from the validated tree."""

    def _section(self, name: str, cls: type) -> Any:
        if name not in self.tree:
            raise VocabTransferError(f"params: section {name!r} not found")
        return from_dict(cls, self.tree[name])

    @cached_property
    def corpus(self) -> CorpusParams:
        return self._section("corpus", CorpusParams)

    @cached_property
    def tokenizer(self) -> TokenizerParams:
        return self._section("tokenizer", TokenizerParams)

    @cached_property
    def pretokenize(self) -> PretokenizeParams:
        return self._section("pretokenize", PretokenizeParams)

    @cached_property
    def fasttext(self) -> FasttextParams:
        return self._section("fasttext", FasttextParams)

    @cached_property
    def overlap(self) -> OverlapParams:
        return self._section("overlap", OverlapParams)

    @cached_property
    def source_head(self) -> SourceHeadParams:
        return self._section("source_head", SourceHeadParams)

    @cached_property
    def init(self) -> InitParams:
        return InitParams(self.tree["init"])

    @cached_property
    def init_eval(self) -> InitEvalParams:
        return self._section("init_eval", InitEvalParams)

    @cached_property
    def pretrain(self) -> PretrainParams:
        return self._section("pretrain", PretrainParams)

    @cached_property
    def report(self) -> ReportParams:
        return self._section("report", ReportParams)

    @cached_property
    def eval(self) -> EvalParams:
        return self._section("eval", EvalParams)

    @cached_property
    def token_frequency_loss(self) -> TokenFrequencyLossParams:
        return self._section("token_frequency_loss", TokenFrequencyLossParams)

    @cached_property
    def gradient_scenarios(self) -> GradientScenariosParams:
        return self._section("gradient_scenarios", GradientScenariosParams)

    @cached_property
    def lm_eval(self) -> LmEvalParams:
        return self._section("lm_eval", LmEvalParams)

    @cached_property
    def export(self) -> ExportParams:
        return self._section("export", ExportParams)

    def rerun_leaves(self, names: Iterable[str], wildcards: Mapping[str, str]) -> list[str]:
        """The rerun keys of a job that reads `names` (a stage's `reads`, `{wildcard}`s filled from `wildcards`):
        a declared leaf as it is, a declared section as its leaves (`section_leaves`: but the `rerun=False` ones),
        either left out where it is a subsection for another objective or schedule than the job's (`applies`)."""
        out: list[str] = []
        for name in names:
            dotted = name.format(**wildcards)
            cls, field = node_class(dotted)
            if field is not None and not applies(self, field, dotted, wildcards, declared=True):
                continue
            if dataclasses.is_dataclass(cls):
                out += section_leaves(self, cls, dotted, wildcards)
            elif typing.get_origin(cls) is dict:  # a mapping: a leaf per key, as typed.field_leaves has it
                out += [f"{dotted}.{key}" for key in self.leaf(dotted)]
            else:
                out.append(dotted)
        return list(dict.fromkeys(out))


# the root's sections, in params.yaml's order: name -> its class (InitParams: the root's `init.methods` and every
# method's and factorisation's options class, vocabtransfer.app.params.schema)
SECTIONS: dict[str, type] = {
    name: typing.get_type_hints(attr.func)["return"]
    for name, attr in vars(Params).items()
    if isinstance(attr, cached_property)
}
TOP_LEAVES = ("languages", "seed", "source_model")


def node_class(dotted: str) -> tuple[Any, dataclasses.Field | None]:
    """The type of the node at `dotted` in the typed root (a section's class, a leaf's type) and the dataclass field
    that holds it (None at the root's level and for `init.<name>`); an error for a name the root does not have."""
    parts = dotted.split(".")
    if parts[0] in TOP_LEAVES and len(parts) == 1:
        return Any, None
    if parts[0] == "init" and len(parts) >= 2:
        if parts[1] == "methods" and len(parts) == 2:
            return tuple, None
        cls, field, rest = options_class(parts[1]), None, parts[2:]
    elif parts[0] in SECTIONS and parts[0] != "init":
        cls, field, rest = SECTIONS[parts[0]], None, parts[1:]
    else:
        raise VocabTransferError(f"params: {dotted!r} is no section or leaf of the typed params root")
    for part in rest:
        fields = {key_of(f): f for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else {}
        if part not in fields:
            raise VocabTransferError(f"params: {dotted!r} is no section or leaf of the typed params root (at {part!r})")
        field, cls = fields[part], typing.get_type_hints(cls)[fields[part].name]
    return cls, field


def section_leaves(params: Params, cls: Any, dotted: str, wildcards: Mapping[str, str]) -> list[str]:
    """The rerun keys of section `dotted` (of class `cls`) for one job: its leaves (`typed.field_leaves`, in the
    validated tree's order) but those `applies` leaves out and, of a mapping keyed by language (`per_language=True`),
    every language's entry but the job's (`${item.lang}` in dvc.yaml)."""
    lang = wildcards.get("lang")
    per_language = {f"{prefix}.{f.name}" for prefix, f in _fields_under(cls, dotted) if f.metadata.get("per_language")}
    out: list[str] = []
    for leaf in field_leaves(cls, dotted, params.leaf(dotted), lambda f: applies(params, f, dotted, wildcards)):
        parent = leaf.rpartition(".")[0]
        if parent not in per_language:
            out.append(leaf)
        elif lang is not None and f"{parent}.{lang}" not in out:
            out.append(f"{parent}.{lang}")
    return out + [f"{m}.{lang}" for m in sorted(per_language) if lang is not None and f"{m}.{lang}" not in out]


def applies(
    params: Params, f: dataclasses.Field, dotted: str, wildcards: Mapping[str, str], declared: bool = False
) -> bool:
    """Whether a job reads field `f` (under section `dotted`): not a `rerun=False` one (unless the stage `declared`
    it by name: its outputs depend on it), nor a subsection declared for another objective or schedule (`objective=`,
    `schedule=` in its metadata, held against the job's wildcard, else the value of the top section's own field:
    `pretrain.schedule`)."""
    if not declared and not f.metadata.get("rerun", True):
        return False
    top = params.tree.get(dotted.split(".")[0])
    for key in ("objective", "schedule"):
        wanted = f.metadata.get(key)
        value = wildcards.get(key, top.get(key) if isinstance(top, Mapping) else None)
        if wanted is not None and value is not None and value not in _values(wanted):
            return False
    return True


def _values(wanted: Any) -> tuple:
    return tuple(wanted) if isinstance(wanted, (tuple, list)) else (wanted,)


def _fields_under(cls: type, prefix: str) -> list[tuple[str, dataclasses.Field]]:
    """(the dotted name of its section, field) of every field of `cls` and its nested sections."""
    hints = typing.get_type_hints(cls)
    out: list[tuple[str, dataclasses.Field]] = []
    for f in dataclasses.fields(cls):
        out.append((prefix, f))
        if dataclasses.is_dataclass(hints[f.name]):
            out += _fields_under(hints[f.name], f"{prefix}.{f.name}")
    return out
