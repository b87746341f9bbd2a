"""The options of an initialisation method: params `init.<name>` over the schema's defaults.

The defaults live in one place, workflow/schemas/params.schema.yaml (`vocabtransfer.pipeline.config.schema`),
so a method called from Python with `options={}` behaves as a pipeline run with default params.
`merged` fills them in (logging keys the method does not read); `integer` and `number` check one
value with one-line errors, for callers that bypass the schema's validation.
"""

from __future__ import annotations

import copy
import logging
import math
from functools import lru_cache

import numpy as np

from vocabtransfer.errors import VocabTransferError

log = logging.getLogger(__name__)


@lru_cache(maxsize=None)
def _schema_defaults(name: str) -> dict:
    from vocabtransfer.pipeline.config import section_defaults

    return section_defaults("init", name)


def defaults(name: str) -> dict:
    """The schema's defaults of params `init.<name>` (a copy; {} for a section the schema lacks)."""
    return copy.deepcopy(_schema_defaults(name))


def merged(options: dict | None, name: str) -> dict:
    """`options` over the defaults of `init.<name>`; keys the section does not have are logged and dropped."""
    known = defaults(name)
    given = dict(options or {})
    unknown = sorted(set(given) - set(known))
    if unknown:
        log.warning("init.%s: ignoring unknown option(s) %s; it reads %s", name, ", ".join(unknown),
                    ", ".join(known) or "no options")
    return {**known, **{k: v for k, v in given.items() if k in known}}


def integer(options: dict, key: str, section: str, *, minimum: int = 1) -> int:
    """`options[key]` checked to be an integer ≥ minimum."""
    value = options[key]
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise VocabTransferError(f"{section}.{key}={value!r}: must be an integer ≥ {minimum}; fix params.yaml")
    return int(value)


def number(options: dict, key: str, section: str, *, minimum: float = 0.0, strict: bool = True) -> float:
    """`options[key]` checked to be a finite number > minimum (≥ with strict=False)."""
    value = options[key]
    ok = isinstance(value, (int, float, np.floating)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or (value <= minimum if strict else value < minimum):
        bound = f"> {minimum}" if strict else f"≥ {minimum}"
        raise VocabTransferError(f"{section}.{key}={value!r}: must be a finite number {bound}; fix params.yaml")
    return float(value)
