"""Batched orthogonal matching pursuit, the solver of init methods `omp` and `omp_donor`
(vocabtransfer.init.methods.omp, whose docstring states the steps and their cost): `batch_omp`, scikit-learn's
Cholesky OMP run on a block of signals in each tensor operation, in float64, and `sparse_rows`, its codes as a sparse
matrix to combine rows with. The atoms and signals are whatever the caller gives: unit fastText vectors (omp) or a
donor model's rows as they are (omp_donor)."""

from __future__ import annotations

import warnings

import torch


def batch_omp(
    atoms: torch.Tensor, signals: torch.Tensor, k: int, *, eps: float | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """OMP with at most `k` atoms for every signal at once, in float64 (init.methods.omp's doc, step 3).

    scikit-learn's `orthogonal_mp` (its Cholesky form, `_cholesky_omp`) run on all signals in each
    tensor operation: the same choices, coefficients and stopping rules. The Cholesky factor L of the
    selected atoms' Gram matrix is grown as scikit-learn grows it; the residual is kept through the
    orthonormal directions that L defines (q_t = (â_j - Σ_{i<t} w_i q_i) / L_tt, with w = L⁻¹ G[I, j] =
    the coordinates of â_j on q_1..q_{t-1}), so that a step costs one product with the atoms and no
    triangular solve: r_t = r_{t-1} - z_t q_t with z = L⁻¹ (Â x)_I. The coefficients are solved once at
    the end, Lᵀ γ = z (scikit-learn solves L Lᵀ γ = (Â x)_I every step: the same γ at the last one).

    Args:
        atoms: (n, d) dictionary rows (unit norm for OMP's usual meaning of "most correlated").
        signals: (b, d) the vectors to approximate.
        k: the most atoms per signal (1 ≤ k ≤ n).
        eps: stopping threshold (default: float64's epsilon, as scikit-learn).

    Returns:
        (idx, coef, count): (b, k) atom indices in the order chosen, (b, k) float64 least-squares
        coefficients (coef[i, :count[i]] on idx[i, :count[i]]; atom 0 with coefficient 0 after that),
        (b,) atoms used.
    """
    n, d = atoms.shape
    b = signals.shape[0]
    if not 1 <= k <= n:
        raise ValueError(f"batch_omp: k={k} must be between 1 and the number of atoms {n}")
    eps = torch.finfo(torch.float64).eps if eps is None else eps
    A, X = atoms.double(), signals.double()
    dev = A.device
    sq = A.square().sum(dim=1)  # the Gram matrix's diagonal
    xy = X @ A.T  # (b, n): Â x
    idx = torch.zeros((b, k), dtype=torch.int64, device=dev)
    valid = torch.zeros((b, k), dtype=torch.bool, device=dev)
    Q = torch.zeros((b, k, d), dtype=torch.float64, device=dev)  # orthonormal directions of the selected atoms
    L = torch.eye(k, dtype=torch.float64, device=dev).repeat(
        b, 1, 1
    )  # Cholesky factor of G[I, I]; identity where unused
    z = torch.zeros((b, k), dtype=torch.float64, device=dev)  # L⁻¹ (Â x)_I, the signal's coordinates on Q
    live = torch.ones(b, dtype=torch.bool, device=dev)
    residual, alpha = X.clone(), xy
    for t in range(k):
        # (a) the atom most correlated with the residual: np.argmax(|α|), ties to the lower index. An atom
        # taken already (its correlation is ~0) means no correlation is left: the token stops (scikit-learn)
        best, lam = alpha.abs().max(dim=1)
        live &= (best.square() >= eps) & ~(idx[:, :t] == lam[:, None]).any(dim=1)
        new = A[lam]
        # (b) its row of the Cholesky factor: w = L⁻¹ G[I, j] = Q_I â_j, L_tt = sqrt(G_jj - |w|²)
        if t:
            w = torch.bmm(Q[:, :t], new.unsqueeze(-1)).squeeze(-1)
            lkk = sq[lam] - w.square().sum(dim=1)
        else:
            w, lkk = None, sq[lam]
        live &= lkk > eps
        if not bool(live.any()):
            break
        idx[:, t], valid[:, t] = lam, live
        diag = torch.where(live, lkk.clamp_min(eps).sqrt(), 1.0)
        L[:, t, t] = diag
        proj = xy.gather(1, lam[:, None]).squeeze(1)
        direction = new
        if w is not None:
            w = torch.where(live[:, None], w, 0.0)
            L[:, t, :t] = w
            proj = proj - (w * z[:, :t]).sum(dim=1)
            direction = new - torch.bmm(w.unsqueeze(1), Q[:, :t]).squeeze(1)
        z[:, t] = torch.where(live, proj / diag, 0.0)
        Q[:, t] = torch.where(live[:, None], direction / diag[:, None], 0.0)
        if t + 1 < k:  # (c) the residual x - Â_Iᵀ γ and the atoms' correlations with it
            residual = residual - z[:, t, None] * Q[:, t]
            alpha = residual @ A.T
    # the least-squares coefficients on the selected atoms: L Lᵀ γ = (Â x)_I, i.e. Lᵀ γ = z
    coef = torch.linalg.solve_triangular(L.mT, z[:, :, None], upper=True).squeeze(-1)
    return idx * valid, coef * valid, valid.sum(dim=1)


def sparse_rows(idx: torch.Tensor, coef: torch.Tensor, valid: torch.Tensor, n: int, dtype: torch.dtype):
    """The (b, n) CSR matrix with coef[i, j] in column idx[i, j] where valid[i, j] (columns distinct per row)."""
    b = idx.shape[0]
    cols, order = idx.masked_fill(~valid, n).sort(dim=1)
    keep = cols < n
    crow = torch.zeros(b + 1, dtype=torch.int64, device=idx.device)
    crow[1:] = keep.sum(dim=1).cumsum(dim=0)
    with warnings.catch_warnings():  # "sparse CSR support is in beta"
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(
            crow, cols[keep], coef.gather(1, order)[keep].to(dtype), size=(b, n), check_invariants=False
        )
