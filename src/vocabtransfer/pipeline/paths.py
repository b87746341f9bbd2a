"""Every artefact path template: the single source of truth for the Snakefile,
the dvc.yaml generator and the CLI.

Templates use `{lang}` / `{method}` wildcards and are relative to the working directory
(the repository root when run through Snakemake or DVC).
"""

from __future__ import annotations

import os
from pathlib import Path

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.pipeline.typed import ParamsTree

RESULTS = "results"
LOGS = "logs"

# corpus
CORPUS_TRAIN = "results/{lang}/corpus/train.parquet"
CORPUS_VALID = "results/{lang}/corpus/valid.parquet"
CORPUS_DEV = "results/{lang}/corpus/dev.parquet"  # the tuning split: never trained on, never scored
CORPUS_STATS = "results/{lang}/corpus/stats.json"

# target tokenizer (an HF fast-tokenizer directory)
TOKENIZER = "results/{lang}/tokenizer"
TOKENIZER_STATS = "results/{lang}/tokenizer_stats.json"

# pre-tokenisation (a split: a directory of ids.npy, offsets.npy and meta.json, data/token_ids.py)
PRETOK_TRAIN = "results/{lang}/pretokenized/train"
PRETOK_VALID = "results/{lang}/pretokenized/valid"
PRETOK_TEXT = "results/{lang}/pretokenized/train.tokens.txt"
PRETOK_STATS = "results/{lang}/pretokenized/stats.json"

# fastText auxiliary embeddings
FASTTEXT_BIN = "results/{lang}/fasttext/model.bin"
FASTTEXT_EMB = "results/{lang}/fasttext/embeddings.safetensors"
FASTTEXT_STATS = "results/{lang}/fasttext/stats.json"

# vocabulary overlap
OVERLAP = "results/{lang}/overlap/overlap.parquet"
OVERLAP_STATS = "results/{lang}/overlap/stats.json"

# per-job logs and Snakemake benchmark tables
LOG = "logs/{stage}/{name}.log"
BENCHMARK = "logs/benchmarks/{stage}/{name}.tsv"


def data_root() -> Path:
    """Root for relative data paths in params.yaml: $VOCABTRANSFER_DATA, else `data/`."""
    return Path(os.environ.get("VOCABTRANSFER_DATA") or "data")


# where a relative `source_model` path (a GGUF file or a model directory) is looked for: the one params key
# whose paths do not resolve against the data root (a model is named like a hub id, `owner/name`)
RELATIVE_MODEL = (
    "a relative source_model path resolves against the working directory, the repository root, "
    "not $VOCABTRANSFER_DATA as data paths do"
)


def check_data_root() -> None:
    """The data folder exists: else one error naming both ways to give it."""
    root = data_root()
    if not root.is_dir():
        given = (
            f"$VOCABTRANSFER_DATA is {os.environ['VOCABTRANSFER_DATA']!r}"
            if os.environ.get("VOCABTRANSFER_DATA")
            else "$VOCABTRANSFER_DATA is not set and there is no `data` link here"
        )
        raise VocabTransferError(
            f"no data folder {str(root)!r} ({given}): link the data beside the checkout with "
            "`ln -s ../shared/data data` (`make run` does) or export VOCABTRANSFER_DATA=<data folder>"
        )


def data_path(path: str | os.PathLike) -> Path:
    """Resolve a data path from params.yaml: absolute paths stay, relative ones join the data root."""
    p = Path(os.path.expanduser(str(path)))
    return p if p.is_absolute() else data_root() / p


# the local data files jobs read (Stage.data: Snakemake inputs, dvc.yaml deps), from params


def local_source_model(params: ParamsTree) -> Path | None:
    """`source_model` when it is a local directory or GGUF file (a hub id, `hf://…` file or `package:…`
    is pinned by its name only)."""
    path = local_model_path(params.source_model)
    return path if path is not None and (path.is_dir() or path.suffix.lower() == ".gguf") else None


def local_model_path(value: str | None) -> Path | None:
    """The local directory or file a model or tokenizer spelling names (`source_model`, `tokenizer.from`), None
    for a hub id, an `hf://…` file, a `package:…` or nothing."""
    if value is None or value.startswith(("hf://", "package:")):
        return None
    path = Path(value).expanduser()
    return path if path.exists() else None


def fill(template: str, **wildcards: object) -> str:
    """Fill a path template's wildcards (`{lang}`, `{method}`, `{pseed}`, …)."""
    return template.format(**wildcards)


def partial(template: str, **wildcards: object) -> str:
    """Fill some of a template's wildcards and keep the others, e.g. `{lang}`."""
    for key, value in wildcards.items():
        template = template.replace("{" + key + "}", str(value))
    return template


