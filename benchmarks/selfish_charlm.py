"""The selfish-tokens study's own experiment, small: a character-level causal transformer trained
from scratch on English text with the standard and with the selfish objective (margin 2), and
its held-out loss per character, characters grouped in tens from most to least frequent.

    python benchmarks/selfish_charlm.py                       # ~6 minutes on 1 CPU thread
    python benchmarks/selfish_charlm.py --steps 1500 --threads 8

Both runs share everything but the loss: the initial weights (same seed), the batches, the
optimiser. The model is a GPT-2 (transformers) with tied input/output embeddings, so jostling
reaches the character embeddings. Text: $VOCABTRANSFER_DATA/pretrain_text/en.txt (the first
`--train-chars` characters train, the last `--valid-chars` are held out); characters are ranked
by their count in the training part; held-out characters never seen in training are dropped.
The held-out loss is the standard cross-entropy for both models.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch
import torch.nn.functional as F

from vocabtransfer.model.losses import objective_loss
from smoke_inputs import DATA  # the data root the pipeline reads


def load_text(train_chars: int, valid_chars: int) -> tuple[str, str]:
    text = (DATA / "pretrain_text" / "en.txt").read_text(encoding="utf-8")
    return text[:train_chars], text[-valid_chars:]


def model_for(vocab: int, args):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(args.seed)
    return GPT2LMHeadModel(
        GPT2Config(
            vocab_size=vocab,
            n_embd=args.dim,
            n_layer=args.layers,
            n_head=4,
            n_positions=args.block,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            bos_token_id=None,
            eos_token_id=None,
        )
    )


def batches(ids: torch.Tensor, args):
    g = torch.Generator().manual_seed(args.seed)
    for _ in range(args.steps):
        starts = torch.randint(0, len(ids) - args.block - 1, (args.batch,), generator=g)
        yield torch.stack([ids[s : s + args.block + 1] for s in starts.tolist()])


def train(objective: str, ids: torch.Tensor, vocab: int, args):
    model = model_for(vocab, args)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 50) * 0.5 * (1 + math.cos(math.pi * s / args.steps))
    )
    model.train()
    start = time.perf_counter()
    for step, block in enumerate(batches(ids, args)):
        logits = model(input_ids=block[:, :-1]).logits
        loss = objective_loss(objective, logits.reshape(-1, vocab), block[:, 1:].reshape(-1), margin=args.margin)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        if step % 100 == 0 or step == args.steps - 1:
            print(
                f"  {objective:8s} step {step:5d}  train loss {float(loss.detach()):.3f}  "
                f"({time.perf_counter() - start:.0f} s)",
                flush=True,
            )
    return model


@torch.inference_mode()
def held_out_losses(model, ids: torch.Tensor, args) -> tuple[torch.Tensor, torch.Tensor]:
    """(per-position standard cross-entropy, target ids) over the held-out text in blocks."""
    model.eval()
    losses, targets = [], []
    for s in range(0, len(ids) - 1, args.block):
        block = ids[s : s + args.block + 1][None]
        if block.shape[1] < 2:
            break
        logits = model(input_ids=block[:, :-1]).logits[0]
        losses.append(F.cross_entropy(logits, block[0, 1:], reduction="none"))
        targets.append(block[0, 1:])
    return torch.cat(losses), torch.cat(targets)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--margin", type=float, default=2.0)
    ap.add_argument("--train-chars", type=int, default=2_000_000)
    ap.add_argument("--valid-chars", type=int, default=200_000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="seconds at tiny sizes: checks that the script runs (tests/project/test_benchmarks.py, in CI)",
    )
    args = ap.parse_args()
    if args.smoke:
        args.steps, args.batch, args.block, args.dim, args.layers = 3, 4, 32, 16, 1
        args.train_chars, args.valid_chars = 20_000, 5_000
    torch.set_num_threads(args.threads)

    train_text, valid_text = load_text(args.train_chars, args.valid_chars)
    counts = Counter(train_text)
    chars = [c for c, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]  # rank order
    index = {c: i for i, c in enumerate(chars)}  # token id = frequency rank
    train_ids = torch.tensor([index[c] for c in train_text])
    valid_ids = torch.tensor([index[c] for c in valid_text if c in index])
    print(
        f"{len(chars)} characters, {len(train_ids):,} training and {len(valid_ids):,} held-out characters; "
        f"GPT-2 {args.layers} layers x {args.dim}, {args.steps} steps of {args.batch} x {args.block}, "
        f"{args.threads} thread(s)",
        flush=True,
    )

    results = {}
    for objective in ("standard", "selfish"):
        model = train(objective, train_ids, len(chars), args)
        results[objective] = held_out_losses(model, valid_ids, args)
    _, targets = results["standard"]

    print("\nHeld-out cross-entropy per character group (ranks by training frequency; id = rank)\n")
    print("| ranks | train count (min-max) | held-out chars | standard | selfish | selfish - standard |")
    print("|---|---|---|---|---|---|")
    for lo in range(0, len(chars), 10):
        hi = min(len(chars), lo + 10) - 1
        sel = (targets >= lo) & (targets <= hi)
        n = int(sel.sum())
        cnt = f"{counts[chars[hi]]:,}-{counts[chars[lo]]:,}"
        if not n:
            print(f"| {lo}-{hi} | {cnt} | 0 | – | – | – |")
            continue
        std, sfs = (float(results[o][0][sel].mean()) for o in ("standard", "selfish"))
        print(f"| {lo}-{hi} | {cnt} | {n:,} | {std:.3f} | {sfs:.3f} | {sfs - std:+.3f} |")
    std, sfs = (float(results[o][0].mean()) for o in ("standard", "selfish"))
    print(f"| all | | {len(targets):,} | {std:.3f} | {sfs:.3f} | {sfs - std:+.3f} |")


if __name__ == "__main__":
    main()
