"""A downstream task's training size and epochs picked on a dev split carved from its TRAINING data, never on
the test examples the report scores.

The task's training examples (params `eval.tasks.<task>.data.<lang>.train`, read as the finetune_eval stage
reads them) are split by group (QA: article) into a dev part (--dev-fraction of the
groups, seeded by --seed + 1 so it is not the train/test split's hash) and the rest; each setting
(max_train × epochs) fine-tunes --model on up to max_train of the rest with --seeds fine-tuning seeds and is
scored on the dev part, beside the task's floor (a predictor without a model) on the same dev examples.
Prints one Markdown table: each setting's mean score over seeds, the lowest seed, the floor, and the seconds
a job took.

    .venv/bin/python benchmarks/tune_task.py --model ../study/results/source/model --task qa --lang sw \\
        --max-train 96 240 480 --epochs 2 3 --seeds 2
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", type=Path, required=True, help="a model directory (e.g. a study's results/source/model)")
    p.add_argument("--task", default="qa", help="eval task (default qa)")
    p.add_argument("--lang", default="sw", help="language (default sw)")
    p.add_argument(
        "--params",
        type=Path,
        nargs="+",
        default=[REPO / "params.yaml", REPO / "config" / "study.yaml"],
        help="params.yaml and overlays (the task's data and options; default params.yaml + config/study.yaml)",
    )
    p.add_argument("--dev-fraction", type=float, default=0.2, help="share of the training groups held out as dev")
    p.add_argument("--max-dev", type=int, default=200, help="dev examples scored (seeded choice; 0 = all)")
    p.add_argument("--max-train", type=int, nargs="+", default=[96, 240, 480], help="training sizes tried")
    p.add_argument("--epochs", type=float, nargs="+", default=[2, 3], help="epochs tried")
    p.add_argument("--seeds", type=int, default=2, help="fine-tuning seeds per setting")
    p.add_argument("--seed", type=int, default=42, help="the params seed (the train/test split's)")
    p.add_argument(
        "--smoke",
        action="store_true",
        help="seconds at tiny sizes: checks that the script runs (tests/project/test_benchmarks.py, in CI)",
    )
    args = p.parse_args(argv)
    if args.smoke:
        args.max_train, args.epochs, args.seeds, args.max_dev = [8], [1], 1, 8
    return args


def dev_splits(args):
    """(the task with the params' options, the dev Splits: train = the rest of the training data, test = dev)."""
    from vocabtransfer.evaluate.tasks import Splits, get_task, open_source, split_by_group, subsample
    from vocabtransfer.plan.task_options import EvalParams
    from vocabtransfer.app.params import validate_params
    from vocabtransfer.pipeline.config import merge_overlay, read_yaml, typed_section

    merged = {}
    for path in args.params:
        merged = merge_overlay(merged, read_yaml(path))
    params = validate_params(merged, source=" + ".join(map(str, args.params)))
    options = getattr(typed_section(EvalParams, "eval", params["eval"]).tasks, args.task)
    if not options.data.get(args.lang):
        sys.exit(f"eval.tasks.{args.task}.data has no entry for {args.lang}")
    task = get_task(args.task, options)
    train, _ = task.read(
        open_source(options.data[args.lang]["train"], f"eval.tasks.{args.task}.data.{args.lang}.train")
    )
    rest, dev = split_by_group(train, args.dev_fraction, args.seed + 1)
    return task, Splits(train=rest, test=subsample(dev, args.max_dev, args.seed, "dev")), len(train)


def main(argv=None) -> int:
    args = parse_args(argv)
    from vocabtransfer.evaluate.finetune_eval import finetune
    from vocabtransfer.evaluate.tasks import Splits, subsample

    task, splits, n_train = dev_splits(args)
    floor = task.floor(splits)
    groups = len({ex["cluster"] for ex in splits.test})
    rows = []
    for max_train in args.max_train:
        for epochs in args.epochs:
            opts = replace(task.options, max_train=max_train, epochs=epochs)
            tuned = type(task)(opts)
            train = subsample(splits.train, max_train, args.seed, "train")
            scores, seconds = [], []
            for seed in range(1, args.seeds + 1):
                print(
                    f"max_train {max_train}, epochs {epochs:g}, seed {seed}: fine-tuning on {len(train)} examples, "
                    f"then scoring {len(splits.test)} dev examples",
                    file=sys.stderr,
                    flush=True,
                )
                t = time.perf_counter()
                with tempfile.TemporaryDirectory() as out:
                    result, _ = finetune(
                        task=tuned,
                        splits=Splits(train=train, test=splits.test),
                        model_dir=args.model,
                        seed=seed,
                        output_dir=Path(out),
                    )
                seconds.append(time.perf_counter() - t)
                scores.append(result["metrics"][task.metric])
                print(
                    f"max_train {max_train}, epochs {epochs:g}, seed {seed}: {task.metric} {scores[-1]:.2f} "
                    f"({seconds[-1]:.0f} s)",
                    file=sys.stderr,
                    flush=True,
                )
            rows.append((max_train, len(train), epochs, scores, sum(seconds) / len(seconds)))
    print(
        f"\n{args.model} -> {args.lang} {args.task}: dev = {len(splits.test)} examples in {groups} groups carved "
        f"from the {n_train} training examples (--dev-fraction {args.dev_fraction}); the test examples are not read\n"
    )
    print(
        f"| max_train (kept) | epochs | {task.metric} mean over {args.seeds} seeds | lowest seed | floor: "
        f"{floor['name']} | s a job |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for max_train, kept, epochs, scores, sec in rows:
        print(
            f"| {max_train} ({kept}) | {epochs:g} | {sum(scores) / len(scores):.1f} | {min(scores):.1f} | "
            f"{floor['value']:.1f} | {sec:.0f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
