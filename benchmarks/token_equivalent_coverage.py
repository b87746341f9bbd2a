"""The coverage of the token-equivalent's interval (report.token_equivalent), by simulation at the studies'
design: `vocabtransfer.report.te_coverage`. Prints the Markdown table (the intervals as the report states
them, their ends at measured points) and, with `--raw`, the coverage before the ends are rounded out.

    PYTHONPATH=src .venv/bin/python benchmarks/token_equivalent_coverage.py --sims 1000
"""

from __future__ import annotations

import argparse

from vocabtransfer.report import te_coverage


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sims", type=int, default=1000, help="synthetic studies a cell")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples of the valid blocks")
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--raw", action="store_true", help="also the coverage before the ends are rounded out")
    parser.add_argument("--smoke", action="store_true", help="3 studies a cell, 20 resamples: checks it runs")
    args = parser.parse_args(argv)
    if args.smoke:
        args.sims, args.resamples = 3, 20
    rows = te_coverage.table(args.sims, args.resamples, args.confidence, args.seed)
    print(te_coverage.markdown(rows, args.confidence))
    if args.raw:
        print(te_coverage.markdown(rows, args.confidence, raw=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
