"""The DAG: every pipeline stage's declaration, in one place, in topological order (each stage after
every stage whose outputs it reads; `tests/project/test_dag.py` derives the edges from the input and output
templates and checks it), grouped by phase.

A declaration (`Stage`, vocabtransfer.pipeline.stage_spec) names the stage's function by a lazy
`"module:function"` reference (its `run`, imported by the runner when a job runs), its wildcards, input and
output path templates (vocabtransfer.pipeline.paths), the params it reads (`reads`, by the typed root's names of
sections and leaves: its rerun keys are their leaves; `plans_with`, what its planning reads to pick jobs), its threads
and resources, which jobs run, and its code: the entry modules under src/vocabtransfer whose import closure DVC
and Snakemake rerun a job on (`stage_spec.module_closure`). What a stage plans with (its params class, its
inputs, its job planner) lives in this package (vocabtransfer.plan), beside the table; the stage modules hold
only code and import from here.

The CLI builds `vocabtransfer <stage>` from this table, the Snakemake rules take their
input/output/params from it (workflow/rules/common.smk, stages.smk), `vocabtransfer dvc-yaml` generates
dvc.yaml from it and `vocabtransfer dag` docs/stages.md's picture; running a job is vocabtransfer.app.runner.
Importing it imports no stage module (tests/project/test_layout.py), so Snakemake and the CLI plan without torch.
"""

from __future__ import annotations

from vocabtransfer.pipeline import paths
from vocabtransfer.pipeline.stage_spec import Stage, contract_fault
from vocabtransfer.plan import (
    availability,
    eval_plans,
    export_plans,
    finetune_plans,
    harness_plans,
    init_plans,
    job_plans,
    pretrain_plans,
    report_plans,
)
from vocabtransfer.registry import Registry


# what decides which initialisations and pretraining runs a language has (plan/availability.py: init.methods, the
# methods' conditions, pretrain's runs): read by the planning of the stages whose jobs follow those runs, not rerun keys
RUNS = (
    "languages",
    "init.methods",
    "init.wechsel.dictionaries",
    "init.wechsel.source_text",
    "pretrain.methods",
    "pretrain.objectives",
    "pretrain.pairs",
    "pretrain.seeds",
)
# and what the report reads besides: every evaluation's jobs (eval, lm_eval's) and whether the rates were tuned
EVERY_JOB = (*RUNS, "eval", "lm_eval.models", "lm_eval.tasks", "pretrain.tune.learning_rates")


