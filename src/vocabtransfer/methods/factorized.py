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

Options: the stage passes `init.<base>` with one extra key, `factorization`, holding the
params section of the factorisation (`init.svd` or `init.snmf`); `options_for` builds
exactly that. The names are resolved lazily (`resolve`), so every registered method gets
its factorised forms without a registry line.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Literal

import numpy as np
import torch

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.factorize import relative_error, semi_nmf, truncated_svd
from vocabtransfer.methods import METHODS, Method, TransferProblem, TransferResult

log = logging.getLogger(__name__)

FACTORIZATIONS = ("svd", "snmf")
# methods that factorise on their own: a second factorisation around them makes no sense
ALREADY_FACTORIZED = ("ofa", "snmf")
SVD_DEFAULTS = {"keep_dim": 100}
SNMF_DEFAULTS = {"rank": 100, "max_iter": 500, "tol": 1e-4, "init": "kmeans"}
# keys of the params sections init.svd / init.snmf (init.snmf also configures the `snmf` method)
SECTION_KEYS = {"svd": ("keep_dim",), "snmf": ("rank", "max_iter", "tol", "init", "neighbors", "temperature")}


def int_option(options: dict, key: str, default: int, *, section: str, minimum: int = 1) -> int:
    value = (options or {}).get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise VocabTransferError(f"{section}.{key}={value!r}: must be an integer ≥ {minimum} (default {default})")
    return int(value)


def float_option(options: dict, key: str, default: float, *, section: str, minimum: float = 0.0,
                 strict: bool = True) -> float:
    value = (options or {}).get(key, default)
    ok = isinstance(value, (int, float, np.floating)) and not isinstance(value, bool) and np.isfinite(value)
    if not ok or (value <= minimum if strict else value < minimum):
        bound = f"> {minimum}" if strict else f"≥ {minimum}"
        raise VocabTransferError(f"{section}.{key}={value!r}: must be a finite number {bound} (default {default})")
    return float(value)


def warn_unknown(options: dict, known, section: str) -> list[str]:
    """Log (and return) option keys this method does not read; the schema normally catches them."""
    unknown = sorted(set(options or {}) - set(known))
    if unknown:
        log.warning("%s: ignoring unknown option(s) %s; it reads %s", section, ", ".join(unknown),
                    ", ".join(sorted(known)))
    return unknown


