"""Source models: load them, read and swap their embedding matrices, save them. Loading tokenizers and
resolving a hub id or a path to a local directory is `vocabtransfer.model.hub`; the language-model batches
are `vocabtransfer.model.lmdata`, their loss `vocabtransfer.model.lm_loss`.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_MASKED_LM_MAPPING_NAMES

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.model.hub import load_tokenizer, resolve_model_path
from vocabtransfer.model.lmdata import Kind
from vocabtransfer.io import atomic_output

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------
# Models: load with an LM head, read and swap the embedding matrices, save.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadingInfo:
    """What `from_pretrained` reported: weights the checkpoint lacked (initialised randomly) or had in excess."""

    missing_keys: tuple[str, ...]
    unexpected_keys: tuple[str, ...]

    @property
    def head_missing(self) -> bool:
        """True when the LM head was not in the checkpoint (e.g. a sentence-transformers BertModel)."""
        return bool(self.missing_keys)


def _directory(path: str | os.PathLike) -> Path:
    p = Path(path)
    return p if p.is_dir() else resolve_model_path(str(path))


def detect_kind(config) -> Kind:
    """`causal` for decoders (is_decoder, *ForCausalLM / *LMHeadModel), `masked` for encoders.

    Decided from `config.is_decoder`, then `config.architectures`, then whether transformers has a
    masked-LM class for the model type (bert, roberta, xlm-roberta …) or only a causal one (gpt2, llama …).
    """
    if getattr(config, "is_decoder", False):
        return "causal"
    archs = list(getattr(config, "architectures", None) or [])
    if any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs):
        return "causal"
    if any(a.endswith("ForMaskedLM") for a in archs):
        return "masked"
    if config.model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        return "masked"
    if config.model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return "causal"
    raise VocabTransferError(
        f"model type {config.model_type!r} (architectures {archs}): transformers has neither a masked-LM nor a "
        "causal-LM class for it; use an encoder (BERT/RoBERTa-style) or decoder (GPT-2/Llama-style) model"
    )


def load_source_model(
    path: str | os.PathLike,
    kind: Literal["auto", "masked", "causal"] = "auto",
    *,
    dtype=None,
    output_loading_info: bool = False,
):
    """Load a model *with its LM head*: AutoModelForMaskedLM or AutoModelForCausalLM (`kind`).

    Returns `(model, kind)`, or `(model, kind, LoadingInfo)` with `output_loading_info=True`.
    A checkpoint without its LM head (sentence-transformers/all-MiniLM-L6-v2 is a bare BertModel)
    loads with the head initialised randomly: `LoadingInfo.missing_keys` lists it
    (`cls.predictions.*`) and a warning says so. A checkpoint that lacks weights of the model body,
    or has weights of the wrong shape, is an error. The model is returned in eval mode.
    """
    directory = _directory(path)
    try:
        config = AutoConfig.from_pretrained(str(directory))
    except Exception as exc:
        raise VocabTransferError(
            f"{directory}: cannot read the model config ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0][:200]}); is this a Hugging Face model directory?"
        ) from exc
    if kind == "auto":
        kind = detect_kind(config)
    elif kind not in ("masked", "causal"):
        raise VocabTransferError(f"load_source_model: kind {kind!r} is not one of auto, masked, causal")
    auto = AutoModelForMaskedLM if kind == "masked" else AutoModelForCausalLM
    kwargs = {"dtype": dtype} if dtype is not None else {}
    try:
        model, info = auto.from_pretrained(
            str(directory), output_loading_info=True, ignore_mismatched_sizes=True, **kwargs
        )
    except Exception as exc:
        raise VocabTransferError(
            f"{directory}: cannot load it as a {kind} LM with {auto.__name__} "
            f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]})"
        ) from exc
    missing = tuple(sorted(info.get("missing_keys") or ()))
    prefix = f"{model.base_model_prefix}."
    body = [k for k in missing if k.startswith(prefix)]
    if body:
        raise VocabTransferError(
            f"{directory}: the checkpoint lacks {len(body)} weight(s) of the model body "
            f"(e.g. {body[0]}); it is incomplete or not a {config.model_type} checkpoint, re-download it"
        )
    mismatched = sorted(info.get("mismatched_keys") or ())
    check_lm_head(model, kind, directory, missing, mismatched)
    if mismatched:
        raise VocabTransferError(
            f"{directory}: {len(mismatched)} weight(s) have the wrong shape (e.g. {mismatched[0]}); "
            "config.json does not match model weights, re-download the model"
        )
    loading = LoadingInfo(missing_keys=missing, unexpected_keys=tuple(sorted(info.get("unexpected_keys") or ())))
    if loading.head_missing:
        log.warning(
            "%s: the checkpoint has no LM head (%s); it was initialised randomly, train it with the "
            "source_head stage before using the model",
            directory,
            ", ".join(missing),
        )
    model.eval()
    return (model, kind, loading) if output_loading_info else (model, kind)


def weights_file(directory: Path) -> Path:
    """The file a model directory keeps its weights in (the index of a sharded checkpoint), for messages."""
    for name in (
        "model.safetensors",
        "model.safetensors.index.json",
        "pytorch_model.bin",
        "pytorch_model.bin.index.json",
    ):
        if (directory / name).is_file():
            return directory / name
    return next(iter(sorted(directory.glob("*.safetensors"))), directory)


def check_lm_head(model, kind: Kind, directory: Path, missing: tuple[str, ...], mismatched: list) -> None:
    """The LM head's output embeddings must have the shape config.json gives the input embeddings
    (vocab_size x hidden_size): every init method fills both with rows of one width. A checkpoint that
    config.json declares a causal LM (`…ForCausalLM`, `…LMHeadModel`) must hold its untied head: without
    it the checkpoint is incomplete. (A bare body, e.g. `LlamaModel`, has no head to lose: source_head
    trains one, as for MiniLM.)"""
    out = model.get_output_embeddings()
    if out is None:
        return
    key = next((n for n, p in model.named_parameters(remove_duplicate=False) if p is out.weight), "lm_head.weight")
    weights = weights_file(directory)
    wrong = next((m for m in mismatched if m[0] == key), None)
    if wrong is not None:
        _, got, want = wrong
        raise VocabTransferError(
            f"{weights}: the LM head {key} is {tuple(got)} but config.json makes the embeddings "
            f"{tuple(want)} (vocab_size x hidden_size); use a checkpoint whose LM head matches its "
            "embeddings (or fix config.json)"
        )
    declared = [
        a for a in (getattr(model.config, "architectures", None) or []) if a.endswith(("ForCausalLM", "LMHeadModel"))
    ]
    if kind == "causal" and key in missing and declared:
        raise VocabTransferError(
            f"{weights}: no LM head ({key}), though config.json declares {declared[0]} with "
            "tie_word_embeddings false; the checkpoint is incomplete: re-download it, or set "
            "tie_word_embeddings: true if the input embeddings are the head"
        )
    width, hidden = out.weight.shape[-1], model.get_input_embeddings().weight.shape[-1]
    if width != hidden:
        raise VocabTransferError(
            f"{weights}: the LM head {key} is {width} wide but the input embeddings are {hidden}; "
            "vocabtransfer initialises both with rows of one width, use a model whose LM head "
            "reads hidden states as wide as its embeddings"
        )


def is_tied(model) -> bool:
    """Whether the output embeddings are the input embeddings (same storage)."""
    out = model.get_output_embeddings()
    if out is None:
        return True
    return out.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()


def output_bias(model):
    """The LM head's per-token output bias (BERT: `cls.predictions.bias`), or None if it has none."""
    out = model.get_output_embeddings()
    return getattr(out, "bias", None) if out is not None else None


