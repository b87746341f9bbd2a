"""The data path at scale: corpus -> pretokenize -> the pretrain data path on ~100 MB and ~1 GB corpora.

Corpora: seeded shuffles of the shared data/pretrain_text/<langs>.txt, each line of the corpus two
lines of a shuffle joined by a space (so lines stay unique and the corpus stage's deduplication keeps
them), written once to --workdir (a temporary folder by default) until the size is reached.
Target tokenizer: a --vocab-size WordPiece tokenizer in MiniLM's conventions (`train_tokenizer`), on
a seeded `tokenizer.sample_bytes`-style sample of the 100 MB corpus (`SampledCorpus`, --sample-bytes).

Stages, each in its own child process (`--child`), which reports its own peak resident memory
(VmHWM) and wall time:
  corpus          `data.corpus.build_corpus` of the text file (clean, deduplicate, split);
  pretokenize     `data.pretokenize.encode_split` of the train split on --threads Rayon threads
                  (flat ids, offsets, the token text for fastText, statistics);
  encode_batch    the reference: raw `tokenizers` `Tokenizer.encode_batch` of the same lines in the
                  same batches on the same threads, nothing kept;
  pretrain_data   what pretrain does before the model: `pretrain.read_ids` (map, check the tokenizer
                  and every id), `packing.PackedBlocks`, then --batches batches of --batch-size blocks
                  drawn by `pretrain.StepBlocks` in the seeded order and collated by `StepCollator`
                  (seeded masked-LM masks per sample, as pretrain); `tokens` counts the batches' ids;
                  seconds are the batches', setup_seconds the map, checks and block boundaries;
  pretrain_blocks the same without the collator: the blocks' ids only.

    PYTHONPATH=src .venv/bin/python benchmarks/data_scale.py --json data_scale.json
Prints a Markdown table and the issue's figures; --json PATH writes the rows.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from smoke_inputs import DATA  # the data root the pipeline reads: data/ links ../shared/data

SIZES = {"1MB": 10**6, "10MB": 10 * 10**6, "100MB": 100 * 10**6, "1GB": 10**9}
MINILM = "sentence-transformers/all-MiniLM-L6-v2"


# ------------------------------------------------------------------ corpora and tokenizer (parent)


def make_corpus(path: Path, size: int, langs: list[str], seed: int) -> None:
    """Lines of seeded shuffles of the shared texts, two joined per line, until `size` bytes."""
    if path.is_file() and path.stat().st_size >= size:
        return
    lines = [
        s.strip()
        for lang in langs
        for s in (DATA / "pretrain_text" / f"{lang}.txt").read_text(encoding="utf-8").splitlines()
        if s.strip()
    ]
    rng, written, tmp = random.Random(seed), 0, path.with_suffix(".tmp")
    with open(tmp, "wb") as out:
        while written < size:
            rng.shuffle(lines)
            for a, b in zip(lines[0::2], lines[1::2]):
                line = f"{a} {b}\n".encode("utf-8")
                if written + len(line) > size:
                    written = size
                    break
                out.write(line)
                written += len(line)
    tmp.rename(path)


def make_tokenizer(work: Path, corpus: Path, vocab_size: int, sample_bytes: int, seed: int) -> Path:
    out = work / f"tokenizer-{vocab_size}"
    if not out.is_dir():
        from vocabtransfer.data.corpus_lines import SampledCorpus
        from vocabtransfer.data.tokenizer import train_tokenizer
        from vocabtransfer.model.hub import load_tokenizer, resolve_model_path

        sample = SampledCorpus(corpus, sample_bytes, seed)
        tok = train_tokenizer(
            load_tokenizer(resolve_model_path(MINILM)), sample, vocab_size=vocab_size, length=sample.rows
        )
        tok.save_pretrained(str(out))
    return out


# ------------------------------------------------------------------ stages (child)


def stage_corpus(a) -> dict:
    from vocabtransfer.data.corpus import build_corpus

    stats = build_corpus({"path": str(a.text)}, a.dir / "train.parquet", a.dir / "valid.parquet", seed=a.seed)
    return {"lines": stats["train_lines"], "extra": {"bytes_kept": stats["bytes_kept"]}}


def stage_pretokenize(a) -> dict:
    from vocabtransfer.data.pretokenize import encode_split
    from vocabtransfer.data.tokenizer import load_target_tokenizer, set_threads

    set_threads(a.threads)
    target = load_target_tokenizer(a.tokenizer)
    _, meta = encode_split(
        target, a.dir / "train.parquet", a.dir / "ids", text_path=a.dir / "train.tokens.txt", batch_size=1000
    )
    ids_bytes = (a.dir / "ids" / "ids.npy").stat().st_size
    offsets_bytes = (a.dir / "ids" / "offsets.npy").stat().st_size
    return {
        "tokens": meta["tokens"],
        "lines": meta["lines"],
        "extra": {
            "ids_bytes_per_token": round(ids_bytes / meta["tokens"], 4),
            "disk_bytes_per_token": round((ids_bytes + offsets_bytes) / meta["tokens"], 4),
        },
    }


def stage_encode_batch(a) -> dict:
    from vocabtransfer.data.corpus_lines import iter_text_batches
    from vocabtransfer.data.pretokenize import encoder
    from vocabtransfer.data.tokenizer import load_target_tokenizer, set_threads

    set_threads(a.threads)
    backend = encoder(load_target_tokenizer(a.tokenizer))
    tokens = lines = 0
    for texts in iter_text_batches(a.dir / "train.parquet", 1000):
        tokens += sum(len(e) for e in backend.encode_batch(texts, add_special_tokens=False))
        lines += len(texts)
    return {"tokens": tokens, "lines": lines}


def _pretrain_data(a, collate: bool) -> dict:
    from vocabtransfer.data.tokenizer import load_target_tokenizer
    from vocabtransfer.train.packing import PackedBlocks
    from vocabtransfer.train.batches import StepBlocks, StepCollator, read_ids

    tok = load_target_tokenizer(a.tokenizer)
    start = time.perf_counter()
    split = read_ids(a.dir / "ids", tok, len(tok))
    blocks = PackedBlocks(split, tok, a.seq_len, kind="masked")
    length = a.batches * a.batch_size
    dataset, collator = StepBlocks(blocks, length, a.seed), StepCollator(tok, "masked", a.seed)
    setup = time.perf_counter() - start
    start, tokens = time.perf_counter(), 0
    for b in range(a.batches):
        items = [dataset[i] for i in range(b * a.batch_size, (b + 1) * a.batch_size)]
        if collate:
            tokens += int(collator(items)["attention_mask"].sum())
        else:
            tokens += sum(len(item["input_ids"]) for item in items)
    return {
        "tokens": tokens,
        "seconds": time.perf_counter() - start,
        "extra": {"setup_seconds": round(setup, 3), "blocks": len(blocks), "corpus_tokens": split.tokens},
    }


STAGES = {
    "corpus": stage_corpus,
    "pretokenize": stage_pretokenize,
    "encode_batch": stage_encode_batch,
    "pretrain_data": lambda a: _pretrain_data(a, True),
    "pretrain_blocks": lambda a: _pretrain_data(a, False),
}


def peak_rss() -> int:
    """This process's own peak resident set (VmHWM). Not ru_maxrss: Linux folds the parent's peak into a
    child's ru_maxrss at exec after vfork, so every child would report at least the parent's peak."""
    with open("/proc/self/status", encoding="ascii") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))


def child(a) -> None:
    import torch

    torch.set_num_threads(a.threads)
    start = time.perf_counter()
    row = STAGES[a.child](a)
    row.setdefault("seconds", time.perf_counter() - start)
    row["peak_rss_bytes"] = peak_rss()
    print("ROW " + json.dumps(row))


def run_child(stage: str, a, size_name: str, folder: Path, text: Path, tokenizer: Path) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        stage,
        "--dir",
        str(folder),
        "--text",
        str(text),
        "--tokenizer",
        str(tokenizer),
        "--threads",
        str(a.threads),
        "--seed",
        str(a.seed),
        "--batches",
        str(a.batches),
        "--batch-size",
        str(a.batch_size),
        "--seq-len",
        str(a.seq_len),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    lines = [line for line in proc.stdout.splitlines() if line.startswith("ROW ")]
    if proc.returncode or not lines:
        sys.exit(f"{stage} on {size_name} failed:\n{proc.stderr[-3000:]}")
    row = json.loads(lines[-1][4:])
    name = f"{stage} (raw tokenizers reference)" if stage == "encode_batch" else stage
    out = {
        "stage": name,
        "corpus": size_name,
        "corpus_bytes": text.stat().st_size,
        "seconds": round(row["seconds"], 3),
        "peak_rss_bytes": row["peak_rss_bytes"],
        "tokens": row.get("tokens"),
        "lines": row.get("lines"),
        **row.get("extra", {}),
    }
    if out["tokens"]:
        out["tokens_per_second"] = round(out["tokens"] / row["seconds"])
    print(
        f"  {name} on {size_name}: {out['seconds']:.1f} s, peak RSS {out['peak_rss_bytes'] / 2**20:.0f} MiB",
        file=sys.stderr,
        flush=True,
    )
    return out


# ------------------------------------------------------------------ report


def table(rows: list[dict]) -> str:
    out = [
        "| stage | corpus | corpus bytes | seconds | peak RSS MiB | tokens | tokens/s | notes |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    skip = {"stage", "corpus", "corpus_bytes", "seconds", "peak_rss_bytes", "tokens", "tokens_per_second", "lines"}
    for r in rows:
        notes = ", ".join(f"{k} {v}" for k, v in r.items() if k not in skip)
        tokens, rate = (f"{r[k]:,}" if r.get(k) else "–" for k in ("tokens", "tokens_per_second"))
        out.append(
            f"| {r['stage']} | {r['corpus']} | {r['corpus_bytes']:,} | {r['seconds']:.1f} | "
            f"{r['peak_rss_bytes'] / 2**20:.0f} | {tokens} | {rate} | {notes} |"
        )
    return "\n".join(out)


def figures(rows: list[dict]) -> list[str]:
    by = {(r["stage"].split(" ")[0], r["corpus"]): r for r in rows}
    lines, sizes = [], sorted({r["corpus"] for r in rows}, key=lambda s: SIZES[s])
    for size in sizes:
        p, e = by.get(("pretokenize", size)), by.get(("encode_batch", size))
        if p and e:
            lines.append(
                f"{size}: pretokenize at {p['tokens_per_second'] / e['tokens_per_second']:.2f}x the raw "
                f"encode_batch throughput; ids {p['ids_bytes_per_token']} bytes/token on disk "
                f"({p['disk_bytes_per_token']} with the line offsets)"
            )
        d = by.get(("pretrain_data", size))
        if d:
            lines.append(
                f"{size}: pretrain data path {d['tokens_per_second'] / 1e6:.2f} M tokens/s with masks, "
                f"{by[('pretrain_blocks', size)]['tokens_per_second'] / 1e6:.2f} M tokens/s blocks only"
            )
    if len(sizes) == 2:
        small, big = sizes
        for stage in ("corpus", "pretokenize", "pretrain_data", "pretrain_blocks"):
            if (stage, small) in by and (stage, big) in by:
                ratio = by[(stage, big)]["peak_rss_bytes"] / by[(stage, small)]["peak_rss_bytes"]
                lines.append(f"peak RSS {stage}: {big} / {small} = {ratio:.2f}x")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the rows here")
    ap.add_argument("--sizes", default="100MB,1GB", help=f"comma-separated, of {', '.join(SIZES)}")
    ap.add_argument("--langs", default="sw")
    ap.add_argument("--vocab-size", type=int, default=16000)
    ap.add_argument("--sample-bytes", type=int, default=20 * 10**6, help="tokenizer training sample")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batches", type=int, default=3000)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--stages", default=",".join(STAGES), help="comma-separated subset of the stages to run")
    ap.add_argument("--workdir", type=Path, help="keep corpora and outputs here (default: a temporary folder)")
    ap.add_argument("--child", choices=list(STAGES), help=argparse.SUPPRESS)
    ap.add_argument("--dir", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--text", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--tokenizer", type=Path, help=argparse.SUPPRESS)
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="seconds at tiny sizes: checks that the script runs (tests/project/test_benchmarks.py, in CI)",
    )
    a = ap.parse_args()
    if a.smoke:
        a.sizes, a.vocab_size, a.sample_bytes, a.batches = "1MB", 1000, 10**6, 20
    if a.child:
        return child(a)

    work = a.workdir or Path(tempfile.mkdtemp(prefix="data_scale-"))
    work.mkdir(parents=True, exist_ok=True)
    rows, tokenizer = [], None
    try:
        for size_name in a.sizes.split(","):
            text = work / f"corpus-{size_name}.txt"
            tick = time.perf_counter()
            make_corpus(text, SIZES[size_name], a.langs.split(","), a.seed)
            print(f"{size_name}: corpus text ready in {time.perf_counter() - tick:.0f} s", file=sys.stderr, flush=True)
            folder = work / size_name
            folder.mkdir(exist_ok=True)
            stages = a.stages.split(",")
            if "corpus" in stages or not (folder / "train.parquet").is_file():
                rows.append(run_child("corpus", a, size_name, folder, text, Path()))
            if tokenizer is None:
                tokenizer = make_tokenizer(work, folder / "train.parquet", a.vocab_size, a.sample_bytes, a.seed)
            for stage in ("pretokenize", "encode_batch", "pretrain_data", "pretrain_blocks"):
                if stage in stages:
                    rows.append(run_child(stage, a, size_name, folder, text, tokenizer))
    finally:
        if a.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    print(table(rows))
    print("\n".join(figures(rows)))
    if a.json:
        a.json.write_text(
            json.dumps(
                {
                    "threads": a.threads,
                    "vocab_size": a.vocab_size,
                    "batch_size": a.batch_size,
                    "seq_len": a.seq_len,
                    "batches": a.batches,
                    "rows": rows,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
