"""An existing tokenizer, named as `source_model` names a model (`tokenizer.from`; the tokenizer stage copies it).

Spellings and where the tokenizer comes from (`route`):

    path/to/model.gguf, hf://owner/name/file.gguf, package:<module>
                          `gguf`: the tokenizer in a GGUF file's metadata (vocabtransfer.model.gguf finds the file),
                          converted by transformers (`from_pretrained(…, gguf_file=…)`; its metadata parsed once)
    path/to/folder        `directory`: a tokenizer folder (`save_pretrained`'s, or a model directory), AutoTokenizer
    path/to/tokenizer.json
                          `file`: one tokenizers file; the folder's tokenizer_config.json where one lies beside a file
                          named tokenizer.json, else the special-token roles read from its special tokens' names
    owner/name            `hub`: the tokenizer files of a hub repository (no weights), from the Hugging Face cache
                          when there, else the copy an installed package ships (`source_kind.PACKAGED_MODELS`:
                          sentence-transformers/all-MiniLM-L6-v2), logged as a warning

`load(value)` returns the fast tokenizer and where it came from: the spelling, the route, the resolved path and
the sha256 of the file it was read from (the GGUF file, or the tokenizer.json), so that a study says which
tokenizer it used and another stage (a donor model of the same tokenizer) can check it is the same one.
"""

from __future__ import annotations

import logging
from pathlib import Path

from tokenizers import Tokenizer
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from vocabtransfer.errors import VocabTransferError, brief
from vocabtransfer.model import gguf
from vocabtransfer.model.hub import _hub_advice
from vocabtransfer.plan.source_kind import PACKAGED_MODELS

log = logging.getLogger(__name__)

KEY = "tokenizer.from"
# what a tokenizer needs of a hub repository (no weights)
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "*.model",
    "*.tiktoken",
    "config.json",
)
# a lone tokenizer.json's special tokens by name -> the roles transformers gives them
ROLES = {
    "pad_token": ("[PAD]", "<pad>", "<|pad|>", "<|finetune_right_pad_id|>"),
    "unk_token": ("[UNK]", "<unk>", "<|unk|>"),
    "bos_token": ("<s>", "<bos>", "<|begin_of_text|>", "<|startoftext|>"),
    "eos_token": ("</s>", "<eos>", "<|end_of_text|>", "<|endoftext|>", "<|im_end|>"),
    "cls_token": ("[CLS]", "<cls>"),
    "sep_token": ("[SEP]", "<sep>"),
    "mask_token": ("[MASK]", "<mask>"),
}


def load(value: str, key: str = KEY) -> tuple[PreTrainedTokenizerFast, dict]:
    """The fast tokenizer `value` names and where it came from: {"from", "route", "resolved", "sha256"}; `key`: the
    params key that names it, for error lines (`tokenizer.donor_model` names a model whose tokenizer is read so)."""
    spec = gguf.parse(value, key=key)
    if spec is not None:
        path = gguf.resolve(spec)
        origin = {"from": value, "route": "gguf", "gguf_kind": spec.kind, "resolved": str(path)}
        tokenizer = _from_gguf(path, key)
        origin["sha256"] = gguf.sha256(path)
    else:
        local = Path(value).expanduser()
        if local.is_file():
            tokenizer = _from_file(local, key)
            origin = {"from": value, "route": "file", "resolved": str(local.resolve()), "sha256": gguf.sha256(local)}
        else:
            folder = local if local.is_dir() else _hub_folder(value, key)
            route = "directory" if local.is_dir() else "hub"
            tokenizer, origin = _from_folder(folder, key), {"from": value, "route": route, "resolved": str(folder)}
            if (folder / "tokenizer.json").is_file():
                origin["sha256"] = gguf.sha256(folder / "tokenizer.json")
    if not getattr(tokenizer, "is_fast", False):
        raise VocabTransferError(
            f"{key}: {value!r} loads as a slow {type(tokenizer).__name__}; vocabtransfer needs a fast tokenizer "
            f"(a tokenizer.json): save the tokenizer with a fast tokenizer's save_pretrained and point {key} "
            "at that folder"
        )
    return tokenizer, origin


def _from_gguf(path: Path, key: str):
    with gguf.one_parse():  # the header check and transformers read the file's metadata once
        gguf.read_header(path)
        try:
            return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        except Exception as exc:
            raise VocabTransferError(
                f"{key}: {path}: transformers reads no tokenizer from this GGUF file ({brief(exc)}); point "
                f"{key} at a file whose metadata holds one (tokenizer.ggml.*), or at a tokenizer folder"
            ) from exc


def _from_folder(folder: Path, key: str):
    try:
        return AutoTokenizer.from_pretrained(str(folder))
    except Exception as exc:
        raise VocabTransferError(
            f"{key}: {folder}: cannot load a tokenizer from this folder ({brief(exc)}); point {key} at a "
            "folder a tokenizer's save_pretrained wrote (tokenizer.json), or at a tokenizer.json"
        ) from exc


def _from_file(path: Path, key: str):
    if path.name == "tokenizer.json" and (path.parent / "tokenizer_config.json").is_file():
        return _from_folder(path.parent, key)
    try:
        backend = Tokenizer.from_file(str(path))
    except Exception as exc:
        raise VocabTransferError(
            f"{key}: {path}: not a readable tokenizers file ({brief(exc)}); point {key} at a tokenizer.json "
            "(a fast tokenizer's save_pretrained writes one) or at its folder"
        ) from exc
    specials = {t.content for t in backend.get_added_tokens_decoder().values() if t.special}
    roles = {role: next((n for n in names if n in specials), None) for role, names in ROLES.items()}
    found = {role: name for role, name in roles.items() if name is not None}
    log.info("%s: %s alone; special-token roles read from their names: %s", key, path, found or "none")
    return PreTrainedTokenizerFast(tokenizer_object=backend, **found)


def _hub_folder(value: str, key: str) -> Path:
    """The tokenizer files of hub repository `value` (no weights), or the copy an installed package ships."""
    from huggingface_hub import snapshot_download  # huggingface_hub: a hub id's tokenizer only

    try:
        return Path(snapshot_download(value, allow_patterns=list(TOKENIZER_FILES)))
    except Exception as exc:  # offline, unknown id, gated repo, ...
        packaged = PACKAGED_MODELS.get(value)
        if packaged is None:
            raise VocabTransferError(
                f"{key}: {value!r}: not a local folder or file, and {_hub_advice(value, exc)} ({brief(exc)})"
            ) from exc
        path = Path(packaged())
        log.warning("%s: %s: hub unreachable (%s); using the copy installed at %s", key, value, brief(exc), path)
        return path
