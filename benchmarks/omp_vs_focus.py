"""OMP (`methods.omp`) against FOCUS on one input, and against scikit-learn's per-token OMP (run by hand).

Inputs, built once and cached in --workdir, as the pipeline builds them with default params:
  * source: sentence-transformers/all-MiniLM-L6-v2 (BERT WordPiece, 30522 x 384), offline copy;
  * target: `tokenizer.train_tokenizer` (MiniLM's family) with --vocab-size tokens on the shared
    pretraining text of --lang;
  * auxiliary: fastText CBOW (`fasttext_models.train_fasttext`, --dim, epochs 3, min_count 10) on that
    text tokenised with the target tokenizer; `fasttext_vectors.token_vectors` per target token;
  * overlap: `overlap.compute_overlap` with the default options.

Times `focus_embeddings` and `omp_embeddings` (--k) on the same inputs, alternating which goes
first, and checks OMP against scikit-learn's `OrthogonalMatchingPursuit(n_nonzero_coefs=k,
fit_intercept=False)` fitted token by token on --sklearn-tokens tokens (the per-token time is
extrapolated to all tokens). Prints Markdown tables.

    .venv/bin/python benchmarks/omp_vs_focus.py --k 64 --repeats 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")

from smoke_inputs import DATA  # the data root the pipeline reads: data/ links ../shared/data

SOURCE = "sentence-transformers/all-MiniLM-L6-v2"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lang", default="sw", help="pretrain_text language (default sw)")
    p.add_argument("--vocab-size", type=int, default=16_000, help="target tokenizer size (default 16000, params.yaml)")
    p.add_argument("--dim", type=int, default=100, help="fastText dimension (default 100, params.yaml)")
    p.add_argument("--k", type=int, default=64, help="OMP atoms per token (default 64)")
    p.add_argument("--device", default="cpu", help="device for both (default cpu)")
    p.add_argument("--repeats", type=int, default=1, help="timed runs of each (default 1)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    p.add_argument("--sklearn-tokens", type=int, default=200, help="tokens checked against scikit-learn (default 200)")
    p.add_argument(
        "--workdir",
        type=Path,
        default=Path(os.environ.get("VOCABTRANSFER_CACHE") or "~/.cache/vocabtransfer").expanduser()
        / "benchmarks"
        / "omp",
        help="where the tokenizer and fastText vectors are cached",
    )
    p.add_argument(
        "--smoke",
        action="store_true",
        help="seconds at tiny sizes: checks that the script runs (tests/project/test_benchmarks.py, in CI)",
    )
    args = p.parse_args(argv)
    if args.smoke:
        args.vocab_size, args.dim, args.k, args.sklearn_tokens = 1000, 16, 4, 20
    return args


def build_inputs(args):
    """(source tokenizer, target tokenizer, auxiliary vectors, mask), built once per setting and cached."""
    from safetensors.torch import load_file, save_file
    from transformers import AutoTokenizer

    from vocabtransfer.data.fasttext_models import train_fasttext
    from vocabtransfer.data.fasttext_vectors import token_vectors
    from vocabtransfer.model.hub import load_tokenizer
    from vocabtransfer.data.tokenizer import train_tokenizer

    source = load_tokenizer(SOURCE)
    lines = [
        ln
        for ln in (DATA / "pretrain_text" / f"{args.lang}.txt").read_text(encoding="utf-8").splitlines()
        if ln.strip()
    ]
    tok_dir = args.workdir / f"{args.lang}-tokenizer-{args.vocab_size}"
    if not (tok_dir / "tokenizer.json").is_file():
        batches = [lines[s : s + 1000] for s in range(0, len(lines), 1000)]
        train_tokenizer(source, batches, vocab_size=args.vocab_size).save_pretrained(str(tok_dir))
    target = AutoTokenizer.from_pretrained(str(tok_dir))
    vec_path = tok_dir / f"fasttext-d{args.dim}.safetensors"
    if not vec_path.is_file():
        text = tok_dir / "tokens.txt"
        with text.open("w", encoding="utf-8") as f:
            for s in range(0, len(lines), 10_000):
                enc = target(lines[s : s + 10_000], add_special_tokens=False)
                f.writelines(" ".join(e.tokens) + "\n" for e in enc.encodings)
        emb, mask = token_vectors(train_fasttext(text, dim=args.dim, threads=os.cpu_count() or 1), target)
        save_file({"embeddings": emb, "mask": mask}, str(vec_path))
        text.unlink()
    vec = load_file(str(vec_path))
    return source, target, vec["embeddings"], vec["mask"].bool()


def main(argv=None) -> int:
    args = parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    import numpy as np
    import torch
    from safetensors.torch import load_file
    from sklearn.linear_model import OrthogonalMatchingPursuit

    from vocabtransfer.init.methods.focus import FocusInputs, focus_embeddings, has_vector
    from vocabtransfer.init.methods.omp import batch_omp, omp_embeddings
    from vocabtransfer.plan.method_options import OmpOptions
    from vocabtransfer.model.hub import resolve_model_path
    from vocabtransfer.data.overlap import compute_overlap, overlap_pairs

    if args.threads:
        torch.set_num_threads(args.threads)
    source, target, aux, mask = build_inputs(args)
    weights = load_file(str(resolve_model_path(SOURCE) / "model.safetensors"))
    src = weights["embeddings.word_embeddings.weight"].to(args.device)
    t_ov, s_ov = overlap_pairs(compute_overlap(target, source))
    n = len(target)
    inputs = FocusInputs(src, t_ov, s_ov, aux, mask, n)

    impls = {
        "focus": lambda: focus_embeddings(inputs, device=args.device),
        f"omp k={args.k}": lambda: omp_embeddings(inputs, OmpOptions(k=args.k), device=args.device),
    }
    times = {name: [] for name in impls}
    stats = {}
    for r in range(args.repeats):
        for name in list(impls) if r % 2 == 0 else list(reversed(impls)):
            t = time.perf_counter()
            _, stats[name] = impls[name]()
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - t)
            print(f"repeat {r + 1}: {name} {times[name][-1]:.2f} s", file=sys.stderr)

    # scikit-learn, token by token, on the first --sklearn-tokens tokens OMP combines
    has_vec = has_vector(aux, mask)
    new = np.setdiff1d(np.flatnonzero(has_vec), t_ov)
    anchors = t_ov[has_vec[t_ov]]
    atoms = torch.nn.functional.normalize(aux[torch.from_numpy(anchors)], dim=1)
    signals = torch.nn.functional.normalize(aux[torch.from_numpy(new[: args.sklearn_tokens])], dim=1)
    idx, coef, count = batch_omp(atoms, signals, args.k)
    ours = np.zeros((len(signals), len(anchors)))
    for i, c in enumerate(count.tolist()):  # slots past count[i] are padding
        ours[i, idx[i, :c].numpy()] = coef[i, :c].numpy()
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "ended prematurely" for tokens that stop early
        ref = np.stack(
            [
                OrthogonalMatchingPursuit(n_nonzero_coefs=args.k, fit_intercept=False)
                .fit(atoms.T.double().numpy(), x.double().numpy())
                .coef_
                for x in signals
            ]
        )
    per_token = (time.perf_counter() - t) / len(signals)
    same_support = int(((ours != 0) == (ref != 0)).all(axis=1).sum())
    diff = np.abs(ours - ref).max()

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    omp_name = f"omp k={args.k}"
    s = stats[omp_name]
    print(
        f"\nMiniLM source ({src.shape[0]} x {src.shape[1]}) -> {args.lang} target ({n} tokens, {len(t_ov)} "
        f"overlapping), fastText dim {aux.shape[1]}: {s['omp_combined']} tokens combined from {s['anchors']} atoms; "
        f"device {args.device}, torch threads {torch.get_num_threads()} of {os.cpu_count()} cores, "
        f"load average {load:.1f}\n"
    )
    print("| method | median wall s | runs (s) |")
    print("|---|---:|---|")
    for name in impls:
        print(f"| {name} | {statistics.median(times[name]):.2f} | {', '.join(f'{x:.2f}' for x in times[name])} |")
    print(
        f"\nomp: {s['atoms_mean']} atoms per token on average (max {s['atoms_max']}, {s['stopped_early']} stopped "
        f"early), relative residual {s['residual_mean']}, mean sum |coef| {s['coef_abs_sum_mean']}\n"
    )
    print(
        "| tokens vs scikit-learn | same support | max abs coef difference | sklearn s/token | "
        "sklearn extrapolated s | speed-up |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    extrapolated = per_token * s["omp_combined"]
    print(
        f"| {len(signals)} | {same_support} | {diff:.3g} | {per_token:.4f} | {extrapolated:.1f} | "
        f"{extrapolated / statistics.median(times[omp_name]):.1f}x |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
