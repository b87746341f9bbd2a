"""The stage table: for every pipeline stage, its wildcards, input and output path
templates, the params leaves it reads and the code it runs.

This table is the single source of truth. The CLI builds `vocabtransfer <stage>` from it,
the Snakemake rules take their input/output/params from it (workflow/rules/common.smk),
and `vocabtransfer dvc-yaml` generates dvc.yaml from it.

The entries are in DAG order. What one entry holds is the `Stage` dataclass
(vocabtransfer.pipeline.stage_spec); running a job of a stage is vocabtransfer.pipeline.runner.
"""

from __future__ import annotations

from pathlib import Path

from vocabtransfer.pipeline import availability
from vocabtransfer.pipeline import models
from vocabtransfer.pipeline import paths
from vocabtransfer.pipeline.stage_spec import PACKAGE, Stage, _lazy, _module_file, section_leaves


STAGES: dict[str, Stage] = {}


def register(stage: Stage) -> Stage:
    STAGES[stage.name] = stage
    return stage


def _source_model_data(params: dict, wildcards: dict) -> dict[str, Path]:
    """A local `source_model` directory or GGUF file (a hub id is pinned by its name, a params leaf)."""
    path = availability.local_source_model(params)
    return {"data_source_model": path} if path else {}


def _fasttext_data(params: dict, wildcards: dict) -> dict[str, Path]:
    pretrained = params["fasttext"].get("pretrained_path")
    if params["fasttext"]["mode"] == "wordlevel" and pretrained:
        return {"data_pretrained": paths.data_path(pretrained)}
    return {}


register(Stage(
    name="corpus",
    func="vocabtransfer.data.corpus:run",
    help="fetch, normalise, deduplicate, cap and split a language's raw text",
    outputs={"train": paths.CORPUS_TRAIN, "valid": paths.CORPUS_VALID, "stats": paths.CORPUS_STATS},
    params=("seed", "corpus.sources.{lang}", "corpus.normalization", "corpus.max_bytes",
            "corpus.valid_fraction", "corpus.min_chars"),
    code=("data/corpus.py", "data/download.py"),
    data=lambda params, wc: {"data_corpus": path} if (path := availability.corpus_file(params, wc["lang"])) else {},
))
register(Stage(
    name="source_model",
    func="vocabtransfer.init.source_model:run",
    help="materialise the source model once as a Hugging Face directory (hub id, directory or GGUF file), hashed",
    wildcards=(),
    outputs={"model": paths.SOURCE_BASE, "stats": paths.SOURCE_BASE_STATS},
    directories=frozenset({"model"}),
    params=("source_model",),
    code=("init/source_model.py", "train/gguf.py"),
    data=_source_model_data,
))
register(Stage(
    name="tokenizer",
    func="vocabtransfer.data.tokenizer:run",
    help="train the target tokenizer (the source tokenizer's family and conventions)",
    inputs={"train": paths.CORPUS_TRAIN, "source": paths.SOURCE_BASE},
    outputs={"tokenizer": paths.TOKENIZER, "stats": paths.TOKENIZER_STATS},
    directories=frozenset({"tokenizer"}),
    params=("source_model", "tokenizer.family", "tokenizer.vocab_size", "tokenizer.min_frequency"),
    code=("data/tokenizer.py",),
    parallel=True,
))
register(Stage(
    name="pretokenize",
    func="vocabtransfer.data.pretokenize:run",
    help="encode the corpus with the target tokenizer; fertility stats against the source tokenizer",
    inputs={"tokenizer": paths.TOKENIZER, "train": paths.CORPUS_TRAIN, "valid": paths.CORPUS_VALID,
            "source": paths.SOURCE_BASE},
    outputs={"train_ids": paths.PRETOK_TRAIN, "valid_ids": paths.PRETOK_VALID, "text": paths.PRETOK_TEXT,
             "stats": paths.PRETOK_STATS},
    params=("source_model", "pretokenize.batch_size"),
    code=("data/pretokenize.py",),
    parallel=True,
))
register(Stage(
    name="fasttext",
    func="vocabtransfer.data.auxiliary:run",
    help="fastText auxiliary embeddings for the target tokens",
    inputs={"text": paths.PRETOK_TEXT, "tokenizer": paths.TOKENIZER},
    outputs={"model": paths.FASTTEXT_BIN, "embeddings": paths.FASTTEXT_EMB, "stats": paths.FASTTEXT_STATS},
    params=("seed", "fasttext.mode", "fasttext.pretrained_path", "fasttext.model", "fasttext.dim",
            "fasttext.epochs", "fasttext.min_count", "fasttext.neg", "fasttext.bucket", "fasttext.reproducible",
            "fasttext.oov"),
    code=("data/auxiliary.py",),
    parallel=True,
    one_thread_if="fasttext.reproducible",  # fastText is bit-reproducible on one thread only
    data=_fasttext_data,
))
register(Stage(
    name="overlap",
    func="vocabtransfer.data.overlap:run",
    help="source vs target vocabulary overlap on canonical token forms",
    inputs={"tokenizer": paths.TOKENIZER, "source": paths.SOURCE_BASE},
    outputs={"overlap": paths.OVERLAP, "stats": paths.OVERLAP_STATS},
    params=("source_model", "overlap.exact_match_all", "overlap.fuzzy_match_all", "overlap.match_symbols",
            "overlap.match_bytes"),
    code=("data/overlap.py",),
))


