"""`focus`: FOCUS (Dobler & de Melo, 2023) from the pipeline's overlap and fastText artefacts.

1. Overlapping tokens copy their source row. Special tokens are part of the overlap when the
   target tokenizer uses the source's special-token strings (the tokenizer stage keeps them);
   any that are not are listed in the stats and initialised like other new tokens, as in deepfocus.
2. New tokens without a fastText vector: N(source mean, source std), seeded, in target-id order.
3. Other new tokens: sparsemax over cosine similarities to the overlapping tokens in fastText
   space, times those tokens' source rows (`focus_embeddings`, in blocks).

Options (params `init.focus`; defaults in `FocusOptions`): `block_size`
(new tokens per similarity block) and `topk` (sparsemax candidates per row; a speed knob, the
result does not depend on it).

`focus_embeddings` is the algorithm, from a precomputed overlap and auxiliary matrix; the
deepfocus-compatible `FOCUS(...)` (`vocabtransfer.init.deepfocus`) builds those and calls it.

What is faster than deepfocus: no per-token Python loop (the random rows are one batched draw,
step 3 runs on blocks of rows); sparsemax runs on each row's top-k similarities, which gives
exactly the full-row sparsemax whenever the support is smaller than k (entmax's own
partial-sort argument) and is recomputed with a larger k for rows where it is not; and the
convex combination is a sparse (CSR) product over each row's support.
"""

from __future__ import annotations

import logging
import time
import warnings

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
import entmax

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.log import progress
from vocabtransfer.init.methods.registry import TransferProblem, TransferResult, register
from vocabtransfer.plan.method_options import FocusOptions
from vocabtransfer.data.overlap import checked_pairs

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FocusInputs:
    """What FOCUS reads of a transfer problem, as arrays (`focus_embeddings`; omp reads the same):

    source_embeddings: (V_s, D) source rows, indexed by source id.
    target_ids_overlap, source_ids_overlap: (n,) aligned ids of the overlapping tokens.
    auxiliary: (V_t, d) auxiliary (fastText) vectors by target id; auxiliary_mask: (V_t,) bool, the token
        has a vector. Rows that are all zeros count as having none (deepfocus's rule).
    target_size: rows of the result (len(target_tokenizer)).
    """

    source_embeddings: torch.Tensor
    target_ids_overlap: Any
    source_ids_overlap: Any
    auxiliary: Any
    auxiliary_mask: Any
    target_size: int

    @classmethod
    def of(cls, problem: TransferProblem) -> FocusInputs:
        return cls(
            problem.source_embeddings,
            problem.overlap_target_ids,
            problem.overlap_source_ids,
            problem.auxiliary,
            problem.auxiliary_mask,
            problem.target_size,
        )


@register("focus")
def focus(problem: TransferProblem, opts: FocusOptions = FocusOptions()) -> TransferResult:
    check_problem(problem, "focus")
    embeddings, stats = focus_embeddings(FocusInputs.of(problem), seed=problem.seed, device=problem.device, opts=opts)
    stats.update(special_overlap_stats(problem, "focus", "FOCUS combination or random row"))
    stats.update(method="focus", options=asdict(opts))
    log.info(
        "focus: %d copied, %d FOCUS combinations of %d anchors, %d random (no fastText vector) in %.1f s",
        stats["copied"],
        stats["focus_combined"],
        stats["anchors"],
        stats["random"],
        stats["seconds"],
    )
    return TransferResult(embeddings=embeddings.cpu(), stats=stats)


# ---------------------------------------------------------------------------------------------
# checks and helpers shared with the methods built on FOCUS's rows (omp)


def check_problem(problem: TransferProblem, name: str) -> None:
    """The auxiliary vectors are there and the source matrix has a row per source token."""
    if problem.auxiliary is None or problem.auxiliary_mask is None:
        raise VocabTransferError(
            f"init {name} ({problem.lang or 'target'}): no auxiliary fastText embeddings were "
            f"given; run the fasttext stage and pass its embeddings.safetensors to {name}"
        )
    n_source = problem.source_embeddings.shape[0]
    if n_source < len(problem.source_tokenizer):
        raise VocabTransferError(
            f"source embeddings: {n_source} rows but the source tokenizer has "
            f"{len(problem.source_tokenizer)} tokens; the tokenizer and the model come from "
            "different checkpoints"
        )


