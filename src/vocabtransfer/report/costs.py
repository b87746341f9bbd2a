"""What each initialisation method cost on this run: the init jobs' wall time and peak memory,
read from Snakemake's per-job benchmark tables (`benchmark:` of every rule,
logs/benchmarks/<stage>/<job>.tsv: a header line, then `s` (seconds), `max_rss` (MiB), …)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vocabtransfer.pipeline import paths


@dataclass(frozen=True)
class JobCost:
    seconds: float
    max_rss_mib: float | None  # None: the job ended before Snakemake's first sample ("NA")


def read_benchmark(path: Path) -> JobCost | None:
    """One benchmark table (the last data row counts; Snakemake writes one per run); None if unreadable."""
    try:
        lines = [ln for ln in Path(path).read_text(encoding="utf-8").splitlines() if ln.strip()]
    except OSError:
        return None
    if len(lines) < 2:
        return None
    header, row = lines[0].split("\t"), lines[-1].split("\t")
    values = dict(zip(header, row))

    def number(key: str) -> float | None:
        try:
            return float(values[key])
        except (KeyError, ValueError):
            return None

    seconds = number("s")
    return JobCost(seconds, number("max_rss")) if seconds is not None else None


# the stages whose one job serves every language's init jobs: their rows (after the methods', named apart from a
# method of the same name: init method hypernet reads stage hypernet's network)
SHARED = {"source_snmf": "source_snmf (shared semi-NMF)", "hypernet": "hypernet (training, shared by every language)"}


def init_costs(root: Path) -> dict[str, list[JobCost]]:
    """method -> the costs of its init jobs (every language and pretraining seed), from
    logs/benchmarks/init/<lang>-<method>-<pseed>.tsv; the shared stages' jobs (SHARED: the semi-NMF of
    source_snmf, the training of hypernet) as rows of their own, named by their stage and what they are."""
    base = Path(root) / Path(paths.BENCHMARK).parent.parent
    out: dict[str, list[JobCost]] = {}
    for path in sorted((base / "init").glob("*.tsv")):
        parts = path.stem.split("-")
        if len(parts) < 3:
            continue
        cost = read_benchmark(path)
        if cost is not None:
            out.setdefault("-".join(parts[1:-1]), []).append(cost)
    for stage in SHARED:
        for path in sorted((base / stage).glob("*.tsv")):
            cost = read_benchmark(path)
            if cost is not None:
                out.setdefault(SHARED[stage], []).append(cost)
    return out


def cost_table(costs: dict[str, list[JobCost]]) -> tuple[list[str], list[list[str]]]:
    """(headers, rows) of the per-method table: jobs, mean and largest seconds, largest peak memory."""
    rows = []
    for method in sorted(costs, key=lambda m: (m in SHARED.values(), m)):
        jobs = costs[method]
        seconds = [j.seconds for j in jobs]
        rss = [j.max_rss_mib for j in jobs if j.max_rss_mib is not None]
        rows.append(
            [
                method,
                str(len(jobs)),
                f"{sum(seconds) / len(seconds):.1f}",
                f"{max(seconds):.1f}",
                f"{max(rss) / 1024:.2f}" if rss else "–",
            ]
        )
    return ["method", "jobs", "seconds (mean)", "seconds (max)", "peak memory (GiB)"], rows


def cost_lines(root: Path, table) -> list[str]:
    """The set-up section's lines on the init jobs' costs (none when no init job has a benchmark);
    `table(headers, rows)` renders the Markdown table."""
    costs = init_costs(root)
    if not any(m not in SHARED.values() for m in costs):
        return []
    headers, rows = cost_table(costs)
    return [
        "What each initialisation cost on this run (Snakemake's benchmark of every init job: wall time "
        "including loading the source model and saving the initialised one, and the peak resident memory; "
        "`snmf` and `<method>+snmf` read the shared semi-NMF, `hypernet` the trained hypernetwork: their costs are "
        "rows of their own):",
        "",
        table(headers, rows),
        "",
    ]
