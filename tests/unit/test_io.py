"""Artefact I/O: atomic writes leave nothing partial; tensors files are byte-identical."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from vocabtransfer import io
from vocabtransfer.errors import VocabTransferError


def test_failed_write_leaves_no_file_and_keeps_the_old_one(tmp_path):
    target = tmp_path / "out" / "table.json"
    io.write_json({"a": 1}, target)
    with pytest.raises(RuntimeError):
        with io.atomic_output(target) as tmp:
            tmp.write_text("partial")
            raise RuntimeError("killed")
    assert io.read_json(target) == {"a": 1}
    assert sorted(p.name for p in target.parent.iterdir()) == ["table.json"]


def test_directory_output_replaced_only_when_complete(tmp_path):
    target = tmp_path / "tok"
    with io.atomic_output(target, directory=True) as tmp:
        (tmp / "a.txt").write_text("1")
    with pytest.raises(ValueError):
        with io.atomic_output(target, directory=True) as tmp:
            (tmp / "b.txt").write_text("2")
            raise ValueError
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tok"]
    assert [p.name for p in target.iterdir()] == ["a.txt"]


@pytest.mark.slow  # several processes
def test_save_tensors_is_byte_identical_across_processes(tmp_path):
    # safetensors orders metadata keys by a per-process hash; io.save_tensors must not
    code = (
        "import sys, torch; from vocabtransfer import io; "
        "io.save_tensors({'b': torch.arange(6.).reshape(2, 3), 'a': torch.ones(2, dtype=torch.bool)}, sys.argv[1], "
        "metadata={'seed': 1, 'mode': 'x', 'dim': 3, 'lang': 'sw', 'method': 'm'})"
    )
    outs = []
    for i in range(3):
        path = tmp_path / f"t{i}.safetensors"
        subprocess.run([sys.executable, "-c", code, str(path)], check=True)
        outs.append(path.read_bytes())
    assert len(set(outs)) == 1
    assert io.tensor_metadata(tmp_path / "t0.safetensors") == {
        "seed": 1,
        "mode": "x",
        "dim": 3,
        "lang": "sw",
        "method": "m",
    }
    assert oct(os.stat(tmp_path / "t0.safetensors").st_mode & 0o777) != oct(0o600)


def test_corrupt_parquet_and_tensors_are_one_clear_error(tmp_path):
    bad = tmp_path / "x.parquet"
    bad.write_bytes(b"not parquet")
    with pytest.raises(VocabTransferError, match="x.parquet: not a readable Parquet file"):
        io.read_parquet(bad)
    bad = tmp_path / "x.safetensors"
    bad.write_bytes(b"\x00" * 10)
    with pytest.raises(VocabTransferError, match="x.safetensors: not a readable safetensors file"):
        io.load_tensors(bad)
    io.save_tensors({"a": torch.zeros(1)}, tmp_path / "ok.safetensors")
    with pytest.raises(VocabTransferError, match="missing tensor"):
        io.load_tensors(tmp_path / "ok.safetensors", keys=["embeddings"])
