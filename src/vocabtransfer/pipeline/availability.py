"""Which jobs each language has, and which data files each job reads, decided from params and
the files present before any job runs.

A language with only a corpus still gets every stage that needs nothing more; what it lacks is
skipped with a one-line reason (`skip_lines`), never discovered by a failing job at the end.
The stage table (stages.py) asks this module three things per job:

* `Stage.available(params, wildcards)`: None when the job runs, else why it is skipped
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

from vocabtransfer.pipeline import paths as P
from vocabtransfer.errors import VocabTransferError

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- the data files


def corpus_file(params: dict, lang: str) -> Path | None:
    """The local file of `corpus.sources.<lang>` (None for a URL or a hub dataset)."""
    source = params["corpus"]["sources"].get(lang) or {}
    return P.data_path(source["path"]) if source.get("path") else None


def dictionary_file(params: dict, lang: str) -> Path | None:
    entry = ((params.get("init") or {}).get("wechsel") or {}).get("dictionaries", {}).get(lang)
    return P.data_path(entry) if entry else None


def xnli_files(params: dict, lang: str) -> list[Path]:
    """The source-language and the target-language XNLI files of `init_eval.xnli`."""
    opts = params["init_eval"]
    return [P.data_path(opts["xnli"].format(lang=code)) for code in (opts["source_lang"], lang)]


def local_source_model(params: dict) -> Path | None:
    """`source_model` when it is a local directory (a hub id is pinned by its name only)."""
    path = Path(params["source_model"]).expanduser()
    return path if path.is_dir() else None


# --------------------------------------------------------------------------- availability


def wechsel_reason(params: dict, lang: str) -> str | None:
    """Why `wechsel` cannot run for `lang` (None when it can)."""
    path = dictionary_file(params, lang)
    if path is None:
        return f"no dictionary: init.wechsel.dictionaries has no entry for {lang}"
    if not path.is_file():
        return f"no dictionary: {path} not found (init.wechsel.dictionaries.{lang})"
    text = P.data_path(params["init"]["wechsel"]["source_text"])
    if not text.is_file():
        return f"no source-language text: {text} not found (init.wechsel.source_text)"
    return None


# method (base name) -> (params, lang) -> reason it cannot run; methods not listed always can
METHOD_CONDITIONS = {"wechsel": wechsel_reason}


def method_reason(params: dict, lang: str, method: str) -> str | None:
    condition = METHOD_CONDITIONS.get(method.partition("+")[0])
    return condition(params, lang) if condition else None


def methods(params: dict, lang: str) -> list[str]:
    """The `init.methods` that `lang` has data for, in params order."""
    return [m for m in params["init"]["methods"] if method_reason(params, lang, m) is None]


def needed_by(params: dict, base: str, lang: str | None = None) -> str | None:
    """Why no init job (of `lang`, or of any language) runs method `base`: a job that only feeds
    that method is skipped for the same reason. None when one runs."""
    if not any(m.partition("+")[0] == base for m in params["init"]["methods"]):
        return f"init.methods has no {base}"
    if lang is not None:
        why = METHOD_CONDITIONS[base](params, lang) if base in METHOD_CONDITIONS else None
        return f"init {base} does not run: {why}" if why else None
    if not any(base in {m.partition("+")[0] for m in methods(params, code)} for code in params["languages"]):
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


# --------------------------------------------------------------------------- the plan


def jobs(params: dict, stage, lang: str | None = None) -> list[dict[str, str]]:
    """The wildcards of every job `stage` has (for one language when it has a `lang` wildcard)."""
    out = []
    for combo in stage.combinations(params):
        wildcards = {**combo, "lang": lang} if "lang" in stage.wildcards else dict(combo)
        if stage.skip_reason(params, wildcards) is None:
            out.append(wildcards)
    return out


def _job_label(stage, wildcards: dict) -> str:
    rest = " ".join(f"pseed{v}" if k == "pseed" else v for k, v in wildcards.items() if k != "lang")
    return f"{stage.name} {rest}" if rest else stage.name


def skip_lines(params: dict) -> list[str]:
    """One line per job that params ask for but the data do not allow (jobs of one stage and language
    skipped for the same reason share a line), and per part a job leaves out, e.g.
    `xx: skipping init wechsel (no dictionary: init.wechsel.dictionaries has no entry for xx)`."""
    from vocabtransfer.pipeline.stages import STAGES

    lines = []
    for stage in STAGES.values():
        langs = params["languages"] if "lang" in stage.wildcards else [None]
        for lang in langs:
            prefix = f"{lang}: " if lang else ""
            skipped: dict[str, list[str]] = {}  # reason -> the skipped jobs' labels
            for combo in stage.combinations(params):
                wildcards = {**combo, "lang": lang} if lang else dict(combo)
                reason = stage.skip_reason(params, wildcards)
                if reason is not None:
                    skipped.setdefault(reason, []).append(_job_label(stage, wildcards))
                    continue
                for part, why in (stage.partial(params, wildcards) if stage.partial else {}).items():
                    lines.append(f"{prefix}{_job_label(stage, wildcards)} without {part} ({why})")
            for reason, labels in skipped.items():
                if len(labels) == 1:
                    lines.append(f"{prefix}skipping {labels[0]} ({reason})")
                else:
                    shown = ", ".join(label.removeprefix(stage.name + " ") for label in labels[:3])
                    more = f", … {len(labels) - 3} more" if len(labels) > 3 else ""
                    lines.append(f"{prefix}skipping {len(labels)} {stage.name} jobs: {shown}{more} ({reason})")
    return lines


def notes(params: dict) -> list[str]:
    """Sources that can change under the same params (a hub dataset without a `revision`), and task
    data for languages the run does not have (e.g. an overlay that narrows `languages`)."""
    out = []
    for task, section in params["eval"]["tasks"].items():
        unused = [lang for lang in section["data"] if lang not in params["languages"]]
        if unused:
            out.append(f"eval.tasks.{task}.data: {', '.join(unused)} not in `languages` "
                       f"({', '.join(params['languages'])}); their data specs are not used")
    for lang in params["languages"]:
        spec = (params["corpus"]["sources"].get(lang) or {}).get("dataset")
        if isinstance(spec, dict) and not spec.get("revision"):
            out.append(f"{lang}: corpus.sources.{lang}.dataset has no revision, so its text can change under the "
                       "same params; pin one (a commit hash of the dataset repository)")
    return out


def preflight(params: dict, source: str = "params.yaml") -> list[str]:
    """Check, before any job, the data files the run cannot do without (one error line naming the
    key and the file), and return the skip lines and notes to show."""
    from vocabtransfer.pipeline.stages import STAGES

    for lang in params["languages"]:
        path = corpus_file(params, lang)
        if path is not None and not path.is_file():
            raise VocabTransferError(f"{source}: corpus.sources.{lang}.path: {path} not found; fix the path "
                                     "(relative paths resolve against $VOCABTRANSFER_DATA)")
    text = P.data_path(params["source_head"]["text"])
    if not text.is_file():
        raise VocabTransferError(f"{source}: source_head.text: {text} not found; the source LM head and the "
                                 "init_eval reference row read it (relative paths resolve against $VOCABTRANSFER_DATA)")
    if params["fasttext"]["mode"] == "wordlevel":
        pretrained = params["fasttext"].get("pretrained_path")
        if not pretrained or not P.data_path(pretrained).is_file():
            raise VocabTransferError(f"{source}: fasttext.pretrained_path: {pretrained!r} is not a file but "
                                     "fasttext.mode is wordlevel; set it to a word-level fastText .bin or use tokenlevel")
    # every stage's own data files, for the jobs that run
    for stage in STAGES.values():
        if stage.data is None:
            continue
        for lang in params["languages"] if "lang" in stage.wildcards else [None]:
            for wildcards in jobs(params, stage, lang):
                for key, path in stage.data(params, wildcards).items():
                    if not Path(path).exists():
                        raise VocabTransferError(f"{source}: {stage.name} {' '.join(wildcards.values())}: data file "
                                                 f"{path} ({key}) not found; fix the params key that names it")
    return skip_lines(params) + notes(params)