# ---------------------------------------------------------------- data: text, tokenizer, token ids
CORPUS = Stage(
    name="corpus",
    run="vocabtransfer.data.corpus:run",
    help="fetch, normalise, deduplicate, cap and split a language's raw text",
    outputs={
        "train": paths.CORPUS_TRAIN,
        "valid": paths.CORPUS_VALID,
        "dev": paths.CORPUS_DEV,
        "stats": paths.CORPUS_STATS,
    },
    reads=("seed", "corpus"),  # of `corpus.sources` the job's language only (per_language)
    code=("data/corpus.py", "data/download.py"),
    data=lambda params, wc: {"data_corpus": path} if (path := availability.corpus_file(params, wc["lang"])) else {},
)
SOURCE_MODEL = Stage(  # the one source model, shared by every language
    name="source_model",
    run="vocabtransfer.init.source_model:run",
    help="materialise the source model once as a Hugging Face directory (hub id, directory or GGUF file), hashed",
    wildcards=(),
    outputs={"model": paths.SOURCE_BASE, "stats": paths.SOURCE_BASE_STATS},
    directories=frozenset({"model"}),
    reads=("source_model",),
    code=("init/source_model.py", "model/gguf.py"),
    # a local directory or GGUF file (a hub id is pinned by its name, a params leaf)
    data=lambda params, wc: {"data_source_model": path} if (path := paths.local_source_model(params)) else {},
)
TOKENIZER = Stage(
    name="tokenizer",
    run="vocabtransfer.data.tokenizer:run",
    help="train the target tokenizer (the source tokenizer's family and conventions), or copy tokenizer.from",
    inputs={"train": paths.CORPUS_TRAIN, "source": paths.SOURCE_BASE},
    outputs={"tokenizer": paths.TOKENIZER, "stats": paths.TOKENIZER_STATS},
    directories=frozenset({"tokenizer"}),
    reads=job_plans.tokenizer_reads,
    plans_with=("tokenizer.from",),  # which keys it reads (an existing tokenizer's or the training keys)
    code=("data/tokenizer.py",),
    data=job_plans.tokenizer_data,
    parallel=True,
)
PRETOKENIZE = Stage(
    name="pretokenize",
    run="vocabtransfer.data.pretokenize:run",
    help="encode the corpus with the target tokenizer; fertility stats against the source tokenizer",
    inputs={
        "tokenizer": paths.TOKENIZER,
        "train": paths.CORPUS_TRAIN,
        "valid": paths.CORPUS_VALID,
        "source": paths.SOURCE_BASE,
    },
    outputs={
        "train_ids": paths.PRETOK_TRAIN,
        "valid_ids": paths.PRETOK_VALID,
        "text": paths.PRETOK_TEXT,
        "stats": paths.PRETOK_STATS,
    },
    directories=frozenset({"train_ids", "valid_ids"}),
    reads=("source_model", "pretokenize"),
    code=("data/pretokenize.py",),
    parallel=True,
)
FASTTEXT = Stage(
    name="fasttext",
    run="vocabtransfer.data.fasttext_vectors:run",
    help="fastText auxiliary embeddings for the target tokens",
    inputs={"text": paths.PRETOK_TEXT, "tokenizer": paths.TOKENIZER},
    outputs={"model": paths.FASTTEXT_BIN, "embeddings": paths.FASTTEXT_EMB, "stats": paths.FASTTEXT_STATS},
    reads=("seed", "fasttext"),
    code=("data/fasttext_vectors.py",),
    parallel=True,
    one_thread_if=lambda params: params.fasttext.reproducible,  # fastText is bit-reproducible on one thread only
    data=job_plans.fasttext_data,
)
OVERLAP = Stage(
    name="overlap",
    run="vocabtransfer.data.overlap:run",
    help="source vs target vocabulary overlap on canonical token forms",
    inputs={"tokenizer": paths.TOKENIZER, "source": paths.SOURCE_BASE},
    outputs={"overlap": paths.OVERLAP, "stats": paths.OVERLAP_STATS},
    reads=job_plans.overlap_reads,
    plans_with=("tokenizer.from",),
    code=("data/overlap.py",),
)


# ---------------------------------------------------------------- init: what the methods read, then the methods
SOURCE_HEAD = Stage(
    name="source_head",
    run="vocabtransfer.init.source_head:run",
    help="complete the source model with a trained LM head when its checkpoint has none",
    wildcards=(),
    inputs={"source": paths.SOURCE_BASE},
    outputs={"model": paths.SOURCE_MODEL, "stats": paths.SOURCE_HEAD_STATS},
    directories=frozenset({"model"}),
    reads=("seed", "source_model", "source_head"),
    code=("init/source_head.py",),
    parallel=True,
    gpu=True,
    data=lambda params, wc: {"data_text": paths.data_path(params.source_head.text)},
)


