"""Truncated SVD and semi-NMF (vocabtransfer.init.factorize)."""

from __future__ import annotations

import pytest
import torch

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.init.factors import relative_error
from vocabtransfer.init.semi_nmf import SemiNmfSettings, kmeans, semi_nmf
from vocabtransfer.plan.method_options import SnmfOptions
from vocabtransfer.init.factorize import factorize_source, svd_relative_error
from vocabtransfer.init.svd import TALL, truncated_svd


pytestmark = pytest.mark.usefixtures("one_thread")


def _random(V: int, D: int, seed: int = 0, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(V, D, generator=torch.Generator().manual_seed(seed), dtype=dtype)


# ------------------------------------------------------------------------------ truncated SVD


def test_svd_full_rank_reproduces_input():
    E = _random(50, 8)
    C, P = truncated_svd(E, 8)
    assert C.shape == (50, 8) and P.shape == (8, 8) and C.dtype == torch.float32
    torch.testing.assert_close(C @ P, E, atol=1e-5, rtol=0)


def test_svd_convention_and_eckart_young():
    E = _random(40, 6, seed=1, dtype=torch.float64)
    C, P = truncated_svd(E, 3)
    # OFA's convention: orthonormal coordinates, singular values in the primitives
    torch.testing.assert_close(C.T @ C, torch.eye(3, dtype=torch.float64))
    S = torch.linalg.svdvals(E)
    torch.testing.assert_close(P.norm(dim=1), S[:3])
    # sign convention: the largest-magnitude entry of every coordinate column is positive
    assert bool((C[C.abs().argmax(dim=0), torch.arange(3)] > 0).all())
    # best rank-3 error = the tail of the singular values
    expected = float((S[3:] ** 2).sum().sqrt() / S.square().sum().sqrt())
    assert relative_error(E, C, P) == pytest.approx(expected, rel=1e-9)


def test_svd_sign_is_deterministic_under_sign_flips():
    E = _random(30, 5, seed=2)
    C1, P1 = truncated_svd(E, 4)
    C2, P2 = truncated_svd(E.clone(), 4)
    assert torch.equal(C1, C2) and torch.equal(P1, P2)
    # negating the input flips the primitives, never the (sign-normalised) coordinates
    C3, P3 = truncated_svd(-E, 4)
    torch.testing.assert_close(C3, C1, atol=1e-5, rtol=0)
    torch.testing.assert_close(P3, -P1, atol=1e-5, rtol=0)


def test_svd_fewer_rows_than_keep_dim_pads_with_zeros():
    E = _random(3, 5)
    C, P = truncated_svd(E, 5)
    assert C.shape == (3, 5) and P.shape == (5, 5)
    assert bool((C[:, 3:] == 0).all()) and bool((P[3:] == 0).all())
    torch.testing.assert_close(C @ P, E, atol=1e-5, rtol=0)


@pytest.mark.parametrize("bad", [9, 0, -1, 2.5])
def test_svd_rejects_bad_keep_dim(bad):
    with pytest.raises(VocabTransferError, match="keep_dim") as err:
        truncated_svd(_random(20, 8), bad)
    assert "\n" not in str(err.value)
    if bad == 9:
        assert "hidden size 8" in str(err.value)


def test_svd_rejects_non_finite_input():
    E = _random(10, 4)
    E[3, 1] = float("nan")
    with pytest.raises(VocabTransferError, match="NaN"):
        truncated_svd(E, 2)


def _lapack(E: torch.Tensor, k: int):
    U, S, Vh = torch.linalg.svd(E.double(), full_matrices=False)
    U, S, Vh = U[:, :k], S[:k], Vh[:k]
    signs = torch.sign(U[U.abs().argmax(dim=0), torch.arange(k)])
    return U * signs, S[:, None] * Vh * signs[:, None]


def test_svd_of_a_tall_matrix_through_the_gram_matrix_equals_lapack():
    # ≥ TALL rows per column: the Gram route; decaying singular values like an embedding matrix's
    g = torch.Generator().manual_seed(11)
    E = torch.randn(3000, 24, generator=g, dtype=torch.float64) * torch.linspace(3.0, 0.2, 24, dtype=torch.float64)
    assert E.shape[0] >= TALL * E.shape[1]
    C, P = truncated_svd(E, 10)
    C_ref, P_ref = _lapack(E, 10)
    torch.testing.assert_close(C, C_ref, atol=1e-10, rtol=0)
    torch.testing.assert_close(P, P_ref, atol=1e-10, rtol=0)
    torch.testing.assert_close(C.T @ C, torch.eye(10, dtype=torch.float64), atol=1e-12, rtol=0)
    # float32 in, float32 out, the same factors to float32 precision, byte-identical on a rerun
    C32, P32 = truncated_svd(E.float(), 10)
    assert C32.dtype == torch.float32
    torch.testing.assert_close(C32.double() @ P32.double(), C_ref @ P_ref, atol=1e-4, rtol=0)
    C32b, P32b = truncated_svd(E.float().clone(), 10)
    assert torch.equal(C32, C32b) and torch.equal(P32, P32b)
    # the error of the factorisation by Pythagoras equals the direct one
    assert svd_relative_error(E, P) == pytest.approx(relative_error(E, C, P), rel=1e-9)


def test_svd_of_a_tall_rank_deficient_matrix_falls_back_to_lapack():
    # rank 3 in 8 columns: the Gram route cannot resolve the zero singular values, LAPACK can
    g = torch.Generator().manual_seed(12)
    E = torch.randn(400, 3, generator=g, dtype=torch.float64) @ torch.randn(3, 8, generator=g, dtype=torch.float64)
    C, P = truncated_svd(E, 8)
    torch.testing.assert_close(C @ P, E, atol=1e-10, rtol=0)
    torch.testing.assert_close(C.T @ C, torch.eye(8, dtype=torch.float64), atol=1e-10, rtol=0)


# ------------------------------------------------------------------------------ semi-NMF


def _clusters(seed: int = 0):
    """60 rows that are exactly 3 prototypes (20 copies each), shuffled."""
    g = torch.Generator().manual_seed(seed)
    protos = torch.randn(3, 7, generator=g) * 3
    labels = torch.arange(60) % 3
    labels = labels[torch.randperm(60, generator=g)]
    return protos[labels], labels


def test_kmeans_finds_exact_clusters():
    X, labels = _clusters()
    found, centroids = kmeans(X, 3, seed=0)
    # same partition (up to cluster names) and centroids equal to the prototypes
    pairs = {(int(a), int(b)) for a, b in zip(labels, found)}
    assert len(pairs) == 3
    for a, b in pairs:
        torch.testing.assert_close(centroids[b], X[labels == a][0])


def test_semi_nmf_kmeans_init_is_exact_on_clustered_rows():
    # Ding et al.: W0 = indicator + 0.2 = indicator · (I + 0.2·11ᵀ), an invertible mix of the
    # clusters, so the first least-squares H already reproduces X exactly.
    X, _ = _clusters(1)
    W, H, history = semi_nmf(X.double(), 3, SemiNmfSettings(max_iter=5, tol=0.0), seed=0, return_history=True)
    assert history[0] > 0.1 and max(history[1:]) < 1e-9
    assert bool((W >= 0).all())
    # float32 gives the same factors to float32 precision (its Gram-based error history is
    # only accurate to ~1e-3 this close to zero; the direct error is far smaller)
    W32, H32 = semi_nmf(X, 3, SemiNmfSettings(max_iter=5, tol=0.0), seed=0)
    assert relative_error(X, W32, H32) < 1e-5


@pytest.mark.parametrize("init", ["kmeans", "svd"])
def test_semi_nmf_nonnegative_and_error_never_rises(init):
    X = _random(200, 12, seed=3, dtype=torch.float64) + 0.3
    seen = []
    W, H, history = semi_nmf(
        X,
        5,
        SemiNmfSettings(max_iter=150, tol=0.0, init=init),
        seed=0,
        return_history=True,
        callback=lambda it, err: seen.append((it, err)),
    )
    assert W.shape == (200, 5) and H.shape == (5, 12) and W.dtype == torch.float64
    assert bool((W >= 0).all())
    assert len(history) == len(seen) + 1 and [e for _, e in seen] == history[1:]
    rises = [b - a for a, b in zip(history, history[1:]) if b > a + 1e-12]
    assert rises == []
    assert history[-1] < history[0]
    # the history is the true error of the returned factors
    assert relative_error(X, W, H) == pytest.approx(history[-1], rel=1e-9)
    # and never better than the truncated-SVD optimum of the same rank
    C, P = truncated_svd(X, 5)
    assert history[-1] >= relative_error(X, C, P) - 1e-12


def test_semi_nmf_float32_error_never_rises_beyond_rounding():
    X = _random(300, 16, seed=4) + 0.5
    W, H, history = semi_nmf(X, 6, SemiNmfSettings(max_iter=100, tol=0.0), seed=1, return_history=True)
    assert W.dtype == torch.float32 and bool((W >= 0).all())
    assert all(b <= a * (1 + 1e-5) for a, b in zip(history, history[1:]))


def test_semi_nmf_same_seed_is_byte_identical():
    X = _random(150, 10, seed=5)
    W1, H1 = semi_nmf(X, 4, SemiNmfSettings(max_iter=40), seed=7)
    W2, H2 = semi_nmf(X.clone(), 4, SemiNmfSettings(max_iter=40), seed=7)
    assert torch.equal(W1, W2) and torch.equal(H1, H2)
    W3, _ = semi_nmf(X, 4, SemiNmfSettings(max_iter=40), seed=8)
    assert not torch.equal(W1, W3)


def test_semi_nmf_stops_on_tol():
    X = _random(150, 10, seed=6)
    _, _, loose = semi_nmf(X, 4, SemiNmfSettings(max_iter=400, tol=1e-2), seed=0, return_history=True)
    _, _, tight = semi_nmf(X, 4, SemiNmfSettings(max_iter=400, tol=1e-6), seed=0, return_history=True)
    assert len(loose) < len(tight)
    # it stopped at the first iteration whose relative improvement fell below tol
    assert (loose[-2] - loose[-1]) / loose[-2] < 1e-2
    assert all((a - b) / a >= 1e-2 for a, b in zip(loose[:-2], loose[1:-1]))


def test_semi_nmf_svd_init_starts_at_rank_minus_one_svd():
    X = _random(80, 9, seed=7, dtype=torch.float64)
    C, P = truncated_svd(X, 3)
    _, _, history = semi_nmf(X, 4, SemiNmfSettings(max_iter=0, init="svd"), return_history=True)
    assert history == [pytest.approx(relative_error(X, C, P), rel=1e-9)]


@pytest.mark.parametrize(
    "kwargs, word",
    [
        ({"rank": 11}, "rank"),
        ({"rank": 0}, "rank"),
        ({"rank": 3, "max_iter": -1}, "max_iter"),
        ({"rank": 3, "tol": -1.0}, "tol"),
        ({"rank": 3, "init": "nndsvd"}, "init"),
    ],
)
def test_semi_nmf_rejects_bad_arguments(kwargs, word):
    rank = kwargs.pop("rank")
    with pytest.raises(VocabTransferError, match=word) as err:
        semi_nmf(_random(30, 10), rank, SemiNmfSettings(**kwargs))
    assert "\n" not in str(err.value)


def test_semi_nmf_within_two_percent_of_svd_on_minilm():
    """The real source model: 30522×384 MiniLM embeddings at rank 100 (fast svd init; the
    default k-means init is measured in benchmarks/semi_nmf_vs_svd.py)."""
    from safetensors.torch import load_file

    from vocabtransfer.model.hub import resolve_model_path

    path = resolve_model_path("sentence-transformers/all-MiniLM-L6-v2") / "model.safetensors"
    E = load_file(str(path))["embeddings.word_embeddings.weight"].float()
    S = torch.linalg.svdvals(E.double())
    err_svd = float(S[100:].square().sum().sqrt() / S.square().sum().sqrt())  # Eckart–Young optimum
    W, H = semi_nmf(E, 100, SemiNmfSettings(init="svd", max_iter=5), seed=0)
    err_snmf = relative_error(E, W, H)
    assert bool((W >= 0).all())
    assert err_svd <= err_snmf <= 1.02 * err_svd


def test_snmf_with_the_default_params_is_within_two_percent_of_svd_on_minilm():
    """What an init job runs (`factorize_source` with init.snmf's defaults: the svd start, max_iter 500,
    tol 1e-4) on MiniLM at rank 100: within the 1.02 bar, stopped by tol, W ≥ 0."""
    from safetensors.torch import load_file

    from vocabtransfer.model.hub import resolve_model_path

    path = resolve_model_path("sentence-transformers/all-MiniLM-L6-v2") / "model.safetensors"
    E = load_file(str(path))["embeddings.word_embeddings.weight"].float()
    W, H, stats = factorize_source(E, "snmf", SnmfOptions(), seed=0)
    err_svd = svd_relative_error(E, truncated_svd(E, 100)[1])
    assert stats["init"] == "svd" and stats["stopped_by_tol"] and bool((W >= 0).all())
    assert relative_error(E, W, H) == pytest.approx(stats["relative_error"], rel=1e-4)
    assert err_svd <= stats["relative_error"] <= 1.02 * err_svd


def test_snmf_with_the_default_params_same_seed_same_factors():
    X = _random(400, 12, seed=9) + 0.2
    W1, H1, s1 = factorize_source(X, "snmf", SnmfOptions(rank=5), seed=3)
    W2, H2, s2 = factorize_source(X.clone(), "snmf", SnmfOptions(rank=5), seed=3)
    assert torch.equal(W1, W2) and torch.equal(H1, H2) and s1["iterations"] == s2["iterations"]
