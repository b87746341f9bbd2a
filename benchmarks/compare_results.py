"""Do two runs' results agree? Compares two `results/` folders artefact by artefact, timings left out.

    PYTHONPATH=src .venv/bin/python benchmarks/compare_results.py RESULTS_A RESULTS_B

- files only in one folder are listed (a format change shows here);
- Parquet tables: every column the two share, NaN equal to NaN, timing columns (`TIMING`) left out;
- JSON: equal after dropping timing keys and the `params` block (a new parameter with its default
  changes the block, not the result);
- other files: byte for byte (report.md: after dropping its timing lines and cells).
Exit status 1 when any shared artefact differs. Used to show that a change of the data path moved
no number downstream of it (benchmarks/README.md).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

TIMING = re.compile(r"second|time|elapsed|peak_rss|version")
SKIP_NAMES = {".snakemake_timestamp"}


def _strip(obj):
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k != "params" and not TIMING.search(k)}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def _parquet_differs(a: Path, b: Path) -> list[str]:
    ta, tb = pq.read_table(a), pq.read_table(b)
    out = []
    for column in (c for c in ta.column_names if c in tb.column_names and not TIMING.search(c)):
        x, y = ta.column(column).to_pylist(), tb.column(column).to_pylist()
        try:
            same = np.array_equal(np.asarray(x, dtype=float), np.asarray(y, dtype=float), equal_nan=True)
        except (TypeError, ValueError):
            same = x == y
        if not same:
            out.append(column)
    return out


def _report_lines(path: Path) -> list[str]:
    return [
        re.sub(r"\d+(\.\d+)? ?(s|min|h)\b", "", line)
        for line in path.read_text(encoding="utf-8").splitlines()
        if "time" not in line.lower()
    ]


def compare(a: Path, b: Path) -> list[str]:
    """One line per artefact that differs (or exists on one side only)."""
    files = {
        side: {p.relative_to(side) for p in side.rglob("*") if p.is_file() and p.name not in SKIP_NAMES}
        for side in (a, b)
    }
    lines = [f"only in {side}: {rel}" for side, other in ((a, b), (b, a)) for rel in sorted(files[side] - files[other])]
    for rel in sorted(files[a] & files[b]):
        pa_, pb_ = a / rel, b / rel
        if pa_.read_bytes() == pb_.read_bytes():
            continue
        if rel.suffix == ".parquet":
            columns = _parquet_differs(pa_, pb_)
            if columns:
                lines.append(f"differs: {rel} (columns {', '.join(columns)})")
        elif rel.suffix == ".json":
            if _strip(json.loads(pa_.read_text())) != _strip(json.loads(pb_.read_text())):
                lines.append(f"differs: {rel}")
        elif rel.name == "report.md":
            if _report_lines(pa_) != _report_lines(pb_):
                lines.append(f"differs: {rel} (beyond its timings)")
        elif rel.suffix not in (".log", ".png", ".svg"):
            lines.append(f"differs: {rel} (bytes)")
    return lines


def main() -> None:
    a, b = map(Path, sys.argv[1:3])
    lines = compare(a, b)
    print("\n".join(lines) if lines else "no artefact differs")
    shared = [line for line in lines if line.startswith("differs")]
    print(f"{len(shared)} shared artefact(s) differ")
    sys.exit(1 if shared else 0)


if __name__ == "__main__":
    main()
