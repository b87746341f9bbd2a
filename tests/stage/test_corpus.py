"""The corpus stage: sources, cleaning, the byte cap, the seeded split and the stage end to end."""

from __future__ import annotations

import gzip
import hashlib
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from vocabtransfer.data import corpus
from vocabtransfer.app.cli import main
from vocabtransfer.app.params import validate_params
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.app.runner import run_stage
from vocabtransfer.plan import data_params


@pytest.fixture(autouse=True)
def hf_cache(tmp_path, monkeypatch):
    """Keep any datasets cache (non-streaming loads) inside the test's directory."""
    import datasets.config

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_datasets")


def params_for(source: dict, **corpus_params) -> dict:
    return validate_params(
        {"languages": ["sw"], "source_model": "x/y", "corpus": {"sources": {"sw": source}, **corpus_params}}
    )


def run_corpus(tmp_path, monkeypatch, source: dict, **corpus_params):
    """Run the stage in tmp_path; return (train lines, valid lines, stats)."""
    monkeypatch.chdir(tmp_path)
    run_stage("corpus", params_for(source, **corpus_params), {"lang": "sw"})
    out = tmp_path / "results" / "sw" / "corpus"
    train, valid = (pq.read_table(out / f"{s}.parquet").column("text").to_pylist() for s in ("train", "valid"))
    return train, valid, json.loads((out / "stats.json").read_text())


def build(tmp_path, source, seed=42, **corpus_params):
    stats = corpus.build_corpus(
        source,
        tmp_path / "train.parquet",
        tmp_path / "valid.parquet",
        seed=seed,
        params=data_params.CorpusParams(**corpus_params),
    )
    train, valid = (pq.read_table(tmp_path / f"{s}.parquet").column("text").to_pylist() for s in ("train", "valid"))
    return train, valid, stats


def is_subsequence(part, whole):
    it = iter(whole)
    return all(x in it for x in part)


NFD_CAFE, NFC_CAFE = "cafe\u0301 ya moto", "caf\u00e9 ya moto"
RAW_LINES = ["  Habari ya asubuhi  ", "", "Habari ya asubuhi", NFD_CAFE, NFC_CAFE, "   ", "ok", "Mwisho wa habari"]


def test_text_file_is_normalised_stripped_and_deduplicated(tmp_path, data_root, monkeypatch):
    (data_root / "sw.txt").write_text("\r\n".join(RAW_LINES) + "\n", encoding="utf-8")
    train, valid, stats = run_corpus(tmp_path, monkeypatch, {"path": "sw.txt"}, min_chars=3)
    kept = ["Habari ya asubuhi", NFC_CAFE, "Mwisho wa habari"]
    assert sorted(train + valid) == sorted(kept)
    assert is_subsequence(train, kept) and is_subsequence(valid, kept)
    assert {
        k: stats[k]
        for k in ("lines_read", "empty_dropped", "duplicates_dropped", "short_dropped", "lines_kept", "capped")
    } == {
        "lines_read": 8,
        "empty_dropped": 2,
        "duplicates_dropped": 2,
        "short_dropped": 1,
        "lines_kept": 3,
        "capped": False,
    }
    assert stats["bytes_kept"] == sum(len(s.encode()) for s in kept) == stats["train_bytes"] + stats["valid_bytes"]
    assert stats["source"] == {"kind": "path", "path": str(data_root / "sw.txt"), "files": 1, "formats": ["text"]}
    assert "pyarrow" in stats["versions"] and stats["seconds"] >= 0

    # without normalisation the NFD and NFC spellings are different lines
    train, valid, stats = run_corpus(tmp_path, monkeypatch, {"path": "sw.txt"}, min_chars=3, normalization="none")
    assert sorted(train + valid) == sorted(kept + [NFD_CAFE])


