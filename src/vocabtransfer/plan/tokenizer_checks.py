"""What the plan can know about `tokenizer.from` before any job, without loading a model: it names a tokenizer
the run can read. A local tokenizer.json (or a folder's) parses, a GGUF spelling is one `source_model` takes
(`pipeline.config.check_source_model`), a hub id is one, and while `HF_HUB_OFFLINE` is set a hub tokenizer (or GGUF
file) is in the cache; else one line naming the key, the cause and the fix. A module apart from `source_kind`, which
the jobs import: a job's code closure need not hold the config checks."""

from __future__ import annotations

import os
from pathlib import Path

from vocabtransfer.errors import VocabTransferError, brief
from vocabtransfer.pipeline.config import HUB_ID, check_source_model
from vocabtransfer.plan.source_kind import OFFLINE, PACKAGED_MODELS


def check_tokenizer_from(value: str | None, source: str = "params.yaml", *, reach: bool = True) -> None:
    """`tokenizer.from` (None: the tokenizer is trained) names a tokenizer this run can read (module doc); `reach`:
    whether a hub tokenizer must be in the cache while HF_HUB_OFFLINE is set."""
    if value is None:
        return
    where = f"{source}: tokenizer.from: {value!r}"
    local = Path(os.path.expanduser(value))
    gguf = value.startswith(("hf://", "package:")) or value.lower().endswith(".gguf")
    if local.exists() and not gguf:
        files = [local] if local.is_file() else [local / "tokenizer.json"]
        if local.is_dir() and not files[0].is_file():
            if (local / "tokenizer_config.json").is_file():
                return  # a slow tokenizer's folder: transformers converts it when the job loads it
            raise VocabTransferError(
                f"{where}: the folder holds no tokenizer.json or tokenizer_config.json, so no tokenizer; point it at "
                "a folder a tokenizer's save_pretrained wrote, or at a tokenizer.json"
            )
        _check_readable(files[0], where)
        return
    if gguf:
        check_source_model(value, source, key="tokenizer.from")
        if reach and value.startswith("hf://") and _offline():
            parts = value[len("hf://") :].split("/")
            _check_cached("/".join(parts[:2]), "/".join(parts[2:]), where)
        return
    if local.is_absolute() or value.startswith((".", "~")) or value.count("/") > 1 or not HUB_ID.match(value):
        raise VocabTransferError(
            f"{where}: no such file or folder ({Path.cwd()}), and no hub id; point it at a tokenizer folder or "
            "tokenizer.json, a .gguf file, hf://owner/name/file.gguf, package:<module> or a hub id `owner/name`"
        )
    if reach and _offline() and value not in PACKAGED_MODELS:
        found = _check_cached(value, "tokenizer.json", where, also="tokenizer_config.json")
        if found is not None and found.name == "tokenizer.json":
            _check_readable(found, where)


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in OFFLINE


def _check_cached(repo: str, filename: str, where: str, also: str | None = None) -> Path | None:
    """The cached `filename` (or `also`) of hub repository `repo`, or one line: offline and not in the cache."""
    from huggingface_hub import try_to_load_from_cache  # a dependency of transformers; planning only needs it here
    from huggingface_hub.constants import HF_HUB_CACHE

    for name in (filename, also):
        found = try_to_load_from_cache(repo, name) if name else None
        if isinstance(found, str):
            return Path(found)
    raise VocabTransferError(
        f"{where}: not in the Hugging Face cache ({HF_HUB_CACHE}) and HF_HUB_OFFLINE is set, so it cannot be "
        "downloaded; unset HF_HUB_OFFLINE to download it once, or point tokenizer.from at a tokenizer folder or file"
    )


def _check_readable(path: Path, where: str) -> None:
    """One line unless `path` parses as a tokenizers file (Rust: a 262k vocabulary in about a second)."""
    from tokenizers import Tokenizer  # tokenizers: the plan reads a tokenizer here only, for tokenizer.from

    try:
        Tokenizer.from_file(str(path))
    except Exception as exc:
        raise VocabTransferError(
            f"{where}: {path} cannot be read as a tokenizer ({brief(exc)}); point tokenizer.from at a tokenizer.json "
            "a fast tokenizer's save_pretrained wrote, or at its folder"
        ) from exc
