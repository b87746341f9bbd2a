"""The report's per-method cost table, read from Snakemake's per-job benchmark tables."""

from __future__ import annotations

from pathlib import Path

from vocabtransfer.report.costs import JobCost, cost_lines, cost_table, init_costs, read_benchmark
from vocabtransfer.report.markdown import md_table

HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time"


def _write(root: Path, stage: str, job: str, seconds: float, rss) -> None:
    path = root / "logs" / "benchmarks" / stage / f"{job}.tsv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"{HEADER}\n{seconds}\t0:00:{int(seconds):02d}\t{rss}\t900.0\t500.0\t510.0\t1.0\t2.0\t80.0\t9.0\n",
        encoding="utf-8",
    )


def test_read_benchmark_takes_seconds_and_peak_rss(tmp_path):
    _write(tmp_path, "init", "sw-focus-1", 12.5, 2048.0)
    cost = read_benchmark(tmp_path / "logs/benchmarks/init/sw-focus-1.tsv")
    assert cost == JobCost(12.5, 2048.0)
    # a job faster than Snakemake's first sample has NA memory; an empty table is no cost
    _write(tmp_path, "init", "sw-mean-1", 0.3, "NA")
    assert read_benchmark(tmp_path / "logs/benchmarks/init/sw-mean-1.tsv") == JobCost(0.3, None)
    (tmp_path / "empty.tsv").write_text(HEADER + "\n", encoding="utf-8")
    assert read_benchmark(tmp_path / "empty.tsv") is None
    assert read_benchmark(tmp_path / "missing.tsv") is None


def test_costs_per_method_over_languages_and_seeds(tmp_path):
    _write(tmp_path, "init", "sw-focus+svd-1", 10.0, 1024.0)
    _write(tmp_path, "init", "de-focus+svd-1", 30.0, 3072.0)
    _write(tmp_path, "init", "sw-random-2", 4.0, "NA")
    _write(tmp_path, "source_snmf", "all", 50.0, 4096.0)
    _write(tmp_path, "hypernet", "all", 1200.0, 2048.0)  # trained once, for every language
    _write(tmp_path, "init", "sw-hypernet-1", 7.0, 512.0)  # init method hypernet: a row apart from the training
    _write(tmp_path, "fasttext", "sw", 99.0, 100.0)  # another stage: not an init cost
    costs = init_costs(tmp_path)
    assert sorted(costs) == [
        "focus+svd",
        "hypernet",
        "hypernet (training, shared by every language)",
        "random",
        "source_snmf (shared semi-NMF)",
    ]
    headers, rows = cost_table(costs)
    assert headers[0] == "method"
    assert rows == [
        ["focus+svd", "2", "20.0", "30.0", "3.00"],
        ["hypernet", "1", "7.0", "7.0", "0.50"],
        ["random", "1", "4.0", "4.0", "–"],
        ["hypernet (training, shared by every language)", "1", "1200.0", "1200.0", "2.00"],
        ["source_snmf (shared semi-NMF)", "1", "50.0", "50.0", "4.00"],
    ]
    lines = cost_lines(tmp_path, md_table)
    table = "\n".join(lines)
    assert "| focus+svd " in table and "| 3.00 " in table and "source_snmf (shared semi-NMF)" in table


def test_no_init_benchmarks_no_lines(tmp_path):
    assert cost_lines(tmp_path, md_table) == []
    _write(tmp_path, "source_snmf", "all", 50.0, 4096.0)
    assert cost_lines(tmp_path, md_table) == []
