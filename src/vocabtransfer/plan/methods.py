"""What planning knows about each init method, without importing any: `MethodInfo` (its function's lazy
reference, its options class, extra inputs, whether its rows depend on the seed, when it can run, …), `METHODS`,
the registry of each method's function (imported when a job runs it), and `INFO`, the registry of each method's
`MethodInfo`. Both are derived from one list, the built-ins' `MethodInfo`s in vocabtransfer.plan.method_catalog
(`BUILTINS`, read on first use: that module imports this one), and a name declared or registered twice is an error.
What a method gets and returns (`TransferProblem`, `TransferResult`) and `@register` on its function are
vocabtransfer.init.methods.registry's. Adding a method is its module (its function under `@register("name")`) and
its entry in the catalog (`MethodInfo("name", run="vocabtransfer.init.methods.<module>:<function>",
options=<its options class>, …)`), plus its section in params.yaml (the schema's `init.<name>` is generated from
its options class, `declared_sections`); a method registered at run time (a plugin) declares its metadata at its
`@register` instead."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from vocabtransfer.pipeline.typed import NoOptions
from vocabtransfer.registry import Registry

# (params, lang) -> why the method cannot run for lang; params is the typed root (plan/params_root.py, which imports
# this module)
Condition = Callable[[Any, str], "str | None"]
DataFiles = Callable[[Any, str], "dict[str, Path | None]"]  # (params, lang) -> {"data_<key>": local file}


@dataclass(frozen=True)
class MethodInfo:
    """What the pipeline needs to know about a method besides its function, declared in its entry in
    method_catalog.py (or at its `@register`, for one registered at run time). A name registered without metadata
    (or not registered) gets these defaults; a factorised variant `base+svd` / `base+snmf` has its base's."""

    name: str
    # its function, by a lazy reference `"vocabtransfer.init.methods.<module>:<function>"` (`METHODS`' entry, the
    # module imported when a job runs the method; its `@register` fulfils the reference): every built-in's; "" for
    # one registered at run time, whose `@register` hands over the function itself
    run: str = ""
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


# the built-in methods' MethodInfo, in the order they register (the schema's `init.<name>` sections, the patterns'
# names): the one list of them
CATALOG = "vocabtransfer.plan.method_catalog:BUILTINS"

# every method's function, a built-in's by the lazy reference its catalog entry carries (`run`): its module is
# imported the first time the method is looked up, and its @register fulfils the reference
METHODS: Registry[Callable[..., Any]] = Registry(
    "init method",
    declared=CATALOG,
    entry=lambda spec: spec.run,
    check=lambda fn: None if callable(fn) else "an init method is a function (problem, options) -> TransferResult",
)
# each method's MethodInfo: a built-in's its catalog entry (method_catalog.py imports no method code)
INFO: Registry[MethodInfo] = Registry(
    "init method's metadata",
    declared=CATALOG,
    check=lambda i: None if isinstance(i, MethodInfo) else "not a MethodInfo",
)


def info(method: str) -> MethodInfo:
    """The metadata of a method, `base` or `base+fact` (its base's); the defaults for a name
    registered without any (or not registered)."""
    base = method.partition("+")[0]
    return INFO.get(base) or MethodInfo(base)


def declared_sections() -> dict[str, type]:
    """{method: its options class}, in the order they register: the typed sections `init.<name>` the
    schema is completed with (vocabtransfer.app.params.schema)."""
    return {name: INFO[name].options for name in METHODS if name in INFO}