SOURCE_FASTTEXT = Stage(  # WECHSEL's word vectors, source side
    name="source_fasttext",
    run="vocabtransfer.init.word_fasttext:run_source_words",
    help="word-level fastText on source-language text (WECHSEL)",
    wildcards=(),
    outputs={"model": paths.SOURCE_WORD_FASTTEXT},
    reads=("seed", "fasttext.reproducible", "init.wechsel.fasttext", "init.wechsel.source_text"),
    plans_with=RUNS,
    code=("init/word_fasttext.py",),
    parallel=True,
    one_thread_if=lambda params: params.fasttext.reproducible,
    skip_reason=lambda params, wc: availability.needed_by(params, "wechsel"),
    data=lambda params, wc: {"data_text": paths.data_path(params.init.wechsel.source_text)},
)
WORD_FASTTEXT = Stage(  # WECHSEL's word vectors, target side
    name="word_fasttext",
    run="vocabtransfer.init.word_fasttext:run_target_words",
    help="word-level fastText on the target corpus (WECHSEL)",
    inputs={"train": paths.CORPUS_TRAIN},
    outputs={"model": paths.WORD_FASTTEXT},
    reads=("seed", "fasttext.reproducible", "init.wechsel.fasttext"),
    plans_with=RUNS,
    code=("init/word_fasttext.py",),
    parallel=True,
    one_thread_if=lambda params: params.fasttext.reproducible,
    skip_reason=lambda params, wc: availability.needed_by(params, "wechsel", wc["lang"]),
)
SOURCE_SNMF = Stage(
    name="source_snmf",
    run="vocabtransfer.init.source_snmf:run",
    help="semi-NMF of the source embeddings, shared by the snmf and <method>+snmf init jobs",
    wildcards=(),
    inputs={"source_model": paths.SOURCE_MODEL},
    outputs={"factors": paths.SOURCE_SNMF},
    # the fields of the typed init.snmf (SnmfOptions) that the job reads, FACTOR_KEYS, in their order whatever
    # the order of params.yaml's keys
    reads=("seed", *(f"init.snmf.{key}" for key in init_plans.FACTOR_KEYS)),
    plans_with=RUNS,
    code=("init/source_snmf.py",),
    parallel=True,
    gpu=True,
    skip_reason=job_plans.snmf_skip_reason,
)
DONOR = Stage(  # tokenizer.donor_model: the space init method omp_donor codes the new tokens in (tokensurgeon)
    name="donor",
    run="vocabtransfer.init.donor:run",
    help="the embeddings of the donor model (tokenizer.donor_model), which owns tokenizer.from, for omp_donor",
    wildcards=(),
    outputs={"embeddings": paths.DONOR_EMB, "stats": paths.DONOR_STATS},
    reads=("tokenizer.from", "tokenizer.donor_model"),
    plans_with=RUNS,
    code=("init/donor.py",),
    parallel=True,
    expand=lambda params: [{}] if init_plans.donor_space(params) else [],  # no job, no line, without omp_donor
    data=job_plans.donor_data,  # the local donor (and tokenizer.from) it reads
)

HYPERNET = Stage(
    name="hypernet",
    run="vocabtransfer.train.hypernet:run",
    help="train the network of init method hypernet, once per source model and network seed, on tokenizers it samples",
    wildcards=("pseed",),
    inputs=job_plans.hypernet_inputs,
    outputs={"hypernet": paths.HYPERNET},
    directories=frozenset({"hypernet"}),
    reads=job_plans.HYPERNET_READS,
    plans_with=RUNS,
    code=("train/hypernet.py",),
    parallel=True,
    gpu=True,
    expand=lambda params: [{"pseed": str(s)} for s in availability.network_seeds(params)],  # seed k: pseed k's init
    skip_reason=lambda params, wc: availability.needed_by(params, "hypernet"),
    data=job_plans.hypernet_data,  # init.hypernet.network: a network trained by another study, copied
)


INIT = Stage(
    name="init",
    run="vocabtransfer.init.initialise:run",
    help="initialise the target embeddings with one method and save the model",
    wildcards=("lang", "method", "pseed"),
    inputs=init_plans.init_inputs,
    outputs={"init": paths.INIT_DIR},
    directories=frozenset({"init"}),
    reads=job_plans.init_reads,
    code=job_plans.init_code,
    expand=lambda params: [{"method": m, "pseed": str(s)} for m, s in availability.init_runs(params)],
    parallel=True,
    gpu=True,
    skip_reason=lambda params, wc: availability.method_reason(params, wc["lang"], wc["method"]),
    data=job_plans.init_data,
)


INIT_EVAL = Stage(  # the methods compared right after initialisation
    name="init_eval",
    run="vocabtransfer.evaluate.init_eval:run",
    help="loss right after initialisation and parallel-sentence retrieval, per method",
    inputs=eval_plans.init_eval_inputs,
    outputs={"init_eval": paths.INIT_EVAL, "plot": paths.INIT_EVAL_PLOT},
    reads=("seed", "init.methods", "source_head.text", "source_head.eval_lines", "init_eval"),
    plans_with=RUNS,
    code=("evaluate/init_eval.py",),
    parallel=True,
    gpu=True,
    partial=lambda params, wc: {"retrieval": why} if (why := availability.retrieval_reason(params, wc["lang"])) else {},
    data=job_plans.init_eval_data,
)


