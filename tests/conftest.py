"""Shared fixtures: offline environment, the shared data directory, params builders."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("VOCABTRANSFER_SHARED_DATA", REPO.parent / "shared" / "data"))

# no test may reach the network
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data beside the checkout (real, openly licensed data; see its MANIFEST.md)."""
    if not (SHARED_DATA / "MANIFEST.md").is_file():
        raise RuntimeError(f"{SHARED_DATA}: the shared data directory is missing; tests need ../shared/data")
    return SHARED_DATA


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
