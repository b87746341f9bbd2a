"""Which file format for flat token ids (docs/stages.md, pretokenize): 50 M uint16 ids written in batches of
1 M, opened mapped, then 20 000 random 128-id slices. `python benchmarks/ids_format.py npy|safetensors|arrow`,
one format per process (peak RSS is the process's); `--smoke`: 2 M ids and 200 slices, seconds (CI:
tests/project/test_benchmarks.py)."""

import json
import os
import resource
import sys
import time

import numpy as np

N, B = 50_000_000, 1_000_000
ROOT = os.environ.get("TMPDIR", "/tmp")
BATCH = np.random.default_rng(0).integers(0, 16000, B, dtype=np.uint16)


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def slices(get, n: int) -> float:
    """Seconds for `n` random 128-id slices (each one touched)."""
    positions = np.random.default_rng(1).integers(0, N - 128, n)
    start = time.perf_counter()
    total = 0
    for p in positions:
        total += int(get(int(p), int(p) + 128)[0])
    return time.perf_counter() - start


def write_npy(path: str):
    header = {"descr": "<u2", "fortran_order": False}
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {**header, "shape": (0,)})
        for _ in range(N // B):
            f.write(BATCH.tobytes())
        f.seek(0)
        np.lib.format.write_array_header_1_0(f, {**header, "shape": (N,)})

    def open_ids():
        array = np.load(path, mmap_mode="r")
        return lambda i, j: array[i:j]

    return open_ids


def write_safetensors(path: str):
    from safetensors import safe_open
    from safetensors.numpy import save_file

    save_file({"ids": np.concatenate([BATCH] * (N // B))}, path)  # no streaming writer: the whole array in memory

    def open_ids():
        piece = safe_open(path, framework="numpy").get_slice("ids")
        return lambda i, j: piece[i:j]

    return open_ids


def write_arrow(path: str):
    import pyarrow as pa

    schema = pa.schema([("ids", pa.uint16())])
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        for _ in range(N // B):
            writer.write_batch(pa.record_batch([pa.array(BATCH)], schema=schema))

    def open_ids():
        column = pa.ipc.open_file(pa.memory_map(path)).read_all().column("ids")
        return lambda i, j: column.slice(i, j - i).to_numpy()

    return open_ids


def main(fmt: str, smoke: bool = False) -> None:
    global N
    n_slices = 200 if smoke else 20000
    N = 2 * B if smoke else N
    path = f"{ROOT}/ids.{fmt}"
    start = time.perf_counter()
    open_ids = {"npy": write_npy, "safetensors": write_safetensors, "arrow": write_arrow}[fmt](path)
    written = time.perf_counter() - start
    before = rss()
    start = time.perf_counter()
    get = open_ids()
    opened = time.perf_counter() - start
    peak_write = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    seconds = slices(get, n_slices)
    print(
        json.dumps(
            {
                "format": fmt,
                "write_s": round(written, 3),
                "peak_rss_write_MiB": round(peak_write / 2**20),
                "open_s": round(opened, 5),
                "rss_after_open_MiB": round((rss() - before) / 2**20, 1),
                "slice_us": round(seconds / n_slices * 1e6, 2),
                "bytes_per_token": round(os.path.getsize(path) / N, 4),
            }
        )
    )
    os.remove(path)


if __name__ == "__main__":
    main(sys.argv[1], smoke="--smoke" in sys.argv[2:])