def test_valid_split_is_never_empty_with_two_or_more_lines(tmp_path, data_root):
    lines = ["Habari ya asubuhi", "caf\u00e9 ya moto", "Mwisho wa habari"]
    values = {line: corpus.split_value(line, 42) for line in lines}
    assert min(values.values()) >= 0.05  # the hash alone puts every line in train ...
    (data_root / "sw.txt").write_text("\n".join(lines), encoding="utf-8")
    train, valid, stats = build(tmp_path, {"path": "sw.txt"}, valid_fraction=0.05)
    smallest = min(lines, key=values.get)  # ... so the smallest hash value moves to valid
    assert valid == [smallest]
    assert train == [line for line in lines if line != smallest]
    assert stats["moved_line"] == "train->valid"

    (data_root / "one.txt").write_text("peke yake\n", encoding="utf-8")
    train, valid, stats = build(tmp_path, {"path": "one.txt"})
    assert (train, valid) == (["peke yake"], [])


def test_byte_cap_counts_utf8_bytes_and_stops_in_order(tmp_path, data_root):
    (data_root / "sw.txt").write_text("ñañaña\nbbbb\ncc\nddddd\n", encoding="utf-8")  # 9, 4, 2, 5 bytes
    train, valid, stats = build(tmp_path, {"path": "sw.txt"}, max_bytes=13)
    assert sorted(train + valid) == sorted(["ñañaña", "bbbb"])  # "cc" would make 15 > 13: stop there
    assert (stats["bytes_kept"], stats["capped"], stats["lines_read"]) == (13, True, 3)
    train, valid, stats = build(tmp_path, {"path": "sw.txt"}, max_bytes=20)
    assert (stats["lines_kept"], stats["bytes_kept"], stats["capped"]) == (4, 20, False)
    with pytest.raises(VocabTransferError, match=r"sw.txt: no line fits in corpus.max_bytes = 5"):
        build(tmp_path, {"path": "sw.txt"}, max_bytes=5)


def test_split_is_seeded_and_per_line(tmp_path, data_root):
    lines = [f"sentensi namba {i}" for i in range(400)]
    (data_root / "all.txt").write_text("\n".join(lines), encoding="utf-8")
    (data_root / "half.txt").write_text("\n".join(lines[::2]), encoding="utf-8")
    _, valid1, _ = build(tmp_path, {"path": "all.txt"}, seed=1, valid_fraction=0.2)
    _, valid1b, _ = build(tmp_path, {"path": "all.txt"}, seed=1, valid_fraction=0.2)
    _, valid2, _ = build(tmp_path, {"path": "all.txt"}, seed=2, valid_fraction=0.2)
    assert valid1 == valid1b
    assert valid1 != valid2
    assert valid1 == [line for line in lines if corpus.split_value(line, 1) < 0.2]
    assert 50 <= len(valid1) <= 110  # 80 expected
    _, valid_half, _ = build(tmp_path, {"path": "half.txt"}, seed=1, valid_fraction=0.2)
    assert valid_half == [line for line in valid1 if line in set(lines[::2])]  # other lines do not matter


