"""The report's DVC plots and metrics, and its figures in `snakemake --report`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from vocabtransfer.app import dvcgen
from vocabtransfer.pipeline import paths
from vocabtransfer.plan import availability
from vocabtransfer.plan.report_plans import curves_csv
from vocabtransfer.app.params import load_params

from conftest import BIN, REPO

RUNS = [("random", "standard"), ("focus", "selfish")]


def run(cmd: list[str], cwd: Path, **kwargs) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True, env=env, **kwargs).stdout


def test_dvc_yaml_declares_curves_as_plots_and_metrics_uncached(monkeypatch, tmp_path):
    monkeypatch.setattr(availability, "pretrain_pairs", lambda params, lang=None: RUNS)
    params = load_params(REPO / "params.yaml")
    text = dvcgen.generate(params)
    doc = yaml.safe_load(text)
    stage = doc["stages"]["report"]
    assert stage["metrics"] == [{paths.REPORT_METRICS: {"cache": False}}]
    assert paths.REPORT_METRICS not in stage["outs"]
    assert {paths.REPORT, paths.REPORT_FIGURES, paths.REPORT_CURVES} <= set(stage["outs"])
    assert "results/sw/init_eval.parquet" in stage["deps"] and "src/vocabtransfer/evaluate/stats.py" in stage["deps"]
    plots = {k: v for entry in doc["plots"] for k, v in entry.items()}
    assert set(plots) == {f"valid_loss_{lang}" for lang in params["languages"]}
    assert plots["valid_loss_sw"]["x"] == "step"
    assert plots["valid_loss_sw"]["y"] == {"results/report/curves/sw.csv": ["random-standard", "focus-selfish"]}

    # DVC itself reads them: `dvc metrics show`, `dvc metrics diff` against the last commit, `dvc plots show`
    (tmp_path / "dvc.yaml").write_text(text)
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    for lang in params["languages"]:
        path = tmp_path / curves_csv(lang)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("step,random-standard,focus-selfish\n0,9,7\n10,8,6\n")
    metrics = tmp_path / paths.REPORT_METRICS
    metrics.write_text(json.dumps({"sw": {"eval": {"nli": {"focus-selfish": 61.5}}}}))
    dvc = str(BIN / "dvc")
    run(["git", "init", "-q"], tmp_path)
    run([dvc, "init", "-q"], tmp_path)
    shown = json.loads(run([dvc, "metrics", "show", "--json"], tmp_path))
    assert shown[""]["data"][paths.REPORT_METRICS]["data"]["sw"]["eval"]["nli"]["focus-selfish"] == 61.5
    run(["git", "add", "-A"], tmp_path)
    run(["git", "commit", "-qm", "v1"], tmp_path)
    metrics.write_text(json.dumps({"sw": {"eval": {"nli": {"focus-selfish": 63.0}}}}))
    diff = json.loads(run([dvc, "metrics", "diff", "--json"], tmp_path))
    assert diff[paths.REPORT_METRICS]["sw.eval.nli.focus-selfish"] == {"old": 61.5, "new": 63.0, "diff": 1.5}
    rendered = json.loads(run([dvc, "plots", "show", "--json"], tmp_path))["data"]
    values = rendered["valid_loss_sw"][0]["content"]["data"]["values"]
    assert {(v["field"], v["step"], v["dvc_inferred_y_value"]) for v in values} == {
        ("random-standard", "0", "9"),
        ("random-standard", "10", "8"),
        ("focus-selfish", "0", "7"),
        ("focus-selfish", "10", "6"),
    }


@pytest.mark.slow
def test_snakemake_report_embeds_the_figures(tmp_path, shared_data):
    """`snakemake --report` on the workflow's DAG, with the report stage's outputs present."""
    for name in ("Snakefile", "params.yaml"):
        shutil.copy(REPO / name, tmp_path / name)
    (tmp_path / "data").symlink_to(shared_data)  # the data files the workflow checks before any job
    shutil.copytree(REPO / "workflow", tmp_path / "workflow")
    figures = tmp_path / paths.REPORT_FIGURES
    figures.mkdir(parents=True)
    (tmp_path / paths.REPORT_CURVES).mkdir()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([0, 1], [1, 0])
    fig.savefig(figures / "sw_valid_loss.png", metadata={"Software": None})
    plt.close(fig)
    (tmp_path / paths.REPORT).write_text("# report\n")
    (tmp_path / paths.REPORT_METRICS).write_text("{}\n")
    run([str(BIN / "snakemake"), "--cores", "1", "--report", "report.html", paths.REPORT], tmp_path)
    html = (tmp_path / "report.html").read_text()
    assert "sw_valid_loss.png" in html
    assert "Figure <tt" in html or "Figure <code" in html  # the caption, with the file's name filled in
    assert "target tokenizer, embedding initialisation" in html  # workflow/report/workflow.rst
