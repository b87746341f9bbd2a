"""bf16 − fp32 of the same pretraining runs: the final valid loss of every language × method × objective that
two results folders share, with the report's interval (pretraining seeds × valid-block clusters).

    python benchmarks/precision_pair.py FP32_ROOT BF16_ROOT [--json PATH]

Each root is a project folder whose `results/<lang>/pretrain/<method>/<objective>/pseed<k>/` hold the
pretrain stage's outputs, the same params but `pretrain.precision` (fp32 in the first, bf16 in the second;
checked in each run's stats.json). The difference is `evaluate.stats.nested_interval` over the runs'
`valid_blocks.parquet` (the summed loss and token count of each fixed valid block, scored in fp32 in both),
as the report computes method − random: pretraining seeds paired by their number, blocks as clusters.
Prints one Markdown row per run group: both losses, bf16 − fp32 [interval], seeds, blocks, tokens per run,
and the step time of each (`train_seconds` / steps); `--json` writes the rows.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from vocabtransfer.evaluate.stats import Runs, nested_interval


def runs_of(root: Path) -> dict[tuple[str, str, str], dict[int, Path]]:
    """(lang, method, objective) -> {pseed: run folder} of every finished pretrain run under root."""
    found: dict = {}
    for stats in sorted(root.glob("results/*/pretrain/*/*/pseed*/stats.json")):
        run = stats.parent
        lang, method, objective = run.parts[-5], run.parts[-3], run.parts[-2]
        found.setdefault((lang, method, objective), {})[int(run.name.removeprefix("pseed"))] = run
    return found


def valid_runs(folders: dict[int, Path]) -> Runs:
    parts, clusters = {}, None
    for pseed, run in sorted(folders.items()):
        blocks = pq.read_table(run / "valid_blocks.parquet").to_pandas()
        clusters = tuple(blocks["block"].tolist())
        parts[(pseed, 0)] = (blocks["loss_sum"].to_numpy(np.float64), blocks["n_tokens"].to_numpy(np.float64))
    return Runs(parts, clusters)


def stats_of(folders: dict[int, Path]) -> list[dict]:
    return [json.loads((run / "stats.json").read_text(encoding="utf-8")) for _, run in sorted(folders.items())]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("fp32_root", type=Path)
    ap.add_argument("bf16_root", type=Path)
    ap.add_argument("--resamples", type=int, default=10000)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    a_runs, b_runs = runs_of(args.fp32_root), runs_of(args.bf16_root)
    rows = []
    print(
        "| lang | method | objective | fp32 valid loss | bf16 valid loss | bf16 − fp32 [95 %] | seeds | blocks "
        "| tokens per run | s/step fp32 | s/step bf16 |"
    )
    print("|---|---|---|---:|---:|---|---:|---:|---:|---:|---:|")
    for key in sorted(a_runs.keys() & b_runs.keys()):
        seeds = sorted(a_runs[key].keys() & b_runs[key].keys())
        a = {p: a_runs[key][p] for p in seeds}
        b = {p: b_runs[key][p] for p in seeds}
        sa, sb = stats_of(a), stats_of(b)
        if any(s["bf16"] for s in sa) or not all(s["bf16"] for s in sb):
            raise SystemExit(f"{key}: the first root's runs must be fp32 and the second's bf16 (stats.json 'bf16')")
        diff = nested_interval(valid_runs(a), valid_runs(b), resamples=args.resamples)
        step = [statistics.median(s["train_seconds"] / s["steps"] for s in side) for side in (sa, sb)]
        row = {
            "lang": key[0],
            "method": key[1],
            "objective": key[2],
            "seeds": seeds,
            "fp32_valid_loss": statistics.mean(s["final_valid_loss"] for s in sa),
            "bf16_valid_loss": statistics.mean(s["final_valid_loss"] for s in sb),
            "diff": diff.diff,
            "low": diff.low,
            "high": diff.high,
            "p_value": diff.p_value,
            "blocks": diff.n_clusters,
            "tokens_per_run": sa[0]["tokens_seen"],
            "seconds_per_step_fp32": step[0],
            "seconds_per_step_bf16": step[1],
        }
        rows.append(row)
        print(
            f"| {key[0]} | {key[1]} | {key[2]} | {row['fp32_valid_loss']:.4f} | {row['bf16_valid_loss']:.4f} | "
            f"{diff.diff:+.4f} [{diff.low:+.4f}, {diff.high:+.4f}] | {len(seeds)} | {diff.n_clusters} | "
            f"{row['tokens_per_run']:,} | {step[0]:.2f} | {step[1]:.2f} |"
        )
    if not rows:
        raise SystemExit(f"no pretrain runs shared by {args.fp32_root} and {args.bf16_root}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
