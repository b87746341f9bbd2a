"""Clustered semi-NMF (`init.snmf.clusters`) on a real embedding matrix (by hand, not in CI).

    .venv/bin/python benchmarks/clustered_snmf.py [--model sentence-transformers/all-MiniLM-L6-v2]
        [--rank 100] [--clusters 1 4 16] [--max-iter 500] [--tol 1e-4] [--init kmeans] [--seed 42]
        [--device cpu]

Factorises the source model's input embeddings (MiniLM: 30522×384) at `rank` with C clusters
for each C in `--clusters`, exactly as the source_snmf stage does (`factorize_source`), and
prints a Markdown table: C, the width of W' (C·rank), relative error ‖E − W'H'‖_F / ‖E‖_F
(recomputed here directly), the smallest and largest cluster, iterations (the largest over the
clusters, and their sum) and seconds.
"""

from __future__ import annotations

import argparse
import logging
import time

import torch

from vocabtransfer.model import modeling
from vocabtransfer.model.hub import load_tokenizer, resolve_model_path
from vocabtransfer.init.factorize import factorize_source
from vocabtransfer.init.factors import relative_error
from vocabtransfer.plan.method_options import SnmfOptions


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2")
    ap.add_argument("--rank", type=int, default=100)
    ap.add_argument("--clusters", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--max-iter", type=int, default=500)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--init", default="kmeans", choices=["kmeans", "svd"])
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--device", default="cpu")
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="seconds at tiny sizes: checks that the script runs (tests/project/test_benchmarks.py, in CI)",
    )
    args = ap.parse_args()
    if args.smoke:
        args.rank, args.clusters, args.max_iter = 8, [1, 2], 3
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")

    path = resolve_model_path(args.model)
    model, _ = modeling.load_source_model(path)
    E = modeling.embedding_matrices(model, load_tokenizer(path))["input"].detach().float()
    del model
    print(
        f"{args.model}: input embeddings {tuple(E.shape)}, rank {args.rank}, init {args.init}, "
        f"torch threads {torch.get_num_threads()}\n"
    )
    rows = []
    for C in args.clusters:
        options = SnmfOptions(rank=args.rank, max_iter=args.max_iter, tol=args.tol, init=args.init, clusters=C)
        t = time.perf_counter()
        W, H, stats = factorize_source(E, "snmf", options, seed=args.seed, device=args.device)
        secs = time.perf_counter() - t
        err = relative_error(E, W, H)
        sizes = stats.get("cluster_sizes", [E.shape[0]])
        total = sum(stats.get("cluster_iterations", [stats["iterations"]]))
        rows.append((C, W.shape[1], err, min(sizes), max(sizes), stats["iterations"], total, secs))
        print(f"C={C}: relative error {err:.4f} in {secs:.1f} s", flush=True)

    print("\n| C | width of W' | relative error | smallest / largest cluster | iterations (max / sum) | seconds |")
    print("|---:|---:|---:|---:|---:|---:|")
    for C, width, err, lo, hi, its, total, secs in rows:
        print(f"| {C} | {width} | {err:.4f} | {lo} / {hi} | {its} / {total} | {secs:.1f} |")


if __name__ == "__main__":
    main()