# ---------------------------------------------------------------- train: continued pretraining
PRETRAIN_TUNE = Stage(  # pretrain.tune: each method x objective's peak learning rate, on the dev split
    name="pretrain_tune",
    run="vocabtransfer.train.tune_lr:run",
    help="pick a method x objective's peak learning rate: short wsd runs at each pretrain.tune rate, dev-split loss",
    wildcards=("lang", "method", "objective"),
    inputs=job_plans.tune_inputs,
    outputs={"tuning": paths.PRETRAIN_TUNE},
    reads=pretrain_plans.tune_reads,
    plans_with=RUNS,
    code=("train/tune_lr.py",),
    expand=pretrain_plans.tune_expand,
    skip_reason=lambda params, wc: availability.method_reason(params, wc["lang"], wc["method"]),
    parallel=True,
    gpu=True,
)
PRETRAIN = Stage(
    name="pretrain",
    run="vocabtransfer.train.pretrain:run",
    help="continued pretraining of an initialised model with the standard, selfish or distill objective",
    wildcards=("lang", "method", "objective", "pseed"),
    inputs=job_plans.pretrain_inputs,
    outputs={"pretrain": paths.PRETRAIN_DIR},
    directories=frozenset({"pretrain"}),
    reads=("seed", "pretrain"),  # a subsection of another objective or schedule left out (params_root.section_leaves)
    plans_with=RUNS,
    code=("train/pretrain.py",),
    expand=pretrain_plans.pretrain_expand,
    skip_reason=lambda params, wc: availability.method_reason(params, wc["lang"], wc["method"]),
    parallel=True,
    processes=lambda params: params.pretrain.processes,  # > 1: launched with accelerate, N GPUs on a cluster
    gpu=True,
)


# ---------------------------------------------------------------- evaluate: the pretrained models
FINETUNE_EVAL = Stage(
    name="finetune_eval",
    run="vocabtransfer.evaluate.finetune_eval:run",
    help="fine-tune one model on one downstream task (nli, qa, ner) with one seed and score it",
    wildcards=("lang", "task", "model", "seed"),
    inputs=finetune_plans.finetune_inputs,
    outputs={"result": paths.EVAL_RESULT},
    # eval.models and eval.seeds decide which jobs exist, not what one computes; of the task's data its language's
    reads=("seed", "eval.precision", "eval.test_precision", "eval.tasks.{task}"),
    # finetune_eval.py and the task's module: editing one task reruns only its jobs
    plans_with=RUNS,
    code=lambda params, wildcards: ("evaluate/finetune_eval.py", f"evaluate/tasks/{wildcards['task']}.py"),
    expand=job_plans.finetune_jobs,
    skip_reason=finetune_plans.finetune_skip_reason,
    data=finetune_plans.finetune_data_files,
    parallel=False,  # small models: two one-thread jobs side by side use two cores better than one job
    gpu=True,
)
FLOOR = Stage(  # what a task scores without a model: the bar finetune_eval's scores are read against
    name="floor",
    run="vocabtransfer.evaluate.task_floor:run",
    help="the score of a task's floor (majority class, training lexicon, sliding-window span) on its test split",
    wildcards=("lang", "task"),
    outputs={"floor": paths.EVAL_FLOOR},
    reads=("seed", "eval.tasks.{task}"),
    code=lambda params, wildcards: ("evaluate/task_floor.py", f"evaluate/tasks/{wildcards['task']}.py"),
    expand=finetune_plans.floor_tasks,
    skip_reason=finetune_plans.floor_skip_reason,
    data=finetune_plans.finetune_data_files,
)


TOKEN_FREQUENCY_LOSS = Stage(
    name="token_frequency_loss",
    run="vocabtransfer.evaluate.token_frequency_loss:run",
    help="held-out loss per train-frequency bucket (init vs standard vs selfish pretraining) and bits per byte",
    inputs=eval_plans.token_frequency_inputs,
    outputs={
        "table": paths.TOKEN_FREQUENCY_LOSS,
        "blocks": paths.TOKEN_FREQUENCY_BLOCKS,
        "bits_per_byte": paths.BITS_PER_BYTE,
        "plot": paths.TOKEN_FREQUENCY_PLOT,
    },
    reads=(
        "seed",
        "token_frequency_loss",
        "init.methods",
        "pretrain.methods",
        "pretrain.objectives",
        "pretrain.pairs",
        "pretrain.seeds",
    ),
    plans_with=RUNS,
    code=("evaluate/token_frequency_loss.py",),
    parallel=True,
    gpu=True,
    skip_reason=eval_plans.token_frequency_skip_reason,
)
GRADIENT_SCENARIOS = Stage(
    name="gradient_scenarios",
    run="vocabtransfer.evaluate.gradient_scenarios:run",
    help="gradient reaching each token's embedding: as input, as target, as non-target (start and end)",
    wildcards=("lang", "method", "objective", "pseed"),
    inputs=job_plans.gradient_scenarios_inputs,
    outputs={"table": paths.GRADIENT_SCENARIOS, "plot": paths.GRADIENT_PLOT},
    reads=("seed", "gradient_scenarios", "pretrain.selfish"),  # the margin a selfish run's loss used: selfish only
    plans_with=RUNS,
    code=("evaluate/gradient_scenarios.py",),
    # descriptive, on the first pretraining seed only
    expand=lambda params: [{"method": m, "objective": o, "pseed": "1"} for m, o in availability.pretrain_pairs(params)],
    skip_reason=lambda params, wc: availability.method_reason(params, wc["lang"], wc["method"]),
    parallel=True,
    gpu=True,
)


