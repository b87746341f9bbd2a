"""The crash matrix: each stage's job killed (SIGKILL to the run's process group, as a scheduler or a power cut
would) at points drawn from its own run time and once inside a write, then the same command again; the job's
artefacts must equal an uninterrupted run's.

It works on a finished run of the tests' shared workflow config (tests/workflow/params.yaml over params.yaml, the
`workflow_run` fixture, or `--reference DIR`). For one stage, its first planned job (sw): the reference directory
is copied, the job's outputs deleted, and `snakemake --cores 2 <the job's outputs>` (the reference's settings)
started in a session of its own;

* a time point: killed `t` seconds after the job's own process started, t drawn (seeded) from (0.1, 0.9) × the
  job's uninterrupted time (its Snakemake benchmark in the reference);
* inside a write: tests/killpoint's VOCABTRANSFER_KILL_IN_WRITE makes the job kill its run group inside its first
  atomic write under results/ (the temporary written, not yet renamed).

Then the same command runs to the end and the outputs are compared file by file with the reference's: bytes,
or for JSON and Parquet the same values once the fields that record times are set aside (TIME_FIELDS). One row per
point: the stage, the point, whether the kill landed before the job ended, whether the rerun succeeded, and the
files that differ (report.md without its job-time line). With `--runner dvc` the command killed and rerun is
`dvc repro --single-item` on the dvc.yaml stage that writes the job's outputs (one stage of each phase by default:
DVC_PHASES), compared with the same job run through DVC without a kill (dvc.yaml gives a job its own threads, and
a pretraining run on two threads is not bit-identical to one on one thread, as the Snakemake reference ran it).
`make crash-matrix` runs every stage (`python tests/crash_matrix.py --reference DIR` without --stages); CI a seeded
sample (tests/workflow/test_crash_matrix.py).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
sys.path.insert(0, str(REPO / "src"))
# fields that record how a run went rather than what it computed: its times, and where a resumed run resumed
TIME_FIELDS = (
    "seconds",
    "time",
    "tokens_per_second",
    "peak",
    "elapsed",
    "duration",
    "per_second",
    "date",
    "started",
    "finished",
    "throughput",
    "log",
    "resumed",
)


@dataclass
class Point:
    stage: str
    point: str  # "t=3.2s" or "in write"
    killed: bool = False  # the run was still going when the kill came
    recovered: bool = False  # the same command then ended with success
    differing: list[str] = field(default_factory=list)
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.recovered and not self.differing


def _job(stage: str, params: dict) -> tuple[dict, list[str]]:
    """The stage's first job for sw (or its one job) and its output paths."""
    from vocabtransfer.plan.stages import STAGES
    from vocabtransfer.pipeline import paths

    spec = STAGES[stage]
    from vocabtransfer.plan.params_root import Params

    jobs = spec.jobs(Params.of(params), "sw") if "lang" in spec.wildcards else spec.jobs(Params.of(params))
    if not jobs:
        raise LookupError(f"{stage}: no job in the shared workflow's params")
    wildcards = jobs[0]
    return wildcards, [
        paths.fill(t, **{k: v for k, v in wildcards.items() if "{" + k + "}" in t}) for t in spec.outputs.values()
    ]


def _checkpoints(stage: str, reference: Path) -> list[str]:
    """The job's checkpoint folder, where its stage keeps one (a finished run leaves its last checkpoints: a trial
    that kept them would resume from the end instead of crashing mid-way)."""
    import yaml

    from vocabtransfer.pipeline import paths

    templates = {
        "pretrain": paths.PRETRAIN_CHECKPOINTS,
        "hypernet": paths.HYPERNET_CHECKPOINTS,
        "finetune_eval": paths.EVAL_CHECKPOINTS,
    }
    if stage not in templates:
        return []
    wildcards, _ = _job(stage, yaml.safe_load((reference / "params.yaml").read_text(encoding="utf-8")))
    template = templates[stage]
    return [paths.fill(template, **{k: v for k, v in wildcards.items() if "{" + k + "}" in template})]


def _seconds(reference: Path, stage: str, wildcards: dict) -> float | None:
    """The job's wall time in the reference run (its Snakemake benchmark: the first data row's `s`)."""
    for table in sorted((reference / "logs" / "benchmarks" / stage).glob("*.tsv")):
        name = table.stem
        if all(str(v) in name for k, v in wildcards.items() if k != "seed"):
            rows = table.read_text(encoding="utf-8").splitlines()
            return float(rows[1].split("\t")[0]) if len(rows) > 1 else None
    return None