# source side (issue: embedding initialisation)
SOURCE_BASE = "results/source/base"  # the source as given, materialised once as an HF directory (source_model)
SOURCE_BASE_STATS = "results/source/base_stats.json"  # its weights' (and GGUF file's) sha256
SOURCE_MODEL = "results/source/model"  # the source model completed with a trained LM head (source_head)
SOURCE_HEAD_STATS = "results/source/head_stats.json"
SOURCE_WORD_FASTTEXT = "results/source/fasttext/words.bin"  # word-level fastText on source-language text
SOURCE_SNMF = "results/source/snmf.safetensors"  # semi-NMF of the source embeddings, shared by every *snmf method
# the donor model's embeddings (tokenizer.donor_model, stage donor): `input`, and `output` where untied, one row per
# target token; what init method omp_donor codes the new tokens in
DONOR_EMB = "results/source/donor/embeddings.safetensors"
DONOR_STATS = "results/source/donor/stats.json"
# the hypernetworks of init method hypernet, trained once per source model and network seed (stage hypernet; the
# init of pretraining seed k applies network seed k): config.json, hypernet.safetensors, stats.json; its Trainer
# checkpoints outside the declared output
HYPERNETS = "results/source/hypernet"  # every network seed's folder, pseed<k>: what init.hypernet.network names
HYPERNET = HYPERNETS + "/pseed{pseed}"
HYPERNET_CHECKPOINTS = "checkpoints/source/hypernet/pseed{pseed}"
WORD_FASTTEXT = "results/{lang}/fasttext/words.bin"  # word-level fastText on the target corpus (WECHSEL)

# embedding initialisation: a directory per method and pretraining seed with embeddings.safetensors,
# model/, stats.json. A method whose rows do not depend on the seed (mean) has pseed1 only.
INIT_DIR = "results/{lang}/init/{method}/pseed{pseed}"
INIT_EVAL = "results/{lang}/init_eval.parquet"
INIT_EVAL_PLOT = "results/{lang}/init_eval.png"

# continued pretraining (one directory per language × method × objective × pretraining seed): model/
# (HF directory with the tokenizer), metrics.parquet, valid_blocks.parquet, stats.json. Trainer
# checkpoints live outside the declared outputs, so a killed job resumes from them and Snakemake/DVC
# never delete them with an incomplete output.
PRETRAIN_DIR = "results/{lang}/pretrain/{method}/{objective}/pseed{pseed}"
PRETRAIN_CHECKPOINTS = "checkpoints/{lang}/pretrain/{method}/{objective}/pseed{pseed}"
# pretrain.tune: the dev loss of each peak learning rate tried, and the pick (train.tune_lr)
PRETRAIN_TUNE = "results/{lang}/pretrain_tune/{method}/{objective}/tuning.json"
PRETRAIN_TUNE_CHECKPOINTS = "checkpoints/{lang}/pretrain_tune/{method}/{objective}"

# analyses of continued pretraining
TOKEN_FREQUENCY_LOSS = "results/{lang}/token_frequency_loss.parquet"
TOKEN_FREQUENCY_PLOT = "results/{lang}/token_frequency_loss.png"
TOKEN_FREQUENCY_BLOCKS = "results/{lang}/token_frequency_blocks.parquet"  # per model, bucket and held-out block
BITS_PER_BYTE = (
    "results/{lang}/bits_per_byte.parquet"  # per model and valid line: bits, bytes, tokens (token_frequency_loss)
)
GRADIENT_SCENARIOS = "results/{lang}/gradients/{method}/{objective}/pseed{pseed}.parquet"
GRADIENT_PLOT = "results/{lang}/gradients/{method}/{objective}/pseed{pseed}.png"

# downstream evaluation: one JSON per language × task × model × fine-tuning seed, where `model` is
# `<method>-<objective>-pseed<k>` (pretrained with pretraining seed k), `<method>-init-pseed<k>`
# (initialised only) or `source` (no transfer); see vocabtransfer.pipeline.names
EVAL_RESULT = "results/{lang}/eval/{task}/{model}/seed{seed}.json"
EVAL_FLOOR = "results/{lang}/eval/{task}/floor.json"  # the task's floor (evaluate/task_floor.py)
EVAL_CHECKPOINTS = "checkpoints/{lang}/eval/{task}/{model}/seed{seed}"

# the study's report
REPORT = "results/report.md"
REPORT_DIR = "results/report"
REPORT_FIGURES = "results/report/figures"  # the report's PNG figures
REPORT_CURVES = "results/report/curves"  # valid-loss curves as CSV, one per language (DVC plots)
REPORT_METRICS = "results/report/metrics.json"  # final scores per language, model and task (DVC metrics)

# the exported run of a language (report/export.py): the pretrained model's Hugging Face folder with its model card
# (README.md), export.json and, for a decoder source, a GGUF file of the model and its tokenizer
EXPORT_DIR = "results/{lang}/export"

# lm-evaluation-harness, zero-shot (evaluate/harness.py): per language and model, the aggregate scores and
# the per-item samples the report pairs across models
LM_EVAL_SCORES = "results/{lang}/lm_eval/{model}/scores.json"
LM_EVAL_SAMPLES = "results/{lang}/lm_eval/{model}/samples.parquet"
