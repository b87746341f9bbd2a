"""Factorised variants of any base method: `focus+svd`, `fvt+snmf`, `overlap+svd`, …

`<base>+<factorization>` runs the base method inside the low-rank space of the source
embeddings and maps the result back up:

1. factorise the source embeddings E ≈ C P (svd: truncated SVD with `keep_dim`
   primitives; snmf: semi-NMF with `rank`, C ≥ 0);
2. run the base method on the same problem with `source_embeddings = C`, so it
   initialises the low-dimensional target rows (copies, means, convex mixes, …);
3. for snmf, clamp negative coordinates to 0 (copies, means and convex mixes of
   non-negative rows never produce any; random rows can) and count them in the stats;
4. embeddings = coordinates @ P.

Options: the stage passes a `FactorizedOptions` (vocabtransfer.plan.method_options): the typed
`init.<base>` and the typed section of the factorisation (`init.svd` or `init.snmf`); the base gets
its options alone.
The names are resolved lazily (`resolve`), so every registered method gets
its factorised forms without a registry line.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Literal

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.pipeline.names import split_method
from vocabtransfer.plan.method_options import FACTORIZATIONS, FactorizedOptions
from vocabtransfer.init.methods.registry import Method, TransferProblem, TransferResult
from vocabtransfer.plan.methods import METHODS, info
from vocabtransfer.init.factorize import factorize_source

log = logging.getLogger(__name__)


def factorized(base_method: Method, factorization: Literal["svd", "snmf"], *, name: str | None = None) -> Method:
    """A method that runs `base_method` in the low-rank space of `factorization` (see module doc)."""
    if factorization not in FACTORIZATIONS:
        raise VocabTransferError(
            f"factorization {factorization!r}: unknown; allowed values: {', '.join(FACTORIZATIONS)}"
        )
    # the registry name of the base (get_method passes the function itself)
    base_name = next((n for n, fn in METHODS.items() if fn is base_method), getattr(base_method, "__name__", "base"))
    if not info(base_name).factorizable:  # ofa, snmf: a second factorisation around them makes no sense
        raise VocabTransferError(
            f"method '{base_name}+{factorization}': {base_name} factorises on its own; use {base_name!r} without "
            f"'+{factorization}'"
        )
    name = name or f"{base_name}+{factorization}"
    section = f"init.{factorization}"

    def method(problem: TransferProblem, options: FactorizedOptions) -> TransferResult:
        # not at the top: factorize imports init.methods.options, whose package imports this module (a cycle)

        # 1. factorise the source embeddings
        C, P, fstats = factorize_source(
            problem.source_embeddings,
            factorization,
            options.factorization,
            seed=problem.seed,
            device=problem.device,
            section=section,
            cached=problem.factors.get(factorization),
        )
        k = C.shape[1]
        # 2. the base method initialises the low-dimensional rows
        inner = dataclasses.replace(problem, source_embeddings=C.float().contiguous())
        res = base_method(inner, options.base)
        coords = res.embeddings.detach().cpu()
        if coords.shape != (problem.target_size, k):
            raise VocabTransferError(
                f"{name}: base method returned shape {tuple(coords.shape)}, expected ({problem.target_size}, {k})"
            )
        if not bool(coords.isfinite().all()):
            raise VocabTransferError(f"{name}: base method returned non-finite coordinates")
        stats = {"method": name, "factorization": fstats, "base": res.stats}
        # 3. semi-NMF coordinates must stay non-negative
        if factorization == "snmf":
            neg = coords < 0
            n_entries, n_rows = int(neg.sum()), int(neg.any(dim=1).sum())
            if n_entries:
                log.warning(
                    "%s: clamped %d negative coordinate entries in %d target rows to 0 "
                    "(semi-NMF coefficients are non-negative)",
                    name,
                    n_entries,
                    n_rows,
                )
                coords = coords.clamp_min(0)
            stats["clamped_negative_entries"] = n_entries
            stats["clamped_rows"] = n_rows
        if res.extra:
            log.info(
                "%s: the base method's extra tensors (%s) live in the low-rank space and are not kept",
                name,
                ", ".join(sorted(res.extra)),
            )
        # 4. map back up with the shared primitives
        embeddings = (coords.double() @ P.double()).float()
        return TransferResult(
            embeddings=embeddings.contiguous(),
            stats=stats,
            extra={"coordinates": coords.float().contiguous(), "primitives": P.float().contiguous()},
        )

    method.__name__ = name.replace("+", "_")
    method.__qualname__ = method.__name__
    method.__doc__ = f"{name}: {base_name} in the {factorization} coordinate space of the source embeddings."
    return method


def resolve(name: str) -> Method:
    """`<base>+svd` / `<base>+snmf` for any registered base method (e.g. focus+svd)."""
    base, fact = split_method(name)
    if fact not in FACTORIZATIONS:
        raise VocabTransferError(
            f"method {name!r}: a factorised form is <base>+<factorization> with factorization one of "
            f"{', '.join(FACTORIZATIONS)} (e.g. focus+svd)"
        )
    if base not in METHODS:
        raise VocabTransferError(
            f"method {name!r}: unknown base method {base!r}; available methods: {', '.join(sorted(METHODS))}"
        )
    if not info(base).factorizable:
        raise VocabTransferError(f"method {name!r}: {base} factorises on its own; use {base!r} without '+{fact}'")
    return factorized(METHODS[base], fact, name=name)  # type: ignore[arg-type]
