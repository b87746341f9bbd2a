"""Embedding initialisation methods: a registry, one module per method.

A method is a function `(problem: TransferProblem) -> TransferResult` registered with
`@register("name")` (all three from `vocabtransfer.init.methods.registry`). Adding a method =
one module + one import line at the bottom of this file. Factorised variants (`focus+svd`,
`fvt+snmf`, …) are composed by `get_method`: the base method runs inside the low-rank space of the
factorisation.
"""

from __future__ import annotations

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.init.methods.registry import METHODS, Method


def available() -> list[str]:
    _load_all()
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
