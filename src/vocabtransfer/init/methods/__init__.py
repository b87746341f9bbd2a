"""Embedding initialisation methods: a registry, one module per method.

A method is a function `(problem: TransferProblem, options) -> TransferResult` registered with
`@register("name")` (all three from `vocabtransfer.init.methods.registry`); what the pipeline needs to know
about it (`MethodInfo`, read with `vocabtransfer.plan.methods.info`: the lazy reference to its function, its options
class, extra inputs, whether its rows depend on the seed, conditions under which it can run, …) is its entry in
vocabtransfer.plan.method_catalog, which planning reads without importing any method. Adding a method = one module
in this package and its entry in the catalog (the registries `METHODS` and `INFO` are derived from it), plus its
section `init.<name>` in params.yaml. Factorised
variants (`focus+svd`, `fvt+snmf`, …) are composed by `get_method`: the base method runs inside
the low-rank space of the factorisation.
"""

from __future__ import annotations

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.init.methods.registry import Method
from vocabtransfer.plan.methods import METHODS, info
from vocabtransfer.init.methods.variants import resolve
from vocabtransfer.plan.method_options import FACTORIZATIONS, FactorizedOptions


def available() -> list[str]:
    """Every method's name (known without importing a method module)."""
    return sorted(METHODS)


def get_method(name: str) -> Method:
    """The method called `name`; `base+svd` / `base+snmf` run `base` inside a low-rank space."""
    if name in METHODS:
        return METHODS[name]
    if "+" in name:
        return resolve(name)  # one-line VocabTransferError naming the bad part
    alone = [n for n in available() if not info(n).factorizable]  # ofa and snmf
    alone_text = ", ".join(alone[:-1]) + " and " + alone[-1] if len(alone) > 1 else "".join(alone)
    raise VocabTransferError(
        f"unknown method {name!r}; available: {', '.join(available())}, or <method>+svd / <method>+snmf "
        f"for any of them{f' except {alone_text}' if alone else ''} (e.g. focus+svd)"
    )


def default_options(name: str):
    """The options `name` runs with when params leave its section out: its registered options class
    with every default; for `base+fact` a `FactorizedOptions` of the base's and the factorisation's."""

    base, _, fact = name.partition("+")
    options = info(base).options()
    return FactorizedOptions(options, FACTORIZATIONS[fact]()) if fact else options