def _model_name(model) -> str:
    return str(getattr(model, "name_or_path", "") or getattr(model.config, "_name_or_path", "") or type(model).__name__)


def _checked_rows(matrix, n_tokens: int | None, what: str, name: str):
    rows = matrix.shape[0]
    if n_tokens is not None:
        if rows < n_tokens:
            raise VocabTransferError(
                f"{name}: {what} embeddings have {rows} rows but the tokenizer has {n_tokens} "
                "tokens; the tokenizer does not belong to this model, use the model's own tokenizer"
            )
        matrix = matrix[:n_tokens]
    bad = (~torch.isfinite(matrix)).any(dim=-1).nonzero().flatten()
    if len(bad):
        raise VocabTransferError(
            f"{name}: {what} embeddings contain NaN/Inf in {len(bad)} row(s) "
            f"(first: token id {int(bad[0])}); the checkpoint is corrupt, re-download or retrain it"
        )
    return matrix.detach().float().cpu().clone()


def embedding_matrices(model, tokenizer=None) -> dict:
    """`{"input": (V, D), "output": (V, D) or None}` as float32 CPU copies.

    `output` is None when the output embeddings are tied to the input ones. With a tokenizer, the
    matrices are cut to `len(tokenizer)` rows (models may pad their vocabulary beyond the tokenizer),
    and fewer rows than tokens is an error. NaN/Inf is an error naming the model.
    """
    name = _model_name(model)
    n = len(tokenizer) if tokenizer is not None else None
    result = {"input": _checked_rows(model.get_input_embeddings().weight, n, "input", name), "output": None}
    if not is_tied(model):
        result["output"] = _checked_rows(model.get_output_embeddings().weight, n, "output", name)
    return result


