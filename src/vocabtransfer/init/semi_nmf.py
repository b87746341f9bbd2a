"""Semi-NMF of an embedding matrix (UNKs Everywhere): E ≈ W @ H with W ≥ 0 (coordinates) and H
free (primitives), by multiplicative updates; k-means for the initialisation and for the
clustered, block-structured form (`init.snmf.clusters`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Literal

import torch

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.plan.method_options import SnmfOptions
from vocabtransfer.init.factors import check_matrix, check_rank, lapack_single_thread, relative_error
from vocabtransfer.init.svd import truncated_svd
from vocabtransfer.log import progress

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SemiNmfSettings:
    """How `semi_nmf` starts and stops: at most `max_iter` iterations, stopping when the relative improvement
    falls below `tol` (both params `init.snmf`'s defaults); `init` the start, "kmeans" (Ding et al.'s, with
    `kmeans_iter` Lloyd iterations) or "svd" (see `semi_nmf`)."""

    max_iter: int = SnmfOptions.max_iter
    tol: float = SnmfOptions.tol
    init: Literal["kmeans", "svd"] = "kmeans"
    kmeans_iter: int = 10


def kmeans(X: torch.Tensor, k: int, *, iters: int = 10, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded k-means on the rows of X: k-means++ seeding, then `iters` Lloyd iterations.

    Returns (labels (V,) int64, centroids (k×D)). An empty cluster is re-seeded with the
    row farthest from its centroid, so every cluster keeps at least one member.
    """
    V = X.shape[0]
    if k > V:
        raise VocabTransferError(f"rank={k}: larger than the number of rows {V}; choose a rank of at most {V}")
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    sq = (X * X).sum(1)

    def sq_dist(c: torch.Tensor) -> torch.Tensor:  # (V, m) squared distances to the rows of c
        return (sq[:, None] - 2.0 * (X @ c.T) + (c * c).sum(1)[None, :]).clamp_min_(0.0)

    # 1. k-means++ seeding (sampling on the CPU generator: identical choices on every device)
    first = int(torch.randint(V, (1,), generator=gen))
    idx = [first]
    closest = sq_dist(X[first : first + 1])[:, 0]
    for _ in range(1, k):
        weights = closest.double().cpu()
        if float(weights.sum()) <= 0:  # fewer distinct rows than k: take the next unused row
            taken = set(idx)
            nxt = next(i for i in range(V) if i not in taken)
        else:
            nxt = int(torch.multinomial(weights, 1, generator=gen))
        idx.append(nxt)
        closest = torch.minimum(closest, sq_dist(X[nxt : nxt + 1])[:, 0])
    centroids = X[torch.tensor(idx, device=X.device)].clone()
    # 2. Lloyd iterations
    labels = sq_dist(centroids).argmin(1)
    for _ in range(iters):
        counts = torch.bincount(labels, minlength=k)
        sums = torch.zeros_like(centroids).index_add_(0, labels, X)
        empty = (counts == 0).nonzero().flatten().tolist()
        centroids = sums / counts.clamp_min(1)[:, None].to(X.dtype)
        if empty:
            dist = sq_dist(centroids).gather(1, labels[:, None])[:, 0]
            far = dist.argsort(descending=True)[: len(empty)]
            centroids[torch.tensor(empty, device=X.device)] = X[far]
        new = sq_dist(centroids).argmin(1)
        if torch.equal(new, labels) and not empty:
            break
        labels = new
    return labels, centroids


def _pos(A: torch.Tensor) -> torch.Tensor:
    return (A.abs() + A) / 2


def _neg(A: torch.Tensor) -> torch.Tensor:
    return (A.abs() - A) / 2


def _least_squares_H(WtW: torch.Tensor, WtX: torch.Tensor) -> torch.Tensor:
    """H = (WᵀW)⁻¹ WᵀX in float64 with a tiny relative ridge (keeps a rank-deficient W solvable)."""
    G = WtW.double()
    ridge = 1e-10 * float(G.diagonal().mean().clamp_min(1e-30))
    G = G + ridge * torch.eye(G.shape[0], dtype=G.dtype, device=G.device)
    with lapack_single_thread(G):
        L, info = torch.linalg.cholesky_ex(G)
        if int(info) == 0:
            return torch.cholesky_solve(WtX.double(), L)
        return torch.linalg.lstsq(G, WtX.double()).solution


