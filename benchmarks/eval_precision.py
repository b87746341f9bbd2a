"""What scoring in bf16 instead of fp32 changes, and what it saves: `lm_eval.precision` and
`eval.test_precision` measured on a real model, on items the study does not score.

* zero-shot (lm_eval stage): the model judged on XNLI 3-way multiple choice (`local_xnli_<lang>`) with the
  harness loading it in float32 and in bfloat16; the items are --xnli-items dev pairs after the first
  --xnli-skip (the study scores the first `lm_eval.limit` = 600), read through a copy of the data folder
  whose xnli/dev-<lang>.tsv starts there.
* extractive QA (finetune_eval stage): the model fine-tuned on up to --qa-train training questions
  (bf16 mixed precision where the CPU multiplies bf16 natively, as `eval.precision: auto`) and scored on a dev
  split carved from the TRAINING questions (benchmarks/tune_task.py's carving: --qa-dev questions), with the
  test split scored in fp32 and in bf16 (`eval.test_precision`); fine-tuned twice, once per scoring precision.

Per item it pairs the two precisions: XNLI accuracy in each, the items whose chosen answer changes, the
largest change of a log-likelihood, and bf16 − fp32 in accuracy with a 95 % bootstrap interval over premises
(the harness's clusters); QA F1 in each and bf16 − fp32 in F1 with a bootstrap interval over articles. And
the seconds of each in the same process: the harness's whole run (its scoring), and for QA the whole job
(the same fine-tuning, then the scoring: the difference is the scoring's saving).

    .venv/bin/python benchmarks/eval_precision.py --model ../gemma-study/results/source/base --lang sw \\
        --threads 1 --xnli-items 200 --qa-dev 120 --json eval_precision.json
    .venv/bin/python benchmarks/eval_precision.py --smoke        # CI: a tiny random Llama, 6 items each

`--pair FP32_ROOT BF16_ROOT` scores nothing: it pairs the study's own results of one model (`--pair-model`,
default source) in two project folders whose `lm_eval.precision` and `eval.test_precision` differ, on the items
the study scores (every `results/<lang>/lm_eval/<model>/samples.parquet` and `results/<lang>/eval/qa/<model>/
seed<k>.json` the two share), with the same rows; the seconds are the jobs' own, so the QA row's are whole jobs.

    .venv/bin/python benchmarks/eval_precision.py --pair ../gemma-fp32 ../gemma-study --resamples 10000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from vocabtransfer.plan import eval_params, harness_plans

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from smoke_inputs import DATA, byte_bpe  # noqa: E402 (the benchmarks folder on the path first)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", type=Path, help="a causal model directory (a study's results/source/base)")
    p.add_argument("--lang", default="sw", help="language (default sw: XNLI and TyDiQA-GoldP)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1, as a one-thread job)")
    p.add_argument("--xnli-skip", type=int, default=600, help="dev pairs skipped: the study's lm_eval.limit")
    p.add_argument("--xnli-items", type=int, default=200, help="dev pairs scored (0: no XNLI part)")
    p.add_argument("--qa-train", type=int, default=64, help="training questions (the study's max_train)")
    p.add_argument("--qa-dev", type=int, default=120, help="dev questions scored (0: no QA part)")
    p.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples")
    p.add_argument("--json", type=Path, help="write the rows here as well")
    p.add_argument("--smoke", action="store_true", help="a tiny random Llama, 6 XNLI items and 6 QA questions")
    p.add_argument(
        "--pair", nargs=2, type=Path, metavar=("FP32_ROOT", "BF16_ROOT"),
        help="score nothing: pair the study's own lm_eval and QA results of --pair-model in two project folders",
    )  # fmt: skip
    p.add_argument("--pair-model", default="source", help="the model whose results --pair reads (default source)")
    return p.parse_args(argv)


def bootstrap(diff: np.ndarray, clusters: list, resamples: int, seed: int = 0) -> tuple[float, float]:
    """95 % percentile interval of the mean of `diff`, resampling whole clusters."""
    keys = sorted(set(clusters), key=str)
    index = {k: i for i, k in enumerate(keys)}
    sums, counts = np.zeros(len(keys)), np.zeros(len(keys))
    np.add.at(sums, [index[c] for c in clusters], diff)
    np.add.at(counts, [index[c] for c in clusters], 1)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(keys), size=(resamples, len(keys)))
    means = sums[draws].sum(1) / counts[draws].sum(1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def xnli_part(args, model: Path) -> dict:
    """The XNLI items after --xnli-skip, judged with the model loaded in float32 and in bfloat16."""
    from vocabtransfer.evaluate import harness

    name = f"dev-{args.lang}.tsv"
    with tempfile.TemporaryDirectory() as root:
        (Path(root) / "xnli").mkdir()
        lines = (DATA / "xnli" / name).read_text(encoding="utf-8").splitlines(keepends=True)
        (Path(root) / "xnli" / name).write_text("".join(lines[args.xnli_skip :]), encoding="utf-8")
        os.environ["VOCABTRANSFER_DATA"] = root
        runs, manager = {}, harness_plans.task_manager()  # the task index built once, outside the timings
        for precision in ("fp32", "bf16"):
            start = time.perf_counter()
            opts = eval_params.LmEvalParams(num_fewshot=0, limit=args.xnli_items, batch_size=8, precision=precision)
            results = harness.evaluate(model, [f"local_xnli_{args.lang}"], opts, manager=manager)
            rows = sorted(harness.samples_table(results).to_pylist(), key=lambda r: r["doc_id"])
            runs[precision] = (rows, time.perf_counter() - start)
        os.environ["VOCABTRANSFER_DATA"] = str(DATA)
    (fp32, t32), (bf16, t16) = runs["fp32"], runs["bf16"]
    return xnli_row(fp32, bf16, t32, t16, args.resamples)


def xnli_row(fp32: list[dict], bf16: list[dict], t32: float, t16: float, resamples: int) -> dict:
    """The XNLI row from the harness's samples of the same items scored in fp32 and in bf16 (doc_id order)."""
    if [r["doc_id"] for r in fp32] != [r["doc_id"] for r in bf16]:
        raise SystemExit("XNLI: the two runs scored different items; pair runs with the same `lm_eval.limit`")
    ll32 = [np.array(r["loglikelihoods"]) for r in fp32]
    ll16 = [np.array(r["loglikelihoods"]) for r in bf16]
    acc32, acc16 = np.array([r["value"] for r in fp32]), np.array([r["value"] for r in bf16])
    clusters = [r["cluster"] for r in fp32]
    return {
        "part": "xnli",
        "items": len(fp32),
        "clusters": len(set(clusters)),
        "fp32": float(acc32.mean()),
        "bf16": float(acc16.mean()),
        "diff": float((acc16 - acc32).mean()),
        "interval": bootstrap(acc16 - acc32, clusters, resamples),
        "changed": int(sum(a.argmax() != b.argmax() for a, b in zip(ll32, ll16))),
        "max_abs_loglik": float(max(np.abs(a - b).max() for a, b in zip(ll32, ll16))),
        "median_abs_loglik": float(np.median(np.concatenate([np.abs(a - b) for a, b in zip(ll32, ll16)]))),
        "seconds_fp32": t32,
        "seconds_bf16": t16,
    }


