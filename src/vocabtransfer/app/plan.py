"""The plan of a run, before any job: one line per job that params ask for but params or the data
present rule out (`skip_lines`), notes on sources that can change, and `preflight`, which checks the
data files the run cannot do without. Which jobs run is the job planner of each stage, `Stage.jobs`
(vocabtransfer.pipeline.stage_spec), over the stage table (vocabtransfer.plan.stages).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.pipeline import paths
from vocabtransfer.plan import availability, harness_plans, source_kind, tokenizer_checks
from vocabtransfer.plan.finetune_plans import same_source
from vocabtransfer.plan.params_root import Params
from vocabtransfer.plan.objectives import TEACHER_OBJECTIVES
from vocabtransfer.plan.stages import STAGES


def _job_label(stage, wildcards: dict) -> str:
    rest = " ".join(f"pseed{v}" if k == "pseed" else v for k, v in wildcards.items() if k != "lang")
    return f"{stage.name} {rest}" if rest else stage.name


def skip_lines(given: Params | Mapping[str, Any]) -> list[str]:
    """One line per job that params ask for but the data do not allow (jobs of one stage and language
    skipped for the same reason share a line), and per part a job leaves out, e.g.
    `xx: skipping init wechsel (no dictionary: init.wechsel.dictionaries has no entry for xx)`."""
    params = Params.of(given)
    lines = []
    for stage in STAGES.values():
        langs = params.languages if "lang" in stage.wildcards else (None,)
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


def notes(given: Params | Mapping[str, Any]) -> list[str]:
    """Sources that can change under the same params (a hub dataset without a `revision`), and task
    data for languages the run does not have (e.g. an overlay that narrows `languages`)."""
    params = Params.of(given)
    out = []
    for task, section in params.eval.task_sections().items():
        unused = [lang for lang in section.data if lang not in params.languages]
        if unused:
            out.append(
                f"eval.tasks.{task}.data: {', '.join(unused)} not in `languages` "
                f"({', '.join(params.languages)}); their data specs are not used"
            )
    for lang in params.languages:
        spec = (params.corpus.sources.get(lang) or {}).get("dataset")
        if isinstance(spec, dict) and not spec.get("revision"):
            out.append(
                f"{lang}: corpus.sources.{lang}.dataset has no revision, so its text can change under the "
                "same params; pin one (a commit hash of the dataset repository)"
            )
    return out


def check_source(given: Params | Mapping[str, Any], source: str = "params.yaml", *, reach: bool = True) -> None:
    """What the source model allows, known before any job: it can be reached (a hub id while HF_HUB_OFFLINE is
    set must be in the cache; not checked with `reach=False`), `tokenizer.from` can be read, `tokenizer.donor_model`
    owns it, and the objectives that need a causal source are not asked of a
    masked one."""
    params = Params.of(given)
    if reach:
        source_kind.check_reachable(params.source_model, source)
    tokenizer_checks.check_tokenizer_from(params.tokenizer.from_, source, reach=reach)
    tokenizer = params.tokenizer
    tokenizer_checks.check_donor(tokenizer.donor_model, tokenizer.from_, source, reach=reach)
    pre = params.pretrain
    objectives = [o for o in pre.objectives if o in TEACHER_OBJECTIVES]
    if objectives and pre.methods and source_kind.kind(params.source_model) == "masked":
        raise VocabTransferError(
            f"{source}: pretrain.objectives: {', '.join(objectives)} {'needs' if len(objectives) == 1 else 'need'} a "
            "causal source model (the source teaches "
            f"by its sequence likelihoods), and source_model {params.source_model} is a masked LM; use standard "
            "or selfish with it, or a causal source (config/gemma.yaml)"
        )


def check_lm_eval_tasks(given: Params | Mapping[str, Any], source: str = "params.yaml") -> None:
    """Every `lm_eval.tasks` name is one the harness knows (the offline tasks first; the harness's catalogue,
    indexed in seconds, only for the others), with the closest names it does know: checked once here rather
    than in each of the jobs."""
    params = Params.of(given)
    if not params.lm_eval.tasks:
        return
    harness_plans.check_include(params, source)
    include = harness_plans.include_key(params)
    names = list(dict.fromkeys(n for lang in params.languages for n in harness_plans.task_names(params, lang)))
    others = [n for n in names if n not in harness_plans.local_tasks(include)]
    if others:
        try:
            known = list(harness_plans.task_manager(include).all_tasks) + list(harness_plans.local_tasks(include))
        except ImportError as exc:
            raise VocabTransferError(
                f"{source}: lm_eval.tasks: the harness is not installed ({exc}); install "
                "lm-eval (pinned in pyproject.toml) or leave lm_eval.tasks empty"
            ) from exc
        try:
            harness_plans.check_tasks(others, known)
        except VocabTransferError as exc:
            raise VocabTransferError(f"{source}: {exc}") from exc


def preflight(given: Params | Mapping[str, Any], source: str = "params.yaml", *, reach: bool = True) -> list[str]:
    """Check, before any job, the data files the run cannot do without (one error line naming the
    key and the file) and what the source model allows (`check_source`), and return the skip lines and notes
    to show."""
    params = Params.of(given)
    paths.check_data_root()  # source_head.text at least is a data file
    check_source(params, source, reach=reach)
    check_lm_eval_tasks(params, source)
    for lang in params.languages:
        path = availability.corpus_file(params, lang)
        if path is not None and not path.is_file():
            raise VocabTransferError(
                f"{source}: corpus.sources.{lang}.path: {path} not found; fix the path "
                "(relative paths resolve against $VOCABTRANSFER_DATA)"
            )
    text = paths.data_path(params.source_head.text)
    if not text.is_file():
        raise VocabTransferError(
            f"{source}: source_head.text: {text} not found; the source LM head and the "
            "init_eval reference row read it (relative paths resolve against $VOCABTRANSFER_DATA)"
        )
    for lang in params.languages:  # a file params name for a method of init.methods: refused, never skipped
        why = availability.method_refusal(params, lang)
        if why:
            raise VocabTransferError(f"{source}: {why}")
    check_held_out_sources(params, source)
    fasttext = params.fasttext
    if fasttext.mode == "wordlevel":
        pretrained = fasttext.pretrained_path
        if not pretrained or not paths.data_path(pretrained).is_file():
            said = f"{paths.data_path(pretrained)} is not a file" if pretrained else "is not set"
            raise VocabTransferError(
                f"{source}: fasttext.pretrained_path {said}, and fasttext.mode is wordlevel; set it "
                "to a word-level fastText .bin or use fasttext.mode: tokenlevel"
            )
    try:  # the plan itself: a model name or a combination no stage produces stops here, not in the DAG
        planned = [
            (stage, wildcards)
            for stage in STAGES.values()
            for lang in (params.languages if "lang" in stage.wildcards else (None,))
            for wildcards in stage.jobs(params, lang)
        ]
    except VocabTransferError as exc:
        raise VocabTransferError(f"{source}: {exc}") from exc
    for stage, wildcards in planned:  # every job's own data files
        for key, file in stage.data_files(params, wildcards).items():
            if not Path(file).exists():
                raise VocabTransferError(
                    f"{source}: {_data_key(stage.name, wildcards, key)}: data file {file} not "
                    f"found (job {stage.name} {' '.join(wildcards.values())}); fix the path "
                    "(relative paths resolve against $VOCABTRANSFER_DATA)"
                )
    return skip_lines(params) + notes(params)


def check_held_out_sources(params: Params, source: str = "params.yaml") -> None:
    """No task tests a language on its training source: a `test` that is the `train` file (after resolving the data
    root), a copy of its bytes, the same URL or the same dataset split is refused before any job (the test examples
    of a different file are checked against the training ones when the job reads them, `tasks.check_held_out`)."""
    for task, section in params.eval.task_sections().items():
        if not section.enabled:
            continue
        for lang in params.languages:
            spec = section.data.get(lang) or {}
            same = same_source(spec["train"], spec["test"]) if "train" in spec and "test" in spec else None
            if same:
                key = f"eval.tasks.{task}.data.{lang}"
                raise VocabTransferError(
                    f"{source}: {key}.test is {same} as {key}.train, so the model would be tested on its training "
                    f"data; point {key}.test at a held-out file, or remove it so that eval.tasks.{task}.test_fraction "
                    "holds part of the training source out"
                )


def _data_key(stage: str, wildcards: dict, key: str) -> str:
    """The params key that names a job's data file `key` (Stage.data), for the error that it is missing."""
    if stage in ("finetune_eval", "floor") and key.startswith("data_"):
        return f"eval.tasks.{wildcards['task']}.data.{wildcards['lang']}.{key.removeprefix('data_')}.path"
    if stage == "lm_eval":
        return "lm_eval.include_path" if key.startswith("task_file") else "lm_eval.tasks"
    return f"{stage} ({key})"


def job_counts(given: Params | Mapping[str, Any]) -> dict[str, int]:
    """Jobs per stage that the plan runs (every language), in the stage table's order."""
    params = Params.of(given)
    return {
        stage.name: sum(
            len(stage.jobs(params, lang)) for lang in (params.languages if "lang" in stage.wildcards else (None,))
        )
        for stage in STAGES.values()
    }
