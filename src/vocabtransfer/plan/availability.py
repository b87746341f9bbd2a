"""Which jobs each language has, decided from params, init's method registry and the files present
before any job runs: the init methods a language can run (the `condition` in each method's catalog entry),
the initialisations and continued-pretraining runs params ask for, and which initialisation a run starts
from (a method registered `deterministic=True` has one, pseed 1). It asks the registry, so it sits in init/.

A language with only a corpus still gets every stage that needs nothing more; what it lacks is
skipped with a one-line reason (`skip_lines`), never discovered by a failing job at the end.
The stage declarations (vocabtransfer.plan.stages) ask this module per job:

* `Stage.why_skipped(params, wildcards)` (its `skip_reason`): None when the job runs, else why it is skipped
  (e.g. `init` with `wechsel` for a language without a bilingual dictionary);
* `Stage.left_out(params, wildcards)` (its `partial`): parts a job leaves out, with the reason
  (e.g. `init_eval` without retrieval when there are no XNLI files).

The local data files a job reads (`Stage.data`: Snakemake inputs, dvc.yaml deps) that params name are resolved
here (`corpus_file`, `xnli_files`) and by vocabtransfer.pipeline.paths (`data_path`, `local_source_model`).
"""

from __future__ import annotations

import logging
from pathlib import Path

from vocabtransfer.pipeline import names
from vocabtransfer.pipeline import paths
from vocabtransfer.plan.methods import info
from vocabtransfer.plan.params_root import Params

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- availability


def seeded(method: str) -> bool:
    """Whether a method's initialisation depends on the seed (it has random rows): not for a method
    registered `deterministic=True`, whose every row is a copy or a mean (nor for its variants)."""
    return not info(method).deterministic


def init_pseed(method: str, pseed: int | str) -> int:
    """The pretraining seed whose initialisation a run with `pseed` starts from."""
    return int(pseed) if seeded(method) else 1


def method_reason(params: Params, lang: str, method: str) -> str | None:
    """Why `method` (or its base) cannot run for `lang`: the `condition` declared in its catalog entry
    (e.g. wechsel without a dictionary); None when it can."""
    condition = info(method).condition
    return condition(params, lang) if condition else None


def method_refusal(params: Params, lang: str) -> str | None:
    """What params name for an `init.methods` entry and `lang` that is not there (e.g. a WECHSEL dictionary path
    with a typo), as one line with the key, the file and the fix; None when nothing named is missing. The rule:
    every skip of something the user asked for by name is a refusal, so a method of init.methods is never skipped
    for a file params name; it is skipped only for what they do not name (no dictionary entry for the language)."""
    for base in dict.fromkeys(names.split_method(m)[0] for m in params.init.methods):
        refusal = info(base).refusal
        why = refusal(params, lang) if refusal else None
        if why:
            return why
    return None


def methods(params: Params, lang: str) -> list[str]:
    """The `init.methods` that `lang` has data for, in params order."""
    return [m for m in params.init.methods if method_reason(params, lang, m) is None]


def needed_by(params: Params, base: str, lang: str | None = None) -> str | None:
    """Why no init job (of `lang`, or of any language) runs method `base`: a job that only feeds
    that method is skipped for the same reason. None when one runs."""
    if not any(names.split_method(m)[0] == base for m in params.init.methods):
        return f"init.methods has no {base}"
    if lang is not None:
        why = method_reason(params, lang, base)
        return f"init {base} does not run: {why}" if why else None
    if not any(base in {names.split_method(m)[0] for m in methods(params, code)} for code in params.languages):
        return f"no language can run init {base}"
    return None


def network_seeds(params: Params) -> list[int]:
    """The network seeds stage hypernet trains: one per initialisation of init method hypernet (its pseeds: each
    pretraining seed of a pretrained hypernet, so the runs' spread holds the network's seed variance), at least 1."""
    seeds = {s for m, s in init_runs(params) if names.split_method(m)[0] == "hypernet"}
    return sorted(seeds) or [1]


def retrieval_reason(params: Params, lang: str) -> str | None:
    """Why `init_eval` measures no parallel-sentence retrieval for `lang` (None when it does)."""
    if params.init_eval.retrieval_sentences == 0:
        return "init_eval.retrieval_sentences is 0"
    for path in xnli_files(params, lang):
        if not path.is_file():
            return f"no XNLI file: {path} not found (init_eval.xnli)"
    return None


def corpus_file(params: Params, lang: str) -> Path | None:
    """The local file of `corpus.sources.<lang>` (None for a URL or a hub dataset)."""
    source = params.corpus.sources.get(lang) or {}
    return paths.data_path(source["path"]) if source.get("path") else None


def xnli_files(params: Params, lang: str) -> list[Path]:
    """The source-language and the target-language XNLI files of `init_eval.xnli`."""
    opts = params.init_eval
    return [paths.data_path(opts.xnli.format(lang=code)) for code in (opts.source_lang, lang)]


# --------------------------------------------------------------------------- the pretraining runs


def pretrain_seeds(params: Params) -> list[int]:
    """1..pretrain.seeds."""
    return list(range(1, params.pretrain.seeds + 1))


def pretrain_pairs(params: Params, lang: str | None = None) -> list[tuple[str, str]]:
    """The (method, objective) pairs params ask for (`pretrain.pairs`, or else `pretrain.methods` ×
    `pretrain.objectives`); with `lang`, those whose init method can run for that language (wechsel
    without a dictionary cannot)."""
    section = params.pretrain
    pairs = [(m, o) for m in section.methods for o in section.objectives]
    if section.pairs is not None:
        chosen = {tuple(p.rsplit("-", 1)) for p in section.pairs}
        pairs = [p for p in pairs if p in chosen]
    return [(m, o) for m, o in pairs if lang is None or method_reason(params, lang, m) is None]


def pretrain_runs(params: Params, lang: str | None = None) -> list[tuple[str, str, int]]:
    """Every (method, objective, pretraining seed) continued-pretraining run params ask for."""
    return [(m, o, s) for m, o in pretrain_pairs(params, lang) for s in pretrain_seeds(params)]


def init_runs(params: Params) -> list[tuple[str, int]]:
    """Every (method, pretraining seed) initialisation: pseed 1 for each init method, and the other
    pretraining seeds for the pretrained methods whose rows depend on the seed."""
    pretrained = set(params.pretrain.methods)
    return [
        (m, s) for m in params.init.methods for s in (pretrain_seeds(params) if m in pretrained and seeded(m) else [1])
    ]
