"""Stage `source_snmf`: the semi-NMF of the source embeddings, computed once for every language.

The `snmf` method and every `<method>+snmf` need the same factorisation E ≈ W H of the
source model's embeddings (params `init.snmf`: rank, max_iter, tol, init; seed). It depends
only on the source model, so it is one job shared by all languages and methods instead of
one per init job (25–160 s each with the k-means start on MiniLM).

Output results/source/snmf.safetensors: `input_coordinates` (W, V_s×rank, ≥ 0) and
`input_primitives` (H, rank×D), plus `output_coordinates` / `output_primitives` when the
source model's output embeddings are untied. The metadata holds the factorisation stats and
a sha256 fingerprint of each factorised matrix; `init` refuses factors whose fingerprint or
options do not match what it is about to factorise (`load_factors`).
"""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path

from vocabtransfer import io
from vocabtransfer import modeling as M
from vocabtransfer.errors import VocabTransferError

log = logging.getLogger(__name__)

# the init.snmf keys that determine the factorisation (neighbors / temperature do not)
FACTOR_KEYS = ("rank", "max_iter", "tol", "init")


def fingerprint(E) -> str:
    """sha256 of a matrix's float32 bytes and shape: identifies the matrix a factorisation belongs to."""
    import torch

    data = E.detach().to(torch.float32).cpu().contiguous().numpy()
    digest = hashlib.sha256(repr(tuple(data.shape)).encode())
    digest.update(data.tobytes())
    return digest.hexdigest()


def run(ctx) -> None:
    with M.torch_threads(ctx.threads):
        _run(ctx)


def _run(ctx) -> None:
    from vocabtransfer.factorize import factorize_source

    start = time.perf_counter()
    source_dir = Path(ctx.input["source_model"])
    model, _ = M.load_source_model(source_dir)
    matrices = M.embedding_matrices(model, M.load_tokenizer(source_dir))
    del model
    options = {k: ctx.param(f"init.snmf.{k}") for k in FACTOR_KEYS}
    tensors, meta = {}, {"options": options, "seed": ctx.seed, "source_model": str(source_dir)}
    for which in ("input", "output"):
        E = matrices[which]
        if E is None:
            continue
        W, H, stats = factorize_source(E, "snmf", options, seed=ctx.seed, device=ctx.device,
                                       section=f"init.snmf ({which} embeddings)")
        log.info("source_snmf: %s embeddings %s -> rank %d, relative error %.4f after %d iterations (%.1f s)",
                 which, tuple(E.shape), stats["rank"], stats["relative_error"], stats["iterations"], stats["seconds"])
        tensors[f"{which}_coordinates"] = W.float().contiguous()
        tensors[f"{which}_primitives"] = H.float().contiguous()
        # no timings in the file: the same inputs give a byte-identical artefact
        stats = {k: v for k, v in stats.items() if k != "seconds"}
        meta[which] = {"fingerprint": fingerprint(E), "stats": stats}
    io.save_tensors(tensors, ctx.output["factors"], metadata=meta)
    log.info("source_snmf done in %.1f s: %s", time.perf_counter() - start, ctx.output["factors"])


def load_factors(path: str | Path, matrices: dict, options: dict, seed: int | None = None) -> dict:
    """{which: (W, H, stats)} from a source_snmf file for each matrix in `matrices`
    ({"input": E, "output": E or None}, as `modeling.embedding_matrices` returns them).

    Refuses, with the cause, factors of another matrix (fingerprint), computed with other
    `init.snmf` options than `options` or (when `seed` is given) with another seed: a stale
    file must never be used silently.
    """
    path = Path(path)
    tensors = io.load_tensors(path)  # a missing or unreadable file: one clear error
    meta = io.tensor_metadata(path)
    saved = meta.get("options") or {}
    differ = [f"{k}={saved.get(k)!r} (params: {options[k]!r})" for k in FACTOR_KEYS
              if k in options and saved.get(k) != options[k]]
    if seed is not None and meta.get("seed") != seed:
        differ.append(f"seed={meta.get('seed')!r} (params: {seed!r})")
    if differ:
        raise VocabTransferError(f"{path}: computed with other init.snmf options: {', '.join(differ)}; "
                                 "rerun the source_snmf stage")
    factors = {}
    for which, E in matrices.items():
        if E is None:
            continue
        entry = meta.get(which)
        if not isinstance(entry, dict):
            raise VocabTransferError(f"{path}: holds no factorisation of the {which} embeddings; "
                                     "rerun the source_snmf stage")
        if entry.get("fingerprint") != fingerprint(E):
            raise VocabTransferError(f"{path}: factorises other {which} embeddings than the source model's "
                                     f"{tuple(E.shape)}; rerun the source_snmf stage")
        keys = (f"{which}_coordinates", f"{which}_primitives")
        missing = [k for k in keys if k not in tensors]
        if missing:
            raise VocabTransferError(f"{path}: missing tensor(s) {', '.join(missing)}; rerun the source_snmf stage")
        factors[which] = (tensors[keys[0]], tensors[keys[1]], dict(entry.get("stats") or {}, cached=str(path)))
    return factors
