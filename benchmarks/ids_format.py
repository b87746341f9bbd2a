"""Which file format for flat token ids (docs/stages.md, pretokenize): 50 M uint16 ids written in batches of
1 M, opened mapped, then 20 000 random 128-id slices. `python benchmarks/ids_format.py npy|safetensors|arrow`,
one format per process (peak RSS is the process's)."""
import os, resource, sys, time, json
import numpy as np
N, B = 50_000_000, 1_000_000
rng = np.random.default_rng(0)
batch = rng.integers(0, 16000, B, dtype=np.uint16)
root = os.environ.get("TMPDIR", "/tmp")
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
def slices(arr_get, n):
    pos = np.random.default_rng(1).integers(0, N - 128, 20000)
    t = time.perf_counter(); s = 0
    for p in pos:
        s += int(arr_get(int(p), int(p) + 128)[0])
    return time.perf_counter() - t
fmt = sys.argv[1]
t0 = time.perf_counter()
if fmt == "npy":
    path = f"{root}/ids.npy"
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "<u2", "fortran_order": False, "shape": (0,)})
        for _ in range(N // B):
            f.write(batch.tobytes())
        f.seek(0)
        np.lib.format.write_array_header_1_0(f, {"descr": "<u2", "fortran_order": False, "shape": (N,)})
    w = time.perf_counter() - t0; r0 = rss(); t = time.perf_counter()
    a = np.load(path, mmap_mode="r"); o = time.perf_counter() - t
    get = lambda i, j: a[i:j]
elif fmt == "safetensors":
    from safetensors.numpy import save_file
    from safetensors import safe_open
    path = f"{root}/ids.safetensors"
    full = np.concatenate([batch] * (N // B))   # no streaming writer: the whole array in memory
    save_file({"ids": full}, path); del full
    w = time.perf_counter() - t0; r0 = rss(); t = time.perf_counter()
    f = safe_open(path, framework="numpy"); sl = f.get_slice("ids"); o = time.perf_counter() - t
    get = lambda i, j: sl[i:j]
elif fmt == "arrow":
    import pyarrow as pa
    path = f"{root}/ids.arrow"
    schema = pa.schema([("ids", pa.uint16())])
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, schema) as wr:
        for _ in range(N // B):
            wr.write_batch(pa.record_batch([pa.array(batch)], schema=schema))
    w = time.perf_counter() - t0; r0 = rss(); t = time.perf_counter()
    col = pa.ipc.open_file(pa.memory_map(path)).read_all().column("ids"); o = time.perf_counter() - t
    get = lambda i, j: col.slice(i, j - i).to_numpy()
peak_write = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
s = slices(get, 20000)
print(json.dumps({"format": fmt, "write_s": round(w, 3), "peak_rss_write_MiB": round(peak_write / 2**20),
                  "open_s": round(o, 5), "rss_after_open_MiB": round((rss() - r0) / 2**20, 1),
                  "slice_us": round(s / 20000 * 1e6, 2), "bytes_per_token": round(os.path.getsize(path) / N, 4)}))
os.remove(path)
