"""OFA (Liu et al. 2024): initialise new tokens in a low-rank SVD space of the source embeddings.

1. Factorise the source embeddings E ≈ C P (truncated SVD, `keep_dim` primitives).
2. Overlapping target tokens copy their source token's coordinates; so do special tokens
   matched to a source special token (same string or role, as in every method:
   `baselines.special_pairs`).
3. Every other target token with an auxiliary (fastText) vector gets a weighted mix of the
   coordinates of its `neighbors` most similar overlapping tokens (cosine similarity of the
   auxiliary vectors, weights softmax(similarity / temperature)).
4. Tokens without an auxiliary vector get random coordinates ~ N(mean, std) of the source
   coordinates per dimension (seeded), counted in the stats.
5. Embeddings = coordinates @ P.

The neighbour step (`neighbour_coordinates`) is shared with `snmf` and works on any
coordinate matrix. Options (params `init.ofa`; defaults in `OfaOptions`):
keep_dim, neighbors, temperature.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.log import progress
from vocabtransfer.init.methods.registry import TransferProblem, TransferResult, register
from vocabtransfer.init.methods.baselines import special_pairs
from vocabtransfer.init.factorize import factorize_source
from vocabtransfer.plan.method_options import OfaOptions, SnmfOptions, SvdOptions
from vocabtransfer.data.overlap import checked_pairs

log = logging.getLogger(__name__)

RANDOM_BLOCK = 8192  # rows per N(0, 1) draw of the random fallback


# --------------------------------------------------------------------------------------------
# input checks shared by ofa and snmf
# --------------------------------------------------------------------------------------------


def check_overlap(problem: TransferProblem, section: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The aligned overlap ids as int64 tensors, checked; an empty overlap is an error."""
    tgt, src = checked_pairs(
        problem.overlap_target_ids,
        problem.overlap_source_ids,
        problem.target_size,
        problem.source_embeddings.shape[0],
        where=section,
        allow_empty=False,
    )
    return torch.from_numpy(tgt.copy()), torch.from_numpy(src.copy())


