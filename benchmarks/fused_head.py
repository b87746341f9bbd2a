"""The LM head fused with the objective against materialised logits, side by side, in one run.

    python benchmarks/fused_head.py --threads 2                      # CPU, (1024,384,250k) and (4096,384,32k)
    python benchmarks/fused_head.py --threads 2 --busy               # the same with a busy process on a core
    python benchmarks/fused_head.py --device cuda --dtype bfloat16 --shapes 8192,2048,256000 --step

Per shape (N predicted rows, H hidden, V vocabulary; random inputs with logits of standard deviation
~3, every label counts), loss forward + backward of:
  materialised CE       logits = h @ W.T (float32), F.cross_entropy
  materialised selfish  the same logits, losses.selfish_cross_entropy (margin 2)
  torch chunked CE      F.linear_cross_entropy(..., options=LinearCrossEntropyOptions()) (torch >= 2.13)
  fused standard/selfish  losses.linear_objective_loss (on CUDA: the Triton path; `fused … (torch)`: the
                        chunked torch path, VOCABTRANSFER_FUSED_HEAD=torch)
  dense-matmul floor    the three products h @ W.T, G @ W, G.T @ h that any exact dense method does
Time: the best of --repeat rounds after a warm-up round, the variants taking turns in each round (a
load that comes and goes on a shared machine hits them all alike; CUDA: synchronised). Memory beyond
the gradients: peak memory of one run minus the inputs and the gradients of h and W (CPU: peak RSS of
a fresh process per variant; CUDA: torch.cuda.max_memory_allocated). Ratios: to materialised CE, and to
torch's chunked CE. `--step`: a training step of a small pre-norm transformer body (4 layers of width H,
N tokens) with the fused head, standard vs selfish, alternating (the median of --repeat each).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch
import torch.nn.functional as F

from vocabtransfer.model import losses
from vocabtransfer.model.fused_head import linear_objective_loss

VARIANTS = [
    "materialised CE",
    "materialised selfish",
    "torch chunked CE",
    "fused standard",
    "fused selfish",
    "fused standard (torch)",
    "fused selfish (torch)",
    "dense-matmul floor",
]
MARGIN = 2.0


def inputs(n: int, h: int, v: int, dtype, device, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, h, generator=g)
    weight = torch.randn(v, h, generator=g) * (3.0 / h**0.5)  # logits ~ N(0, 9)
    labels = torch.randint(0, v, (n,), generator=g)
    return hidden.to(device, dtype), weight.to(device, dtype), labels.to(device)


def loss_fn(variant: str):
    def logits(h, w):
        x = h @ w.T
        return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x

    if variant == "materialised CE":
        return lambda h, w, y: F.cross_entropy(logits(h, w), y)
    if variant == "materialised selfish":
        return lambda h, w, y: losses.selfish_cross_entropy(logits(h, w), y, MARGIN)
    if variant == "torch chunked CE":
        return lambda h, w, y: F.linear_cross_entropy(h, w, y, options=torch.nn.LinearCrossEntropyOptions())
    objective = "selfish" if "selfish" in variant else "standard"
    return lambda h, w, y: linear_objective_loss(h, w, y, objective=objective, margin=MARGIN)


def available(variant: str, device: str) -> bool:
    if variant == "torch chunked CE":
        return hasattr(F, "linear_cross_entropy") and hasattr(torch.nn, "LinearCrossEntropyOptions")
    if variant.endswith("(torch)"):
        return device == "cuda"
    return True


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def one_run(variant: str, h, w, y, device: str) -> None:
    if variant == "dense-matmul floor":
        with torch.no_grad():
            x = h @ w.T
            x @ w
            x.T @ h
        return
    h.grad = w.grad = None
    loss_fn(variant)(h, w, y).backward()


def memory(variant: str, shape, dtype, device: str) -> int:
    """Peak memory of one run beyond the inputs and the gradients of h and W (CPU: call it in a fresh
    process, whose peak RSS is then this run's)."""
    if variant.endswith("(torch)"):
        os.environ["VOCABTRANSFER_FUSED_HEAD"] = "torch"
    h, w, y = inputs(*shape, dtype, device)
    h.requires_grad_(True)
    w.requires_grad_(True)
    grads = 0 if variant == "dense-matmul floor" else (h.numel() + w.numel()) * h.element_size()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = rss_now()
    one_run(variant, h, w, y, device)
    sync(device)
    if device == "cuda":
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = peak_rss() - base
    os.environ.pop("VOCABTRANSFER_FUSED_HEAD", None)
    return max(0, peak - grads)


def times(variants: list[str], shape, dtype, device: str, repeat: int) -> dict[str, float]:
    """The best of `repeat` rounds per variant; the variants take turns within each round (after a
    warm-up round), so that a load that comes and goes on a shared machine hits them all alike."""
    h, w, y = inputs(*shape, dtype, device)
    h.requires_grad_(True)
    w.requires_grad_(True)
    best = {v: float("inf") for v in variants}
    for r in range(repeat + 1):
        for variant in variants:
            if variant.endswith("(torch)"):
                os.environ["VOCABTRANSFER_FUSED_HEAD"] = "torch"
            sync(device)
            start = time.perf_counter()
            one_run(variant, h, w, y, device)
            sync(device)
            if r:
                best[variant] = min(best[variant], time.perf_counter() - start)
            os.environ.pop("VOCABTRANSFER_FUSED_HEAD", None)
        h.grad = w.grad = None
    return best


def rss_now() -> int:
    with open("/proc/self/statm", encoding="ascii") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss() -> int:
    """This process's peak RSS (VmHWM: unlike ru_maxrss, not inherited from the parent across exec)."""
    with open("/proc/self/status", encoding="ascii") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmHWM:"))


def training_step(shape, dtype, device: str, repeat: int) -> list[dict]:
    """A small pre-norm transformer body (4 layers, width H, N tokens) + the fused head: standard vs selfish."""
    n, hdim, v = shape
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(
        hdim, max(1, hdim // 128), 4 * hdim, dropout=0.0, batch_first=True, norm_first=True
    )
    body = torch.nn.TransformerEncoder(layer, 4).to(device, dtype)
    _, w, y = inputs(n, hdim, v, dtype, device)
    w.requires_grad_(True)
    seq = 2048 if n % 2048 == 0 else n
    x = torch.randn(n // seq, seq, hdim, device=device, dtype=dtype)
    times: dict[str, list[float]] = {"standard": [], "selfish": []}
    for i in range(2 * (repeat + 1)):  # alternating, so that both objectives see the same conditions
        objective = ("standard", "selfish")[i % 2]
        body.zero_grad(set_to_none=True)
        w.grad = None
        sync(device)
        start = time.perf_counter()
        hidden = body(x).reshape(n, hdim)
        linear_objective_loss(hidden, w, y, objective=objective, margin=MARGIN).backward()
        sync(device)
        if i >= 2:
            times[objective].append(time.perf_counter() - start)
    return [
        {"variant": f"training step, {o}", "seconds": sorted(t)[len(t) // 2], "memory": 0} for o, t in times.items()
    ]


def child(args) -> None:
    torch.set_num_threads(args.threads)
    shape = tuple(int(s) for s in args.child_shape.split(","))
    print(json.dumps(memory(args.child, shape, getattr(torch, args.dtype), args.device)))


def table(shape, rows: list[dict], device: str, busy: bool) -> str:
    by = {r["variant"]: r for r in rows}
    ce, lce = by["materialised CE"], by.get("torch chunked CE")
    lines = [
        f"\n(N, H, V) = {shape}, {device}, {'busy' if busy else 'idle'}\n",
        "| variant | time s | × mat. CE | × torch chunked CE | memory MiB | × mat. CE |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        t, no_memory = r["seconds"], r["variant"] == "dense-matmul floor" or r["variant"].startswith("training")
        versus = f"{t / lce['seconds']:.3f}" if lce else "–"
        memory = "– | –" if no_memory else f"{r['memory'] / 2**20:.0f} | {r['memory'] / max(1, ce['memory']):.3f}"
        lines.append(f"| {r['variant']} | {t:.4f} | {t / ce['seconds']:.3f} | {versus} | {memory} |")
    if "training step, standard" in by:
        loss = by["fused selfish"]["seconds"] / by["fused standard"]["seconds"]
        step = by["training step, selfish"]["seconds"] / by["training step, standard"]["seconds"]
        lines.append(f"\nselfish / standard: loss {loss:.3f}, training step {step:.3f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--shapes", nargs="+", default=["1024,384,250000", "4096,384,32000"])
    parser.add_argument("--repeat", type=int, default=2, help="timed rounds (after a warm-up round)")
    parser.add_argument("--busy", action="store_true", help="a busy-looping process on a core while measuring")
    parser.add_argument("--step", action="store_true", help="also a training step, standard vs selfish (CUDA)")
    parser.add_argument("--variants", nargs="+", default=VARIANTS)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-shape", help=argparse.SUPPRESS)
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="seconds at tiny sizes: checks that the script runs (tests/project/test_benchmarks.py, in CI)",
    )
    args = parser.parse_args()
    if args.smoke:
        args.shapes, args.repeat = ["64,16,1000"], 1
        if args.variants == VARIANTS:  # a fresh process each for memory: three variants, one of each kind
            args.variants = ["materialised CE", "fused standard", "fused selfish (torch)"]
    if args.child:
        return child(args)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.busy else None
    try:
        print(
            f"torch {torch.__version__}, {args.device}, {args.dtype}, {args.threads} threads"
            f"{', a busy process on a core' if args.busy else ''}",
            flush=True,
        )
        for spec in args.shapes:
            shape = tuple(int(s) for s in spec.split(","))
            variants = [v for v in args.variants if available(v, args.device)]
            peaks = {}
            for variant in variants:
                if args.device == "cpu":  # a fresh process per variant: its peak RSS is this variant's
                    cmd = [
                        sys.executable,
                        __file__,
                        "--child",
                        variant,
                        "--child-shape",
                        spec,
                        "--device",
                        "cpu",
                        "--dtype",
                        args.dtype,
                        "--threads",
                        str(args.threads),
                    ]
                    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
                    peaks[variant] = json.loads(out.strip().splitlines()[-1])
                else:
                    torch.cuda.empty_cache()
                    peaks[variant] = memory(variant, shape, getattr(torch, args.dtype), args.device)
            best = times(variants, shape, getattr(torch, args.dtype), args.device, args.repeat)
            rows = [{"variant": v, "seconds": best[v], "memory": peaks[v]} for v in variants]
            if args.step:
                rows += training_step(shape, getattr(torch, args.dtype), args.device, args.repeat)
            print(table(shape, rows, args.device, args.busy), flush=True)
    finally:
        if busy is not None:
            busy.kill()


if __name__ == "__main__":
    main()
