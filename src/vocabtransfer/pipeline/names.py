"""Names in the study: init methods, pretraining seeds and the models that evaluation sees.

* A method name is `base` or `base+factorisation` (`focus`, `focus+svd`, `overlap+snmf`);
  `split_method` is the one place that splits it.
* Pretraining seeds are 1..`pretrain.seeds`. Seed k changes the order of the training blocks and
  the random rows of the initialisation (the seed the init method draws with is
  `seed + 1000 * (k - 1)`, so seed 1 is the params `seed` itself). A method whose rows never
  depend on the seed (`deterministic=True` in plan/method_catalog.py, e.g. `mean`) has one initialisation,
  pseed 1, shared by all its runs (`init_pseed` in vocabtransfer.plan.availability, which asks
  the registry).
* A model name is `source`, `<method>-init-pseed<k>` (initialised only) or
  `<method>-<objective>-pseed<k>` (continued pretraining with pretraining seed k).
* A seeded hash of a string (`seeded_unit`) decides every split and subsample: blake2b of `"{seed}:{text}"`,
  its first 8 bytes read as a number in [0, 1).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.pipeline.typed import ParamsTree

SEED_STRIDE = 1000
SOURCE = "source"
INIT = "init"  # the objective-like label of an initialised-only model
_MODEL = re.compile(r"(?P<method>.+)-(?P<objective>[a-z]+)-pseed(?P<pseed>[1-9][0-9]*)")


def split_method(method: str) -> tuple[str, str]:
    """(base, factorisation) of a method name; the factorisation is '' for a plain method."""
    base, _, fact = method.partition("+")
    return base, fact


def seed_value(params: ParamsTree, pseed: int | str) -> int:
    """The random seed of pretraining seed `pseed`: params `seed` for pseed 1."""
    pseed = int(pseed)
    if pseed < 1:
        raise VocabTransferError(f"pretraining seed {pseed}: must be 1 or more (1..pretrain.seeds)")
    return params.seed + SEED_STRIDE * (pseed - 1)


@dataclass(frozen=True)
class Model:
    """A model evaluation sees: `source`, or a method with an objective (`init` for initialised only)
    and a pretraining seed."""

    method: str
    objective: str | None = None
    pseed: int | None = None

    @property
    def name(self) -> str:
        return SOURCE if self.method == SOURCE else f"{self.method}-{self.objective}-pseed{self.pseed}"

    @property
    def group(self) -> str:
        """The name without the pretraining seed (`focus-standard`): what the report compares."""
        return SOURCE if self.method == SOURCE else f"{self.method}-{self.objective}"


def model_name(method: str, objective: str, pseed: int | str) -> str:
    return Model(method, objective, int(pseed)).name


def parse_model_name(name: str) -> Model:
    """The parts of a model name; a malformed one is one error that shows the grammar."""
    if name == SOURCE:
        return Model(SOURCE)
    m = _MODEL.fullmatch(name)
    if not m:
        raise VocabTransferError(
            f"model {name!r}: expected `source`, `<method>-init-pseed<k>` or "
            "`<method>-<objective>-pseed<k>` (e.g. focus-standard-pseed1)"
        )
    return Model(m["method"], m["objective"], int(m["pseed"]))


def seeded_digest(text: str, seed: int, size: int) -> bytes:
    """blake2b of `"{seed}:{text}"` with a digest of `size` bytes. The size is part of blake2b's hash, so each
    user keeps its own: the corpus 16 (a line's identity for duplicates, and its split), the eval tasks 8 (their
    splits and subsamples); changing either would move every committed split."""
    return hashlib.blake2b(f"{seed}:{text}".encode("utf-8"), digest_size=size).digest()


def unit_value(digest: bytes) -> float:
    """A digest's first 8 bytes as a number in [0, 1)."""
    return int.from_bytes(digest[:8], "big") / 2**64
