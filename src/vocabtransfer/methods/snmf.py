"""UNKs Everywhere (Pfeiffer et al. 2021) style initialisation through semi-NMF.

1. Factorise the source embeddings E ≈ W H with semi-NMF: W ≥ 0 (V_s×rank) are per-token
   non-negative coefficients, H (rank×D) is the shared, unconstrained up-projection
   (see vocabtransfer.factorize.semi_nmf for why this orientation).
2. Overlapping target tokens copy their source token's W row.
3. Other target tokens with an auxiliary (fastText) vector get the softmax-weighted mix of
   their nearest overlapping tokens' W rows, exactly as in OFA (shared code:
   `methods.ofa.neighbour_coordinates`); mixes of non-negative rows stay non-negative.
4. The rest get seeded N(mean, std) rows per dimension, clamped at 0 (counted in stats).
5. Embeddings = W_target @ H.

Options (params `init.snmf`; defaults in workflow/schemas/params.schema.yaml): rank, max_iter,
tol, init (the factorisation, computed once by the source_snmf stage), neighbors, temperature.
"""

from __future__ import annotations

import logging

from vocabtransfer.factorize import factorize_source
from vocabtransfer.methods import TransferProblem, TransferResult, register
from vocabtransfer.methods.ofa import neighbour_coordinates, neighbour_method_options

log = logging.getLogger(__name__)


@register("snmf")
def snmf(problem: TransferProblem) -> TransferResult:
    section = "init.snmf"
    _, neighbors, temperature = neighbour_method_options(problem, "snmf", "rank")

    # 1. semi-NMF of the source embeddings
    W, H, fstats = factorize_source(problem.source_embeddings, "snmf", problem.options or {}, seed=problem.seed,
                                    device=problem.device, section=section, cached=problem.factors.get("snmf"))
    # 2.-4. coefficients of the target tokens
    coords, stats = neighbour_coordinates(problem, W, neighbors=neighbors, temperature=temperature,
                                          section=section, nonnegative=True)
    # 5. up-projection with the shared H
    embeddings = (coords.double() @ H.double()).float()
    stats.update({"method": "snmf", "rank": fstats["rank"], "factorization": fstats})
    return TransferResult(embeddings=embeddings.contiguous(), stats=stats,
                          extra={"coordinates": coords.float().contiguous(), "primitives": H.float().contiguous()})