def uses_snmf(method: str) -> bool:
    from vocabtransfer.init.initialise import uses_snmf

    return uses_snmf(method)


_init_inputs = _lazy("init.initialise:inputs")


def _init_leaves(params: dict, wildcards: dict) -> list[str]:
    base, fact = models.split_method(wildcards["method"])
    return [leaf for name in (base, fact) if name and name in params["init"]
            for leaf in section_leaves(params, f"init.{name}")]


def _init_code(params: dict, wildcards: dict) -> tuple[str, ...]:
    """The entry modules of one init job: init.py, the method's module and, for base+fact, the
    factorised wrapper; editing another method does not rerun this one."""
    from vocabtransfer.init.methods import get_method

    base, fact = models.split_method(wildcards["method"])
    module = _module_file(get_method(base).__module__)  # e.g. random lives in methods/baselines.py
    return ("init/initialise.py", str(module.relative_to(PACKAGE))) + (("init/methods/variants.py",) if fact else ())


def _init_data(params: dict, wildcards: dict) -> dict[str, Path]:
    """The local data files of one init job: what the method's `@register(..., data=...)` names
    (wechsel: the language's bilingual dictionary)."""
    from vocabtransfer.init.methods.registry import info

    data = info(wildcards["method"]).data
    return data(params, wildcards["lang"]) if data else {}


_init_eval_inputs = _lazy("evaluate.init_eval:inputs")


WORD_FASTTEXT_LEAVES = ("seed", "fasttext.reproducible", "init.wechsel.fasttext.model", "init.wechsel.fasttext.dim",
                        "init.wechsel.fasttext.epochs", "init.wechsel.fasttext.min_count",
                        "init.wechsel.fasttext.bucket")

