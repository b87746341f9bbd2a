"""Truncated SVD of an embedding matrix: E ≈ coordinates (V×k) @ primitives (k×D), the
factorisation OFA and the `<method>+svd` variants work in."""

from __future__ import annotations

import torch

from vocabtransfer.init.factors import check_matrix, check_rank, lapack_single_thread


def truncated_svd(E: torch.Tensor, keep_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """E ≈ C @ P with C = U_k (V×k, orthonormal columns) and P = diag(S_k) V_kᵀ (k×D).

    This is OFA's convention (Liu et al. 2024, `perform_factorize`): the coordinates are
    the left singular vectors and the singular values live in the "primitive embeddings".
    Any per-dimension scaling convention gives the same final embeddings for the methods
    here (linear combinations, means, per-dimension Gaussians), so this choice only fixes
    what coordinates.safetensors holds.

    Computed in float64 and returned in E's dtype. Signs are fixed deterministically: in
    each column of U the entry of largest magnitude is positive (ties: the lowest row), so
    the same input always gives byte-identical output. `keep_dim` larger than the number
    of rows pads with zero columns/rows (the factorisation is exact already).
    """
    check_matrix(E, "truncated_svd: E")
    V, D = E.shape
    k = check_rank(keep_dim, "keep_dim", V, D)
    # 1. LAPACK's SVD differs in the last bits with the thread count (enough to flip a few
    #    float32 roundings); one thread makes it byte-identical for every caller
    with lapack_single_thread(E):
        U, S, Vh = torch.linalg.svd(E.detach().double(), full_matrices=False)
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
