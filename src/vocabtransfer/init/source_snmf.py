"""Stage `source_snmf`: the semi-NMF of the source embeddings, computed once for every language.

The `snmf` method and every `<method>+snmf` need the same factorisation E ≈ W H of the
source model's embeddings (params `init.snmf`: rank, max_iter, tol, init, clusters; seed). It
depends only on the source model, so it is one job shared by all languages and methods
instead of one per init job (25–160 s each with the k-means start on MiniLM).

Output results/source/snmf.safetensors: `input_coordinates` (W, V_s×rank, ≥ 0) and
`input_primitives` (H, rank×D), plus `output_coordinates` / `output_primitives` when the
source model's output embeddings are untied. The metadata holds the factorisation stats and
a sha256 fingerprint of each factorised matrix; `init` refuses factors whose fingerprint or
options do not match what it is about to factorise (`load_factors`).

Clustered factors (`init.snmf.clusters` = C > 1, `factorize.clustered_semi_nmf`) are stored
compactly: `<which>_coordinates` holds each row's coefficients of its own cluster only
(V_s×rank, the same shape as with C = 1), `<which>_clusters` the cluster of every row
(V_s, int64) and `<which>_primitives` the stacked H' = vstack(H_1..H_C) (C·rank×D).
`load_factors` expands them to the block-structured W' (V_s×C·rank) every consumer uses.
Why not store W' itself: all but one block of each row is zero, so W' is C times larger
for no information (MiniLM at rank 100 and C = 16: 195 MB instead of 12 MB), and the
explicit cluster ids stay exact even for a row whose coefficients are all zero. With
C = 1 the file holds the same tensors as before clusters existed; a file whose options
lack `clusters` (written before the option existed) counts as clusters = 1.
"""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path

import torch


from vocabtransfer import io
from vocabtransfer.model import modeling
from vocabtransfer.model.hub import load_tokenizer
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.plan.method_options import SnmfOptions
from vocabtransfer.plan.init_plans import FACTOR_KEYS
from vocabtransfer.init.factorize import factorize_source
from vocabtransfer.init.semi_nmf import block_coefficients, expand_blocks
from vocabtransfer.pipeline.stage_spec import Context

log = logging.getLogger(__name__)

# what a file without a key was computed with (files from before `clusters` existed)
MISSING_KEY = {"clusters": 1}


def fingerprint(E) -> str:
    """sha256 of a matrix's float32 bytes and shape: identifies the matrix a factorisation belongs to."""

    data = E.detach().to(torch.float32).cpu().contiguous().numpy()
    digest = hashlib.sha256(repr(tuple(data.shape)).encode())
    digest.update(data.tobytes())
    return digest.hexdigest()


def run(ctx: Context) -> None:

    start = time.perf_counter()
    source_dir = Path(ctx.input["source_model"])
    model, _ = modeling.load_source_model(source_dir)
    matrices = modeling.embedding_matrices(model, load_tokenizer(source_dir))
    del model
    opts = ctx.params.init.snmf
    options = {k: getattr(opts, k) for k in FACTOR_KEYS}
    tensors, meta = {}, {"options": options, "seed": ctx.seed, "source_model": str(source_dir)}
    for which in ("input", "output"):
        E = matrices[which]
        if E is None:
            continue
        W, H, stats, labels = factorize_source(
            E,
            "snmf",
            opts,
            seed=ctx.seed,
            device=ctx.device,
            section=f"init.snmf ({which} embeddings)",
            return_labels=True,
        )
        log.info(
            "source_snmf: %s embeddings %s -> %d cluster(s) × rank %d, relative error %.4f after %d "
            "iterations (%.1f s)",
            which,
            tuple(E.shape),
            stats["clusters"],
            stats["rank"],
            stats["relative_error"],
            stats["iterations"],
            stats["seconds"],
        )
        if stats["clusters"] > 1:  # compact: own-block coefficients + cluster ids (see the module doc)
            W = block_coefficients(W, labels, stats["clusters"])
            tensors[f"{which}_clusters"] = labels.to(torch.int64).contiguous()
        tensors[f"{which}_coordinates"] = W.float().contiguous()
        tensors[f"{which}_primitives"] = H.float().contiguous()
        # no timings in the file: the same inputs give a byte-identical artefact
        stats = {k: v for k, v in stats.items() if k != "seconds"}
        meta[which] = {"fingerprint": fingerprint(E), "stats": stats}
    io.save_tensors(tensors, ctx.output["factors"], metadata=meta)
    log.info("source_snmf done in %.1f s: %s", time.perf_counter() - start, ctx.output["factors"])


def load_factors(path: str | Path, matrices: dict, options, seed: int | None = None) -> dict:
    """{which: (W, H, stats, cluster ids)} from a source_snmf file for each matrix in
    `matrices` ({"input": E, "output": E or None}, as `modeling.embedding_matrices` returns
    them). Clustered factors come expanded to the block-structured W' (V_s×C·rank); the
    cluster ids are (V_s,) int64 (all 0 with one cluster).

    Refuses, with the cause, factors of another matrix (fingerprint), computed with other
    `init.snmf` options than `options` (typed, `SnmfOptions`; None: its defaults) or (when `seed`
    is given) with another seed: a stale file must never be used silently.
    """

    path = Path(path)
    tensors = io.load_tensors(path)  # a missing or unreadable file: one clear error
    meta = io.tensor_metadata(path)
    saved = {**MISSING_KEY, **(meta.get("options") or {})}
    options = options or SnmfOptions()
    differ = [
        f"{k}={saved.get(k)!r} (params: {getattr(options, k)!r})"
        for k in FACTOR_KEYS
        if saved.get(k) != getattr(options, k)
    ]
    if seed is not None and meta.get("seed") != seed:
        differ.append(f"seed={meta.get('seed')!r} (params: {seed!r})")
    if differ:
        raise VocabTransferError(
            f"{path}: computed with other init.snmf options: {', '.join(differ)}; rerun the source_snmf stage"
        )
    factors = {}
    for which, E in matrices.items():
        if E is None:
            continue
        entry = meta.get(which)
        if not isinstance(entry, dict):
            raise VocabTransferError(
                f"{path}: holds no factorisation of the {which} embeddings; rerun the source_snmf stage"
            )
        if entry.get("fingerprint") != fingerprint(E):
            raise VocabTransferError(
                f"{path}: factorises other {which} embeddings than the source model's "
                f"{tuple(E.shape)}; rerun the source_snmf stage"
            )
        keys = (f"{which}_coordinates", f"{which}_primitives")
        missing = [k for k in keys if k not in tensors]
        if missing:
            raise VocabTransferError(f"{path}: missing tensor(s) {', '.join(missing)}; rerun the source_snmf stage")
        W, H = tensors[keys[0]], tensors[keys[1]]
        n_clusters = int(saved["clusters"])
        if n_clusters > 1:
            labels = tensors.get(f"{which}_clusters")
            if (
                labels is None
                or tuple(labels.shape) != (W.shape[0],)
                or labels.is_floating_point()
                or (labels.numel() and not (0 <= int(labels.min()) and int(labels.max()) < n_clusters))
            ):
                raise VocabTransferError(
                    f"{path}: clustered factors without the cluster id of every {which} row "
                    f"in 0..{n_clusters - 1} ({which}_clusters); rerun the source_snmf stage"
                )
            labels = labels.to(torch.int64)
            W = expand_blocks(W, labels, n_clusters)
        else:
            labels = torch.zeros(W.shape[0], dtype=torch.int64)
        factors[which] = (W, H, dict(entry.get("stats") or {}, cached=str(path)), labels)
    return factors
