"""Stage `donor`: the embeddings of the donor model (`tokenizer.donor_model`), the model that owns the target tokenizer
(`tokenizer.from`), in which init method `omp_donor` codes the new tokens (init/methods/omp.py, tokensurgeon).

1. the donor's tokenizer, read as `tokenizer.from` reads a tokenizer (`model.tokenizer_from`: a hub id's tokenizer
   files alone, a model folder's, a GGUF file's metadata), against the tokenizer `tokenizer.from` names: another
   vocabulary is one line naming tokenizer.donor_model, the first difference and the fix (`plan.donor_vocab`; the
   plan refuses it before any job where both tokenizer.json files can be read there), before any weight is read;
2. the donor's weights, loaded as `source_model` would be (a hub id or a directory with its LM head,
   `modeling.load_source_model`; a GGUF file dequantised, `gguf.load`): its input embeddings and, where its LM head
   is not tied to them, its output embeddings, cut to the tokenizer's rows, float32;
3. results/source/donor/embeddings.safetensors: `input`, and `output` for an untied donor (a tied one has one space:
   both of an untied source's passes code in it), with the vocabulary's sha256 in its metadata, which the init job
   checks its target tokenizer against; and stats.json (where the donor came from, tied or not, rows, width, sha256
   of the tokenizer files read, seconds).

One job for every language: `tokenizer.from` is one tokenizer, so every language's target is the same vocabulary.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from vocabtransfer import io
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.model import gguf, modeling, tokenizer_from
from vocabtransfer.model.hub import resolve_model_path
from vocabtransfer.pipeline.stage_spec import Context
from vocabtransfer.plan.donor_vocab import vocabulary_refusal, vocabulary_sha256
from vocabtransfer.plan.params_root import Params

log = logging.getLogger(__name__)

KEY = "tokenizer.donor_model"


def checked_tokenizer(donor: str, target: str):
    """Step 1: (the donor's tokenizer, where it came from, where the target's came from), or the refusal line."""
    donor_tok, origin = tokenizer_from.load(donor, key=KEY)
    target_tok, target_origin = tokenizer_from.load(target)
    why = vocabulary_refusal(donor, target, donor_tok.get_vocab(), target_tok.get_vocab())
    if why:
        raise VocabTransferError(why)
    return donor_tok, origin, target_origin


def donor_matrices(donor: str, tokenizer) -> dict:
    """Step 2: {"input": (V, D), "output": (V, D) or None where tied} of the donor's weights."""
    spec = gguf.parse(donor, key=KEY)
    if spec is not None:
        path = gguf.resolve(spec)
        with gguf.one_parse():
            gguf.read_header(path)
            model, _ = gguf.load(path)
    else:
        try:
            model, _ = modeling.load_source_model(resolve_model_path(donor))
        except VocabTransferError as exc:
            raise VocabTransferError(f"{KEY}: {exc}") from exc
    try:
        return modeling.embedding_matrices(model, tokenizer)
    except VocabTransferError as exc:
        raise VocabTransferError(f"{KEY}: {donor!r}: {exc}") from exc


def run(ctx: Context[Params]) -> None:
    start = time.perf_counter()
    opts = ctx.params.tokenizer
    donor, target = opts.donor_model, opts.from_
    if donor is None or target is None:  # refused before any job (plan.tokenizer_checks.check_donor)
        raise VocabTransferError(f"{KEY}: stage donor needs tokenizer.donor_model and tokenizer.from; set both")
    tokenizer, origin, target_origin = checked_tokenizer(donor, target)
    matrices = donor_matrices(donor, tokenizer)
    tensors = {which: m for which, m in matrices.items() if m is not None}
    vocab_sha256 = vocabulary_sha256(tokenizer.get_vocab())
    io.save_tensors(tensors, ctx.output["embeddings"], metadata={"donor_model": donor, "vocab_sha256": vocab_sha256})
    stats = {
        "donor_model": donor,
        "from": origin,
        "target_from": target_origin,
        "tied": matrices["output"] is None,
        "rows": int(matrices["input"].shape[0]),
        "dim": int(matrices["input"].shape[1]),
        "tensors": sorted(tensors),
        "vocab_sha256": vocab_sha256,
        "seconds": round(time.perf_counter() - start, 3),
        "versions": io.versions(),
    }
    io.write_json(stats, ctx.output["stats"])
    log.info(
        "donor %s: %d x %d %s embeddings (%s) in %.1f s: %s",
        donor,
        stats["rows"],
        stats["dim"],
        "tied" if stats["tied"] else "untied input and output",
        origin["route"],
        stats["seconds"],
        Path(ctx.output["embeddings"]),
    )