def test_jsonl_csv_parquet_and_directory_sources(tmp_path, data_root):
    rows = [
        {"id": 1, "body": "Habari ya kwanza"},
        {"id": 2, "body": "  "},
        {"id": 3, "body": "Habari ya pili"},
        {"id": 4, "body": None},
    ]
    (data_root / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    train, valid, stats = build(tmp_path, {"path": "rows.jsonl", "text_column": "body"})
    assert sorted(train + valid) == ["Habari ya kwanza", "Habari ya pili"]
    assert (stats["lines_read"], stats["empty_dropped"]) == (4, 2)
    with pytest.raises(
        VocabTransferError,
        match=r"rows.jsonl: no column 'text' \(columns: id, body\); set "
        r"corpus source.text_column",
    ):
        build(tmp_path, {"path": "rows.jsonl"})

    (data_root / "rows.csv").write_text(
        'id,text\n1,"Jambo, rafiki"\n2,Asante sana\n3,"Jambo, rafiki"\n', encoding="utf-8"
    )
    train, valid, stats = build(tmp_path, {"path": "rows.csv"})
    assert sorted(train + valid) == ["Asante sana", "Jambo, rafiki"]
    assert stats["duplicates_dropped"] == 1

    pq.write_table(pa.table({"text": ["moja", "mbili", "tatu"]}), data_root / "rows.parquet")
    train, valid, _ = build(tmp_path, {"path": "rows.parquet"})
    assert sorted(train + valid) == ["mbili", "moja", "tatu"]

    folder = data_root / "folder"
    folder.mkdir()
    (folder / "a.txt").write_text("kwanza\npili\n", encoding="utf-8")
    with gzip.open(folder / "b.txt.gz", "wt", encoding="utf-8") as f:
        f.write("tatu\nnne\n")
    (folder / "notes.md").write_text("not corpus text\n", encoding="utf-8")
    train, valid, stats = build(tmp_path, {"path": "folder"}, valid_fraction=0.3)
    assert sorted(train + valid) == ["kwanza", "nne", "pili", "tatu"]
    assert is_subsequence(train, ["kwanza", "pili", "tatu", "nne"])
    assert stats["source"]["files"] == 2


def test_datasets_builder_spec_streaming_and_not(tmp_path, data_root):
    rows = [{"text": f"mstari wa {i}"} for i in range(50)]
    (data_root / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    spec = {"dataset": {"path": "json", "data_files": "rows.jsonl"}}  # relative to the data root
    train, valid, stats = build(tmp_path, spec)
    assert sorted(train + valid) == sorted(r["text"] for r in rows)
    assert stats["source"]["kind"] == "dataset"
    assert stats["source"]["data_files"] == str(data_root / "rows.jsonl")

    streamed = {"dataset": {"path": "json", "data_files": "rows.jsonl", "streaming": True}}
    train, valid, stats = build(tmp_path, streamed, max_bytes=60)  # each line is 11-12 bytes
    assert sorted(train + valid) == [f"mstari wa {i}" for i in range(5)]
    assert stats["lines_read"] == 6 and stats["capped"]

    with pytest.raises(VocabTransferError, match=r"corpus source.dataset: load_dataset\('json'.*failed"):
        build(tmp_path, {"dataset": {"path": "json", "data_files": "absent.jsonl"}})


def test_url_source_served_from_the_offline_mirror(tmp_path, monkeypatch, shared_data):
    text = "\n".join((shared_data / "pretrain_text" / "sw.txt").read_text(encoding="utf-8").splitlines()[:300])
    url = "https://example.org/corpora/sw.txt"
    mirror = tmp_path / "mirror"
    (mirror / "example.org" / "corpora").mkdir(parents=True)
    (mirror / "example.org" / "corpora" / "sw.txt").write_text(text, encoding="utf-8")
    monkeypatch.setenv("VOCABTRANSFER_MIRROR", str(mirror))
    monkeypatch.setenv("VOCABTRANSFER_CACHE", str(tmp_path / "cache"))
    sha = hashlib.sha256(text.encode()).hexdigest()
    train, valid, stats = build(tmp_path, {"url": url, "sha256": sha})
    assert stats["lines_kept"] == 300 and len(train) + len(valid) == 300
    assert stats["source"]["origin"] == "mirror" and stats["source"]["url"] == url


def test_stage_end_to_end_on_swahili_slice(tmp_path, data_root, monkeypatch, shared_data):
    lines = (shared_data / "pretrain_text" / "sw.txt").read_text(encoding="utf-8").splitlines()[:2000]
    (data_root / "pretrain_text").mkdir()
    (data_root / "pretrain_text" / "sw.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    train, valid, stats = run_corpus(tmp_path, monkeypatch, {"path": "pretrain_text/sw.txt"})
    out = tmp_path / "results" / "sw" / "corpus"
    for split in ("train", "valid"):
        assert pq.read_schema(out / f"{split}.parquet").names == ["text"]
        assert pq.read_schema(out / f"{split}.parquet").field("text").type == pa.string()
    # the file is NFC, stripped and deduplicated already (MANIFEST.md): every line survives, in order
    assert (stats["lines_read"], stats["lines_kept"], stats["duplicates_dropped"]) == (2000, 2000, 0)
    assert is_subsequence(train, lines) and is_subsequence(valid, lines)
    assert sorted(train + valid) == sorted(lines)
    assert valid == [line for line in lines if corpus.split_value(line, 42) < 0.05]
    assert 60 <= len(valid) <= 140  # 100 expected
    assert stats["train_lines"] == len(train) and stats["valid_lines"] == len(valid)
    assert not list(out.glob(".*"))  # no temporary files left
    first = {p.name: p.read_bytes() for p in out.glob("*.parquet")}
    run_corpus(tmp_path, monkeypatch, {"path": "pretrain_text/sw.txt"})
    assert {p.name: p.read_bytes() for p in out.glob("*.parquet")} == first  # byte-identical rerun


def test_empty_corpus_and_bad_encoding_are_one_line_errors(tmp_path, data_root):
    (data_root / "blank.txt").write_text("\n  \n\t\n", encoding="utf-8")
    with pytest.raises(VocabTransferError) as err:
        build(tmp_path, {"path": "blank.txt"})
    assert str(err.value).startswith(f"{data_root / 'blank.txt'}: no text left after cleaning (3 lines read: 3 empty")
    (data_root / "latin1.txt").write_bytes("jambo\nmaña\n".encode("latin-1"))
    with pytest.raises(VocabTransferError, match=r"latin1.txt: not UTF-8 text at line 2"):
        build(tmp_path, {"path": "latin1.txt"})
    assert not (tmp_path / "train.parquet").exists() and not list(tmp_path.glob(".*.tmp-*"))


def test_cli_missing_file_is_one_error_line(tmp_path, data_root, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(
        "languages: [sw]\nsource_model: x/y\ncorpus:\n  sources:\n    sw: {path: pretrain_text/absent.txt}\n"
    )
    assert main(["corpus", "--lang", "sw", "--params", "params.yaml", "--device", "cpu"]) == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1
    assert f"{data_root / 'pretrain_text' / 'absent.txt'}: corpus file not found" in errors[0]
    assert "corpus.sources.sw.path" in errors[0]
    assert not (tmp_path / "results").exists()


def test_dev_split_is_a_band_of_what_was_train_and_leaves_valid_alone(tmp_path, data_root):
    """corpus.dev_fraction: lines whose hash value lies in [valid_fraction, valid_fraction + dev_fraction) go
    to dev.parquet; valid is unchanged, train loses exactly those lines, and with 0 train and valid are the
    files of a run without a dev split."""
    lines = [f"sentensi namba {i}" for i in range(400)]
    (data_root / "all.txt").write_text("\n".join(lines), encoding="utf-8")
    (tmp_path / "plain").mkdir()
    train0, valid0, _ = build(tmp_path / "plain", {"path": "all.txt"}, valid_fraction=0.1)
    out = tmp_path / "dev"
    out.mkdir()
    stats = corpus.build_corpus(
        {"path": "all.txt"},
        out / "train.parquet",
        out / "valid.parquet",
        seed=42,
        params=data_params.CorpusParams(valid_fraction=0.1, dev_fraction=0.15),
        dev_path=out / "dev.parquet",
    )
    train, valid, dev = (
        pq.read_table(out / f"{s}.parquet").column("text").to_pylist() for s in ("train", "valid", "dev")
    )
    assert valid == valid0
    assert dev == [s for s in lines if 0.1 <= corpus.split_value(s, 42) < 0.25]
    assert train == [s for s in train0 if s not in set(dev)] and 40 <= len(dev) <= 80  # 60 expected
    assert (stats["dev_lines"], stats["dev_fraction"]) == (len(dev), 0.15)
    same = tmp_path / "zero"
    same.mkdir()
    stats = corpus.build_corpus(
        {"path": "all.txt"},
        same / "train.parquet",
        same / "valid.parquet",
        seed=42,
        params=data_params.CorpusParams(valid_fraction=0.1, dev_fraction=0.0),
        dev_path=same / "dev.parquet",
    )
    for split in ("train", "valid"):
        assert (same / f"{split}.parquet").read_bytes() == (tmp_path / "plain" / f"{split}.parquet").read_bytes()
    assert pq.read_table(same / "dev.parquet").num_rows == 0 and stats["dev_lines"] == 0
    with pytest.raises(VocabTransferError, match="corpus.dev_fraction=0.1: the dev split needs a dev path"):
        corpus.build_corpus(
            {"path": "all.txt"},
            same / "t.parquet",
            same / "v.parquet",
            seed=42,
            params=data_params.CorpusParams(dev_fraction=0.1),
        )