register(Stage(
    name="source_head",
    func="vocabtransfer.init.source_head:run",
    help="complete the source model with a trained LM head when its checkpoint has none",
    wildcards=(),
    inputs={"source": paths.SOURCE_BASE},
    outputs={"model": paths.SOURCE_MODEL, "stats": paths.SOURCE_HEAD_STATS},
    directories=frozenset({"model"}),
    params=("seed", "source_model"),
    extra_params=lambda params, wildcards: section_leaves(params, "source_head"),
    code=("init/source_head.py",),
    parallel=True,
    gpu=True,
    data=lambda params, wc: {"data_text": paths.data_path(params["source_head"]["text"])},
))
register(Stage(
    name="source_fasttext",
    func="vocabtransfer.data.auxiliary:run_source_words",
    help="word-level fastText on source-language text (WECHSEL)",
    wildcards=(),
    outputs={"model": paths.SOURCE_WORD_FASTTEXT},
    params=WORD_FASTTEXT_LEAVES + ("init.wechsel.source_text",),
    code=("data/auxiliary.py",),
    parallel=True,
    one_thread_if="fasttext.reproducible",  # fastText is bit-reproducible on one thread only
    available=lambda params, wc: availability.needed_by(params, "wechsel"),
    data=lambda params, wc: {"data_text": paths.data_path(params["init"]["wechsel"]["source_text"])},
))
register(Stage(
    name="word_fasttext",
    func="vocabtransfer.data.auxiliary:run_target_words",
    help="word-level fastText on the target corpus (WECHSEL)",
    inputs={"train": paths.CORPUS_TRAIN},
    outputs={"model": paths.WORD_FASTTEXT},
    params=WORD_FASTTEXT_LEAVES,
    code=("data/auxiliary.py",),
    parallel=True,
    one_thread_if="fasttext.reproducible",  # fastText is bit-reproducible on one thread only
    available=lambda params, wc: availability.needed_by(params, "wechsel", wc["lang"]),
))
register(Stage(
    name="source_snmf",
    func="vocabtransfer.init.source_snmf:run",
    help="semi-NMF of the source embeddings, shared by the snmf and <method>+snmf init jobs",
    wildcards=(),
    inputs={"source_model": paths.SOURCE_MODEL},
    outputs={"factors": paths.SOURCE_SNMF},
    params=("seed", "init.snmf.rank", "init.snmf.max_iter", "init.snmf.tol", "init.snmf.init",
            "init.snmf.clusters"),
    code=("init/source_snmf.py",),
    parallel=True,
    gpu=True,
    available=lambda params, wc: (None if any(uses_snmf(m) for m in params["init"]["methods"])
                                  else "init.methods has no snmf or <method>+snmf"),
))
register(Stage(
    name="init",
    func="vocabtransfer.init.initialise:run",
    help="initialise the target embeddings with one method and save the model",
    wildcards=("lang", "method", "pseed"),
    inputs=_init_inputs,
    outputs={"init": paths.INIT_DIR},
    directories=frozenset({"init"}),
    params=("seed",),
    extra_params=_init_leaves,
    code=_init_code,
    expand=lambda params: [{"method": m, "pseed": str(s)} for m, s in models.init_runs(params)],
    parallel=True,
    gpu=True,
    available=lambda params, wc: availability.method_reason(params, wc["lang"], wc["method"]),
    data=_init_data,
))
register(Stage(
    name="init_eval",
    func="vocabtransfer.evaluate.init_eval:run",
    help="loss right after initialisation and parallel-sentence retrieval, per method",
    inputs=_init_eval_inputs,
    outputs={"init_eval": paths.INIT_EVAL, "plot": paths.INIT_EVAL_PLOT},
    params=("seed", "init.methods", "source_head.text", "source_head.eval_lines"),
    extra_params=lambda params, wildcards: section_leaves(params, "init_eval"),
    code=("evaluate/init_eval.py",),
    parallel=True,
    gpu=True,
    partial=lambda params, wc: {"retrieval": why} if (why := availability.retrieval_reason(params, wc["lang"])) else {},
    data=lambda params, wc: {"data_source_text": paths.data_path(params["source_head"]["text"]),
                             **({} if availability.retrieval_reason(params, wc["lang"]) else
                                dict(zip(("data_xnli_source", "data_xnli"),
                                         availability.xnli_files(params, wc["lang"]))))},
))


_pretrain_leaves = _lazy("train.pretrain:leaves")
_pretrain_expand = _lazy("train.pretrain:expand")


register(Stage(
    name="pretrain",
    func="vocabtransfer.train.pretrain:run",
    help="continued pretraining of an initialised model with the standard, selfish or distill objective",
    wildcards=("lang", "method", "objective", "pseed"),
    inputs=lambda params, wc: {"init": paths.partial(paths.INIT_DIR, method=wc["method"],
                                                     pseed=models.init_pseed(wc["method"], wc["pseed"])),
                               "train": paths.PRETOK_TRAIN, "valid": paths.PRETOK_VALID,
                               # the distill objective's teacher: the source model with its own tokenizer
                               **({"source": paths.SOURCE_MODEL} if wc.get("objective") == "distill" else {})},
    outputs={"pretrain": paths.PRETRAIN_DIR},
    directories=frozenset({"pretrain"}),
    params=("seed",),
    extra_params=_pretrain_leaves,
    code=("train/pretrain.py",),
    expand=_pretrain_expand,
    available=lambda params, wc: availability.method_reason(params, wc["lang"], wc["method"]),
    parallel=True,
    processes="pretrain.processes",  # > 1: launched with accelerate, N GPUs on a cluster
    gpu=True,
))


_report_inputs = _lazy("report.read:inputs")
_report_plots = _lazy("report.build:dvc_plots")


register(Stage(
    name="report",
    func="vocabtransfer.report.build:run",
    help="the study's report: results/report.md with figures, DVC plots (valid-loss curves) and metrics",
    wildcards=(),
    inputs=_report_inputs,
    outputs={"report": paths.REPORT, "figures": paths.REPORT_FIGURES, "curves": paths.REPORT_CURVES,
             "metrics": paths.REPORT_METRICS},
    directories=frozenset({"figures", "curves"}),
    metrics=frozenset({"metrics"}),
    plots=_report_plots,
    params=("seed", "languages", "source_model", "init.methods", "report.bootstrap_resamples", "report.confidence",
            "report.correction", "report.min_clusters"),
    code=("report/build.py",),
))


def _eval_code(params: dict, wildcards: dict) -> tuple[str, ...]:
    """finetune_eval.py and the task's module: editing one task reruns only its jobs."""
    return ("evaluate/finetune_eval.py", f"evaluate/tasks/{wildcards['task']}.py")


