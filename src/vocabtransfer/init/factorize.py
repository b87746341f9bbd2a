"""Low-rank factorisations of an embedding matrix E (V×D): truncated SVD and semi-NMF.

Both return a pair `(coordinates, primitives)` with E ≈ coordinates @ primitives:
coordinates are per token (V×k), primitives are the shared up-projection (k×D).
Methods such as OFA, UNKs Everywhere (`snmf`) and the factorised variants (`focus+svd`, …,
`methods.variants`) initialise new tokens in the k-dimensional coordinate space and map them
up with the source model's primitives; `factorize_source` is the factorisation they (and the
source_snmf stage) run, configured by the params sections `init.svd` / `init.snmf`.
"""

from __future__ import annotations

import logging
import time
from typing import Literal, TypeVar

import torch

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.plan.method_options import FACTORIZATIONS, SnmfOptions, SvdOptions
from vocabtransfer.init.semi_nmf import SemiNmfSettings, clustered_semi_nmf, semi_nmf
from vocabtransfer.init.svd import truncated_svd

log = logging.getLogger(__name__)
OptionsT = TypeVar("OptionsT", SvdOptions, SnmfOptions)

# FACTORIZATIONS: the kinds `factorize_source` runs and their typed params `init.<kind>` (options.py)


def svd_relative_error(E: torch.Tensor, P: torch.Tensor) -> float:
    """‖E − CP‖_F / ‖E‖_F of a truncated SVD (C orthonormal, P = CᵀE): by Pythagoras
    ‖E‖² − ‖P‖², in float64, without forming the V×D product."""
    den = float(E.detach().double().square().sum())
    num = den - float(P.detach().double().square().sum())
    return (max(num, 0.0) / den) ** 0.5 if den > 0 else 0.0


def _typed(options: object, cls: type[OptionsT], section: str) -> OptionsT:
    """`options` checked to be the factorization's typed params section `cls`."""
    if not isinstance(options, cls):
        raise VocabTransferError(
            f"{section}: the options are a {type(options).__name__}, not the {cls.__name__} it takes"
        )
    return options


def factorize_source(
    E: torch.Tensor,
    kind: Literal["svd", "snmf"],
    options: SvdOptions | SnmfOptions | None,
    *,
    seed: int,
    device: str = "cpu",
    section: str | None = None,
    cached: tuple | None = None,
    return_labels: bool = False,
) -> tuple:
    """(coordinates V×k, primitives k×D, stats) of the source embeddings, on the CPU; with
    `return_labels=True` also the (V,) int64 cluster of every row (all 0 for svd and for
    snmf with `clusters` = 1).

    `cached` = (C, P, stats) or (C, P, stats, labels) computed earlier for the same E and
    options (the source_snmf stage, `problem.factors[kind]`) is checked for shape and
    returned instead of factorising.

    svd returns float64 factors; with keep_dim = D it does not factorise (C = E, P = I, as
    OFA does), so copied rows reproduce the source rows exactly. snmf returns float32; with
    `init.snmf.clusters` = C > 1 it is the block-structured `clustered_semi_nmf` (k = C·rank
    columns, each row non-zero only in its cluster's block), with C = 1 today's single
    `semi_nmf`. `options` is the typed params section (`init.svd` / `init.snmf`; None: the defaults),
    named `section` in errors.
    """
    if kind not in FACTORIZATIONS:
        raise VocabTransferError(f"factorization {kind!r}: unknown; allowed values: {', '.join(FACTORIZATIONS)}")
    section = section or f"init.{kind}"
    options = options or FACTORIZATIONS[kind]()
    V, D = E.shape
    t0 = time.perf_counter()
    labels = torch.zeros(V, dtype=torch.int64)
    if kind == "svd":
        C, P, stats = _svd_factors(E, _typed(options, SvdOptions, section).keep_dim, section)
    else:
        options = _typed(options, SnmfOptions, section)
        _check_snmf_options(options, V, D, section)
        if cached is not None:
            C, P, stats, labels = _cached_snmf(cached, options, V, D, labels, section)
            out = (C, P, stats)
            return out + (labels,) if return_labels else out
        C, P, stats, labels = _snmf_factors(E, options, labels, seed=seed, device=device, section=section)
    stats["seconds"] = round(time.perf_counter() - t0, 3)
    return (C, P, stats, labels) if return_labels else (C, P, stats)


def _svd_factors(E: torch.Tensor, k: int, section: str) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """`factorize_source`'s svd: float64 (C, P, stats) of the rank-`k` truncated SVD, or with k = D
    no factorisation at all (C = E, P = I, OFA's convention)."""
    D = E.shape[1]
    if k > D:
        raise VocabTransferError(
            f"{section}.keep_dim={k}: larger than the source model's hidden size {D}; set it to at most {D}"
        )
    if k == D:
        # OFA's convention: keep_dim = hidden size means no factorisation at all
        C = E.detach().cpu().double()
        P = torch.eye(D, dtype=torch.float64)
        stats = {
            "kind": "svd",
            "keep_dim": k,
            "relative_error": 0.0,
            "note": "keep_dim equals the hidden size: not factorised (coordinates = embeddings, "
            "primitives = identity), as in OFA",
        }
        log.info("%s: keep_dim = hidden size %d, so the embeddings are used unfactorised", section, D)
    else:
        C, P = truncated_svd(E.detach().cpu().double(), k)
        err = svd_relative_error(E, P)
        stats = {"kind": "svd", "keep_dim": k, "relative_error": err}
        log.info("%s: truncated SVD to %d primitives, relative reconstruction error %.4f", section, k, err)
    return C, P, stats


