"""One training step of stage hypernet (train/hypernet.py) on a real source, at several sampled vocabulary sizes.

For each vocabulary size (and width), in one process: the sampled tokenizer's episode (the tokenizer trained on
`tokenizer_lines` lines, its FVT rows, its pieces) once, then `--repeats` steps of the stage's loss (the
network's rows for the whole sampled vocabulary, the frozen source through them, the LM loss and the auxiliary
term), backward and an AdamW step, under the precision the stage picks (`init.hypernet.precision: auto`).
Rows (`--json`): vocabulary size, width, seconds per episode, median seconds per step, training tokens per
step and per second, the process's peak resident memory (VmHWM), and the minutes `--steps` steps take (600, the
default, with a new tokenizer every 10 steps).

    PYTHONPATH=src .venv/bin/python benchmarks/hypernet_step.py --source results/source/model \\
        --train results/sw/corpus/train.parquet results/de/corpus/train.parquet --json hypernet_step.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from vocabtransfer.plan.method_options import HypernetOptions
from vocabtransfer.model import hypernet as network
from vocabtransfer.model.precision import resolve
from vocabtransfer.train import hypernet as stage


def peak_rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def measure(
    source: Path,
    lines: list[str],
    vocab: int,
    width: int | None,
    repeats: int,
    *,
    batch_size: int = 16,
    seq_len: int = 128,
    steps: int = 600,
) -> dict:
    options = HypernetOptions(vocab_min=vocab, vocab_max=vocab, width=width, batch_size=batch_size, seq_len=seq_len)
    choice = resolve(options.precision, use_cpu=True)
    setup = stage.Setup(source, lines, options, seed=1)
    net = network.HyperNet(stage.config_for(setup, options))
    start = time.perf_counter()
    episode = setup.episode(0)
    episode_seconds = time.perf_counter() - start
    optimizer = torch.optim.AdamW(net.parameters(), lr=options.learning_rate)
    times, tokens = [], []
    for step in range(repeats + 1):  # the first is a warm-up
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=choice.bf16):
            loss, parts = setup.loss(net, step)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step:
            times.append(time.perf_counter() - start)
            tokens.append(parts["tokens"])
    per_step = statistics.median(times)
    return {
        "vocab": len(episode.tokenizer),
        "width": net.config.width,
        "precision": "bf16" if choice.bf16 else "fp32",
        "episode_seconds": round(episode_seconds, 2),
        "seconds_per_step": round(per_step, 3),
        "tokens_per_step": round(statistics.mean(tokens)),
        "tokens_per_second": round(statistics.mean(tokens) / per_step),
        "peak_memory_bytes": peak_rss(),
        "steps": steps,
        "minutes_for_steps": round((steps * per_step + steps / 10 * episode_seconds) / 60, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, default=Path("results/source/model"))
    parser.add_argument("--train", type=Path, nargs="+", default=[Path("results/sw/corpus/train.parquet")])
    parser.add_argument("--vocab", type=int, nargs="+", default=[2000, 8000, 16000])
    parser.add_argument("--width", type=int, nargs="*", default=[], help="widths besides the source's size")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16, help="init.hypernet.batch_size (blocks a step)")
    parser.add_argument("--seq-len", type=int, default=128, help="init.hypernet.seq_len")
    parser.add_argument("--steps", type=int, default=600, help="init.hypernet.steps, for the minutes column")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="seconds at tiny sizes: checks that the script runs (tests/project/test_benchmarks.py, in CI)",
    )
    args = parser.parse_args()
    if args.smoke:
        args.vocab, args.repeats, args.batch_size, args.seq_len, args.steps = [500], 1, 2, 16, 2
    torch.set_num_threads(args.threads)
    lines = stage.train_lines(args.train)
    rows = [
        measure(
            args.source, lines, v, w, args.repeats, batch_size=args.batch_size, seq_len=args.seq_len, steps=args.steps
        )
        for v in args.vocab
        for w in [None, *args.width]
    ]
    print(
        "| vocab | width | precision | episode s | s/step | tokens/step | tokens/s | peak GiB | "
        f"{args.steps} steps, min |"
    )
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['vocab']} | {r['width']} | {r['precision']} | {r['episode_seconds']} | {r['seconds_per_step']} | "
            f"{r['tokens_per_step']} | {r['tokens_per_second']} | {r['peak_memory_bytes'] / 2**30:.2f} | "
            f"{r['minutes_for_steps']} |"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
