"""What the plan can know about `tokenizer.from` and `tokenizer.donor_model` before any job, without loading a model.

`tokenizer.from` names a tokenizer the run can read: a local tokenizer.json (or a folder's) parses, a GGUF spelling is
one `source_model` takes (`pipeline.config.check_source_model`), a hub id is one, and while `HF_HUB_OFFLINE` is set a
hub tokenizer (or GGUF file) is in the cache. `tokenizer.donor_model` (`check_donor`) is a model spelling, with
`tokenizer.from` beside it, reachable offline, and where both tokenizer.json files can be read here (local folders or
files, a hub id's cached or packaged copy) of the same vocabulary (plan.donor_vocab; else stage donor checks it
first); init method omp_donor needs it (its catalog refusal). Else one line naming the key, the cause and the fix. A
module apart from `source_kind`, which the jobs import: a job's code closure need not hold the config checks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from vocabtransfer.errors import VocabTransferError, brief
from vocabtransfer.pipeline.config import HUB_ID, check_source_model
from vocabtransfer.plan.donor_vocab import vocabulary_refusal
from vocabtransfer.plan.source_kind import OFFLINE, PACKAGED_MODELS, hub_cache_dir, hub_cached


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


def check_donor(
    donor: str | None, tokenizer_from: str | None, source: str = "params.yaml", *, reach: bool = True
) -> None:
    """`tokenizer.donor_model` (None: no donor) against `tokenizer.from` (module doc)."""
    if donor is None:
        return
    key = "tokenizer.donor_model"
    where = f"{source}: {key}: {donor!r}"
    if tokenizer_from is None:
        raise VocabTransferError(
            f"{where}: a donor owns the target tokenizer, and tokenizer.from is not set (the target is trained, so no "
            "model owns it); set tokenizer.from to the donor's tokenizer (the donor's own spelling reads it), or unset "
            f"{key}"
        )
    check_source_model(donor, source, key=key)
    if reach and _offline() and not donor.startswith("package:") and not Path(os.path.expanduser(donor)).exists():
        if donor.startswith("hf://"):
            parts = donor[len("hf://") :].split("/")
            _check_cached("/".join(parts[:2]), "/".join(parts[2:]), where, key=key)
        elif not donor.lower().endswith(".gguf") and donor not in PACKAGED_MODELS:
            _check_cached(donor, "config.json", where, key=key)
    donor_json, target_json = _tokenizer_json(donor), _tokenizer_json(tokenizer_from)
    if donor_json is None or target_json is None:
        return  # a GGUF file's tokenizer, or a hub one not here: stage donor compares them first
    why = vocabulary_refusal(
        donor,
        tokenizer_from,
        _check_readable(donor_json, where, key).get_vocab(with_added_tokens=True),
        _check_readable(target_json, f"{source}: tokenizer.from: {tokenizer_from!r}").get_vocab(with_added_tokens=True),
    )
    if why:
        raise VocabTransferError(f"{source}: {why}")


def _tokenizer_json(value: str) -> Path | None:
    """The tokenizer.json a model or tokenizer spelling names, where it can be read without loading anything: a local
    file or folder's, a hub id's packaged or cached copy; None for a GGUF spelling or a hub id not cached."""
    if value.startswith(("hf://", "package:")) or value.lower().endswith(".gguf"):
        return None
    local = Path(os.path.expanduser(value))
    if local.exists():
        found = local if local.is_file() else local / "tokenizer.json"
        return found if found.is_file() else None
    if value in PACKAGED_MODELS:
        try:
            found = Path(PACKAGED_MODELS[value]()) / "tokenizer.json"
        except ImportError:
            return None
        return found if found.is_file() else None
    return hub_cached(value, "tokenizer.json")


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in OFFLINE


def _check_cached(
    repo: str, filename: str, where: str, also: str | None = None, key: str = "tokenizer.from"
) -> Path | None:
    """The cached `filename` (or `also`) of hub repository `repo`, or one line: offline and not in the cache."""
    for name in (filename, also):
        found = hub_cached(repo, name) if name else None
        if found is not None:
            return found
    raise VocabTransferError(
        f"{where}: not in the Hugging Face cache ({hub_cache_dir()}) and HF_HUB_OFFLINE is set, so it cannot be "
        f"downloaded; unset HF_HUB_OFFLINE to download it once, or point {key} at a local folder or file"
    )


def _check_readable(path: Path, where: str, key: str = "tokenizer.from") -> Any:
    """The tokenizers file `path` parsed (Rust: a 262k vocabulary in about a second), else one line."""
    from tokenizers import Tokenizer  # tokenizers: the plan reads a tokenizer here only, for tokenizer.from

    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:
        raise VocabTransferError(
            f"{where}: {path} cannot be read as a tokenizer ({brief(exc)}); point {key} at a tokenizer.json "
            "a fast tokenizer's save_pretrained wrote, or at its folder"
        ) from exc
