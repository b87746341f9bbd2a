"""Speed and peak memory of the selfish cross-entropy against `F.cross_entropy` and the naive
masked_fill version, measured in one run; and a whole masked-LM training step with each objective.

    python benchmarks/selfish_loss.py                 # CPU, float32 (and CUDA float32 + bf16 if present)
    python benchmarks/selfish_loss.py --threads 1 --repeats 5 --skip-step

Time: the median of `--repeats` forward + backward passes of the loss alone on fixed logits (the
three implementations interleaved, after one warm-up each). Peak memory: each (shape,
implementation) runs once in a fresh subprocess; on CPU the peak resident set size (VmHWM,
reset through /proc/self/clear_refs just before the loss, once logits and labels exist) minus
the resident size at that moment, so it counts every temporary and the gradient buffer; on CUDA
`torch.cuda.max_memory_allocated()` minus the memory allocated before the loss.
Training step: a MiniLM-sized BERT masked LM (6 layers, hidden 384) with a 32k vocabulary, batch
8 x 128, 15 % of positions predicted, AdamW; forward, loss over all positions (ignore_index for
the unmasked ones, as `BertForMaskedLM` does), backward, optimizer step.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch
import torch.nn.functional as F

from vocabtransfer.model.losses import selfish_cross_entropy, selfish_cross_entropy_naive

IMPLS = {
    "cross_entropy": lambda x, y: F.cross_entropy(x, y),
    "naive_selfish": lambda x, y: selfish_cross_entropy_naive(x, y, margin=2.0),
    "selfish": lambda x, y: selfish_cross_entropy(x, y, margin=2.0),
}
SHAPES = [(256, 250_000), (4096, 32_000)]
IGNORED = [0.0, 0.85]  # shares of ignored labels (-100) measured per shape
# the whole training step's model: MiniLM's shape over a 32k vocabulary
STEP_MODEL = dict(
    vocab_size=32_000, hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536
)


def make(n: int, v: int, dtype, device, ignored: float = 0.0):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(n, v, generator=g).mul_(2).to(device=device, dtype=dtype).requires_grad_()
    labels = torch.randint(0, v, (n,), generator=g)
    if ignored:
        labels[torch.rand(n, generator=g) < ignored] = -100
    return logits, labels.to(device)


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def time_impls(n, v, dtype, device, repeats, ignored=0.0) -> dict[str, float]:
    logits, labels = make(n, v, dtype, device, ignored)
    times: dict[str, list[float]] = {k: [] for k in IMPLS}
    for r in range(repeats + 1):
        for name, fn in IMPLS.items():
            logits.grad = None
            sync(device)
            t = time.perf_counter()
            fn(logits, labels).backward()
            sync(device)
            if r:  # the first round warms up
                times[name].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS counter (VmHWM) to the current RSS; False where unsupported."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def peak_rss_bytes() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def peak_child(name: str, n: int, v: int, dtype: str, device: str, ignored: float) -> None:
    """In a fresh process: the extra peak memory of one forward + backward (printed as JSON)."""
    logits, labels = make(n, v, getattr(torch, dtype), device, ignored)
    if device == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        IMPLS[name](logits, labels).backward()
        torch.cuda.synchronize()
        extra = torch.cuda.max_memory_allocated() - before
    else:
        before = rss_bytes()
        if not reset_peak_rss():
            raise SystemExit("cannot reset the peak RSS (/proc/self/clear_refs); no CPU memory figure")
        IMPLS[name](logits, labels).backward()
        extra = peak_rss_bytes() - before
    print(json.dumps({"extra": extra}))


def peak(name, n, v, dtype, device, threads, ignored=0.0) -> int:
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            name,
            str(n),
            str(v),
            dtype,
            device,
            str(ignored),
            "--threads",
            str(threads),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])["extra"]


def training_step(device, steps: int) -> dict[str, float]:
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    vocab = STEP_MODEL["vocab_size"]
    model = BertForMaskedLM(BertConfig(**STEP_MODEL, max_position_embeddings=512)).to(device)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, vocab, (8, 128), generator=g)
    labels = ids.masked_fill(torch.rand(8, 128, generator=g) >= 0.15, -100)
    ids, labels = ids.to(device), labels.to(device)
    losses = {
        "cross_entropy": lambda x, y: F.cross_entropy(x, y),
        "selfish": lambda x, y: selfish_cross_entropy(x, y, margin=2.0),
    }
    times: dict[str, list[float]] = {k: [] for k in losses}
    for r in range(steps + 1):
        for name, fn in losses.items():
            sync(device)
            t = time.perf_counter()
            logits = model(input_ids=ids).logits
            loss = fn(logits.view(-1, vocab), labels.view(-1))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            sync(device)
            if r:
                times[name].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=5, help="training steps timed per objective")
    ap.add_argument("--skip-step", action="store_true", help="skip the training-step comparison")
    ap.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="seconds at tiny sizes: checks that the script runs (tests/project/test_benchmarks.py, in CI)",
    )
    args = ap.parse_args()
    if args.smoke:
        SHAPES[:], IGNORED[:] = [(64, 1000)], [0.85]
        STEP_MODEL.update(
            vocab_size=1000, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
        )
        args.repeats, args.steps = 1, 1
    torch.set_num_threads(args.threads)
    if args.child:
        name, n, v, dtype, device, ignored = args.child
        peak_child(name, int(n), int(v), dtype, device, float(ignored))
        return

    setups = [("cpu", "float32")]
    if torch.cuda.is_available():
        setups += [("cuda", "float32")] + ([("cuda", "bfloat16")] if torch.cuda.is_bf16_supported() else [])
    print(
        f"torch {torch.__version__}, {args.threads} CPU thread(s)"
        + (f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else "")
    )
    print(
        "\nLoss alone, forward + backward (time: median of "
        f"{args.repeats}; memory: extra peak over logits + labels, fresh process each)\n"
    )
    print(
        "| device | dtype | N x V | ignored | cross_entropy ms | naive / CE time | selfish / CE time "
        "| CE extra MiB | naive / CE memory | selfish / CE memory |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for device, dtype in setups:
        for n, v in SHAPES:
            for ignored in IGNORED:
                t = time_impls(n, v, getattr(torch, dtype), device, args.repeats, ignored)
                m = {k: peak(k, n, v, dtype, device, args.threads, ignored) for k in IMPLS}
                print(
                    f"| {device} | {dtype} | {n} x {v} | {ignored:.0%} | {t['cross_entropy'] * 1e3:.1f} "
                    f"| {t['naive_selfish'] / t['cross_entropy']:.2f} | {t['selfish'] / t['cross_entropy']:.2f} "
                    f"| {m['cross_entropy'] / 2**20:.0f} | {m['naive_selfish'] / m['cross_entropy']:.2f} "
                    f"| {m['selfish'] / m['cross_entropy']:.2f} |",
                    flush=True,
                )
    if args.skip_step:
        return
    print(
        f"\nWhole training step, BERT masked LM of width {STEP_MODEL['hidden_size']}, "
        f"{STEP_MODEL['num_hidden_layers']} layer(s), {STEP_MODEL['vocab_size']:,} tokens, batch 8 x 128 "
        f"(median of {args.steps})\n"
    )
    print("| device | cross_entropy s/step | selfish s/step | selfish / CE |")
    print("|---|---|---|---|")
    for device in ["cpu"] + (["cuda"] if torch.cuda.is_available() else []):
        t = training_step(device, args.steps)
        print(
            f"| {device} | {t['cross_entropy']:.3f} | {t['selfish']:.3f} | {t['selfish'] / t['cross_entropy']:.3f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
