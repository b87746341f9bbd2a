"""Truncated SVD of an embedding matrix: E ≈ coordinates (V×k) @ primitives (k×D), the
factorisation OFA and the `<method>+svd` variants work in."""

from __future__ import annotations

import torch

from vocabtransfer.init.factors import check_matrix, check_rank, lapack_single_thread

# A matrix with at least TALL rows per column (every embedding matrix: 30522×384, 262144×640)
# is factorised through its D×D Gram matrix, as long as the kept singular values are at least
# GRAM_MIN_RATIO of the largest (so squaring them loses nothing that float64 keeps).
TALL = 8
GRAM_MIN_RATIO = 1e-3
GRAM_BLOCK = 16384  # rows per block of the Gram product (a fixed order: the same sum on every machine)


def _gram_svd(E: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """(U_k, S_k, V_kᵀ) of a tall float64 E from the eigenvectors of EᵀE; None when the kept
    singular values span more than 1/GRAM_MIN_RATIO (then only the full SVD is accurate).

    1. G = EᵀE in float64, summed over row blocks in a fixed order (V·D² multiply-adds);
    2. G = V Λ Vᵀ (a D×D symmetric eigenproblem, on one thread); S = sqrt(Λ), largest first;
    3. U_k = E V_k / S_k (V·D·k multiply-adds).
    The coordinates agree with LAPACK's to about 1e-16·(σ_1/σ_k)² (orthonormal to that
    precision); the full SVD (QR, bidiagonalisation, U for all D columns) costs several times more.
    """
    V, D = E.shape
    G = E.new_zeros(D, D)
    for start in range(0, V, GRAM_BLOCK):
        block = E[start : start + GRAM_BLOCK]
        G += block.T @ block
    with lapack_single_thread(G):
        lam, vecs = torch.linalg.eigh(G)
    lam, vecs = lam.flip(0)[:k], vecs.flip(1)[:, :k]
    if not float(lam[-1]) > float(lam[0]) * GRAM_MIN_RATIO**2:
        return None
    S = lam.sqrt()
    U = (E @ vecs) / S
    return U, S, vecs.T


def truncated_svd(E: torch.Tensor, keep_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """E ≈ C @ P with C = U_k (V×k, orthonormal columns) and P = diag(S_k) V_kᵀ (k×D).

    This is OFA's convention (Liu et al. 2024, `perform_factorize`): the coordinates are
    the left singular vectors and the singular values live in the "primitive embeddings".
    Any per-dimension scaling convention gives the same final embeddings for the methods
    here (linear combinations, means, per-dimension Gaussians), so this choice only fixes
    what coordinates.safetensors holds.

    Computed in float64 and returned in E's dtype: a tall matrix (≥ TALL rows per column)
    through its Gram matrix (`_gram_svd`: 262,144×640 in seconds, where LAPACK's full SVD
    takes about a minute on one core), any other matrix, or one whose kept singular values
    span too wide a range, by LAPACK's SVD. Signs are fixed deterministically: in
    each column of U the entry of largest magnitude is positive (ties: the lowest row), so
    the same input always gives byte-identical output. `keep_dim` larger than the number
    of rows pads with zero columns/rows (the factorisation is exact already).
    """
    check_matrix(E, "truncated_svd: E")
    V, D = E.shape
    k = check_rank(keep_dim, "keep_dim", V, D)
    X = E.detach().double()
    found = _gram_svd(X, k) if V >= TALL * D else None
    if found is not None:
        U, S, Vh = found
    else:
        # 1. LAPACK's SVD differs in the last bits with the thread count (enough to flip a few
        #    float32 roundings); one thread makes it byte-identical for every caller
        with lapack_single_thread(E):
            U, S, Vh = torch.linalg.svd(X, full_matrices=False)
    r = min(k, S.shape[0])
    U, S, Vh = U[:, :r], S[:r], Vh[:r]
    # 2. deterministic signs: the largest-|.| entry of every coordinate column is positive
    pivot = U.abs().argmax(dim=0)
    signs = torch.sign(U[pivot, torch.arange(r, device=U.device)])
    signs[signs == 0] = 1.0
    U = U * signs
    Vh = Vh * signs[:, None]
    C = U
    P = S[:, None] * Vh
    # 3. fewer rows than keep_dim: pad with zero coordinates / zero primitives
    if r < k:
        C = torch.cat([C, C.new_zeros(V, k - r)], dim=1)
        P = torch.cat([P, P.new_zeros(k - r, D)], dim=0)
    return C.to(E.dtype).contiguous(), P.to(E.dtype).contiguous()
