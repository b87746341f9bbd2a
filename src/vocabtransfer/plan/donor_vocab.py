"""What makes a donor model's vocabulary the target tokenizer's (`tokenizer.donor_model` against `tokenizer.from`):
the same tokens at the same ids. `vocabulary_refusal` gives the one line that refuses another vocabulary, the same
before any job (plan.tokenizer_checks, where both tokenizer.json files can be read cheaply) and in stage donor's
first step (init.donor); `vocabulary_sha256` is the fingerprint stage donor records beside the donor's embeddings and
the init job checks its target tokenizer against. Plain Python: the jobs import it without the planning's checks."""

from __future__ import annotations

import hashlib
import json
from typing import Mapping

FIX = (
    "point tokenizer.donor_model at the model that owns tokenizer.from's tokenizer, or unset it (and drop omp_donor "
    "from init.methods)"
)


def vocabulary_sha256(vocab: Mapping[str, int]) -> str:
    """sha256 of a vocabulary's (token, id) pairs in id order (`get_vocab()`, added tokens included)."""
    pairs = sorted(vocab.items(), key=lambda item: (item[1], item[0]))
    return hashlib.sha256(json.dumps(pairs, ensure_ascii=False).encode("utf-8")).hexdigest()


def vocabulary_refusal(
    donor: str, target: str, donor_vocab: Mapping[str, int], target_vocab: Mapping[str, int]
) -> str | None:
    """None when the donor's vocabulary (token -> id) is the target's, else one line naming tokenizer.donor_model,
    the first difference in target id order (or a token the donor has beyond the target's) and the fix."""
    if dict(donor_vocab) == dict(target_vocab):
        return None
    detail = None
    for token, i in sorted(target_vocab.items(), key=lambda item: item[1]):
        there = donor_vocab.get(token)
        if there != i:
            where = "absent from the donor" if there is None else f"id {there} in the donor"
            detail = f"target token {token!r} (id {i}) is {where}"
            break
    if detail is None:  # every target token at its id: the donor has more
        token, i = min(((t, j) for t, j in donor_vocab.items() if t not in target_vocab), key=lambda item: item[1])
        detail = f"donor token {token!r} (id {i}) is not in the target"
    return (
        f"tokenizer.donor_model: {donor!r}: its vocabulary is not the target tokenizer's (tokenizer.from: {target!r}): "
        f"{len(donor_vocab)} tokens against {len(target_vocab)}, {detail}; {FIX}"
    )