LM_EVAL = Stage(
    name="lm_eval",
    run="vocabtransfer.evaluate.harness:run",
    help="one causal model judged by lm-evaluation-harness on the lm_eval.tasks of its language",
    wildcards=("lang", "model"),
    inputs=lambda params, wc: {"model": finetune_plans.parse_model(params, wc["model"])["input"]},
    outputs={"scores": paths.LM_EVAL_SCORES, "samples": paths.LM_EVAL_SAMPLES},
    reads=("seed", "lm_eval"),  # but lm_eval.models, which decides which jobs exist (rerun=False)
    plans_with=(*RUNS, "source_model"),
    code=("evaluate/harness.py", "evaluate/harness_tasks/utils.py"),  # the task YAMLs: data_files and params
    expand=lambda params: [{"model": m} for m in harness_plans.models(params)] if params.lm_eval.tasks else [],
    skip_reason=harness_plans.skip_reason,
    data=harness_plans.data_files,
    gpu=True,
)


# ---------------------------------------------------------------- report: reads every evaluation above
REPORT = Stage(
    name="report",
    run="vocabtransfer.report.build:run",
    help="the study's report: results/report.md with figures, DVC plots (valid-loss curves) and metrics",
    wildcards=(),
    inputs=lambda params, wc: report_plans.inputs(report_plans.plan(params, STAGES)),
    outputs={
        "report": paths.REPORT,
        "figures": paths.REPORT_FIGURES,
        "curves": paths.REPORT_CURVES,
        "metrics": paths.REPORT_METRICS,
    },
    directories=frozenset({"figures", "curves"}),
    metrics=frozenset({"metrics"}),
    plots=report_plans.dvc_plots,
    reads=("seed", "languages", "source_model", "init.methods", "report"),
    plans_with=EVERY_JOB,
    code=("report/build.py",),
)

EXPORT = Stage(  # what a user takes away: one run as a Hugging Face folder with its model card (and GGUF)
    name="export",
    run="vocabtransfer.report.export:run",
    help="the recommended pretrained run (or export.model's) as a Hugging Face folder with a model card, and a GGUF "
    "file for a decoder source",
    inputs=lambda params, wc: export_plans.inputs(params, wc, STAGES),
    outputs={"export": paths.EXPORT_DIR},
    directories=frozenset({"export"}),
    reads=("seed", "source_model", "report.baseline", "report.confidence", "report.bootstrap_resamples", "export"),
    plans_with=EVERY_JOB,
    code=("report/export.py", "plan/export_plans.py"),
    skip_reason=export_plans.check,
)

# the table, in the order above (topological: tests/project/test_dag.py); each declaration checked against the stage
# contract (stage_spec.contract_fault), a name declared twice refused
STAGES: Registry[Stage] = Registry("stage", check=contract_fault)
for _stage in (
    *(CORPUS, SOURCE_MODEL, TOKENIZER, PRETOKENIZE, FASTTEXT, OVERLAP),  # data
    *(SOURCE_HEAD, SOURCE_FASTTEXT, WORD_FASTTEXT, SOURCE_SNMF, DONOR, HYPERNET, INIT, INIT_EVAL),  # init
    *(PRETRAIN_TUNE, PRETRAIN),  # train
    *(FINETUNE_EVAL, FLOOR, TOKEN_FREQUENCY_LOSS, GRADIENT_SCENARIOS, LM_EVAL),  # evaluate
    *(REPORT, EXPORT),  # report
):
    STAGES.register(_stage.name)(_stage)