def require_auxiliary(problem: TransferProblem, section: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(auxiliary V_t×d float32, usable V_t bool): usable = has a finite, non-zero vector."""
    if problem.auxiliary is None:
        raise VocabTransferError(
            f"{section}: needs fastText auxiliary vectors for the target tokens but none were given; "
            "run the fasttext stage for this language first (its output is an input of init)"
        )
    aux = problem.auxiliary.detach().float().cpu()
    V_t = problem.target_size
    if aux.ndim != 2 or aux.shape[0] != V_t:
        raise VocabTransferError(
            f"{section}: auxiliary vectors have shape {tuple(aux.shape)}, expected ({V_t}, dim) for the target "
            "vocabulary; rerun the fasttext stage with this tokenizer"
        )
    mask = (
        torch.ones(V_t, dtype=torch.bool)
        if problem.auxiliary_mask is None
        else problem.auxiliary_mask.detach().cpu().bool().reshape(-1)
    )
    if mask.shape[0] != V_t:
        raise VocabTransferError(
            f"{section}: auxiliary_mask has {mask.shape[0]} entries, expected {V_t}; rerun the fasttext stage"
        )
    bad = mask & ~torch.isfinite(aux).all(dim=1)
    if bool(bad.any()):
        raise VocabTransferError(
            f"{section}: auxiliary vector of target id {int(bad.nonzero()[0])} is not finite; rerun the fasttext stage"
        )
    return aux, mask


def check_neighbour_method(problem: TransferProblem, name: str, opts: OfaOptions | SnmfOptions, size_key: str) -> None:
    """The low-rank size (`keep_dim` / `rank`) of ofa's or snmf's options (params `init.<name>`)
    checked against the hidden size, and the overlap and auxiliary inputs checked too: every bad
    input fails before the factorisation."""
    section = f"init.{name}"
    size = getattr(opts, size_key)
    D = problem.source_embeddings.shape[1]
    if size > D:
        raise VocabTransferError(
            f"{section}.{size_key}={size}: larger than the source model's hidden size {D}; set it to at most {D}"
        )
    check_overlap(problem, section)
    require_auxiliary(problem, section)


# --------------------------------------------------------------------------------------------
# the neighbour step (OFA and UNKs Everywhere)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Step:
    """How `neighbour_coordinates` runs its steps 3 and 4: `top` neighbours mixed per new token with softmax
    temperature `temperature`, `block_size` rows at a time, `section` named in its messages, negative random
    entries clamped (`nonnegative`), and the source rows' clusters (`labels_src`, None unclustered) of `n_clusters`."""

    top: int
    temperature: float
    section: str
    block_size: int
    nonnegative: bool
    labels_src: torch.Tensor | None
    n_clusters: int


def neighbour_coordinates(
    problem: TransferProblem,
    source_coords: torch.Tensor,
    opts: OfaOptions | SnmfOptions,
    *,
    section: str,
    nonnegative: bool = False,
    block_size: int = 1024,
    source_clusters: torch.Tensor | None = None,
    n_clusters: int = 1,
) -> tuple[torch.Tensor, dict]:
    """Target coordinates (V_t×k, dtype of `source_coords`, CPU) and stats.

    Overlapping tokens (and special tokens matched by string or role) copy their source
    row; other tokens with an auxiliary vector get
    softmax(top-`opts.neighbors` cosine similarities / `opts.temperature`)-weighted mixes of the
    overlapping tokens' rows (only overlapping tokens that have an auxiliary vector can be
    neighbours); the rest get seeded N(mean, std) rows of `source_coords` per dimension.
    With `nonnegative=True` (semi-NMF coefficients) negative random entries are clamped to
    0 and counted. Runs over blocks of `block_size` rows on `problem.device`; no per-token Python
    loop. `opts`: params `init.ofa` or `init.snmf` (their neighbors and temperature); `section`
    names it in messages.

    Clustered coordinates (`n_clusters` = C > 1, `source_clusters` = the (V_s,) cluster of
    every source row, k = C·rank columns in C blocks, a clustered semi-NMF's W'): copies are
    unchanged; a new token joins the ONE cluster with the largest summed softmax weight
    among its top-`opts.neighbors` neighbours (ties: the lowest cluster id) and gets the
    renormalised mix of the neighbours in that cluster only, so it lives in that cluster's
    block; a random token draws its cluster (seeded, proportional to the clusters' source
    sizes) and gets N(mean, std) of that cluster's rows within its block. The stats count
    the new and random tokens per cluster.
    """
    tgt, src = check_overlap(problem, section)
    aux, has_vec = require_auxiliary(problem, section)
    V_t = problem.target_size
    coords_src = source_coords.detach().cpu()
    out = coords_src.new_zeros(V_t, coords_src.shape[1])
    labels_src = _checked_clusters(source_clusters, coords_src.shape, n_clusters, section) if n_clusters > 1 else None
    # 1. overlapping tokens, and special tokens matched to a source special token, copy their row
    done, copied = _copy_rows(problem, out, coords_src, tgt, src)
    # 2. which rows can take part in the similarity search
    cand_tgt, cand_src, new_ids, reasons = _search_rows(aux, has_vec, tgt, src, done, section)
    # 3. new tokens: softmax-weighted mix of the top-k most similar overlapping tokens
    neighbors, temperature = opts.neighbors, opts.temperature
    top = min(neighbors, int(cand_tgt.numel()))
    step = _Step(top, temperature, section, block_size, nonnegative, labels_src, n_clusters)
    combined_tokens = _mix_neighbours(problem, out, aux, coords_src, cand_tgt, cand_src, new_ids, step)
    # 4. the rest: seeded N(mean, std) of the source coordinates per dimension
    is_rand = ~done
    is_rand[new_ids] = False
    clamped, random_tokens = _random_rows(problem, out, is_rand, coords_src, reasons, step)
    n_new = int(new_ids.numel())
    stats = {
        "target_size": V_t,
        "copied": int(done.sum()),
        "combined": n_new,
        "random": int(is_rand.sum()),
        "reasons": {
            "copied": copied,
            "combined": {"auxiliary-vector neighbours among overlapping tokens": n_new} if n_new else {},
            "random": reasons,
        },
        "neighbour_candidates": int(cand_tgt.numel()),
        "neighbors": neighbors,
        "neighbors_used": top,
        "temperature": temperature,
        "seed": int(problem.seed),
    }
    if nonnegative:
        stats["random_negative_entries_clamped"] = clamped
    if labels_src is not None:
        stats["clusters"] = {
            "clusters": n_clusters,
            "source_tokens": torch.bincount(labels_src, minlength=n_clusters).tolist(),
            "combined_tokens": combined_tokens,
            "random_tokens": random_tokens,
        }
    return out, stats


def _copy_rows(
    problem: TransferProblem, out: torch.Tensor, coords_src: torch.Tensor, tgt: torch.Tensor, src: torch.Tensor
) -> tuple[torch.Tensor, dict[str, int]]:
    """Step 1 of `neighbour_coordinates`: overlapping tokens copy their source coordinates, and so do
    special tokens that match a source special token (same string or role) without being in the
    overlap. Returns (the copied target ids as a V_t bool mask, the copies counted by reason)."""
    out[tgt] = coords_src[src]
    is_overlap = torch.zeros(problem.target_size, dtype=torch.bool)
    is_overlap[tgt] = True
    copied = {"overlap": int(tgt.numel())}
    sp_t, sp_s, how, _ = special_pairs(problem, coords_src.shape[0])
    keep = ~is_overlap[torch.from_numpy(sp_t)].numpy() if sp_t.size else np.zeros(0, dtype=bool)
    for t_id, s_id, why in zip(sp_t[keep].tolist(), sp_s[keep].tolist(), [h for h, k_ in zip(how, keep) if k_]):
        out[t_id] = coords_src[s_id]
        copied[f"special token ({why})"] = copied.get(f"special token ({why})", 0) + 1
    done = is_overlap.clone()
    done[torch.from_numpy(sp_t[keep])] = True
    return done, copied


def _search_rows(
    aux: torch.Tensor, has_vec: torch.Tensor, tgt: torch.Tensor, src: torch.Tensor, done: torch.Tensor, section: str
):
    """Step 2 of `neighbour_coordinates`: the candidate neighbours (the overlapping pairs whose target
    token has a non-zero auxiliary vector), the new tokens to mix (not copied, with such a vector),
    and why the others will be random. Returns (cand_tgt, cand_src, new_ids, reasons)."""
    nonzero = aux.norm(dim=1) > 0
    zero_vec = has_vec & ~nonzero
    usable = has_vec & nonzero
    cand_mask = usable[tgt]
    cand_tgt, cand_src = tgt[cand_mask], src[cand_mask]
    new_ids = (~done & usable).nonzero().flatten()
    reasons: dict[str, int] = {}
    missing = ~done & ~has_vec
    if int(missing.sum()):
        reasons["no auxiliary vector"] = int(missing.sum())
    if int((zero_vec & ~done).sum()):
        reasons["all-zero auxiliary vector"] = int((zero_vec & ~done).sum())
    if int(cand_tgt.numel()) == 0 and new_ids.numel():
        log.warning(
            "%s: none of the %d overlapping tokens has an auxiliary vector; %d new tokens "
            "with vectors get random coordinates instead",
            section,
            len(tgt),
            new_ids.numel(),
        )
        reasons["no overlapping token has an auxiliary vector"] = int(new_ids.numel())
        new_ids = new_ids[:0]
    return cand_tgt, cand_src, new_ids, reasons


def _mix_neighbours(
    problem: TransferProblem,
    out: torch.Tensor,
    aux: torch.Tensor,
    coords_src: torch.Tensor,
    cand_tgt: torch.Tensor,
    cand_src: torch.Tensor,
    new_ids: torch.Tensor,
    step: _Step,
) -> list[int]:
    """Step 3 of `neighbour_coordinates`: `out[new_ids]` = the softmax(similarity / step.temperature)-weighted
    mix of the coordinates of the `step.top` most similar candidates, over blocks of rows on the problem's
    device; clustered, only the neighbours in the cluster of the largest summed weight. Returns how
    many new tokens joined each cluster (all zeros unclustered or without new tokens)."""
    top, temperature, block_size = step.top, step.temperature, step.block_size
    labels_src, n_clusters = step.labels_src, step.n_clusters
    combined = [0] * n_clusters
    if not new_ids.numel():
        return combined
    clustered = labels_src is not None
    dev = torch.device(problem.device)
    cand_vec = torch.nn.functional.normalize(aux[cand_tgt], dim=1).to(dev)
    cand_coords = coords_src[cand_src].to(dev)
    if labels_src is not None:  # clustered
        cand_labels = labels_src[cand_src].to(dev)
        chosen_counts = torch.zeros(n_clusters, dtype=torch.int64, device=dev)
    blocks = range(0, int(new_ids.numel()), block_size)
    for start in progress(blocks, desc=f"{step.section}: neighbours", unit="block"):
        ids = new_ids[start : start + block_size]
        q = torch.nn.functional.normalize(aux[ids], dim=1).to(dev)
        sim, idx = (q @ cand_vec.T).topk(top, dim=1)  # (b, top), sorted, deterministic ties
        w = torch.softmax(sim / temperature, dim=1).to(cand_coords.dtype)
        if clustered:
            # the cluster with the largest summed weight; only its neighbours are mixed
            lab = cand_labels[idx]
            votes = w.new_zeros(w.shape[0], n_clusters).scatter_add_(1, lab, w)
            chosen = votes.argmax(dim=1)  # first maximum: the lowest cluster id on ties
            w = w * (lab == chosen[:, None]).to(w.dtype)
            w = w / w.sum(dim=1, keepdim=True)
            chosen_counts += torch.bincount(chosen, minlength=n_clusters)
        out[ids] = torch.einsum("bn,bnk->bk", w, cand_coords[idx]).cpu()
    return chosen_counts.cpu().tolist() if clustered else combined


def _random_rows(
    problem: TransferProblem,
    out: torch.Tensor,
    is_rand: torch.Tensor,
    coords_src: torch.Tensor,
    reasons: dict[str, int],
    step: _Step,
) -> tuple[int, list[int]]:
    """Step 4 of `neighbour_coordinates`: the rows in `is_rand` get seeded N(mean, std) of the source
    coordinates (clustered: of their drawn cluster's rows). Returns (negative entries clamped, how
    many random tokens each cluster got)."""
    section, nonnegative, labels_src, n_clusters = step.section, step.nonnegative, step.labels_src, step.n_clusters
    n_rand = int(is_rand.sum())
    clamped, per_cluster = 0, [0] * n_clusters
    if not n_rand:
        return clamped, per_cluster
    if labels_src is not None:
        clamped, drawn = random_cluster_coordinates(
            out, is_rand, coords_src, labels_src, n_clusters, problem.seed, nonnegative=nonnegative
        )
        per_cluster = torch.bincount(drawn, minlength=n_clusters).tolist()
    else:
        clamped = random_coordinates(out, is_rand, coords_src, problem.seed, nonnegative=nonnegative)
    log.info(
        "%s: %d target token(s) get random coordinates (%s)",
        section,
        n_rand,
        ", ".join(f"{r}: {n}" for r, n in reasons.items()),
    )
    if clamped:
        log.info("%s: clamped %d negative random coefficient entries to 0", section, clamped)
    return clamped, per_cluster


def _checked_clusters(labels: torch.Tensor | None, shape: tuple, n_clusters: int, section: str) -> torch.Tensor:
    """The (V_s,) int64 cluster ids of the source rows, checked against the block structure."""
    V_s, k = shape
    if labels is None or tuple(labels.shape) != (V_s,) or k % n_clusters:
        got = None if labels is None else tuple(labels.shape)
        raise VocabTransferError(
            f"{section}: {n_clusters} clusters need the cluster id of each of the {V_s} source "
            f"rows and a width divisible by {n_clusters} (got ids {got}, width {k}); "
            "rerun the source_snmf stage"
        )
    labels = labels.detach().cpu().to(torch.int64)
    if V_s and (int(labels.min()) < 0 or int(labels.max()) >= n_clusters):
        raise VocabTransferError(f"{section}: cluster ids outside 0..{n_clusters - 1}; rerun the source_snmf stage")
    return labels


def random_coordinates(
    out: torch.Tensor, rows: torch.Tensor, coords: torch.Tensor, seed: int, *, nonnegative: bool = False
) -> int:
    """Fill `out[rows]` (bool mask over the target ids) with seeded N(mean, std) of `coords` per
    dimension, computed in float64; with `nonnegative`, negative entries are clamped to 0 and
    counted (the return value). The N(0, 1) draw covers the whole vocabulary in fixed blocks of
    RANDOM_BLOCK rows, so a token's random row does not depend on which other tokens are random.
    (Not `baselines.random_matrix`'s rows: this draws in the coordinate space, in float64.)"""
    V_t, k = out.shape
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    mean, std = coords.double().mean(dim=0), coords.double().std(dim=0, unbiased=False)
    clamped = 0
    for start in range(0, V_t, RANDOM_BLOCK):
        z = torch.randn(min(RANDOM_BLOCK, V_t - start), k, generator=gen)
        local = rows[start : start + RANDOM_BLOCK].nonzero().flatten()
        if local.numel() == 0:
            continue
        values = (mean + std * z[local].double()).to(out.dtype)
        if nonnegative:
            clamped += int((values < 0).sum())
            values = values.clamp_min(0)
        out[start + local] = values
    return clamped


def random_cluster_coordinates(
    out: torch.Tensor,
    rows: torch.Tensor,
    coords: torch.Tensor,
    labels: torch.Tensor,
    n_clusters: int,
    seed: int,
    *,
    nonnegative: bool = False,
) -> tuple[int, torch.Tensor]:
    """The clustered form of `random_coordinates`: every row in `rows` (bool mask over the
    target ids) draws a cluster c with probability proportional to the number of source rows
    in c, and gets N(mean, std) of those rows' coefficients in c's block (zeros elsewhere).
    The cluster and N(0, 1) draws cover the whole vocabulary (fixed RANDOM_BLOCK blocks), so a
    token's row does not depend on which other tokens are random. Returns (clamped negative
    entries, the drawn clusters of the rows in `rows`)."""
    V_t, k = out.shape
    rank = k // n_clusters
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    sizes = torch.bincount(labels, minlength=n_clusters).double()
    drawn_all = torch.multinomial(sizes, V_t, replacement=True, generator=gen)
    mean = torch.zeros(n_clusters, rank, dtype=torch.float64)
    std = torch.zeros(n_clusters, rank, dtype=torch.float64)
    for c in range(n_clusters):
        if sizes[c]:
            own = coords[labels == c, c * rank : (c + 1) * rank].double()
            mean[c], std[c] = own.mean(dim=0), own.std(dim=0, unbiased=False)
    clamped = 0
    view = out.view(V_t, n_clusters, rank)
    for start in range(0, V_t, RANDOM_BLOCK):
        z = torch.randn(min(RANDOM_BLOCK, V_t - start), rank, generator=gen)
        local = rows[start : start + RANDOM_BLOCK].nonzero().flatten()
        if local.numel() == 0:
            continue
        c = drawn_all[start + local]
        values = (mean[c] + std[c] * z[local].double()).to(out.dtype)
        if nonnegative:
            clamped += int((values < 0).sum())
            values = values.clamp_min(0)
        view[start + local] = 0
        view[start + local, c] = values
    return clamped, drawn_all[rows]


# --------------------------------------------------------------------------------------------
# the method
# --------------------------------------------------------------------------------------------


@register("ofa")
def ofa(problem: TransferProblem, opts: OfaOptions = OfaOptions()) -> TransferResult:
    section = "init.ofa"
    check_neighbour_method(problem, "ofa", opts, "keep_dim")
    keep_dim = opts.keep_dim

    # 1. factorise in float64 (keep_dim = hidden size: no factorisation, P = identity, as in OFA)
    C, P, fstats = factorize_source(
        problem.source_embeddings, "svd", SvdOptions(keep_dim=keep_dim), seed=problem.seed, section=section
    )
    # 2.-4. coordinates of the target tokens
    coords, stats = neighbour_coordinates(problem, C, opts, section=section)
    # 5. up-projection
    embeddings = (coords @ P).float()
    stats.update({"method": "ofa", "keep_dim": keep_dim, "factorization": fstats})
    return TransferResult(
        embeddings=embeddings.contiguous(),
        stats=stats,
        extra={"coordinates": coords.float().contiguous(), "primitives": P.float().contiguous()},
    )