def _values(path: Path):
    """A file's content for the comparison: JSON and Parquet without their time fields, else bytes."""

    def keep(key) -> bool:
        return not any(word in str(key).lower() for word in TIME_FIELDS)

    def strip(obj):  # NaN as a word: a NaN equals no NaN, and a masked LM's bits per byte are NaN in both runs
        if isinstance(obj, dict):
            return {k: strip(v) for k, v in obj.items() if keep(k)}
        if isinstance(obj, list):
            return [strip(v) for v in obj]
        return "NaN" if isinstance(obj, float) and obj != obj else obj

    if path.suffix == ".json":
        return strip(json.loads(path.read_text(encoding="utf-8")))
    if path.name == "report.md":  # its lines without the job time (a rerun adds its own), as compare_results reads it
        return [
            re.sub(r"\d+(\.\d+)? ?(s|min|h)\b", "", line)
            for line in path.read_text(encoding="utf-8").splitlines()
            if "time" not in line.lower()
        ]
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        return strip(table.select([c for c in table.column_names if keep(c)]).to_pylist())
    return path.read_bytes()


def _files(output: Path) -> list[Path]:
    """A directory output's files (Snakemake's own marker left aside: a run through DVC has none), or the file."""
    if not output.is_dir():
        return [Path()]
    return sorted(p.relative_to(output) for p in output.rglob("*") if p.is_file() and p.name != ".snakemake_timestamp")


def _differing(reference: Path, trial: Path, outputs: list[str]) -> list[str]:
    out = []
    for output in outputs:
        ref, got = reference / output, trial / output
        files = _files(ref)
        if not got.exists():
            out.append(f"{output}: missing")
            continue
        mine = _files(got)
        if files != mine:
            out.append(f"{output}: other files ({sorted(set(map(str, files)) ^ set(map(str, mine)))[:3]})")
            continue
        out += [f"{output}/{f}".rstrip("/.") for f in files if _values(ref / f) != _values(got / f)]
    return out


def _job_started(proc: subprocess.Popen, stage: str, limit: float = 300.0) -> float | None:
    """When (time.monotonic) a process `vocabtransfer <stage> …` appeared under the run; None if the run ended or
    `limit` seconds passed first."""
    import psutil

    end = time.monotonic() + limit
    while time.monotonic() < end and proc.poll() is None:
        try:
            for child in psutil.Process(proc.pid).children(recursive=True):
                words = child.cmdline()
                if any(w.endswith("vocabtransfer") for w in words[:3]) and stage in words[:4]:
                    return time.monotonic()
        except psutil.Error:
            pass
        time.sleep(0.05)
    return None


def _command(runner: str, work: Path, outputs: list[str]) -> list[str]:
    """The command that makes the job's outputs: Snakemake on the outputs, as the reference ran (tests/conftest.py
    workflow_run: the threads a job records are the same), or `dvc repro --single-item` on the dvc.yaml stage
    that declares them (its upstream is in place and not rerun)."""
    if runner == "snakemake":
        return [
            str(BIN / "snakemake"),
            "--cores",
            "2",
            *outputs,
            "--set-threads",
            "init=1",
            "pretrain=1",
            "gradient_scenarios=1",
        ]
    from dvc.repo import Repo

    with Repo(str(work)) as repo:
        for dvc_stage in repo.index.stages:
            if {str(out.def_path) for out in dvc_stage.outs} & set(outputs):
                return [str(BIN / "dvc"), "repro", "--single-item", dvc_stage.name]  # the root dvc.yaml's stage
    raise LookupError(f"no dvc.yaml stage in {work} writes {outputs}")


