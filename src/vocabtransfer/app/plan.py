"""The plan of a run, before any job: one line per job that params ask for but params or the data
present rule out (`skip_lines`), notes on sources that can change, and `preflight`, which checks the
data files the run cannot do without. Which jobs run is the job planner of each stage, `Stage.jobs`
(vocabtransfer.pipeline.stage_spec), over the stage table (vocabtransfer.app.stages).
"""

from __future__ import annotations

from pathlib import Path

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.pipeline import paths
from vocabtransfer.pipeline.paths import corpus_file
from vocabtransfer.app.stages import STAGES


def _job_label(stage, wildcards: dict) -> str:
    rest = " ".join(f"pseed{v}" if k == "pseed" else v for k, v in wildcards.items() if k != "lang")
    return f"{stage.name} {rest}" if rest else stage.name


def skip_lines(params: dict) -> list[str]:
    """One line per job that params ask for but the data do not allow (jobs of one stage and language
    skipped for the same reason share a line), and per part a job leaves out, e.g.
    `xx: skipping init wechsel (no dictionary: init.wechsel.dictionaries has no entry for xx)`."""
    lines = []
    for stage in STAGES.values():
        langs = params["languages"] if "lang" in stage.wildcards else [None]
        for lang in langs:
            prefix = f"{lang}: " if lang else ""
            skipped: dict[str, list[str]] = {}  # reason -> the skipped jobs' labels
            for wildcards, reason in stage.candidates(params, lang):
                if reason is not None:
                    skipped.setdefault(reason, []).append(_job_label(stage, wildcards))
                    continue
                for part, why in stage.left_out(params, wildcards).items():
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
    paths.check_data_root()  # source_head.text at least is a data file
    for lang in params["languages"]:
        path = corpus_file(params, lang)
        if path is not None and not path.is_file():
            raise VocabTransferError(f"{source}: corpus.sources.{lang}.path: {path} not found; fix the path "
                                     "(relative paths resolve against $VOCABTRANSFER_DATA)")
    text = paths.data_path(params["source_head"]["text"])
    if not text.is_file():
        raise VocabTransferError(f"{source}: source_head.text: {text} not found; the source LM head and the "
                                 "init_eval reference row read it (relative paths resolve against $VOCABTRANSFER_DATA)")
    if params["fasttext"]["mode"] == "wordlevel":
        pretrained = params["fasttext"].get("pretrained_path")
        if not pretrained or not paths.data_path(pretrained).is_file():
            raise VocabTransferError(f"{source}: fasttext.pretrained_path: {pretrained!r} is not a file but "
                                     "fasttext.mode is wordlevel; set it to a word-level fastText .bin or use tokenlevel")
    # every stage's own data files, for the jobs that run
    for stage in STAGES.values():
        for lang in params["languages"] if "lang" in stage.wildcards else [None]:
            for wildcards in stage.jobs(params, lang):
                for key, path in stage.data_files(params, wildcards).items():
                    if not Path(path).exists():
                        raise VocabTransferError(f"{source}: {stage.name} {' '.join(wildcards.values())}: data file "
                                                 f"{path} ({key}) not found; fix the params key that names it")
    return skip_lines(params) + notes(params)