def _check_snmf_options(options: SnmfOptions, V: int, D: int, section: str) -> None:
    """snmf's rank at most the hidden size, its clusters at most the number of source tokens."""
    k = options.rank
    if k > D:
        raise VocabTransferError(
            f"{section}.rank={k}: larger than the source model's hidden size {D}; set it to at most {D}"
        )
    n_clusters = options.clusters
    if n_clusters > V:
        raise VocabTransferError(
            f"{section}.clusters={n_clusters}: more clusters than the {V} source tokens; set it to at most {V}"
        )


def _cached_snmf(cached: tuple, options: SnmfOptions, V: int, D: int, labels: torch.Tensor, section: str):
    """The precomputed semi-NMF `cached` (C, P, stats[, labels]), checked against the options and E's shape:
    (C float32, P float32, a copy of stats, the cluster ids, or `labels` where it has none)."""
    k, n_clusters = options.rank, options.clusters
    width = n_clusters * k
    C, P, stats = cached[:3]
    saved_clusters = int(stats.get("clusters", 1))
    if tuple(C.shape) != (V, width) or tuple(P.shape) != (width, D) or saved_clusters != n_clusters:
        raise VocabTransferError(
            f"{section}: precomputed factors have shapes {tuple(C.shape)} and {tuple(P.shape)} for "
            f"{saved_clusters} cluster(s), expected ({V}, {width}) and ({width}, {D}) for {n_clusters}; "
            "rerun the source_snmf stage"
        )
    if len(cached) > 3:
        labels = cached[3].to(torch.int64)
    elif n_clusters > 1:
        raise VocabTransferError(
            f"{section}: precomputed clustered factors come without their cluster ids; rerun the source_snmf stage"
        )
    log.info(
        "%s: using the precomputed semi-NMF (rank %d, %d cluster(s), relative error %.4f)",
        section,
        k,
        n_clusters,
        stats.get("relative_error", float("nan")),
    )
    return C.float(), P.float(), dict(stats), labels


def _snmf_factors(E: torch.Tensor, options: SnmfOptions, labels: torch.Tensor, *, seed: int, device: str, section: str):
    """`factorize_source`'s snmf: (W, H on the CPU, stats, the cluster ids) of the single `semi_nmf`
    (`labels` unchanged) or, with clusters > 1, the block-structured `clustered_semi_nmf`."""
    k, n_clusters = options.rank, options.clusters
    max_iter, tol, init = options.max_iter, options.tol, options.init
    settings = SemiNmfSettings(max_iter=max_iter, tol=tol, init=init)
    if n_clusters == 1:  # today's single factorisation, unchanged
        W, H, history = semi_nmf(E.detach().float(), k, settings, seed=seed, device=device, return_history=True)
        iterations = len(history) - 1
        stats = {
            "kind": "snmf",
            "rank": k,
            "clusters": 1,
            "init": init,
            "max_iter": max_iter,
            "tol": tol,
            "iterations": iterations,
            "stopped_by_tol": iterations < max_iter,
            "initial_relative_error": history[0],
            "relative_error": history[-1],
        }
    else:
        W, H, labels, info = clustered_semi_nmf(E.detach().float(), k, n_clusters, settings, seed=seed, device=device)
        iterations = max(info["iterations"])
        stats = {
            "kind": "snmf",
            "rank": k,
            "clusters": n_clusters,
            "init": init,
            "max_iter": max_iter,
            "tol": tol,
            "iterations": iterations,
            "stopped_by_tol": all(i < max_iter for i in info["iterations"]),
            "initial_relative_error": info["initial_relative_error"],
            "relative_error": info["relative_error"],
            "cluster_sizes": info["sizes"],
            "cluster_ranks": info["ranks"],
            "cluster_relative_errors": info["relative_errors"],
            "cluster_iterations": info["iterations"],
        }
        log.info(
            "%s: %d clusters × rank %d, relative error %.4f (per cluster %s)",
            section,
            n_clusters,
            k,
            info["relative_error"],
            ", ".join(f"{e:.3f}" for e in info["relative_errors"]),
        )
    if not stats["stopped_by_tol"] and max_iter > 0:
        log.warning(
            "%s: semi-NMF hit max_iter=%d before the relative improvement fell below tol=%g "
            "(relative error %.4f); raise %s.max_iter for a closer fit",
            section,
            max_iter,
            tol,
            stats["relative_error"],
            section,
        )
    return W.cpu(), H.cpu(), stats, labels
