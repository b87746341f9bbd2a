"""The init phase's planning: params `source_head` (SourceHeadParams), the `init.snmf` keys that determine the shared
factorisation (FACTOR_KEYS), whether some method codes in the donor's space (`donor_space`: stage donor runs), and
one init job's inputs (`init_inputs`: the core ones, the method's own, the shared semi-NMF, the train split where
drawn rows are calibrated, the donor's embeddings)."""

from __future__ import annotations


from vocabtransfer.pipeline import names, paths
from vocabtransfer.plan.params_root import Params
from vocabtransfer.plan.method_options import RandomRowsOptions
from vocabtransfer.plan.methods import info


# the init.snmf keys that determine the factorisation (neighbors / temperature do not)
FACTOR_KEYS = ("rank", "max_iter", "tol", "init", "clusters")


def uses_snmf(method: str) -> bool:
    """Every `<base>+snmf` and a method registered with `factors=("snmf",)` (snmf) read the shared
    semi-NMF of stage source_snmf."""
    return names.split_method(method)[1] == "snmf" or "snmf" in info(method).factors


def calibrates(params: Params, method: str) -> bool:
    """Whether the init job of `method` scales its drawn rows by a measured factor (`init.<method>.scale:
    calibrated`, random and overlap: `RandomRowsOptions`); it then reads the train split."""
    base, fact = names.split_method(method)
    cls = info(base).options
    if fact or not (isinstance(cls, type) and issubclass(cls, RandomRowsOptions)):
        return False
    return params.init.options(base).scale == "calibrated"


def in_donor_space(method: str) -> bool:
    """Whether `method` (omp_donor, omp_donor+fact, or any method whose catalog entry reads stage donor's embeddings,
    `inputs={"donor": ...}`) codes in the donor's space."""
    return "donor" in info(names.split_method(method)[0]).inputs


def donor_space(params: Params) -> bool:
    """Whether stage donor runs: some init method codes in the donor's space."""
    return any(in_donor_space(method) for method in params.init.methods)


def init_inputs(params: Params, wildcards: dict) -> dict[str, str]:
    """The stage's input templates for these wildcards: the core inputs plus the method's own
    (`inputs=` in its catalog entry), the train split where the drawn rows are calibrated, and the donor's
    embeddings for omp_donor (its catalog entry's input, as the factorised variants have their base's)."""
    method = wildcards["method"]
    factors = {"snmf_factors": paths.SOURCE_SNMF} if uses_snmf(method) else {}
    calibration = {"calibration_text": paths.CORPUS_TRAIN} if calibrates(params, method) else {}
    return {
        "source_model": paths.SOURCE_MODEL,
        "tokenizer": paths.TOKENIZER,
        "overlap": paths.OVERLAP,
        "fasttext": paths.FASTTEXT_EMB,
        **factors,
        **calibration,
        **info(method).inputs,
    }
