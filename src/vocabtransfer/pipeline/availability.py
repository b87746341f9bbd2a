"""Which jobs each language has, and which data files each job reads, decided from params and
the files present before any job runs.

A language with only a corpus still gets every stage that needs nothing more; what it lacks is
skipped with a one-line reason (`skip_lines`), never discovered by a failing job at the end.
The stage declarations (`STAGE = Stage(...)` in each stage module) ask this module three things per job:

* `Stage.skip_reason(params, wildcards)`: None when the job runs, else why it is skipped
  (e.g. `init` with `wechsel` for a language without a bilingual dictionary);
* `Stage.partial(params, wildcards)`: parts a job leaves out, with the reason
  (e.g. `init_eval` without retrieval when there are no XNLI files);
* `Stage.data(params, wildcards)`: the local data files the job reads, resolved through
  $VOCABTRANSFER_DATA (`paths.data_path`); Snakemake takes them as inputs and dvc.yaml as deps,
  so editing one reruns exactly the jobs that read it. URL sources are pinned by their sha256
  and hub datasets by `revision`, both params leaves.
"""

from __future__ import annotations

import logging
from pathlib import Path

from vocabtransfer.pipeline import models
from vocabtransfer.pipeline import paths

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- the data files


def corpus_file(params: dict, lang: str) -> Path | None:
    """The local file of `corpus.sources.<lang>` (None for a URL or a hub dataset)."""
    source = params["corpus"]["sources"].get(lang) or {}
    return paths.data_path(source["path"]) if source.get("path") else None


def xnli_files(params: dict, lang: str) -> list[Path]:
    """The source-language and the target-language XNLI files of `init_eval.xnli`."""
    opts = params["init_eval"]
    return [paths.data_path(opts["xnli"].format(lang=code)) for code in (opts["source_lang"], lang)]


def local_source_model(params: dict) -> Path | None:
    """`source_model` when it is a local directory or GGUF file (a hub id, `hf://…` file or `package:…`
    is pinned by its name only)."""
    value = str(params["source_model"])
    if value.startswith(("hf://", "package:")):
        return None
    path = Path(value).expanduser()
    return path if path.is_dir() or (path.is_file() and path.suffix.lower() == ".gguf") else None


# --------------------------------------------------------------------------- availability


def method_reason(params: dict, lang: str, method: str) -> str | None:
    """Why `method` (or its base) cannot run for `lang`: the `condition` declared at its `@register`
    (e.g. wechsel without a dictionary); None when it can."""
    from vocabtransfer.init.methods.registry import info

    condition = info(method).condition
    return condition(params, lang) if condition else None


def methods(params: dict, lang: str) -> list[str]:
    """The `init.methods` that `lang` has data for, in params order."""
    return [m for m in params["init"]["methods"] if method_reason(params, lang, m) is None]


def needed_by(params: dict, base: str, lang: str | None = None) -> str | None:
    """Why no init job (of `lang`, or of any language) runs method `base`: a job that only feeds
    that method is skipped for the same reason. None when one runs."""
    if not any(models.split_method(m)[0] == base for m in params["init"]["methods"]):
        return f"init.methods has no {base}"
    if lang is not None:
        why = method_reason(params, lang, base)
        return f"init {base} does not run: {why}" if why else None
    if not any(base in {models.split_method(m)[0] for m in methods(params, code)} for code in params["languages"]):
        return f"no language can run init {base}"
    return None


def retrieval_reason(params: dict, lang: str) -> str | None:
    """Why `init_eval` measures no parallel-sentence retrieval for `lang` (None when it does)."""
    if int(params["init_eval"]["retrieval_sentences"]) == 0:
        return "init_eval.retrieval_sentences is 0"
    for path in xnli_files(params, lang):
        if not path.is_file():
            return f"no XNLI file: {path} not found (init_eval.xnli)"
    return None


# --------------------------------------------------------------------------- the pretraining runs


def pretrain_pairs(params: dict, lang: str | None = None) -> list[tuple[str, str]]:
    """The (method, objective) pairs params ask for (`pretrain.pairs`, or else `pretrain.methods` ×
    `pretrain.objectives`); with `lang`, those whose init method can run for that language (wechsel
    without a dictionary cannot)."""
    section = params.get("pretrain") or {}
    pairs = [(m, o) for m in section.get("methods") or [] for o in section.get("objectives") or []]
    if section.get("pairs") is not None:
        chosen = {tuple(p.rsplit("-", 1)) for p in section["pairs"]}
        pairs = [p for p in pairs if p in chosen]
    return [(m, o) for m, o in pairs if lang is None or method_reason(params, lang, m) is None]


def pretrain_runs(params: dict, lang: str | None = None) -> list[tuple[str, str, int]]:
    """Every (method, objective, pretraining seed) continued-pretraining run params ask for."""
    return [(m, o, s) for m, o in pretrain_pairs(params, lang) for s in models.pretrain_seeds(params)]
