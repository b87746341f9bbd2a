"""What every factorisation E ≈ coordinates @ primitives shares: the input checks (one error
naming the argument), the relative error, and LAPACK on one thread for the small solves."""

from __future__ import annotations

import contextlib

import torch

from vocabtransfer.errors import VocabTransferError


def check_matrix(X: torch.Tensor, name: str) -> None:
    if not isinstance(X, torch.Tensor) or X.ndim != 2 or X.shape[0] == 0 or X.shape[1] == 0:
        shape = tuple(X.shape) if isinstance(X, torch.Tensor) else type(X).__name__
        raise VocabTransferError(f"{name}: expected a non-empty 2-D tensor (tokens × hidden size), got {shape}")
    if not X.is_floating_point():
        raise VocabTransferError(
            f"{name}: expected floating-point values, got {X.dtype}; convert the embeddings to float32"
        )
    if not bool(torch.isfinite(X).all()):
        raise VocabTransferError(f"{name}: contains NaN or infinite values; check the source model's embedding weights")


def check_rank(value, name: str, V: int, D: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise VocabTransferError(f"{name}={value!r}: must be a positive integer (e.g. 100)")
    if value > D:
        raise VocabTransferError(
            f"{name}={value}: larger than the source model's hidden size {D}; "
            f"a factorisation must not be wider than the embeddings, set {name} to at most {D}"
        )
    return value


def relative_error(X: torch.Tensor, C: torch.Tensor, P: torch.Tensor) -> float:
    """‖X − C P‖_F / ‖X‖_F, computed in float64 in row blocks."""
    num = 0.0
    for start in range(0, X.shape[0], 8192):
        block = X[start : start + 8192].double() - C[start : start + 8192].double() @ P.double()
        num += float((block * block).sum())
    den = float((X.double() ** 2).sum())
    return (num / den) ** 0.5 if den > 0 else 0.0


@contextlib.contextmanager
def lapack_single_thread(t: torch.Tensor):
    """Run a CPU LAPACK call on one thread: its rounding then does not depend on the thread
    count (matrix products already do not). A no-op for tensors on an accelerator."""
    if t.device.type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