def _check_new_matrix(matrix, shape: tuple[int, int], what: str, target: Path):
    if not isinstance(matrix, torch.Tensor) or tuple(matrix.shape) != shape:
        got = tuple(matrix.shape) if hasattr(matrix, "shape") else type(matrix).__name__
        raise VocabTransferError(
            f"{target}: {what} must have shape {shape} (target vocabulary x hidden size), got {got}; "
            "the embeddings were built for another tokenizer or model"
        )
    if not torch.isfinite(matrix).all():
        raise VocabTransferError(f"{target}: {what} contain NaN/Inf; the initialisation method produced invalid rows")


def _set_token_ids(model, tokenizer) -> None:
    """Point the config's (and generation config's) special-token ids at the target tokenizer."""
    configs = [model.config]
    text = model.config.get_text_config()
    if text is not model.config:
        configs.append(text)
    gen = getattr(model, "generation_config", None)
    for name in ("pad", "bos", "eos", "cls", "sep"):
        key = f"{name}_token_id"
        value = getattr(tokenizer, key, None)
        if name in ("cls", "sep") and value is None and not hasattr(model.config, key):
            continue
        for cfg in configs:
            setattr(cfg, key, value)
        if gen is not None and name in ("pad", "bos", "eos"):
            setattr(gen, key, value)


def build_target_model(
    source_model_dir: str | os.PathLike,
    target_tokenizer_dir: str | os.PathLike,
    input_embeddings,
    output_embeddings=None,
    *,
    bias=None,
    kind: Literal["auto", "masked", "causal"] = "auto",
):
    """The source model with the target vocabulary: new embedding matrices, everything else unchanged.

    1. load the source model with its LM head and the target tokenizer;
    2. resize to `len(target_tokenizer)` rows and copy `input_embeddings` in; for untied models copy
       `output_embeddings` into the LM head (required then; an error for tied models, whose output
       embeddings are the input ones and stay tied);
    3. the LM head's output bias (BERT `cls.predictions.bias`, tied to the decoder bias) is set to
       `bias` when given (init builds it: the source bias copied for overlapping ids and the mean
       source bias elsewhere), else to zeros: the source bias is indexed by source ids and means
       nothing for target ids;
    4. `config.vocab_size` and the pad/bos/eos/cls/sep ids follow the target tokenizer.
    """
    model, kind = load_source_model(source_model_dir, kind)
    tokenizer = load_tokenizer(target_tokenizer_dir)
    target = Path(target_tokenizer_dir)
    n, dim = len(tokenizer), model.get_input_embeddings().weight.shape[1]
    tied = is_tied(model)
    _check_new_matrix(input_embeddings, (n, dim), "input_embeddings", target)
    if tied and output_embeddings is not None:
        raise VocabTransferError(
            f"{source_model_dir}: the model ties its output embeddings to its input embeddings; "
            "pass output_embeddings=None"
        )
    if not tied:
        if output_embeddings is None:
            raise VocabTransferError(
                f"{source_model_dir}: the model has untied output embeddings; "
                "pass output_embeddings for the target vocabulary too"
            )
        _check_new_matrix(
            output_embeddings, (n, model.get_output_embeddings().weight.shape[1]), "output_embeddings", target
        )
    model.resize_token_embeddings(n, mean_resizing=False)  # every row is overwritten below
    with torch.no_grad():
        weight = model.get_input_embeddings().weight
        weight.copy_(input_embeddings.to(weight.dtype))
        if not tied:
            out = model.get_output_embeddings().weight
            out.copy_(output_embeddings.to(out.dtype))
        b = output_bias(model)
        if b is not None:
            if bias is not None:
                _check_new_matrix(bias.reshape(-1, 1), (n, 1), "output bias", target)
                b.copy_(bias.to(b.dtype))
            else:
                b.zero_()
    if tied:
        model.tie_weights()
        if not is_tied(model):
            raise VocabTransferError(f"{source_model_dir}: tying the resized output embeddings failed")
    model.config.vocab_size = n
    model.config.get_text_config().vocab_size = n
    _set_token_ids(model, tokenizer)
    model.eval()
    return model


def save_model_dir(model, tokenizer, out_dir: str | os.PathLike) -> Path:
    """`save_pretrained` the model and its tokenizer into `out_dir`, atomically.

    The directory loads with `AutoModelForMaskedLM`/`AutoModelForCausalLM` and `AutoTokenizer` alone.
    """
    out_dir = Path(out_dir)
    with atomic_output(out_dir, directory=True) as tmp:
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
    return out_dir