def _killed_run(
    reference: Path, work: Path, outputs: list[str], runner: str, env: dict, stage: str, at: float | None
) -> tuple[bool, str, list[str], float | None]:
    """A fresh copy of the reference without the job's outputs, the runner's command started and killed (at `at`
    seconds from the job's own start, or inside its first write when None): (whether the kill landed, a note, the
    command, the seconds from the job's start to the run's end when the run ended before the kill)."""
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(reference, work, symlinks=True)
    for output in outputs + _checkpoints(stage, reference):  # the state before the job: no output, no checkpoint
        target = work / output
        shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
    command = _command(runner, work, outputs)
    run_env = {
        **env,
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO / "tests" / "killpoint"), env.get("PYTHONPATH")) if p),
    }
    if at is None:
        run_env["VOCABTRANSFER_KILL_IN_WRITE"] = "results/"
    proc = subprocess.Popen(
        command, cwd=work, env=run_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    note, started = "", None
    if at is not None:  # the clock starts when the job's own process does (Snakemake plans first)
        started = _job_started(proc, stage)
        if started is None:
            note = "the job never started"
        else:
            try:
                proc.wait(timeout=max(0.0, started + at - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    killed = proc.returncode == -signal.SIGKILL
    lasted = None if killed or started is None else time.monotonic() - started
    return killed, note or ("" if killed else f"the run ended (rc {proc.returncode}) before the kill"), command, lasted


_UNINTERRUPTED: dict[tuple[str, str], Path] = {}


def _uninterrupted(reference: Path, work: Path, outputs: list[str], runner: str, env: dict, stage: str) -> Path:
    """For a runner other than the reference's (DVC: its command's threads are dvc.yaml's, not the reference
    run's), the same job run through it without a kill, once per stage: what a killed run must end with."""
    key = (runner, stage)
    if key not in _UNINTERRUPTED:
        done = work.with_name(work.name + f"-{runner}-{stage}")
        if done.exists():
            shutil.rmtree(done)
        shutil.copytree(reference, done, symlinks=True)
        for output in outputs + _checkpoints(stage, reference):
            target = done / output
            shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
        subprocess.run(_command(runner, done, outputs), cwd=done, env=env, check=True, capture_output=True)
        _UNINTERRUPTED[key] = done
    return _UNINTERRUPTED[key]


def run_point(
    reference: Path,
    work: Path,
    env: dict,
    stage: str,
    point: str,
    at: float | None,
    runner: str = "snakemake",
    tries: int = 3,
) -> Point:
    """One row: copy, delete the job's outputs, start (`runner`: snakemake or dvc), kill (at `at` seconds, or
    inside a write when None), rerun. A time point the job outlived (it ran faster than in the reference) is tried
    again at the same fraction of the time the job took here, up to `tries` times; the row names the time the kill
    landed at."""
    import yaml

    params = yaml.safe_load((reference / "params.yaml").read_text(encoding="utf-8"))
    wildcards, outputs = _job(stage, params)
    fraction = None if at is None else at / (_seconds(reference, stage, wildcards) or 10.0)
    row = Point(stage if runner == "snakemake" else f"{stage} (dvc repro)", point)
    for attempt in range(tries if at is not None else 1):
        row.killed, row.note, command, lasted = _killed_run(reference, work, outputs, runner, env, stage, at)
        if row.killed or at is None or attempt == tries - 1:
            break
        at = fraction * lasted if lasted else at / 2
        row.point += f" → {at:.1f}s"
    rerun = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True)
    row.recovered = rerun.returncode == 0
    if not row.recovered:
        row.note = (row.note + "; " if row.note else "") + rerun.stderr.strip().splitlines()[-1][:200]
    expected = reference if runner == "snakemake" else _uninterrupted(reference, work, outputs, runner, env, stage)
    row.differing = _differing(expected, work, outputs) if row.recovered else []
    return row


def points(reference: Path, stage: str, n_times: int, seed: int) -> list[tuple[str, float | None]]:
    """The stage's kill points: `n_times` drawn from (0.1, 0.9) of its reference time, and one inside a write."""
    import yaml

    params = yaml.safe_load((reference / "params.yaml").read_text(encoding="utf-8"))
    wildcards, _ = _job(stage, params)
    seconds = _seconds(reference, stage, wildcards) or 10.0
    rng = random.Random(f"{seed}:{stage}")
    times = sorted(rng.uniform(0.1, 0.9) * seconds for _ in range(n_times))  # from the job's own start
    return [(f"t={t:.1f}s", t) for t in times] + [("in write", None)]


def table(rows: list[Point]) -> str:
    lines = ["| stage | point | killed mid-run | recovered | differing files | note |", "|---|---|---|---|---|---|"]
    lines += [
        f"| {r.stage} | {r.point} | {'yes' if r.killed else 'no'} | {'yes' if r.recovered else 'no'} | "
        f"{', '.join(r.differing) or 'none'} | {r.note} |"
        for r in rows
    ]
    return "\n".join(lines)


DVC_PHASES = ("fasttext", "init", "pretrain", "finetune_eval", "report")  # one stage of each phase, through DVC
CHEAP = ("corpus", "tokenizer", "pretokenize", "overlap", "init", "floor")  # CI's sample: jobs of seconds


def sample(day: str, n: int = 1) -> list[str]:
    """CI's stages for `day` (YYYY-MM-DD): `n` of CHEAP drawn from the date, so each day covers another."""
    return random.Random(day).sample(CHEAP, n)


def build_reference(directory: Path, shared_data: Path) -> None:
    """The shared workflow run as tests/conftest.py's `workflow_run` makes it, for `make crash-matrix`."""
    sys.path.insert(0, str(REPO / "tests"))
    from conftest import ONE_THREAD, workflow_environment
    from helpers import run_command, setup_workdir
    from vocabtransfer.pipeline.config import merge_overlay, read_yaml

    params = merge_overlay(read_yaml(REPO / "params.yaml"), read_yaml(REPO / "tests" / "workflow" / "params.yaml"))
    env = workflow_environment(shared_data)
    directory.mkdir(parents=True)
    setup_workdir(directory, params, env)
    run_command([str(BIN / "snakemake"), "--cores", "2", "results/report.md", *ONE_THREAD], directory, env)


def build_decoder_reference(directory: Path, shared_data: Path) -> None:
    """For `--decoder`: the lm_eval stage's job, which the shared workflow config (a masked source) does not plan,
    on tests/workflow/test_decoder_only.py's tiny Llama source with one offline zero-shot task (16 items) scored on the
    source itself; the run makes that job's outputs and what they need, nothing else."""
    sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "workflow")]  # helpers; test_decoder_only
    from conftest import workflow_environment
    from helpers import run_command, setup_workdir
    from test_decoder_only import build_source, overlay
    from vocabtransfer.pipeline.config import merge_overlay, read_yaml

    directory.mkdir(parents=True)
    source = build_source("llama", directory / "source")
    settings = {
        **overlay(source, ["random", "focus"], ["standard"]),
        "lm_eval": {"tasks": ["local_xnli_sw"], "limit": 16, "batch_size": 4, "models": ["source"]},
    }
    params = merge_overlay(read_yaml(REPO / "params.yaml"), settings)
    env = workflow_environment(shared_data)
    setup_workdir(directory, params, env)
    run_command(
        [
            str(BIN / "snakemake"),
            "--cores",
            "2",
            "results/sw/lm_eval/source/scores.json",
            "results/sw/lm_eval/source/samples.parquet",
        ],
        directory,
        env,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--reference",
        type=Path,
        required=True,
        help="a finished run of tests/workflow/params.yaml (made there first when it does not exist)",
    )
    parser.add_argument("--stages", nargs="*", default=None, help="default: every stage with a job")
    parser.add_argument("--times", type=int, default=2, help="time points per stage (plus one inside a write)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--runner",
        choices=("snakemake", "dvc"),
        default="snakemake",
        help="the command killed and rerun: snakemake on the job's outputs, or dvc repro --single-item "
        "on its dvc.yaml stage (default stages then: one of each phase, DVC_PHASES)",
    )
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "vocabtransfer-crash-trial")
    parser.add_argument(
        "--decoder",
        action="store_true",
        help="the reference is (or is built as) a tiny Llama source with a zero-shot task: the lm_eval "
        "stage's job, which the shared workflow config does not plan (default stages: lm_eval)",
    )
    args = parser.parse_args()
    from vocabtransfer.plan.stages import STAGES

    data = Path(os.environ.get("VOCABTRANSFER_DATA", REPO.parent / "shared" / "data"))
    if not args.reference.exists():
        print(f"# building the reference run in {args.reference}", flush=True)
        (build_decoder_reference if args.decoder else build_reference)(args.reference, data)
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "HF_HUB_OFFLINE": "1", "VOCABTRANSFER_DATA": str(data)}
    rows = []
    default = ["lm_eval"] if args.decoder else list(STAGES) if args.runner == "snakemake" else DVC_PHASES
    for stage in args.stages or default:
        try:
            kills = points(args.reference, stage, args.times, args.seed)
        except LookupError as exc:
            print(f"# {exc}", flush=True)
            continue
        for name, at in kills:
            start = time.perf_counter()
            rows.append(run_point(args.reference, args.work, env, stage, name, at, args.runner))
            print(table(rows[-1:]).splitlines()[-1] + f" ({time.perf_counter() - start:.0f} s)", flush=True)
    print(table(rows))
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
