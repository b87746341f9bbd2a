"""UNKs Everywhere (Pfeiffer et al. 2021) style initialisation through semi-NMF.

1. Factorise the source embeddings E ≈ W H with semi-NMF: W ≥ 0 (V_s×rank) are per-token
   non-negative coefficients, H (rank×D) is the shared, unconstrained up-projection
   (see vocabtransfer.init.semi_nmf.semi_nmf for why this orientation).
2. Overlapping target tokens copy their source token's W row.
3. Other target tokens with an auxiliary (fastText) vector get the softmax-weighted mix of
   their nearest overlapping tokens' W rows, exactly as in OFA (shared code:
   `methods.ofa.neighbour_coordinates`); mixes of non-negative rows stay non-negative.
4. The rest get seeded N(mean, std) rows per dimension, clamped at 0 (counted in stats).
5. Embeddings = W_target @ H.

With `init.snmf.clusters` = C > 1 (UNKs Everywhere's C up-projections) the factorisation is
`factorize.clustered_semi_nmf`: one semi-NMF per k-means cluster of the source embeddings,
written as one block-structured W' (V_s×C·rank) and H' = vstack(H_1..H_C). Overlapping tokens
copy their W' row (so their embedding is their cluster's reconstruction); a new token with an
auxiliary vector joins the ONE cluster with the largest summed softmax weight among its
neighbours and mixes only the neighbours of that cluster (renormalised), so it is mapped up
with that cluster's H_c alone; a random token draws its cluster (seeded, proportional to the
clusters' sizes) and gets random non-negative coefficients in that block. The cluster of a
source row is carried explicitly (the source_snmf file stores it), never guessed from W'.
The stats count the new and random tokens per cluster (`clusters`).

Options (params `init.snmf`; defaults in `SnmfOptions`): rank, max_iter,
tol, init, clusters (the factorisation, computed once by the source_snmf stage), neighbors,
temperature.
"""

from __future__ import annotations

import logging

from vocabtransfer.init.factorize import factorize_source
from vocabtransfer.init.methods.registry import TransferProblem, TransferResult, register
from vocabtransfer.init.methods.ofa import check_neighbour_method, neighbour_coordinates
from vocabtransfer.plan.method_options import SnmfOptions

log = logging.getLogger(__name__)


@register("snmf")
def snmf(problem: TransferProblem, opts: SnmfOptions = SnmfOptions()) -> TransferResult:
    section = "init.snmf"
    check_neighbour_method(problem, "snmf", opts, "rank")

    # 1. semi-NMF of the source embeddings
    W, H, fstats, labels = factorize_source(
        problem.source_embeddings,
        "snmf",
        opts,
        seed=problem.seed,
        device=problem.device,
        section=section,
        cached=problem.factors.get("snmf"),
        return_labels=True,
    )
    # 2.-4. coefficients of the target tokens (clustered: within one cluster's block each)
    n_clusters = int(fstats.get("clusters", 1))
    coords, stats = neighbour_coordinates(
        problem, W, opts, section=section, nonnegative=True, source_clusters=labels, n_clusters=n_clusters
    )
    # 5. up-projection with the shared H (clustered: H' = vstack(H_c), each row uses its block's H_c)
    embeddings = (coords.double() @ H.double()).float()
    stats.update({"method": "snmf", "rank": fstats["rank"], "factorization": fstats})
    return TransferResult(
        embeddings=embeddings.contiguous(),
        stats=stats,
        extra={"coordinates": coords.float().contiguous(), "primitives": H.float().contiguous()},
    )