_eval_inputs = _lazy("evaluate.finetune_eval:inputs")


def _eval_leaves(params: dict, wildcards: dict) -> list[str]:
    task = wildcards["task"]
    return [leaf for leaf in section_leaves(params, f"eval.tasks.{task}") if ".data." not in leaf] + [
        f"eval.tasks.{task}.data.{wildcards['lang']}"]


def _eval_combinations(params: dict) -> list[dict[str, str]]:
    """Every (task, model, seed) params ask for; `_eval_available` rules out, per language, the tasks
    without data and the models that do not exist there (and says why)."""
    from vocabtransfer.evaluate import finetune_eval

    return [{"task": t, "model": m, "seed": str(s)} for t, section in params["eval"]["tasks"].items()
            if section["enabled"] for m in finetune_eval.eval_models(params)
            for s in range(1, int(params["eval"]["seeds"]) + 1)]


_eval_available = _lazy("evaluate.finetune_eval:skip_reason")
_eval_data = _lazy("evaluate.finetune_eval:data_files")


register(Stage(
    name="finetune_eval",
    func="vocabtransfer.evaluate.finetune_eval:run",
    help="fine-tune one model on one downstream task (nli, qa, ner) with one seed and score it",
    wildcards=("lang", "task", "model", "seed"),
    inputs=_eval_inputs,
    outputs={"result": paths.EVAL_RESULT},
    params=("seed",),  # eval.models and eval.seeds decide which jobs exist, not what one computes
    extra_params=_eval_leaves,
    code=_eval_code,
    expand=_eval_combinations,
    available=_eval_available,
    data=_eval_data,
    parallel=False,  # small models: two one-thread jobs side by side use two cores better than one job
    gpu=True,
))


register(Stage(
    name="floor",
    func="vocabtransfer.evaluate.floor:run",
    help="the score of a task's floor (majority class, training lexicon, sliding-window span) on its test split",
    wildcards=("lang", "task"),
    outputs={"floor": paths.EVAL_FLOOR},
    params=("seed",),
    extra_params=_eval_leaves,
    code=lambda params, wildcards: ("evaluate/floor.py", f"evaluate/tasks/{wildcards['task']}.py"),
    expand=_lazy("evaluate.floor:tasks"),
    available=_lazy("evaluate.floor:skip_reason"),
    data=_eval_data,
))


# ---------------------------------------------------------------- analyses of continued pretraining

_token_frequency_inputs = _lazy("evaluate.token_frequency_loss:inputs")


register(Stage(
    name="token_frequency_loss",
    func="vocabtransfer.evaluate.token_frequency_loss:run",
    help="held-out loss per train-frequency bucket (init vs standard vs selfish pretraining) and bits per byte",
    inputs=_token_frequency_inputs,
    outputs={"table": paths.TOKEN_FREQUENCY_LOSS, "blocks": paths.TOKEN_FREQUENCY_BLOCKS,
             "bits_per_byte": paths.BITS_PER_BYTE, "plot": paths.TOKEN_FREQUENCY_PLOT},
    params=("seed",),
    extra_params=lambda params, wildcards: (section_leaves(params, "token_frequency_loss")
                                            + ["pretrain.methods", "pretrain.objectives", "pretrain.pairs", "pretrain.seeds"]),
    code=("evaluate/token_frequency_loss.py",),
    parallel=True,
    gpu=True,
))
register(Stage(
    name="gradient_scenarios",
    func="vocabtransfer.evaluate.gradient_scenarios:run",
    help="gradient reaching each token's embedding: as input, as target, as non-target (start and end)",
    wildcards=("lang", "method", "objective", "pseed"),
    inputs=lambda params, wc: {"train_ids": paths.PRETOK_TRAIN, "pretrain": paths.PRETRAIN_DIR,
                               "init": paths.partial(paths.INIT_DIR, method=wc["method"],
                                                     pseed=models.init_pseed(wc["method"], wc["pseed"]))},
    outputs={"table": paths.GRADIENT_SCENARIOS, "plot": paths.GRADIENT_PLOT},
    params=("seed",),
    extra_params=lambda params, wildcards: (section_leaves(params, "gradient_scenarios") + (
        ["pretrain.selfish.margin"] if wildcards.get("objective") == "selfish" else [])),
    code=("evaluate/gradient_scenarios.py",),
    # descriptive, on the first pretraining seed only
    expand=lambda params: [{"method": m, "objective": o, "pseed": "1"} for m, o in availability.pretrain_pairs(params)],
    available=lambda params, wc: availability.method_reason(params, wc["lang"], wc["method"]),
    parallel=True,
    gpu=True,
))