def special_overlap_stats(problem: TransferProblem, name: str, fallback: str) -> dict:
    """`special_copied` and (logged) `special_not_in_overlap`: special target tokens outside the overlap
    are initialised like other new tokens (`fallback` says how)."""
    special = problem.special_target_ids()
    copied = np.isin(special, np.asarray(problem.overlap_target_ids, dtype=np.int64))
    stats = {"special_copied": int(copied.sum())}
    if (~copied).any():
        missing = problem.target_tokenizer.convert_ids_to_tokens(special[~copied].tolist())
        stats["special_not_in_overlap"] = missing
        log.warning(
            "%s: special token(s) %s do not overlap the source vocabulary; they are initialised "
            "like other new tokens (%s)",
            name,
            ", ".join(missing),
            fallback,
        )
    return stats


def has_vector(auxiliary: torch.Tensor, auxiliary_mask) -> np.ndarray:
    """(V_t,) bool: the token has an auxiliary vector (mask set and the row not all zeros, deepfocus's rule)."""
    aux_mask = torch.as_tensor(auxiliary_mask).to("cpu", torch.bool).numpy().reshape(-1)
    return aux_mask & (torch.as_tensor(auxiliary).to("cpu").abs().sum(dim=1) != 0).numpy()


# ---------------------------------------------------------------------------------------------
# random rows


def normal_rows(mean: torch.Tensor, std: torch.Tensor, n: int, seed: int) -> torch.Tensor:
    """`n` rows, bit for bit what `n` successive `torch.normal(mean, std, generator=gen)` calls give
    with `gen = torch.Generator("cpu").manual_seed(seed)` (deepfocus's per-token loop on CPU).

    FOCUS's own fallback, so that its random rows are deepfocus's; they are not the rows of
    `baselines.random_matrix` (which the other methods share) for the same seed."""
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    mean, std = mean.cpu(), std.cpu()
    dim = mean.numel()
    if n == 0:
        return torch.empty((0, dim), dtype=mean.dtype)
    if mean.dtype == torch.float32 and dim % 16 == 0:
        # CPU normal_ fills float32 tensors of >= 16 elements 16 at a time (Box-Muller on 16 uniforms);
        # with D % 16 == 0 each row of one (n, D) draw consumes the stream exactly as one D-draw does.
        return torch.normal(mean.expand(n, dim), std.expand(n, dim), generator=gen)
    # D % 16 != 0 (or not float32): the kernel recomputes the last 16 values of every draw from 16
    # fresh uniforms, so a batched draw would consume the stream differently. We fall back to the
    # per-row draw for these rows only (exact; n small calls, n = rows without a fastText vector).
    return torch.stack([torch.normal(mean, std, generator=gen) for _ in range(n)])


# ---------------------------------------------------------------------------------------------
# sparsemax weights and convex combinations


def _support_size(vals: torch.Tensor) -> torch.Tensor:
    """entmax's sparsemax support size for rows of descending values (same float operations)."""
    x = vals - vals[:, :1]
    cumsum = x.cumsum(dim=1) - 1
    rho = torch.arange(1, x.shape[1] + 1, device=x.device, dtype=x.dtype)
    return (rho * x > cumsum).sum(dim=1)


def _sparse_weights(sims: torch.Tensor, k: int) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """sparsemax(sims, dim=-1) as (rows, weights, anchor indices) groups with weights sorted descending.

    With the top-k values of a row, entmax's threshold is the full-row threshold whenever the
    support is smaller than k; rows whose support reaches k are redone with 2k (full sort at the end).
    """

    n_anchor = sims.shape[1]
    rows = torch.arange(sims.shape[0], device=sims.device)
    out = []
    while rows.numel():
        k = min(k, n_anchor)
        part = sims if rows.numel() == sims.shape[0] else sims[rows]
        vals, idx = part.topk(k, dim=1) if k < n_anchor else part.sort(dim=1, descending=True)
        solved = _support_size(vals) < k if k < n_anchor else torch.ones_like(rows, dtype=torch.bool)
        if solved.any():
            w = entmax.sparsemax(vals[solved], dim=-1)
            support = int((w > 0).sum(dim=1).max())
            out.append((rows[solved], w[:, :support], idx[solved][:, :support]))
        rows, k = rows[~solved], 2 * k
    return out


