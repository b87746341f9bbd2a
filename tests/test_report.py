"""The report renders from small hand-made result files that follow the stage contracts."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow as pa
import pytest

from vocabtransfer import io
from vocabtransfer.pipeline import paths as P
from vocabtransfer.report import stage as R
from vocabtransfer.evaluate import stats as S
from vocabtransfer.evaluate.init_eval import SCHEMA as INIT_EVAL_SCHEMA

LANGS = ("sw", "de")
METHODS = ("random", "focus")
OBJECTIVES = ("standard", "selfish")
SEEDS = (1, 2)
N = 50  # test examples per task
# correct answers out of N per (model, seed) for nli; the other tasks follow the same ranking
CORRECT = {"source": (27, 28), "random-init": (20, 22), "focus-init": (22, 24),
           "random-standard": (25, 25), "focus-standard": (30, 32),
           "random-selfish": (24, 26), "focus-selfish": (26, 28)}
PARAMS = {"languages": list(LANGS), "seed": 42, "source_model": "sentence-transformers/all-MiniLM-L6-v2",
          "init": {"methods": list(METHODS)}, "report": {"bootstrap_resamples": 300, "confidence": 0.95}}
TASKS_OF = {"sw": ("nli", "qa", "ner"), "de": ("nli", "qa")}  # de has no NER data


def write(root: Path, template: str, obj, **wc) -> Path:
    path = root / P.fill(template, **wc)
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(obj, pa.Table):
        io.write_parquet(obj, path)
    elif isinstance(obj, bytes):
        path.write_bytes(obj)
    else:
        path.write_text(json.dumps(obj))
    return path


def split(model: str) -> tuple[str, str | None]:
    if model == "source":
        return "source", None
    method, _, objective = model.rpartition("-")
    return method, objective


TRIVIAL = {"nli": {"name": "majority class", "value": 34.0}, "qa": {"name": "empty answer", "value": 0.0},
           "ner": {"name": "all O", "value": 0.0}}


def eval_result(lang: str, task: str, model: str, seed: int) -> dict:
    c = CORRECT[model][seed - 1]
    ids = [f"{task}-{i}" for i in range(N)]
    if task == "ner":  # one gold entity per sentence, found in the first c
        examples = {"ids": ids, "tp": [1] * c + [0] * (N - c), "n_pred": [1] * N, "n_gold": [1] * N}
        metrics = {"f1": 200 * c / (2 * N), "precision": 100 * c / N, "recall": 100 * c / N}
        metric = "f1"
    elif task == "qa":
        examples = {"ids": ids, "score": [100.0] * c + [50.0] * (N - c)}
        metrics = {"f1": (100 * c + 50 * (N - c)) / N, "exact_match": 100 * c / N}
        metric = "f1"
    else:
        examples = {"ids": ids, "score": [1] * c + [0] * (N - c)}
        metrics = {"accuracy": 100 * c / N}
        metric = "accuracy"
    method, objective = split(model)
    return {"lang": lang, "task": task, "model": model, "method": method, "objective": objective, "seed": seed,
            "metric": metric, "metrics": metrics, "n_train": 100, "n_test": N, "examples_seen": 200,
            "seconds": 1.0, "skipped": {}, "examples": examples, "trivial": TRIVIAL[task]}


def make_results(root: Path, langs=LANGS, with_evals: bool = True) -> R.Plan:
    """Hand-made artefacts for two languages × two methods × two objectives × three tasks × two seeds."""
    write(root, P.SOURCE_HEAD_STATS, {"source_model": PARAMS["source_model"], "kind": "masked",
                                      "model_class": "BertForMaskedLM", "skipped": False, "steps": 100,
                                      "text": "pretrain_text/en.txt", "loss_before": 10.4, "loss_after": 4.2})
    plan = R.Plan(languages=list(langs), pretrain=[(m, o) for m in METHODS for o in OBJECTIVES],
                  gradients=[(m, o) for m in METHODS for o in OBJECTIVES], token_frequency=True)
    for k, lang in enumerate(langs):
        write(root, P.CORPUS_STATS, {"lang": lang, "train_lines": 1000 + k, "train_bytes": 90000,
                                     "valid_lines": 50}, lang=lang)
        write(root, P.TOKENIZER_STATS, {"family": "wordpiece", "style": "bert", "vocab_size": 2000,
                                        "vocab_size_reached": 1999 - k}, lang=lang)
        write(root, P.PRETOK_STATS, {"stats": {"valid": {"source": {"fertility": 2.5},
                                                         "target": {"fertility": 1.4}}}}, lang=lang)
        rows = [{"lang": "en", "method": "source", "kind": "masked", "loss": 4.2, "perplexity": 66.7,
                 "calibrated_loss": 4.1, "temperature": 1.1, "n_eval_tokens": 100, "n_eval_lines": 10,
                 "retrieval_en2xx": 0.2, "retrieval_xx2en": 0.25, "n_sentences": 20, "model": "m", "seconds": 1.0}]
        for i, method in enumerate(METHODS):
            rows.append({**rows[0], "lang": lang, "method": method, "loss": 9.0 - 2 * i, "calibrated_loss": 8.0 - i,
                         "temperature": 2.0, "retrieval_en2xx": 0.05 * (i + 1), "retrieval_xx2en": 0.04 * (i + 1)})
        write(root, P.INIT_EVAL, pa.Table.from_pylist(rows, schema=INIT_EVAL_SCHEMA), lang=lang)
        tfl = []
        for i, (method, objective) in enumerate(plan.pretrain):
            run = dict(lang=lang, method=method, objective=objective)
            start = 9.0 - 2 * METHODS.index(method)
            valid = [start, start - 1.0 - 0.1 * i, start - 1.5 - 0.1 * i]
            table = pa.table({"step": pa.array([0, 10, 20], pa.int64()),
                              "tokens_seen": pa.array([0, 1280, 2560], pa.int64()),
                              "train_loss": pa.array([math.nan, 8.0, 7.0], pa.float64()),
                              "valid_loss": pa.array(valid, pa.float64()),
                              "learning_rate": pa.array([0.0, 1e-4, 5e-5], pa.float64()),
                              "tokens_per_second": pa.array([math.nan, 100.0, 100.0], pa.float64())})
            write(root, P.PRETRAIN_DIR + "/metrics.parquet", table, **run)
            write(root, P.PRETRAIN_DIR + "/stats.json", {**run, "kind": "masked", "steps": 20, "tokens_seen": 2560,
                                                         "initial_valid_loss": valid[0], "final_valid_loss": valid[-1]},
                  **run)
            write(root, P.GRADIENT_PLOT, b"\x89PNG\r\n\x1a\n", **run)
            for objective_row in (["init"] if objective == "standard" else []) + [objective]:
                for b in range(3):
                    tfl.append({"lang": lang, "method": method, "objective": objective_row, "bucket": b,
                                "rank_lo": 10 * b, "rank_hi": 10 * b + 9, "n_types": 10, "n_tokens": 100 - 10 * b,
                                "loss": 2.0 + b + (1.0 if objective_row == "init" else 0.0)})
        schema = pa.schema([("lang", pa.string()), ("method", pa.string()), ("objective", pa.string()),
                            ("bucket", pa.int32()), ("rank_lo", pa.int64()), ("rank_hi", pa.int64()),
                            ("n_types", pa.int64()), ("n_tokens", pa.int64()), ("loss", pa.float64())])
        write(root, P.TOKEN_FREQUENCY_LOSS, pa.Table.from_pylist(tfl, schema=schema), lang=lang)
        plan.evals[lang] = []
        plan.skipped[lang] = {} if len(TASKS_OF[lang]) == 3 else {"ner": "no NER data for de in params"}
        if not with_evals:
            continue
        for task in TASKS_OF[lang]:
            for model in CORRECT:
                for seed in SEEDS:
                    write(root, P.EVAL_RESULT, eval_result(lang, task, model, seed), lang=lang, task=task,
                          model=model, seed=str(seed))
                    plan.evals[lang].append({"task": task, "model": model, "seed": seed})
    return plan


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    root = tmp_path_factory.mktemp("study")
    plan = make_results(root)
    R.write_report(PARAMS, plan, root)
    return root, plan


def section(text: str, heading: str) -> str:
    """The text from a heading to the next heading of the same or a higher level."""
    level = heading.split(" ")[0]
    start = text.index(heading + "\n")
    rest = text[start + len(heading) + 1:]
    ends = [i for i in (rest.find("\n" + "#" * n + " ") for n in range(1, len(level) + 1)) if i >= 0]
    return rest[: min(ends)] if ends else rest


def cells(text: str, *first: str) -> list[str]:
    """The cells of the first table row whose leading cells are `first`."""
    for line in text.splitlines():
        row = [c.strip() for c in line.split("|")[1:-1]]
        if line.startswith("|") and row[: len(first)] == list(first):
            return row
    raise AssertionError(f"no row {first} in\n{text}")


def test_report_has_every_section(rendered):
    root, _ = rendered
    text = (root / P.REPORT).read_text()
    assert text.startswith("# vocabtransfer: report\n")
    assert "## Set-up" in text and "## What was skipped and why" in text
    for lang in LANGS:
        body = section(text, f"## {lang}")
        for heading in ("### Right after initialisation", "### Continued pretraining", "### Loss by token frequency",
                        "### Gradient scenarios", "### Downstream tasks"):
            assert heading in body, (lang, heading)
        assert "_No" not in body  # every section has data
    setup = section(text, "## Set-up")
    assert "BertForMaskedLM" in setup and "4 runs per language" in setup and "20 steps" in setup
    assert cells(setup, "sw")[1] == "1000" and cells(setup, "sw")[5] == "1999"  # corpus lines, vocabulary
    skipped = section(text, "## What was skipped and why")
    assert "* de / ner: no NER data for de in params" in skipped
    assert "sw / ner" not in skipped


def test_downstream_table_mean_std_bold_and_interval(rendered):
    root, _ = rendered
    down = section(section((root / P.REPORT).read_text(), "## sw"), "### Downstream tasks")
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in down.splitlines() if line.startswith("| ") and not line.startswith("| model")}
    header = [c.strip() for c in next(ln for ln in down.splitlines() if ln.startswith("| model")).split("|")[1:-1]]
    assert header[:3] == ["model", "nli (accuracy)", "nli: Δ random [95% CI]"] and "ner (f1)" in header
    # focus-standard nli: 30 and 32 of 50 correct -> 60 % and 64 %: mean 62.0, std sqrt(8) = 2.8; the best
    assert rows["focus-standard"][0] == "**62.0 ± 2.8**"
    assert rows["random-standard"][0] == "50.0 ± 0.0" and rows["random-standard"][1] == "(baseline)"
    assert rows["source"][1] == "(no random baseline for the source model)"
    # its difference to random-standard with the paired interval, computed from the same JSONs
    runs = {m: {s: eval_result("sw", "nli", m, s)["examples"] for s in SEEDS} for m in CORRECT}
    d = S.paired_bootstrap("nli", runs["random-standard"], runs["focus-standard"], resamples=300, seed=42)
    assert d.diff == pytest.approx(12.0) and d.excludes_zero
    assert rows["focus-standard"][1] == f"+12.0 [{d.low:+.1f}, {d.high:+.1f}] ✱"
    # focus-selfish vs random-selfish: 26/28 vs 24/26 correct -> +4.0; the interval still excludes 0 here
    assert rows["focus-selfish"][1].startswith("+4.0 [")
    assert rows["trivial predictor"] == ["34.0 (majority class)", ""] + rows["trivial predictor"][2:]
    assert rows["trivial predictor"][header.index("ner (f1)") - 1] == "0.0 (all O)"
    assert list(rows) == ["trivial predictor", "source", "random-init", "random-standard", "random-selfish", "focus-init",
                          "focus-standard", "focus-selfish"]
    # de has no ner column
    de = section(section((root / P.REPORT).read_text(), "## de"), "### Downstream tasks")
    assert "ner (f1)" not in de and "qa (f1)" in de


def test_init_pretrain_and_frequency_tables(rendered):
    root, _ = rendered
    sw = section((root / P.REPORT).read_text(), "## sw")
    init = section(sw, "### Right after initialisation")
    assert cells(init, "focus")[1:3] == ["**7.000**", "**7.000**"]  # lowest raw and calibrated loss in bold
    assert cells(init, "random")[1:3] == ["9.000", "8.000"]
    assert "![sw: right after initialisation](sw/init_eval.png)" in init
    pre = section(sw, "### Continued pretraining")
    # step 0, standard (end), selfish (end): focus 7.0, 7.0 - 1.5 - 0.2, 7.0 - 1.5 - 0.3
    assert cells(pre, "method") == ["method", "step 0", "standard (end)", "selfish (end)"]
    assert cells(pre, "focus")[1:] == ["**7.000**", "**5.300**", "**5.200**"]
    assert cells(pre, "random")[1:] == ["9.000", "7.500", "7.400"]
    assert "(report/figures/sw_valid_loss.png)" in pre
    freq = section(sw, "### Loss by token frequency")
    assert cells(freq, "method")[-1] == "b2 (ranks 20–29)"
    assert cells(freq, "focus", "init")[2:] == ["3.00", "4.00", "5.00"]
    grad = section(sw, "### Gradient scenarios")
    assert "![focus selfish](sw/gradients/focus/selfish.png)" in grad


def test_figures_curves_and_metrics(rendered, tmp_path):
    root, _ = rendered
    figures = sorted(p.name for p in (root / P.REPORT_FIGURES).iterdir())
    assert figures == ["de_downstream.png", "de_valid_loss.png", "sw_downstream.png", "sw_valid_loss.png"]
    for name in figures:
        assert (root / P.REPORT_FIGURES / name).read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    # a second render of the same inputs gives byte-identical figures and report
    plan = make_results(tmp_path)
    R.write_report(PARAMS, plan, tmp_path)
    for name in figures:
        assert (tmp_path / P.REPORT_FIGURES / name).read_bytes() == (root / P.REPORT_FIGURES / name).read_bytes()
    assert (tmp_path / P.REPORT).read_text() == (root / P.REPORT).read_text()
    # curves: step then one column per run
    lines = (root / R.curves_csv("sw")).read_text().splitlines()
    assert lines[0] == "step,random-standard,random-selfish,focus-standard,focus-selfish"
    assert lines[1] == "0,9,9,7,7" and lines[3] == "20,7.5,7.4,5.3,5.2"
    metrics = json.loads((root / P.REPORT_METRICS).read_text())
    assert metrics["sw"]["eval"]["nli"]["focus-standard"] == pytest.approx(62.0)
    assert metrics["de"]["valid_loss"]["focus-selfish"] == pytest.approx(5.2)
    assert metrics["sw"]["init_loss"] == {"random": 9.0, "focus": 7.0}
    assert "ner" not in metrics["de"]["eval"]


def test_missing_results_render_as_notes(tmp_path):
    """Only the set-up and init_eval files of one language: every other section says what is missing."""
    plan = make_results(tmp_path, langs=("sw",), with_evals=False)
    (tmp_path / P.fill(P.TOKEN_FREQUENCY_LOSS, lang="sw")).unlink()
    plan.skipped["sw"] = {"nli": "no XNLI data", "qa": "no QA data", "ner": "no NER data"}
    for method, objective in plan.pretrain:
        (tmp_path / P.fill(P.PRETRAIN_DIR, lang="sw", method=method, objective=objective) / "metrics.parquet").unlink()
    R.write_report(PARAMS, plan, tmp_path)
    sw = section((tmp_path / P.REPORT).read_text(), "## sw")
    assert "_No continued-pretraining results for this language._" in sw
    assert "_No token-frequency results (results/sw/token_frequency_loss.parquet)._" in sw
    assert "_No downstream results for this language._" in sw
    skipped = section((tmp_path / P.REPORT).read_text(), "## What was skipped and why")
    assert "* sw / qa: no QA data" in skipped
    assert "`results/sw/token_frequency_loss.parquet` missing" in skipped
    assert list((tmp_path / P.REPORT_FIGURES).iterdir()) == []
    assert json.loads((tmp_path / P.REPORT_METRICS).read_text()) == {"sw": {"init_loss": {"random": 9.0, "focus": 7.0}}}


def test_inputs_name_every_artefact_of_the_plan(monkeypatch):
    """The stage's inputs follow the plan: pretrain runs, analyses and eval results per language."""
    plan = R.Plan(languages=["sw"], pretrain=[("focus+svd", "selfish")], gradients=[("focus+svd", "selfish")],
                  token_frequency=True, evals={"sw": [{"task": "nli", "model": "focus+svd-selfish", "seed": 2}]},
                  skipped={"sw": {}})
    monkeypatch.setattr(R, "plan", lambda params, root=Path("."): plan)
    paths = set(R.inputs(PARAMS, {}).values())
    assert {"results/sw/init_eval.parquet", "results/source/head_stats.json", "results/sw/pretokenized/stats.json",
            "results/sw/pretrain/focus+svd/selfish", "results/sw/token_frequency_loss.parquet",
            "results/sw/gradients/focus+svd/selfish.parquet",
            "results/sw/eval/nli/focus+svd-selfish/seed2.json"} <= paths
    assert all(k.isidentifier() for k in R.inputs(PARAMS, {}))


def test_cli_runs_the_stage(tmp_path, monkeypatch):
    """`vocabtransfer report` in a results tree: the stage writes every declared output."""
    from conftest import REPO
    from vocabtransfer.cli import main
    from vocabtransfer.pipeline.stages import STAGES

    plan = make_results(tmp_path)
    monkeypatch.setattr(R, "plan", lambda params, root=Path("."): plan)
    monkeypatch.chdir(tmp_path)
    assert main(["report", "--params", str(REPO / "params.yaml")]) == 0
    for name, template in STAGES["report"].outputs.items():
        assert (tmp_path / template).exists(), name
    assert "**62.0 ± 2.8**" in (tmp_path / P.REPORT).read_text()
