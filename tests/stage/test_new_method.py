"""Adding an init method is its module plus its section in params.yaml (a built-in's metadata is its entry in
plan/method_catalog.py, a plugin's is given at its `@register`): a throwaway module, written and imported here,
registers `scaled_mean` with its options class, and `vocabtransfer init` runs it on tiny data from a params file
that names it. Nothing else is edited: not the schema, not the options module, not the typed params root."""

from __future__ import annotations

import importlib
import json
import sys

import pytest
import torch
import yaml
from safetensors.torch import load_file

from vocabtransfer import io
from vocabtransfer.app.cli import main
from vocabtransfer.init.methods import available
from vocabtransfer.plan.methods import INFO, METHODS
from vocabtransfer.app.params import load_params
from vocabtransfer.plan.stages import STAGES
from vocabtransfer.plan.params_root import Params

from helpers import tiny_bert, wordpiece_tokenizer, write_inputs

MODULE = '''
"""scaled_mean: overlapping rows copied, every other row the mean source row times `scale`."""

from dataclasses import dataclass

import torch

from vocabtransfer.init.methods.registry import TransferProblem, TransferResult, register
from vocabtransfer.pipeline.typed import option


@dataclass(frozen=True)
class ScaledMeanOptions:
    """a throwaway method of the tests: the mean source row, scaled"""

    scale: float = option(1.0, "factor on the mean source row", exclusiveMinimum=0)


@register("scaled_mean", options=ScaledMeanOptions, deterministic=True)
def scaled_mean(problem: TransferProblem, options: ScaledMeanOptions) -> TransferResult:
    src = problem.source_embeddings
    emb = (src.mean(0) * options.scale).repeat(problem.target_size, 1)
    t, s = torch.from_numpy(problem.overlap_target_ids), torch.from_numpy(problem.overlap_source_ids)
    emb[t] = src[s]
    return TransferResult(emb, {"copied": len(t), "scale": options.scale})
'''


@pytest.fixture
def throwaway_module(tmp_path, monkeypatch):
    """The module `throwaway_init`, imported from a directory of the test: its @register runs; afterwards
    the registry and the schema are as they were."""
    available()  # the real methods register first
    (tmp_path / "modules").mkdir()
    (tmp_path / "modules" / "throwaway_init.py").write_text(MODULE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path / "modules"))
    importlib.import_module("throwaway_init")
    yield
    METHODS.pop("scaled_mean", None)
    INFO.pop("scaled_mean", None)
    sys.modules.pop("throwaway_init", None)


def _project(tmp_path, monkeypatch, scale) -> list[str]:
    """Inputs of the init stage where the pipeline writes them, and params.yaml naming the method; the
    arguments of `vocabtransfer init` for it."""
    monkeypatch.chdir(tmp_path)
    source_tok = wordpiece_tokenizer("en")
    write_inputs(tmp_path / "results", tiny_bert(len(source_tok)), source_tok, wordpiece_tokenizer("sw", 250))
    params = {
        "languages": ["sw"],
        "source_model": "results/source/model",
        "corpus": {"sources": {"sw": {"path": "pretrain_text/sw.txt"}}},
        "init": {"methods": ["scaled_mean"], "scaled_mean": {"scale": scale}},
    }
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    return [
        "init",
        "--params",
        "params.yaml",
        "--lang",
        "sw",
        "--method",
        "scaled_mean",
        "--pseed",
        "1",
        "--threads",
        "1",
        "--device",
        "cpu",
    ]


def test_a_new_method_is_its_module_and_its_params(throwaway_module, tmp_path, monkeypatch):
    args = _project(tmp_path, monkeypatch, 2.0)
    params = load_params("params.yaml")
    assert params["init"]["scaled_mean"] == {"scale": 2.0}
    assert Params(params).init.scaled_mean.scale == 2.0  # its typed section, by attribute as a built-in's
    assert STAGES["init"].leaves(Params(params), {"lang": "sw", "method": "scaled_mean", "pseed": "1"}) == [
        "seed",
        "init.scaled_mean.scale",
    ]  # its option reruns its jobs
    assert main(args) == 0
    out = tmp_path / "results" / "sw" / "init" / "scaled_mean" / "pseed1"
    stats = json.loads((out / "stats.json").read_text(encoding="utf-8"))
    assert stats["options"] == {"scale": 2.0} and stats["method_stats"]["scale"] == 2.0
    emb = load_file(str(out / "embeddings.safetensors"))["input_embeddings"]
    source = load_file(str(tmp_path / "results" / "source" / "model" / "model.safetensors"))
    mean = next(v for k, v in source.items() if k.endswith("word_embeddings.weight")).mean(0)
    overlap = set(
        io.read_parquet(tmp_path / "results" / "sw" / "overlap" / "overlap.parquet")
        .to_pandas()
        .dropna(subset=["source_id"])["target_id"]
    )
    new = [i for i in range(emb.shape[0]) if i not in overlap]
    assert new and torch.allclose(emb[new], (2.0 * mean).expand(len(new), -1), atol=1e-6)
    assert (out / "model" / "config.json").is_file()


def test_a_new_methods_params_are_validated_with_the_key_path(throwaway_module, tmp_path, monkeypatch, capsys):
    args = _project(tmp_path, monkeypatch, 0)
    capsys.readouterr()
    assert main(args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1 and "params.yaml: init.scaled_mean.scale: 0 is less than or equal to the minimum of 0" in err[0]
    )
    assert not (tmp_path / "results" / "sw" / "init").exists()