def _combine(weights: torch.Tensor, idx: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    """Row i: sum_j weights[i, j] * anchors[idx[i, j]] (weights padded with zeros past each support).

    A sparse (CSR) product with the support entries only; a dense one when the supports cover a
    large share of the anchors (then a plain matrix product is the faster of the two).
    """
    n, support = weights.shape
    n_anchor = anchors.shape[0]
    weights = weights.to(anchors.dtype)
    if support * 4 >= n_anchor:
        dense = torch.zeros((n, n_anchor), dtype=anchors.dtype, device=anchors.device)
        return dense.scatter_(1, idx, weights) @ anchors
    # columns in ascending anchor order within each row (deepfocus's summation order); padding last
    cols, order = idx.masked_fill(weights <= 0, n_anchor).sort(dim=1)
    keep = cols < n_anchor
    crow = torch.zeros(n + 1, dtype=torch.int64, device=anchors.device)
    crow[1:] = keep.sum(dim=1).cumsum(dim=0)
    with warnings.catch_warnings():  # "sparse CSR support is in beta"
        warnings.simplefilter("ignore", UserWarning)
        csr = torch.sparse_csr_tensor(
            crow, cols[keep], weights.gather(1, order)[keep], size=(n, n_anchor), check_invariants=False
        )
        return csr @ anchors


_FIX = "recompute the overlap and auxiliary embeddings for this target tokenizer"


def _checked_inputs(inputs: FocusInputs) -> tuple[np.ndarray, np.ndarray, torch.Tensor, np.ndarray]:
    """`focus_embeddings`' inputs checked: (overlap target ids, overlap source ids, auxiliary vectors
    float32 on the CPU, which target tokens have a vector)."""
    source_embeddings, target_size = inputs.source_embeddings, inputs.target_size
    if not isinstance(source_embeddings, torch.Tensor) or source_embeddings.dim() != 2:
        raise VocabTransferError(
            f"source embeddings: expected a 2-D tensor (vocab x dim), got "
            f"{getattr(source_embeddings, 'shape', type(source_embeddings).__name__)}"
        )
    n_source, dim = source_embeddings.shape
    t_ov, s_ov = checked_pairs(
        inputs.target_ids_overlap, inputs.source_ids_overlap, target_size, n_source, where="overlap"
    )
    aux = torch.as_tensor(inputs.auxiliary)
    aux_mask = torch.as_tensor(inputs.auxiliary_mask).to("cpu", torch.bool).numpy().reshape(-1)
    if aux.dim() != 2 or aux.shape[0] != target_size or aux_mask.shape != (target_size,):
        raise VocabTransferError(
            f"auxiliary embeddings: expected ({target_size}, d) vectors and a ({target_size},) "
            f"mask, got {tuple(aux.shape)} and {aux_mask.shape}; {_FIX}"
        )
    aux = aux.to("cpu", torch.float32)
    return t_ov, s_ov, aux, has_vector(aux, aux_mask)


def _new_target_ids(new_ids, t_ov: np.ndarray, target_size: int) -> np.ndarray:
    """The sorted target ids `focus_embeddings` initialises besides the overlap (default: all others)."""
    if new_ids is None:
        is_new = np.ones(target_size, dtype=bool)
        is_new[t_ov] = False
        return np.flatnonzero(is_new)
    new = np.unique(np.asarray(new_ids, dtype=np.int64))
    if np.isin(new, t_ov).any() or (new.size and (new[0] < 0 or new[-1] >= target_size)):
        raise VocabTransferError(f"new_ids: must be target ids (< {target_size}) outside the overlap; {_FIX}")
    return new


def _combine_new_rows(
    out: torch.Tensor,
    src: torch.Tensor,
    aux: torch.Tensor,
    focus_ids: np.ndarray,
    anchor_t: np.ndarray,
    anchor_s: np.ndarray,
    *,
    device: torch.device,
    opts: FocusOptions,
) -> list[torch.Tensor]:
    """Step 3 of `focus_embeddings`: `out[focus_ids]` = sparsemax(cosine similarities to the anchors'
    auxiliary vectors) @ the anchors' source rows, in blocks of `opts.block_size` rows, sparsemax on
    `opts.topk` candidates per row. Returns the support sizes of the rows, per block."""
    block_size, topk = opts.block_size, opts.topk
    supports: list[torch.Tensor] = []
    if not focus_ids.size:
        return supports
    if anchor_t.size == 0:
        raise VocabTransferError(
            "FOCUS: no overlapping token has an auxiliary (fastText) vector, so new tokens "
            "have nothing to be combined from; check the overlap and the fastText model"
        )
    anchor_src = src[torch.from_numpy(anchor_s).to(src.device)].to(device, torch.float32)
    anchor_aux = torch.nn.functional.normalize(aux[torch.from_numpy(anchor_t)].to(device), dim=1)
    blocks = range(0, focus_ids.size, max(1, int(block_size)))
    for s in progress(blocks, desc="FOCUS", unit="block"):
        ids = torch.from_numpy(focus_ids[s : s + block_size])
        sims = torch.nn.functional.normalize(aux[ids].to(device), dim=1) @ anchor_aux.T
        for rows, w, idx in _sparse_weights(sims, topk):
            out[ids.to(device)[rows]] = _combine(w, idx, anchor_src)
            supports.append((w > 0).sum(dim=1).cpu())
        del sims
    return supports


def focus_embeddings(
    inputs: FocusInputs,
    seed: int = 42,
    device: str | torch.device = "cpu",
    opts: FocusOptions = FocusOptions(),
    *,
    new_ids=None,
    anchor_mask=None,
) -> tuple[torch.Tensor, dict]:
    """FOCUS from a precomputed overlap and auxiliary matrix.

    Args:
        inputs: the source rows, the overlap and the auxiliary vectors (`FocusInputs`).
        seed: seeds the CPU generator of the random rows (CPU always, so CPU and GPU runs draw the
            same random rows).
        device: where similarities, sparsemax and the combination run ("cuda" when available).
        opts: params `init.focus`: `block_size`, new tokens per similarity block (block_size x anchors
            floats at a time), and `topk`, sparsemax candidates per row, doubled for rows whose support
            fills it (a speed knob; the result does not depend on it).
        new_ids: target ids to initialise besides the overlap (default: all other ids).
        anchor_mask: (n,) bool, which overlapping tokens may serve as FOCUS anchors (default: all).

    Returns:
        ((target_size, D) float32 tensor on `device`, stats): stats counts copied, focus_combined
        and random rows (random_reason: "no fastText vector"), anchors, support sizes, seconds.
    """
    start = time.perf_counter()
    device = torch.device(device)
    target_size = inputs.target_size
    t_ov, s_ov, aux, has_vec = _checked_inputs(inputs)

    # 1. copy the overlapping tokens
    src = inputs.source_embeddings.detach()
    out = torch.zeros((target_size, src.shape[1]), dtype=torch.float32, device=device)
    out[torch.from_numpy(t_ov).to(device)] = src[torch.from_numpy(s_ov).to(src.device)].to(device, torch.float32)

    # random rows for new tokens without an auxiliary vector, in target-id order
    new = _new_target_ids(new_ids, t_ov, target_size)
    random_ids = new[~has_vec[new]]
    focus_ids = new[has_vec[new]]
    rand = normal_rows(src.mean(dim=0), src.std(dim=0), random_ids.size, seed)
    out[torch.from_numpy(random_ids).to(device)] = rand.to(device, torch.float32)

    # 3. anchors: overlapping tokens with an auxiliary vector
    use = has_vec[t_ov] if anchor_mask is None else has_vec[t_ov] & np.asarray(anchor_mask, dtype=bool).reshape(-1)
    anchor_t, anchor_s = t_ov[use], s_ov[use]
    supports = _combine_new_rows(out, src, aux, focus_ids, anchor_t, anchor_s, device=device, opts=opts)
    support = torch.cat(supports).float() if supports else torch.zeros(0)
    stats = {
        "copied": int(t_ov.size),
        "focus_combined": int(focus_ids.size),
        "random": int(random_ids.size),
        "random_reason": "no fastText vector",
        "untouched": int(target_size - t_ov.size - new.size),
        "anchors": int(anchor_t.size),
        "support_mean": round(float(support.mean()), 3) if support.numel() else 0.0,
        "support_max": int(support.max()) if support.numel() else 0,
        "seed": int(seed),
        "device": str(device),
        "seconds": round(time.perf_counter() - start, 3),
    }
    return out, stats
