"""FOCUS: vocabtransfer.FOCUS against deepfocus.FOCUS 1.0.1 on identical inputs (run by hand).

Inputs, built once and cached in --workdir:
  * source: sentence-transformers/all-MiniLM-L6-v2 (BERT WordPiece, 30522 x 384), offline copy;
  * target: a WordPiece tokenizer of --vocab-size tokens trained (MiniLM's pipeline,
    `train_new_from_iterator`) on the shared pretraining text of --langs combined;
  * auxiliary: one fastText CBOW model (deepfocus's settings: neg=10, --dim, --epochs,
    --min-count) trained on that text tokenised with the target tokenizer; both implementations
    get its path (`fasttext_model_path`), so they start from the same vectors.

Each repeat times both end to end (fastText load, overlap, auxiliary look-ups, random rows,
FOCUS combinations), alternating which goes first. fastdist's numba kernel is compiled before
timing, so deepfocus is not charged for its JIT. Prints a Markdown table.

    .venv/bin/python benchmarks/focus_vs_deepfocus.py --vocab-size 50000 --repeats 3
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")  # deepfocus's per-token progress bars
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")

from smoke_inputs import DATA  # the data root the pipeline reads: data/ links ../shared/data

SOURCE = "sentence-transformers/all-MiniLM-L6-v2"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--vocab-size", type=int, default=50_000, help="target tokenizer size (default 50000)")
    p.add_argument("--langs", default="sw,de,en", help="pretrain_text languages combined (default sw,de,en)")
    p.add_argument("--device", default="cpu", help="device for both implementations (default cpu)")
    p.add_argument("--repeats", type=int, default=1, help="timed runs of each implementation (default 1)")
    p.add_argument("--threads", type=int, default=0, help="torch threads for both (default: torch's choice)")
    p.add_argument("--dim", type=int, default=100, help="fastText dimension (default 100)")
    p.add_argument("--epochs", type=int, default=3, help="fastText epochs (default 3)")
    p.add_argument("--min-count", type=int, default=10, help="fastText minCount (default 10)")
    p.add_argument(
        "--workdir",
        type=Path,
        default=Path(os.environ.get("VOCABTRANSFER_CACHE") or "~/.cache/vocabtransfer").expanduser()
        / "benchmarks"
        / "focus",
        help="where the tokenizer and fastText model are cached (default ~/.cache/vocabtransfer/benchmarks/focus)",
    )
    p.add_argument(
        "--smoke",
        action="store_true",
        help="seconds at tiny sizes: checks that the script runs (tests/project/test_benchmarks.py, in CI)",
    )
    args = p.parse_args(argv)
    if args.smoke:
        args.vocab_size, args.langs, args.dim, args.epochs, args.min_count = 1000, "sw", 16, 1, 5
    return args


def read_lines(langs: list[str]) -> list[str]:
    lines = []
    for lang in langs:
        path = DATA / "pretrain_text" / f"{lang}.txt"
        if not path.is_file():
            sys.exit(f"error: {path}: not found; set VOCABTRANSFER_DATA to the data directory (or run make data-link)")
        lines += [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    return lines


def build_inputs(args, lines: list[str]):
    """(target tokenizer, fastText .bin path), trained once per setting and cached."""
    import fasttext
    from transformers import AutoTokenizer

    from vocabtransfer.model.hub import load_tokenizer

    key = hashlib.sha256(f"{args.langs}|{args.vocab_size}|{len(lines)}".encode()).hexdigest()[:10]
    tok_dir = args.workdir / f"tokenizer-{args.vocab_size}-{key}"
    if not (tok_dir / "tokenizer.json").is_file():
        t = time.perf_counter()
        target = load_tokenizer(SOURCE).train_new_from_iterator(lines, vocab_size=args.vocab_size)
        target.save_pretrained(str(tok_dir))
        print(f"trained target tokenizer ({len(target)} tokens) in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    target = AutoTokenizer.from_pretrained(str(tok_dir))

    ft_path = tok_dir / f"fasttext-d{args.dim}-e{args.epochs}-m{args.min_count}.bin"
    if not ft_path.is_file():
        t = time.perf_counter()
        text = tok_dir / "tokens.txt"
        with text.open("w", encoding="utf-8") as f:
            for s in range(0, len(lines), 10_000):
                enc = target(lines[s : s + 10_000], add_special_tokens=False)
                f.writelines(" ".join(e.tokens) + "\n" for e in enc.encodings)
        model = fasttext.train_unsupervised(
            str(text),
            model="cbow",
            dim=args.dim,
            epoch=args.epochs,
            neg=10,
            minCount=args.min_count,
            thread=os.cpu_count() or 1,
            verbose=0,
        )
        model.save_model(str(ft_path))
        text.unlink()
        print(f"trained fastText ({len(model.get_words())} words) in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    return target, ft_path


def main(argv=None) -> int:
    args = parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    import numpy as np
    import torch
    from safetensors.torch import load_file

    import deepfocus
    from fastdist import fastdist

    from vocabtransfer.init.deepfocus import FOCUS
    from vocabtransfer.model.hub import load_tokenizer, resolve_model_path

    if args.threads:
        torch.set_num_threads(args.threads)
    langs = args.langs.split(",")
    lines = read_lines(langs)
    target, ft_path = build_inputs(args, lines)
    source = load_tokenizer(SOURCE)
    weights = load_file(str(resolve_model_path(SOURCE) / "model.safetensors"))
    source_embeddings = weights["embeddings.word_embeddings.weight"].to(args.device)
    fastdist.cosine_matrix_to_matrix(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32))  # numba JIT, untimed

    kwargs = dict(
        target_tokenizer=target,
        source_tokenizer=source,
        source_embeddings=source_embeddings,
        fasttext_model_path=str(ft_path),
        device=args.device,
        verbosity="silent",
    )
    impls = {"deepfocus.FOCUS": deepfocus.FOCUS, "vocabtransfer.FOCUS": FOCUS}
    times: dict[str, list[float]] = {name: [] for name in impls}
    outputs = {}
    for r in range(args.repeats):
        order = list(impls) if r % 2 == 0 else list(reversed(impls))
        for name in order:
            t = time.perf_counter()
            out = impls[name](**kwargs)
            if out.is_cuda:
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - t)
            outputs[name] = out.cpu()
            print(f"repeat {r + 1}: {name} {times[name][-1]:.2f} s", file=sys.stderr)

    ref, ours = outputs["deepfocus.FOCUS"], outputs["vocabtransfer.FOCUS"]
    diff = (ref - ours).abs()
    row_diff = diff.max(dim=1).values
    med = {name: statistics.median(ts) for name, ts in times.items()}
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"\nFOCUS, MiniLM source ({source_embeddings.shape[0]} x {source_embeddings.shape[1]}) -> "
        f"{'+'.join(langs)} WordPiece target ({len(target)} tokens), fastText {ft_path.name}, "
        f"device {args.device}, torch threads {torch.get_num_threads()} of {os.cpu_count()} cores, "
        f"{args.repeats} repeat(s), load average {load:.1f}\n"
    )
    print("| implementation | median wall s | runs (s) |")
    print("|---|---:|---|")
    for name in impls:
        print(f"| {name} | {med[name]:.2f} | {', '.join(f'{t:.2f}' for t in times[name])} |")
    print()
    print("| rows compared | max abs difference | rows differing > 1e-5 | bit-identical rows | speed-up (median) |")
    print("|---:|---:|---:|---:|---:|")
    print(
        f"| {ref.shape[0]} | {diff.max().item():.3g} | {int((row_diff > 1e-5).sum())} | "
        f"{int((row_diff == 0).sum())} | {med['deepfocus.FOCUS'] / med['vocabtransfer.FOCUS']:.1f}x |"
    )
    return 0 if diff.max().item() < 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
