"""Seeded samples of a corpus's lines (data/corpus_lines.py): `tokenizer.sample_bytes` and
`fasttext.sample_bytes` on real text."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers import text_lines
from vocabtransfer.data.corpus_lines import CorpusBatches, SampledCorpus, sampled_text


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    lines = text_lines("sw", 6000)
    path = tmp_path_factory.mktemp("corpus") / "train.parquet"
    pq.write_table(pa.table({"text": lines}), path)
    return path, lines


def _lines(batches):
    return [t for batch in batches for t in batch]


def test_sample_is_seeded_near_its_budget_and_grows_with_it(corpus):
    path, lines = corpus
    total = sum(len(t.encode("utf-8")) for t in lines)
    small = SampledCorpus(path, total // 10, seed=3, batch_size=500)
    kept = _lines(small)
    assert kept == _lines(SampledCorpus(path, total // 10, seed=3)) != _lines(SampledCorpus(path, total // 10, seed=4))
    assert small.rows == len(kept) and small.bytes == sum(len(t.encode("utf-8")) for t in kept)
    assert 0.85 * total / 10 < small.bytes < 1.15 * total / 10
    assert set(kept) <= set(_lines(SampledCorpus(path, total // 4, seed=3)))  # a larger budget keeps these lines
    lines_in_order = [t for t in lines if t in set(kept)]
    assert kept == lines_in_order  # in corpus order
    for budget in (0, total, 10 * total):  # 0, or a budget the split does not exceed: every line
        assert _lines(SampledCorpus(path, budget, seed=3)) == _lines(CorpusBatches(path)) == lines


def test_sampled_text_file(tmp_path):
    text = tmp_path / "train.tokens.txt"
    text.write_text("".join(f"▁tok en {i} ▁line\n" for i in range(4000)), encoding="utf-8")
    with sampled_text(text, 0, 5, tmp_path / "ft") as (path, counts):
        assert path == text and counts["lines_kept"] is None
    budget = text.stat().st_size // 5
    with sampled_text(text, budget, 5, tmp_path / "ft") as (path, counts):
        sample = path.read_text(encoding="utf-8").splitlines()
        assert path.parent == tmp_path / "ft" and counts["lines_kept"] == len(sample)
        assert 0.85 * budget < counts["bytes_kept"] < 1.15 * budget
        assert set(sample) < set(text.read_text(encoding="utf-8").splitlines())
    with sampled_text(text, budget, 5, tmp_path / "ft") as (again, _):
        assert again.read_text(encoding="utf-8").splitlines() == sample
    assert list((tmp_path / "ft").iterdir()) == []  # the sample file is gone


def test_tokenizer_stage_trains_on_the_sample(tmp_path, monkeypatch, corpus):
    import json
    import os

    from vocabtransfer.pipeline import paths
    from vocabtransfer.app.params import validate_params
    from vocabtransfer.app.runner import run_stage

    path, lines = corpus
    monkeypatch.chdir(tmp_path)
    for var in ("RAYON_NUM_THREADS", "TOKENIZERS_PARALLELISM"):  # the stage sets them from --threads
        monkeypatch.setenv(var, os.environ.get(var, ""))
    target = tmp_path / paths.fill(paths.CORPUS_TRAIN, lang="sw")
    target.parent.mkdir(parents=True)
    target.write_bytes(path.read_bytes())
    budget = sum(len(t.encode("utf-8")) for t in lines) // 3
    params = validate_params(
        {
            "languages": ["sw"],
            "source_model": "sentence-transformers/all-MiniLM-L6-v2",
            "corpus": {"sources": {"sw": {"path": "sw.txt"}}},
            "tokenizer": {"vocab_size": 300, "sample_bytes": budget},
        }
    )
    run_stage("source_model", params, {}, threads=1)
    run_stage("tokenizer", params, {"lang": "sw"}, threads=1)
    stats = json.loads((tmp_path / paths.fill(paths.TOKENIZER_STATS, lang="sw")).read_text())
    assert stats["sample_bytes"] == budget
    assert stats["train_lines"] == SampledCorpus(path, budget, seed=params["seed"]).rows < len(lines)