def qa_part(args, model: Path) -> dict:
    """QA fine-tuned on the training questions minus a dev split, the dev split scored in fp32 and in bf16."""
    from vocabtransfer.evaluate.finetune_eval import finetune
    from vocabtransfer.evaluate.tasks import Splits, get_task, open_source, split_by_group, subsample
    from vocabtransfer.plan.task_options import EvalParams
    from vocabtransfer.app.params import validate_params
    from vocabtransfer.pipeline.config import read_yaml, typed_section

    params = validate_params(read_yaml(REPO / "params.yaml"), source="params.yaml")
    options = typed_section(EvalParams, "eval", params["eval"]).tasks.qa
    task = get_task("qa", options)
    key = f"eval.tasks.qa.data.{args.lang}.train"
    train, _ = task.read(open_source(options.data[args.lang]["train"], key))
    rest, dev = split_by_group(train, 0.2, 43)  # tune_task.py's carving: the params seed 42 + 1
    splits = Splits(train=subsample(rest, args.qa_train, 42, "train"), test=subsample(dev, args.qa_dev, 42, "dev"))
    runs = {}
    for precision in ("fp32", "bf16"):  # the same fine-tuning twice (seeded): only the scoring differs
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as out:
            result, _ = finetune(
                task=task, splits=splits, model_dir=model, seed=1, output_dir=Path(out), precision="auto",
                test_precision=precision,
            )  # fmt: skip
        runs[precision] = (result["examples"], time.perf_counter() - start)
    (ex32, t32), (ex16, t16) = runs["fp32"], runs["bf16"]
    return qa_row(ex32, ex16, t32, t16, args.resamples)


def qa_row(ex32: dict, ex16: dict, t32: float, t16: float, resamples: int) -> dict:
    """The QA row from a fine-tuned model's per-question `examples` (finetune_eval's result) in fp32 and bf16."""
    if ex32["ids"] != ex16["ids"]:
        raise SystemExit("QA: the two runs scored different questions; pair runs of the same params")
    f32, f16 = np.array(ex32["score"]), np.array(ex16["score"])
    return {
        "part": "qa",
        "items": len(f32),
        "clusters": len(set(ex32["clusters"])),
        "fp32": float(f32.mean()),
        "bf16": float(f16.mean()),
        "diff": float((f16 - f32).mean()),
        "interval": bootstrap(f16 - f32, list(ex32["clusters"]), resamples),
        "changed": int(sum(a != b for a, b in zip(ex32["prediction"], ex16["prediction"]))),
        "seconds_fp32": t32,
        "seconds_bf16": t16,
    }


