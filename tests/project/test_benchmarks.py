"""Every script in benchmarks/ runs in CI, so that a refactor cannot break one unseen: at its smoke size
(`--smoke`: its own tiny sizes, seconds; the output is the script's table), or on hand-made artefacts for the
scripts that read a finished run's. `test_every_benchmark_script_runs_here` keeps the list whole."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import REPO, SHARED_DATA
from helpers import bpe_tokenizer, save_dir, text_lines, tiny_llama

from vocabtransfer.model.hub import resolve_model_path

pytestmark = pytest.mark.slow
MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def run_script(name: str, *args: str, cwd=REPO, timeout: int = 300) -> str:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "VOCABTRANSFER_DATA": str(SHARED_DATA),
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / name), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, (
        f"{name} {' '.join(args)}: rc {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    )
    return proc.stdout


@pytest.fixture(scope="module")
def sw_train(tmp_path_factory):
    """A corpus-stage train split of 400 Swahili lines (column `text`)."""
    lines = [s.strip() for s in (SHARED_DATA / "pretrain_text" / "sw.txt").open(encoding="utf-8") if s.strip()][:400]
    path = tmp_path_factory.mktemp("sw") / "train.parquet"
    pq.write_table(pa.table({"text": lines}), path)
    return path


@pytest.mark.parametrize(
    "name, args, expect",
    [
        ("clustered_snmf.py", ["--smoke"], "| C | width of W'"),
        ("semi_nmf_vs_svd.py", ["--smoke"], "truncated SVD"),
        ("selfish_charlm.py", ["--smoke", "--threads", "1"], "selfish"),
        ("selfish_loss.py", ["--smoke", "--threads", "1"], "| cpu | float32 | 64 x 1000 |"),
        ("fused_head.py", ["--smoke", "--threads", "1"], "fused standard"),
        ("ids_format.py", ["npy", "--smoke"], '"format": "npy"'),
        ("pretrain_step.py", ["--smoke", "--threads", "1"], "|"),
        ("distill_step.py", ["--smoke", "--threads", "1"], "| distill (cached teacher) |"),
        ("eval_precision.py", ["--smoke"], "| xnli | 6 ("),
        ("token_equivalent_coverage.py", ["--smoke", "--raw"], "| design | blocks | scenario | b1 |"),
    ],
)
def test_a_benchmark_runs_at_its_smoke_size(name, args, expect):
    assert expect in run_script(name, *args)


def test_the_benchmarks_that_build_their_inputs_run_at_their_smoke_size(tmp_path):
    out = run_script("omp_vs_focus.py", "--smoke", "--threads", "1", "--workdir", str(tmp_path / "omp"))
    assert "omp" in out and "focus" in out
    out = run_script("focus_vs_deepfocus.py", "--smoke", "--threads", "1", "--workdir", str(tmp_path / "focus"))
    assert "deepfocus.FOCUS" in out
    out = run_script("data_scale.py", "--smoke", "--threads", "1", "--workdir", str(tmp_path / "scale"))
    assert "1MB" in out


def test_init_scale_runs_its_tiny_problem(tmp_path):
    out = run_script("init_scale.py", "--smoke", "--threads", "1", "--cache", str(tmp_path / "cache"))
    assert "| tiny | svd |" in out and "| tiny | focus+svd |" in out and "failed" not in out


def test_gguf_materialise_compares_one_parse_with_a_parse_per_opening(tmp_path):
    """On a tiny GGUF file (tests/tiny_gguf.py): the stage's way parses the metadata once, the other four times,
    and both write the same bytes."""
    from tiny_gguf import write_tiny_gguf

    write_tiny_gguf(tmp_path / "tiny.gguf")
    out = run_script("gguf_materialise.py", "--gguf", str(tmp_path / "tiny.gguf"))
    assert "| one parse (the stage) | 1 |" in out and "| a parse per opening | 4 |" in out
    assert "the two folders byte for byte the same: True" in out


def test_every_benchmark_script_runs_here():
    """A script added to benchmarks/ without a run in this module fails here (smoke_inputs.py is the smoke
    runs' shared inputs, not a benchmark)."""
    source = Path(__file__).read_text(encoding="utf-8")
    scripts = sorted(p.name for p in (REPO / "benchmarks").glob("*.py") if p.name != "smoke_inputs.py")
    assert [name for name in scripts if f'"{name}"' not in source] == []


def test_the_benchmarks_of_a_source_model_run_at_their_smoke_size(sw_train):
    minilm = str(resolve_model_path(MINILM))
    out = run_script("hypernet_step.py", "--smoke", "--threads", "1", "--source", minilm, "--train", str(sw_train))
    assert "| 500 |" in out
    out = run_script("tune_task.py", "--smoke", "--model", minilm, "--task", "qa", "--lang", "sw")
    assert "| 8 (" in out
    out = run_script("tune_init.py", "--smoke", "--source", MINILM, "--workdir", str(sw_train.parent / "tune_init"))
    assert "| omp k=4 norm=atoms |" in out


def test_the_gpu_benchmarks_run_their_cpu_path_at_their_smoke_size():
    out = run_script("pretrain_cuda.py", "--smoke", "--text", str(SHARED_DATA / "pretrain_text" / "sw.txt"))
    assert "| standard | fp32 |" in out or "| standard | bf16 |" in out
    out = run_script("lm_eval_cuda.py", "4", "cpu")  # LIMIT 4 items per task, on the CPU only
    assert "LM_EVAL_CHECK PASS" in out


def test_compare_results_tells_equal_folders_from_differing_ones(tmp_path):
    for name, value in (("a", 1.0), ("b", 1.0), ("c", 2.0)):
        folder = tmp_path / name / "sw"
        folder.mkdir(parents=True)
        pq.write_table(pa.table({"x": [value, 3.0], "seconds": [float(ord(name)), 1.0]}), folder / "t.parquet")
        (folder / "stats.json").write_text(f'{{"loss": {value}, "seconds": {ord(name)}}}', encoding="utf-8")
    run_script("compare_results.py", str(tmp_path / "a"), str(tmp_path / "b"))  # the time columns left out
    with pytest.raises(AssertionError, match="rc 1"):
        run_script("compare_results.py", str(tmp_path / "a"), str(tmp_path / "c"))


def fake_pretrain_runs(root, bf16: bool, shift: float) -> None:
    """Two pretraining seeds of sw random-standard with 10 valid blocks of 50 tokens: block b's summed loss is
    (5 + b / 10 + shift) x 50."""
    for pseed in (1, 2):
        run = root / "results" / "sw" / "pretrain" / "random" / "standard" / f"pseed{pseed}"
        run.mkdir(parents=True)
        pq.write_table(
            pa.table(
                {
                    "block": list(range(10)),
                    "loss_sum": [(5 + b / 10 + shift) * 50 for b in range(10)],
                    "n_tokens": [50] * 10,
                }
            ),
            run / "valid_blocks.parquet",
        )
        (run / "stats.json").write_text(
            json.dumps(
                {
                    "bf16": bf16,
                    "final_valid_loss": 5.45 + shift,
                    "steps": 10,
                    "train_seconds": 20.0 if bf16 else 40.0,
                    "tokens_seen": 5120,
                }
            )
        )


def test_precision_pair_on_runs_a_tenth_of_a_nat_apart(tmp_path):
    """bf16's runs score every block 0.1 nats a token above fp32's: the difference and its whole interval are
    +0.1, on 2 seeds and 10 blocks, and the step times 4.00 and 2.00 s (40 and 20 s over 10 steps)."""
    fake_pretrain_runs(tmp_path / "fp32", bf16=False, shift=0.0)
    fake_pretrain_runs(tmp_path / "bf16", bf16=True, shift=0.1)
    out = run_script("precision_pair.py", str(tmp_path / "fp32"), str(tmp_path / "bf16"), "--resamples", "200")
    assert (
        "| sw | random | standard | 5.4500 | 5.5500 | +0.1000 [+0.1000, +0.1000] | 2 | 10 | 5,120 | 4.00 | 2.00 |"
        in out
    )
    with pytest.raises(AssertionError, match="must be fp32"):
        run_script("precision_pair.py", str(tmp_path / "bf16"), str(tmp_path / "fp32"), "--resamples", "200")


def fake_scored(root: Path, precision: str, flip: bool) -> None:
    """The source's lm_eval samples (6 XNLI items, 3 premises) and QA result (4 questions, 2 articles) as the
    study writes them, scored in `precision`; `flip`: item 2's choice and question 1's answer change."""
    lm = root / "results" / "sw" / "lm_eval" / "source"
    lm.mkdir(parents=True)
    lls = [[-1.0, -2.0, -3.0]] * 6
    if flip:
        lls = lls[:2] + [[-2.5, -2.0, -3.0]] + lls[3:]
    targets = [0, 0, 0, 0, 1, 1]  # items 0-3 right (argmax 0), 4-5 wrong
    rows = {
        "task": ["local_xnli_sw"] * 6, "doc_id": list(range(6)), "cluster": ["a", "a", "b", "b", "c", "c"],
        "metric": ["acc"] * 6, "target": targets, "loglikelihoods": lls, "response": [""] * 6,
        "value": [float(max(range(3), key=lambda j: ll[j]) == t) for ll, t in zip(lls, targets)],
    }  # fmt: skip
    pq.write_table(pa.table(rows), lm / "samples.parquet")
    (lm / "scores.json").write_text(json.dumps({"precision": precision, "seconds": 30.0 if flip else 50.0}))
    qa = root / "results" / "sw" / "eval" / "qa" / "source"
    qa.mkdir(parents=True)
    scores, predictions = [100.0, 50.0, 0.0, 100.0], ["1999", "mji mkuu", "x", "Dodoma"]
    if flip:
        scores[1], predictions[1] = 0.0, "mji"
    examples = {"ids": ["q0", "q1", "q2", "q3"], "clusters": ["A", "A", "B", "B"], "score": scores,
                "prediction": predictions, "exact_match": scores}  # fmt: skip
    result = {"examples": examples, "scored_in": precision, "seconds": 90.0 if flip else 100.0}
    (qa / "seed1.json").write_text(json.dumps(result))


def test_eval_precision_pairs_a_studys_own_scores(tmp_path):
    """--pair reads the study's results of the same model scored in fp32 and in bf16: XNLI accuracy 66.7 %
    against 50.0 % with one answer changed (0.5 nats the largest log-likelihood change), QA F1 62.5 against
    50.0 with one prediction changed, the jobs' own seconds; a folder scored in the other precision is refused."""
    fake_scored(tmp_path / "fp32", "fp32", flip=False)
    fake_scored(tmp_path / "bf16", "bf16", flip=True)
    pair = ["--pair", str(tmp_path / "fp32"), str(tmp_path / "bf16")]
    out = run_script("eval_precision.py", *pair, "--json", str(tmp_path / "r.json"))
    xnli, qa = json.loads((tmp_path / "r.json").read_text())
    assert (xnli["part"], xnli["items"], xnli["clusters"], xnli["changed"]) == ("xnli sw", 6, 3, 1)
    assert xnli["fp32"] == pytest.approx(4 / 6) and xnli["diff"] == pytest.approx(-1 / 6)
    assert xnli["max_abs_loglik"] == pytest.approx(1.5) and xnli["interval"][0] <= -1 / 6 <= xnli["interval"][1]
    assert (qa["part"], qa["items"], qa["clusters"], qa["changed"]) == ("qa sw seed1", 4, 2, 1)
    assert (qa["fp32"], qa["bf16"], qa["seconds_fp32"], qa["seconds_bf16"]) == (62.5, 50.0, 100.0, 90.0)
    assert "| xnli sw | 6 (3) | 66.7 | 50.0 | -16.67 [" in out
    assert "| qa sw seed1 | 4 (2) | 62.5 | 50.0 | -12.50 [" in out
    with pytest.raises(AssertionError, match="scored in bf16, not fp32"):
        run_script("eval_precision.py", "--pair", str(tmp_path / "bf16"), str(tmp_path / "fp32"))


def test_loss_by_token_on_two_tiny_causal_models(tmp_path):
    tok = bpe_tokenizer("sw", 300)
    a = save_dir(tiny_llama(len(tok), seed=0), tok, tmp_path / "a")
    b = save_dir(tiny_llama(len(tok), seed=1), tok, tmp_path / "b")
    pq.write_table(pa.table({"text": text_lines("sw", 20, start=500)}), tmp_path / "valid.parquet")
    out = run_script(
        "loss_by_token.py",
        str(a),
        str(b),
        str(tmp_path / "valid.parquet"),
        "--lines",
        "20",
        "--seq-len",
        "64",
        "--top",
        "3",
    )
    assert "tokens scored" in out and out.count("\n| '") == 3  # the top 3 tokens of the gap
