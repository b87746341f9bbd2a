"""The pretrain stage on a GPU: its CUDA path (bf16 where supported), standard vs selfish objective.

    python benchmarks/pretrain_cuda.py --text ../shared/data/pretrain_text/sw.txt [--steps 200]

Builds a MiniLM-shaped masked LM (6 layers, hidden 384, 12 heads; `--smoke`: 2 layers of 64 on 2,000 lines)
with random weights and a WordPiece tokenizer trained on the text, lays out `results/sw/init/random/model` and
the pre-tokenised splits in a scratch directory, and runs `vocabtransfer pretrain --device auto` there once per
objective, as the pipeline does. Prints, per objective, the precision the stage chose, tokens per second, the valid loss
at step 0 and at the end, and the wall time, then the selfish / standard time ratio. By hand on a GPU; CI runs
its CPU path at `--smoke` (tests/project/test_benchmarks.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
import yaml


def build_project(
    root: Path, text: Path, vocab_size: int, seed: int = 0, max_lines: int | None = None, small: bool = False
) -> None:
    import torch
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertConfig, BertForMaskedLM, PreTrainedTokenizerFast
    from vocabtransfer.data import token_ids

    lines = [s.strip() for s in text.read_text(encoding="utf-8").splitlines() if s.strip()][:max_lines]
    valid, train = lines[:1000], lines[1000:]
    wordpiece = BertWordPieceTokenizer(lowercase=True)
    wordpiece.train_from_iterator(train, vocab_size=vocab_size)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=wordpiece._tokenizer,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )
    torch.manual_seed(seed)
    shape = (
        dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128)
        if small
        else dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536)
    )
    model = BertForMaskedLM(BertConfig(vocab_size=len(tok), max_position_embeddings=512, **shape))
    model_dir = root / "results/sw/init/random/pseed1/model"
    model.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    for split, split_lines in (("train", train), ("valid", valid)):
        ids = tok(split_lines, add_special_tokens=False)["input_ids"]
        token_ids.write_lines(root / f"results/sw/pretokenized/{split}", tok, ids)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--text", type=Path, required=True, help="target-language text, one sentence per line")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--vocab-size", type=int, default=16000)
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="seconds at tiny sizes: checks that the script runs (tests/project/test_benchmarks.py, in CI)",
    )
    args = ap.parse_args()
    if args.smoke:
        args.steps, args.batch_size, args.seq_len, args.vocab_size = 4, 2, 32, 1000

    from vocabtransfer.app.params import validate_params

    root = Path(tempfile.mkdtemp(prefix="pretrain_cuda_"))
    build_project(root, args.text.resolve(), args.vocab_size, max_lines=2000 if args.smoke else None, small=args.smoke)
    params = validate_params(
        {
            "languages": ["sw"],
            "source_model": "unused/unused",
            "corpus": {"sources": {"sw": {"path": "unused.txt"}}},
            "init": {"methods": ["random"]},
            "pretrain": {
                "methods": ["random"],
                "steps": args.steps,
                "batch_size": args.batch_size,
                "seq_len": args.seq_len,
                "learning_rate": 5e-4,
                "warmup_steps": args.steps // 10,
                "eval_every": args.steps // 2,
                "log_every": 10,
                "save_every": args.steps // 2,
                "eval_lines": 50 if args.smoke else 1000,
            },
        }
    )
    (root / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    rows = []
    for objective in ("standard", "selfish"):
        start = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "vocabtransfer",
                "pretrain",
                "--lang",
                "sw",
                "--method",
                "random",
                "--objective",
                objective,
                "--pseed",
                "1",
                "--params",
                "params.yaml",
                "--device",
                "auto",
            ],
            cwd=root,
            check=True,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
        seconds = time.perf_counter() - start
        run_dir = root / f"results/sw/pretrain/random/{objective}/pseed1"
        stats = json.loads((run_dir / "stats.json").read_text())
        metrics = pq.read_table(run_dir / "metrics.parquet").to_pandas()
        rows.append(
            (
                objective,
                "bf16" if stats.get("bf16") else "fp32",
                metrics["tokens_per_second"].median(),
                stats["initial_valid_loss"],
                stats["final_valid_loss"],
                seconds,
            )
        )
    import torch

    print(
        f"\n{torch.cuda.get_device_name() if torch.cuda.is_available() else 'CPU'}; {args.steps} steps of "
        f"{args.batch_size} × {args.seq_len} tokens, {'a tiny' if args.smoke else 'MiniLM-shaped'} masked LM, "
        f"vocabulary {args.vocab_size}\n"
    )
    print("| objective | precision | tokens/s (median) | valid loss step 0 | valid loss end | wall s |")
    print("|---|---|---:|---:|---:|---:|")
    for objective, precision, tps, first, last, seconds in rows:
        print(f"| {objective} | {precision} | {tps:,.0f} | {first:.3f} | {last:.3f} | {seconds:.1f} |")
    print(f"\nselfish / standard: wall time {rows[1][5] / rows[0][5]:.3f}, tokens/s {rows[1][2] / rows[0][2]:.3f}")


if __name__ == "__main__":
    main()