def pair_rows(fp32_root: Path, bf16_root: Path, model: str, resamples: int) -> list[dict]:
    """The rows of `model`'s own scores in two project folders of the same study, one scored in fp32 and one in
    bf16 (`lm_eval.precision`, `eval.test_precision`): every `results/<lang>/lm_eval/<model>/samples.parquet`
    and `results/<lang>/eval/qa/<model>/seed<k>.json` the two share; the seconds are the jobs' own."""
    import pyarrow.parquet as pq

    rows = []
    for samples in sorted(fp32_root.glob(f"results/*/lm_eval/{model}/samples.parquet")):
        other = bf16_root / samples.relative_to(fp32_root)
        if not other.exists():
            continue
        t32, t16 = lm_eval_seconds(samples, "fp32"), lm_eval_seconds(other, "bf16")
        xnli = [sorted(pq.read_table(f).to_pylist(), key=lambda r: r["doc_id"]) for f in (samples, other)]
        rows.append({**xnli_row(*xnli, t32, t16, resamples), "part": f"xnli {samples.parts[-4]}"})
    for result in sorted(fp32_root.glob(f"results/*/eval/qa/{model}/seed*.json")):
        other = bf16_root / result.relative_to(fp32_root)
        if not other.exists():
            continue
        (ex32, t32), (ex16, t16) = qa_run(result, "fp32"), qa_run(other, "bf16")
        rows.append({**qa_row(ex32, ex16, t32, t16, resamples), "part": f"qa {result.parts[-5]} {result.stem}"})
    if not rows:
        raise SystemExit(f"no lm_eval or QA results of model {model!r} shared by {fp32_root} and {bf16_root}")
    return rows


def lm_eval_seconds(samples: Path, want: str) -> float:
    """The job's seconds, after checking its scores.json says it scored in `want` (a scores.json without
    `precision` predates the key, when every run scored in fp32)."""
    scores = json.loads((samples.parent / "scores.json").read_text(encoding="utf-8"))
    if scores.get("precision", "fp32") != want:
        raise SystemExit(f"{samples.parent}: scored in {scores.get('precision', 'fp32')}, not {want}")
    return float(scores["seconds"])


def qa_run(result: Path, want: str) -> tuple[dict, float]:
    """A QA result's per-question examples and the job's seconds, after checking it scored in `want`."""
    data = json.loads(result.read_text(encoding="utf-8"))
    if data["scored_in"] != want:
        raise SystemExit(f"{result}: scored in {data['scored_in']}, not {want}")
    return data["examples"], float(data["seconds"])


def smoke_model(root: Path, lang: str) -> Path:
    """A tiny random Llama with a byte-level BPE tokenizer: the code path, not the numbers."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = byte_bpe(lang)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=0, eos_token_id=1,
    )  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(root)
    tokenizer.save_pretrained(root)
    return root


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.pair:
        fp32_root, bf16_root = args.pair
        rows = pair_rows(fp32_root, bf16_root, args.pair_model, args.resamples)
        print_rows(rows, f"\n{args.pair_model}: its own scores in {fp32_root} (fp32) and {bf16_root} (bf16)\n")
    else:
        rows = measure(args)
        model = "a tiny random Llama" if args.smoke else args.model
        print_rows(
            rows, f"\n{model}, {args.lang}, {args.threads} thread(s): bf16 against fp32 scoring of the same model\n"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


def measure(args) -> list[dict]:
    """Both parts scored here, in one process, on items the study does not score."""
    import torch

    torch.set_num_threads(args.threads)
    work = Path(tempfile.mkdtemp(prefix="eval_precision_"))
    try:
        if args.smoke:
            args.xnli_items, args.qa_dev, args.qa_train, args.resamples = 6, 6, 8, 200
            model = smoke_model(work / "model", args.lang)
        elif args.model is None:
            sys.exit("--model: a causal model directory is needed (or --smoke, or --pair)")
        else:
            model = args.model
        return ([xnli_part(args, model)] if args.xnli_items else []) + ([qa_part(args, model)] if args.qa_dev else [])
    finally:
        shutil.rmtree(work, ignore_errors=True)


def print_rows(rows: list[dict], heading: str) -> None:
    print(heading)
    print("| part | items (clusters) | fp32 | bf16 | bf16 − fp32 [95 % interval] | answers changed | s fp32 | s bf16 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        scale = 100.0 if r["part"].startswith("xnli") else 1.0  # accuracy in %, F1 already in points
        lo, hi = r["interval"]
        print(
            f"| {r['part']} | {r['items']} ({r['clusters']}) | {scale * r['fp32']:.1f} | {scale * r['bf16']:.1f} | "
            f"{scale * r['diff']:+.2f} [{scale * lo:+.2f}, {scale * hi:+.2f}] | {r['changed']} | "
            f"{r['seconds_fp32']:.0f} | {r['seconds_bf16']:.0f} |"
        )
    for r in rows:
        if r["part"].startswith("xnli"):
            print(
                f"\n{r['part']} log-likelihoods, bf16 − fp32: largest change {r['max_abs_loglik']:.3f} nats, median "
                f"{r['median_abs_loglik']:.4f}; speed-up {r['seconds_fp32'] / r['seconds_bf16']:.2f}x"
            )
        else:
            print(
                f"{r['part']}: QA job (fine-tuning and scoring) speed-up {r['seconds_fp32'] / r['seconds_bf16']:.2f}x"
            )


if __name__ == "__main__":
    sys.exit(main())
