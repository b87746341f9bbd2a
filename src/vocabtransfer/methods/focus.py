"""`focus`: FOCUS (Dobler & de Melo, 2023) from the pipeline's overlap and fastText artefacts.

1. Overlapping tokens copy their source row. Special tokens are part of the overlap when the
   target tokenizer uses the source's special-token strings (the tokenizer stage keeps them);
   any that are not are listed in the stats and initialised like other new tokens, as in deepfocus.
2. New tokens without a fastText vector: N(source mean, source std), seeded, in target-id order.
3. Other new tokens: sparsemax over cosine similarities to the overlapping tokens in fastText
   space, times those tokens' source rows (`vocabtransfer.focus.focus_embeddings`, in blocks).

Options (params `init.focus`): `block_size` (new tokens per similarity block, default 2048) and
`topk` (sparsemax candidates per row, default 64; a speed knob, the result does not depend on it).
"""

from __future__ import annotations

import logging

import numpy as np

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.focus import DEFAULT_BLOCK_SIZE, DEFAULT_TOPK, focus_embeddings
from vocabtransfer.methods import TransferProblem, TransferResult, register

log = logging.getLogger(__name__)

DEFAULTS = {"block_size": DEFAULT_BLOCK_SIZE, "topk": DEFAULT_TOPK}


def _options(problem: TransferProblem) -> dict:
    given = dict(problem.options or {})
    unknown = sorted(set(given) - set(DEFAULTS))
    if unknown:
        log.warning("init.focus: ignoring unknown option(s) %s; focus reads %s", ", ".join(unknown), ", ".join(DEFAULTS))
    opts = {**DEFAULTS, **{k: v for k, v in given.items() if k in DEFAULTS}}
    for key, value in opts.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise VocabTransferError(f"init.focus.{key}: {value!r} is not a positive integer; "
                                     f"use e.g. {DEFAULTS[key]}")
    return opts


@register("focus")
def focus(problem: TransferProblem) -> TransferResult:
    opts = _options(problem)
    if problem.auxiliary is None or problem.auxiliary_mask is None:
        raise VocabTransferError(f"init focus ({problem.lang or 'target'}): no auxiliary fastText embeddings were "
                                 "given; run the fasttext stage and pass its embeddings.safetensors to FOCUS")
    n_source = problem.source_embeddings.shape[0]
    if n_source < len(problem.source_tokenizer):
        raise VocabTransferError(f"source embeddings: {n_source} rows but the source tokenizer has "
                                 f"{len(problem.source_tokenizer)} tokens; the tokenizer and the model come from "
                                 "different checkpoints")
    embeddings, stats = focus_embeddings(
        problem.source_embeddings, problem.overlap_target_ids, problem.overlap_source_ids,
        problem.auxiliary, problem.auxiliary_mask, problem.target_size, seed=problem.seed,
        device=problem.device, block_size=opts["block_size"], topk=opts["topk"],
    )
    special = problem.special_target_ids()
    copied = np.isin(special, np.asarray(problem.overlap_target_ids, dtype=np.int64))
    stats["special_copied"] = int(copied.sum())
    if (~copied).any():
        missing = problem.target_tokenizer.convert_ids_to_tokens(special[~copied].tolist())
        stats["special_not_in_overlap"] = missing
        log.warning("focus: special token(s) %s do not overlap the source vocabulary; they are initialised "
                    "like other new tokens (FOCUS combination or random row)", ", ".join(missing))
    stats.update(method="focus", options=opts)
    log.info("focus: %d copied, %d FOCUS combinations of %d anchors, %d random (no fastText vector) in %.1f s",
             stats["copied"], stats["focus_combined"], stats["anchors"], stats["random"], stats["seconds"])
    return TransferResult(embeddings=embeddings.cpu(), stats=stats)
