"""Which target tokens carry the valid-loss gap between two causal models of one target tokenizer?

    PYTHONPATH=src .venv/bin/python benchmarks/loss_by_token.py MODEL_A MODEL_B VALID_PARQUET \
        [--lines 200] [--seq-len 128] [--top 8]

Scores the first `--lines` lines of the corpus stage's valid split (results/L/corpus/valid.parquet), packed
as the pretrain stage packs them (`lmdata.pack_ids`: the tokenizer's own special tokens around each line, an
end-of-sequence token closing it, blocks of at most `--seq-len`), with both models' standard cross-entropy
per token, and prints B − A: over all tokens, over the special tokens (BOS, EOS: no bytes, so in no chunk of
the distill/alm objectives) and over the rest, then the `--top` target tokens whose summed difference is
largest, with their count and share of the whole gap. Used in docs/objectives.md on the distill study's alm
and standard models (seed 1).
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import pyarrow.parquet as pq
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from vocabtransfer.model.lmdata import pack_ids


def token_losses(model_dir: str, blocks: list[list[int]]) -> torch.Tensor:
    """Cross-entropy of every token after a block's first, blocks in order."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    out = []
    with torch.inference_mode():
        for block in blocks:
            ids = torch.tensor([block])
            logits = model(ids).logits[0, :-1]
            out.append(torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="none"))
    return torch.cat(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_a")
    ap.add_argument("model_b")
    ap.add_argument("valid")
    ap.add_argument("--lines", type=int, default=200)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--top", type=int, default=8)
    args = ap.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(args.model_a)
    lines = pq.read_table(args.valid, columns=["text"]).column("text").to_pylist()[: args.lines]
    ids = tokenizer(lines, add_special_tokens=False)["input_ids"]
    blocks = pack_ids(tokenizer, ids, args.seq_len, kind="causal")
    a, b = token_losses(args.model_a, blocks), token_losses(args.model_b, blocks)
    labels = torch.cat([torch.tensor(block[1:]) for block in blocks])
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
        print(f"| {tokenizer.convert_ids_to_tokens(token)!r} | {count[token]} | {total[token] / count[token]:+.2f} "
              f"| {total[token] / whole:.2f} |")


if __name__ == "__main__":
    main()
