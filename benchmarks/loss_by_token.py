"""Which target tokens carry the valid-loss gap between two causal models of one target tokenizer?

    PYTHONPATH=src .venv/bin/python benchmarks/loss_by_token.py MODEL_A MODEL_B VALID_PARQUET \
        [--lines 200] [--seq-len 128] [--top 8]

Scores the first `--lines` lines of the corpus stage's valid split (results/L/corpus/valid.parquet), packed
as the pretrain stage packs them (`lmdata.pack_ids`: the tokenizer's own special tokens around each line, an
end-of-sequence token closing it, blocks of at most `--seq-len`), with both models' standard cross-entropy
per token (`lm_loss.token_losses`, as the pipeline scores), and prints B − A: over all tokens, over the
special tokens (BOS, EOS: no bytes, so in no chunk of the distill/alm objectives) and over the rest, then the
`--top` target tokens whose summed difference is largest, with their count and share of the whole gap. Used in
docs/objectives.md on the distill study's alm and standard models (seed 1).
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import pyarrow.parquet as pq
import torch

from vocabtransfer.model import lm_loss, modeling
from vocabtransfer.model.hub import load_tokenizer
from vocabtransfer.model.lmdata import LMCollator, pack_ids


def token_losses(model_dir: str, batches: list[dict]) -> tuple[torch.Tensor, torch.Tensor]:
    """(standard cross-entropy of every predicted token, its target id), batches in order, scored as the
    pipeline scores (`lm_loss.token_losses`, the fused head)."""
    model, _ = modeling.load_source_model(model_dir, "causal")
    losses, targets = [], []
    with torch.inference_mode():
        for batch in batches:
            loss, target = lm_loss.token_losses(model, batch, "causal")
            losses.append(loss.float())
            targets.append(target)
    return torch.cat(losses), torch.cat(targets)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_a")
    ap.add_argument("model_b")
    ap.add_argument("valid")
    ap.add_argument("--lines", type=int, default=200)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--top", type=int, default=8)
    args = ap.parse_args()
    tokenizer = load_tokenizer(args.model_a)
    lines = pq.read_table(args.valid, columns=["text"]).column("text").to_pylist()[: args.lines]
    ids = tokenizer(lines, add_special_tokens=False)["input_ids"]
    blocks = pack_ids(tokenizer, ids, args.seq_len, kind="causal")
    collate = LMCollator(tokenizer, "causal", seed=0)
    batches = [collate(blocks[k : k + 8]) for k in range(0, len(blocks), 8)]
    (a, labels), (b, _) = token_losses(args.model_a, batches), token_losses(args.model_b, batches)  # same targets
    diff = b - a
    special = torch.isin(labels, torch.tensor(sorted(tokenizer.all_special_ids)))
    print(f"{len(blocks)} blocks, {len(diff)} tokens scored ({int(special.sum())} special)")
    print(f"mean loss: A {a.mean():.3f}, B {b.mean():.3f}; B − A {diff.mean():+.3f} nats per token")
    print(f"B − A over the special tokens {diff[special].mean():+.3f}, over the rest {diff[~special].mean():+.3f}")
    total, count = defaultdict(float), defaultdict(int)
    for token, d in zip(labels.tolist(), diff.tolist()):
        total[token] += d
        count[token] += 1
    whole = float(diff.sum())
    print("| token | count | B − A per token | share of the whole gap |\n|---|---|---|---|")
    for token in sorted(total, key=lambda t: -total[t])[: args.top]:
        print(
            f"| {tokenizer.convert_ids_to_tokens(token)!r} | {count[token]} | {total[token] / count[token]:+.2f} "
            f"| {total[token] / whole:.2f} |"
        )


if __name__ == "__main__":
    main()