def factorize_source(
    E: torch.Tensor,
    kind: Literal["svd", "snmf"],
    options: dict,
    *,
    seed: int,
    device: str = "cpu",
    section: str | None = None,
    cached: tuple[torch.Tensor, torch.Tensor, dict] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """(coordinates V×k, primitives k×D, stats) of the source embeddings, on the CPU.

    `cached` = (C, P, stats) computed earlier for the same E and options (the source_snmf
    stage, `problem.factors[kind]`) is checked for shape and returned instead of factorising.

    svd returns float64 factors; with keep_dim = D it does not factorise (C = E, P = I, as
    OFA does), so copied rows reproduce the source rows exactly. snmf returns float32.
    `options` is the params section (`init.svd` / `init.snmf`), named `section` in errors.
    """
    section = section or f"init.{kind}"
    D = E.shape[1]
    t0 = time.perf_counter()
    if kind == "svd":
        k = int_option(options, "keep_dim", SVD_DEFAULTS["keep_dim"], section=section)
        if k > D:
            raise VocabTransferError(
                f"{section}.keep_dim={k}: larger than the source model's hidden size {D}; set it to at most {D}"
            )
        if k == D:
            # OFA's convention: keep_dim = hidden size means no factorisation at all
            C = E.detach().cpu().double()
            P = torch.eye(D, dtype=torch.float64)
            stats = {"kind": "svd", "keep_dim": k, "relative_error": 0.0,
                     "note": "keep_dim equals the hidden size: not factorised (coordinates = embeddings, "
                             "primitives = identity), as in OFA"}
            log.info("%s: keep_dim = hidden size %d, so the embeddings are used unfactorised", section, D)
        else:
            C, P = truncated_svd(E.detach().cpu().double(), k)
            err = relative_error(E, C, P)
            stats = {"kind": "svd", "keep_dim": k, "relative_error": err}
            log.info("%s: truncated SVD to %d primitives, relative reconstruction error %.4f", section, k, err)
    elif kind == "snmf":
        k = int_option(options, "rank", SNMF_DEFAULTS["rank"], section=section)
        if k > D:
            raise VocabTransferError(
                f"{section}.rank={k}: larger than the source model's hidden size {D}; set it to at most {D}"
            )
        if cached is not None:
            C, P, stats = cached
            if tuple(C.shape) != (E.shape[0], k) or tuple(P.shape) != (k, D):
                raise VocabTransferError(
                    f"{section}: precomputed factors have shapes {tuple(C.shape)} and {tuple(P.shape)}, expected "
                    f"({E.shape[0]}, {k}) and ({k}, {D}); rerun the source_snmf stage"
                )
            log.info("%s: using the precomputed semi-NMF (rank %d, relative error %.4f)", section, k,
                     stats.get("relative_error", float("nan")))
            return C.float(), P.float(), dict(stats)
        max_iter = int_option(options, "max_iter", SNMF_DEFAULTS["max_iter"], section=section, minimum=0)
        tol = float_option(options, "tol", SNMF_DEFAULTS["tol"], section=section, strict=False)
        init = (options or {}).get("init", SNMF_DEFAULTS["init"])
        if init not in ("kmeans", "svd"):
            raise VocabTransferError(
                f"{section}.init={init!r}: unknown initialisation; allowed values: 'kmeans', 'svd'"
            )
        W, H, history = semi_nmf(E.detach().float(), k, max_iter=max_iter, tol=tol, seed=seed, device=device,
                                 init=init, return_history=True)
        C, P = W.cpu(), H.cpu()
        iterations = len(history) - 1
        stats = {"kind": "snmf", "rank": k, "init": init, "max_iter": max_iter, "tol": tol,
                 "iterations": iterations, "stopped_by_tol": iterations < max_iter,
                 "initial_relative_error": history[0], "relative_error": history[-1]}
        if iterations >= max_iter and max_iter > 0:
            log.warning("%s: semi-NMF hit max_iter=%d before the relative improvement fell below tol=%g "
                        "(relative error %.4f); raise %s.max_iter for a closer fit",
                        section, max_iter, tol, history[-1], section)
    else:
        raise VocabTransferError(f"factorization {kind!r}: unknown; allowed values: {', '.join(FACTORIZATIONS)}")
    stats["seconds"] = round(time.perf_counter() - t0, 3)
    return C, P, stats


def factorized(base_method: Method, factorization: Literal["svd", "snmf"], *, name: str | None = None) -> Method:
    """A method that runs `base_method` in the low-rank space of `factorization` (see module doc)."""
    if factorization not in FACTORIZATIONS:
        raise VocabTransferError(
            f"factorization {factorization!r}: unknown; allowed values: {', '.join(FACTORIZATIONS)}"
        )
    # the registry name of the base (get_method passes the function itself)
    base_name = next((n for n, fn in METHODS.items() if fn is base_method), getattr(base_method, "__name__", "base"))
    if base_name in ALREADY_FACTORIZED:
        raise VocabTransferError(
            f"method '{base_name}+{factorization}': {base_name} factorises on its own; use {base_name!r} without "
            f"'+{factorization}'"
        )
    name = name or f"{base_name}+{factorization}"
    section = f"init.{factorization}"

    def method(problem: TransferProblem) -> TransferResult:
        opts = dict(problem.options or {})
        fopts = opts.pop("factorization", None) or {}
        if not isinstance(fopts, dict):
            raise VocabTransferError(f"{name}: options['factorization'] must be the {section} mapping, got {fopts!r}")
        warn_unknown(fopts, SECTION_KEYS[factorization], section)
        # 1. factorise the source embeddings
        C, P, fstats = factorize_source(problem.source_embeddings, factorization, fopts, seed=problem.seed,
                                        device=problem.device, section=section,
                                        cached=problem.factors.get(factorization))
        k = C.shape[1]
        # 2. the base method initialises the low-dimensional rows
        inner = dataclasses.replace(problem, source_embeddings=C.float().contiguous(), options=opts)
        res = base_method(inner)
        coords = res.embeddings.detach().cpu()
        if coords.shape != (problem.target_size, k):
            raise VocabTransferError(
                f"{name}: base method returned shape {tuple(coords.shape)}, expected ({problem.target_size}, {k})"
            )
        if not bool(torch.isfinite(coords).all()):
            raise VocabTransferError(f"{name}: base method returned non-finite coordinates")
        stats = {"method": name, "factorization": fstats, "base": res.stats}
        # 3. semi-NMF coordinates must stay non-negative
        if factorization == "snmf":
            neg = coords < 0
            n_entries, n_rows = int(neg.sum()), int(neg.any(dim=1).sum())
            if n_entries:
                log.warning("%s: clamped %d negative coordinate entries in %d target rows to 0 "
                            "(semi-NMF coefficients are non-negative)", name, n_entries, n_rows)
                coords = coords.clamp_min(0)
            stats["clamped_negative_entries"] = n_entries
            stats["clamped_rows"] = n_rows
        if res.extra:
            log.info("%s: the base method's extra tensors (%s) live in the low-rank space and are not kept",
                     name, ", ".join(sorted(res.extra)))
        # 4. map back up with the shared primitives
        embeddings = (coords.double() @ P.double()).float()
        return TransferResult(embeddings=embeddings.contiguous(), stats=stats,
                              extra={"coordinates": coords.float().contiguous(), "primitives": P.float().contiguous()})

    method.__name__ = name.replace("+", "_")
    method.__qualname__ = method.__name__
    method.__doc__ = f"{name}: {base_name} in the {factorization} coordinate space of the source embeddings."
    return method


def factorized_forms() -> list[str]:
    """Every `<base>+<factorization>` name that `resolve` accepts now."""
    return [f"{b}+{f}" for b in sorted(METHODS) if b not in ALREADY_FACTORIZED for f in FACTORIZATIONS]


def resolve(name: str) -> Method:
    """`<base>+svd` / `<base>+snmf` for any registered base method (e.g. focus+svd)."""
    base, sep, fact = name.partition("+")
    if not sep or fact not in FACTORIZATIONS:
        raise VocabTransferError(
            f"method {name!r}: a factorised form is <base>+<factorization> with factorization one of "
            f"{', '.join(FACTORIZATIONS)} (e.g. focus+svd)"
        )
    if base not in METHODS and base not in ALREADY_FACTORIZED:
        raise VocabTransferError(
            f"method {name!r}: unknown base method {base!r}; available methods: {', '.join(sorted(METHODS))}"
        )
    if base in ALREADY_FACTORIZED:
        raise VocabTransferError(f"method {name!r}: {base} factorises on its own; use {base!r} without '+{fact}'")
    return factorized(METHODS[base], fact, name=name)  # type: ignore[arg-type]


def options_for(init: dict, name: str) -> dict:
    """The `problem.options` for method `name` from the params section `init`.

    Plain methods get `init.<name>`; `<base>+<fact>` gets `init.<base>` plus the key
    `factorization` = `init.<fact>` (e.g. focus+svd: {**init.focus, "factorization": init.svd}).
    """
    init = init or {}
    base, sep, fact = name.partition("+")
    if not sep:
        return dict(init.get(name) or {})
    return {**(init.get(base) or {}), "factorization": dict(init.get(fact) or {})}


def option_sections(name: str) -> list[str]:
    """The params sections method `name` reads (for the stage's params leaves / DVC):
    `ofa` -> [init.ofa]; `focus+svd` -> [init.focus, init.svd]."""
    base, sep, fact = name.partition("+")
    return [f"init.{base}"] + ([f"init.{fact}"] if sep else [])