def _check_options(k: int, V: int, settings: SemiNmfSettings) -> None:
    """semi_nmf's rank (at most the number of rows), iteration limit, tolerance and initialisation."""
    max_iter, tol, init = settings.max_iter, settings.tol, settings.init
    if k > V:
        raise VocabTransferError(f"rank={k}: larger than the number of rows {V}; choose a rank of at most {V}")
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 0:
        raise VocabTransferError(f"max_iter={max_iter!r}: must be a non-negative integer (e.g. 500)")
    if not isinstance(tol, (int, float)) or isinstance(tol, bool) or not tol >= 0:
        raise VocabTransferError(f"tol={tol!r}: must be a non-negative number (e.g. 1e-4)")
    if init not in ("kmeans", "svd"):
        raise VocabTransferError(f"init={init!r}: unknown semi-NMF initialisation; use 'svd' or 'kmeans'")


def _initial_factors(
    X: torch.Tensor, k: int, settings: SemiNmfSettings, *, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The starting (W, H) of semi_nmf (`settings.init`): k-means indicators + 0.2 and centroids, or the
    exact non-negative rewrite of the rank-(k−1) truncated SVD (see `semi_nmf`)."""
    V, D = X.shape
    dtype = X.dtype
    if settings.init == "kmeans":
        labels, centroids = kmeans(X, k, iters=settings.kmeans_iter, seed=seed)
        W = torch.nn.functional.one_hot(labels, k).to(dtype) + 0.2
        H = centroids.clone()
    else:
        if k == 1:
            C, P = X.new_zeros(V, 0), X.new_zeros(0, D)
        else:
            C, P = truncated_svd(X.double(), k - 1)
        m = C.min(dim=0).values if k > 1 else C.new_zeros(0)
        W = torch.cat([C - m, C.new_ones(V, 1)], dim=1).to(dtype)
        H = torch.cat([P, (m @ P)[None, :]], dim=0).to(dtype)
        if k == 1:  # rank 1: the best constant row (the mean)
            H = X.mean(dim=0, keepdim=True)
    return W.contiguous(), H


def _multiplicative_updates(
    X: torch.Tensor,
    W: torch.Tensor,
    H: torch.Tensor,
    settings: SemiNmfSettings,
    *,
    log_every: int,
    callback: Callable[[int, float], None] | None,
    device: torch.device,
):
    """semi_nmf's iterations from (W, H): H by least squares, W by the multiplicative update, until the
    relative improvement falls below `settings.tol` or after `settings.max_iter`. Returns (W, H, history)."""
    max_iter, tol = settings.max_iter, settings.tol
    V, D = X.shape
    k = W.shape[1]
    # the error comes from the Gram terms at no extra V×D product: ‖X − WH‖² = ‖X‖² − 2⟨XHᵀ, W⟩ + ⟨WᵀW, HHᵀ⟩
    xx = float((X.double() ** 2).sum())
    if xx == 0.0:
        raise VocabTransferError("semi_nmf: X is all zeros; there is nothing to factorise")

    def rel_err(XHt: torch.Tensor, W: torch.Tensor, WtW: torch.Tensor, HHt: torch.Tensor) -> float:
        sq = xx - 2.0 * float((XHt.double() * W.double()).sum()) + float((WtW.double() * HHt.double()).sum())
        return max(sq, 0.0) ** 0.5 / xx**0.5

    WtW = W.T @ W
    history = [rel_err(X @ H.T, W, WtW, H @ H.T)]
    log.info(
        "semi-NMF %d×%d rank %d (%s init) on %s: relative error %.4f at start",
        V,
        D,
        k,
        settings.init,
        device,
        history[0],
    )
    bar = progress(range(1, max_iter + 1), desc=f"semi-NMF rank {k}", unit="it")
    it = 0
    for it in bar:
        H = _least_squares_H(WtW, W.T @ X).to(X.dtype)
        XHt = X @ H.T
        HHt = H @ H.T
        num = _pos(XHt) + W @ _neg(HHt)
        den = _neg(XHt) + W @ _pos(HHt)
        den = den.clamp_min(1e-12 * float(den.max().clamp_min(1e-30)))
        W = W * torch.sqrt(num / den)
        WtW = W.T @ W
        err = rel_err(XHt, W, WtW, HHt)
        history.append(err)
        if callback is not None:
            callback(it, err)
        if hasattr(bar, "set_postfix"):
            bar.set_postfix(rel_err=f"{err:.4f}", refresh=False)
        if log_every and it % log_every == 0:
            log.info("semi-NMF iteration %d: relative error %.4f", it, err)
        prev = history[-2]
        if prev <= 0.0 or (prev - err) / prev < tol:  # exact fit, or too little progress
            break
    if hasattr(bar, "close"):
        bar.close()
    log.info("semi-NMF stopped after %d iteration(s): relative error %.4f (start %.4f)", it, history[-1], history[0])
    return W, H, history


def semi_nmf(
    X: torch.Tensor,
    rank: int,
    settings: SemiNmfSettings = SemiNmfSettings(),
    *,
    seed: int = 0,
    device: str | torch.device | None = None,
    log_every: int = 50,
    return_history: bool = False,
    callback: Callable[[int, float], None] | None = None,
):
    """Semi-NMF X ≈ W @ H with W ≥ 0 (V×rank, token coefficients) and H (rank×D) unconstrained.

    Why this orientation: pymf's SNMF (and Ding, Li & Jordan's notation X ≈ F Gᵀ with
    columns as data points) applied to a V×D embedding matrix would constrain the D-side
    factor, i.e. make the shared up-projection non-negative and leave the per-token
    coefficients free. UNKs Everywhere (Pfeiffer et al. 2021) wants the opposite:
    non-negative per-token coefficients (each token a non-negative mix of latent
    "concepts") and one shared, unconstrained up-projection. So the rows of X (tokens) are
    the data points: X (V×D) = W (V×k, ≥ 0) · H (k×D). In Ding et al.'s symbols G = W and
    F = Hᵀ; their updates transposed to this orientation are, per iteration:

        1. H ← (WᵀW)⁻¹ WᵀX                                  (least squares, exact minimiser)
        2. W ← W ⊙ sqrt( ((XHᵀ)⁺ + W(HHᵀ)⁻) / ((XHᵀ)⁻ + W(HHᵀ)⁺) )
           with A⁺ = (|A| + A)/2 and A⁻ = (|A| − A)/2        (monotone, keeps W ≥ 0)

    so the reconstruction error never rises (in exact arithmetic; in float32 it can wobble
    at the 1e-7 level). Stops when the relative improvement of ‖X − WH‖_F over one
    iteration falls below `settings.tol` (a wobble upwards counts as no improvement), or
    after `settings.max_iter` iterations.

    Initialisation (`settings.init`):
      - "kmeans" (default, Ding et al.'s): seeded k-means (k-means++ then `settings.kmeans_iter`
        Lloyd iterations) on the rows of X with `rank` clusters; W = cluster indicator
        + 0.2, H = centroids. On MiniLM (30522×384, rank 100, tol 1e-4) this stops after
        ~140 iterations within 1% of the truncated-SVD error (benchmarks/semi_nmf_vs_svd.py).
      - "svd": an exact non-negative rewrite of the rank-(k−1) truncated SVD: with
        C, P = truncated_svd(X, k−1) and m = the per-column minimum of C,
        W = [C − m, 1] ≥ 0 and H = [P; m P] give W H = C P exactly, so the updates start
        at the rank-(k−1) SVD error (a few seconds instead of tens; W is dense, without the
        cluster structure of the k-means start; `seed` is not used).

    Computes in float32 (float64 if X is float64) on `device` (default: X's device); the
    k×k solves and the error bookkeeping run in float64. Same input, seed and device give
    byte-identical W, H (on the CPU also across thread counts: the LAPACK calls run on
    one thread). The error history uses the Gram identity below, accurate to about
    1e-7·‖X‖² in float32 (fine for embedding matrices, whose relative error is ~0.1–0.7;
    pass float64 X for near-exact fits). Returns (W, H) on `device`, or (W, H, history) with
    `return_history=True`, where history[i] is the relative error ‖X − WH‖_F / ‖X‖_F after
    i iterations (history[0]: the initialisation). `callback(iteration, rel_error)` is
    called after every iteration, and every `log_every` iterations log a line (0: none).
    """
    check_matrix(X, "semi_nmf: X")
    V, D = X.shape
    k = check_rank(rank, "rank", V, D)
    _check_options(k, V, settings)
    dev = torch.device(device) if device is not None else X.device
    dtype = torch.float64 if X.dtype == torch.float64 else torch.float32
    X = X.detach().to(device=dev, dtype=dtype)
    W, H = _initial_factors(X, k, settings, seed=seed)
    W, H, history = _multiplicative_updates(X, W, H, settings, log_every=log_every, callback=callback, device=dev)
    if return_history:
        return W, H, history
    return W, H


# --------------------------------------------------------------------------------------------
# Clustered semi-NMF (UNKs Everywhere's C up-projections)
# --------------------------------------------------------------------------------------------

CLUSTER_KMEANS_ITER = 20  # Lloyd iterations of the clustering that splits the rows into C groups


def _factorise_clusters(
    X: torch.Tensor,
    labels: torch.Tensor,
    clusters: int,
    k: int,
    dev: torch.device,
    settings: SemiNmfSettings,
    *,
    seed: int,
):
    """Steps 2 and 3 of `clustered_semi_nmf`: one `semi_nmf` per cluster of rows, written into its block
    of W' and H', and the overall error combined from the clusters'. Returns (W', H', info)."""
    V, D = X.shape
    W = X.new_zeros(V, clusters * k)
    H = X.new_zeros(clusters * k, D)
    info: dict[str, Any] = {
        "sizes": [],
        "ranks": [],
        "relative_errors": [],
        "initial_relative_errors": [],
        "iterations": [],
    }
    sq_total = sq_start = norm_total = 0.0
    for c in range(clusters):
        rows = (labels == c).nonzero().flatten().to(dev)
        Xc = X[rows]
        n, k_c = int(rows.numel()), min(k, int(rows.numel()))
        norm = float((Xc.double() ** 2).sum())
        if norm == 0.0:  # nothing to factorise: zero coefficients and primitives reconstruct it exactly
            errs, iters = [0.0, 0.0], 0
        else:
            Wc, Hc, history = semi_nmf(Xc, k_c, settings, seed=seed, log_every=0, return_history=True)
            W[rows, c * k : c * k + k_c] = Wc
            H[c * k : c * k + k_c] = Hc
            errs, iters = [history[0], relative_error(Xc, Wc, Hc)], len(history) - 1
            if clusters > 1:
                log.info(
                    "semi-NMF cluster %d/%d: %d rows, rank %d, relative error %.4f after %d iteration(s)",
                    c + 1,
                    clusters,
                    n,
                    k_c,
                    errs[1],
                    iters,
                )
        info["sizes"].append(n)
        info["ranks"].append(k_c)
        info["initial_relative_errors"].append(errs[0])
        info["relative_errors"].append(errs[1])
        info["iterations"].append(iters)
        sq_start += errs[0] ** 2 * norm
        sq_total += errs[1] ** 2 * norm
        norm_total += norm
    # the overall error: the clusters' squared errors add up
    info["initial_relative_error"] = (sq_start / norm_total) ** 0.5 if norm_total else 0.0
    info["relative_error"] = (sq_total / norm_total) ** 0.5 if norm_total else 0.0
    return W, H, info


def clustered_semi_nmf(
    X: torch.Tensor,
    rank: int,
    clusters: int,
    settings: SemiNmfSettings = SemiNmfSettings(),
    *,
    seed: int = 0,
    device: str | torch.device | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict]:
    """Semi-NMF per cluster of rows, written as ONE block-structured factorisation X ≈ W' H'.

    UNKs Everywhere (Pfeiffer et al. 2021) splits the source vocabulary into C clusters and
    gives every cluster its own up-projection. Here:

      1. the rows of X are clustered with the seeded `kmeans` (k-means++ then
         CLUSTER_KMEANS_ITER Lloyd iterations, `seed`) into `clusters` groups;
      2. each group c is factorised on its own, X_c ≈ W_c H_c, with `semi_nmf` at the same
         `rank` (capped at the group's size: rank_c = min(rank, |c|), the missing columns of
         W_c and rows of H_c are zero; an all-zero group gets W_c = 0, H_c = 0) and the same
         `seed` and `settings` (max_iter, tol, init);
      3. W' (V×C·rank, ≥ 0) holds row i's coefficients in the columns of its cluster's block
         [c·rank, (c+1)·rank) and zeros elsewhere; H' = vstack(H_1, …, H_C) (C·rank×D). So
         W' H' is exactly the clustered reconstruction, and every consumer of a (W, H) pair
         works unchanged.

    With clusters = 1 this is `semi_nmf(X, rank, …)` itself (no clustering): the same W, H
    byte for byte. Returns (W', H', labels (V,) int64 on the CPU, info) where info holds
    `sizes`, `ranks`, per-cluster `relative_errors` (‖X_c − W_c H_c‖/‖X_c‖, computed
    directly in float64), `initial_relative_errors` and `iterations`, and the overall
    `relative_error` / `initial_relative_error` (‖X − W'H'‖/‖X‖, combined from the clusters).
    W', H' are on `device` (default: X's device) in X's float precision.
    """
    check_matrix(X, "clustered_semi_nmf: X")
    V, D = X.shape
    k = check_rank(rank, "rank", V, D)
    if isinstance(clusters, bool) or not isinstance(clusters, int) or clusters < 1:
        raise VocabTransferError(f"clusters={clusters!r}: must be a positive integer (e.g. 1 or 16)")
    if clusters > V:
        raise VocabTransferError(f"clusters={clusters}: more clusters than the {V} rows; choose at most {V}")
    dev = torch.device(device) if device is not None else X.device
    dtype = torch.float64 if X.dtype == torch.float64 else torch.float32
    X = X.detach().to(device=dev, dtype=dtype)

    # 1. which cluster each row belongs to (clusters = 1: all rows, in their order)
    if clusters == 1:
        labels = torch.zeros(V, dtype=torch.int64)
    else:
        labels, _ = kmeans(X, clusters, iters=CLUSTER_KMEANS_ITER, seed=seed)
        labels = labels.cpu()
        log.info(
            "semi-NMF: %d rows in %d clusters (sizes %s)",
            V,
            clusters,
            torch.bincount(labels, minlength=clusters).tolist(),
        )
    # 2. one semi-NMF per cluster, written into its block of W' and H'; 3. the overall error
    W, H, info = _factorise_clusters(X, labels, clusters, k, dev, settings, seed=seed)
    return W.contiguous(), H.contiguous(), labels, info


def block_coefficients(W: torch.Tensor, labels: torch.Tensor, clusters: int) -> torch.Tensor:
    """The V×rank coefficients of each row's own block of a block-structured W' (V×C·rank):
    the compact form `expand_blocks` inverts."""
    V, width = W.shape
    rank = width // clusters
    return W.reshape(V, clusters, rank)[torch.arange(V), labels.to(torch.int64)].contiguous()


def expand_blocks(coefficients: torch.Tensor, labels: torch.Tensor, clusters: int) -> torch.Tensor:
    """W' (V×C·rank) with row i's `coefficients` (V×rank) in the block of cluster labels[i], zeros elsewhere."""
    V, rank = coefficients.shape
    W = coefficients.new_zeros(V, clusters, rank)
    W[torch.arange(V), labels.to(torch.int64)] = coefficients
    return W.reshape(V, clusters * rank)
