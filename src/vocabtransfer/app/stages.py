"""The stage table: every pipeline stage in DAG order, each declared by the module that holds its
code (`STAGE = Stage(...)` at its end: its function, wildcards, input and output path templates, the
params leaves it reads, its code and which jobs run; vocabtransfer.pipeline.stage_spec).

The CLI builds `vocabtransfer <stage>` from this table, the Snakemake rules take their
input/output/params from it (workflow/rules/common.smk), and `vocabtransfer dvc-yaml` generates
dvc.yaml from it; running a job of a stage is vocabtransfer.app.runner. Importing it imports
every stage module but neither torch nor transformers (Snakemake and the CLI load it before any job).
"""

from __future__ import annotations

from vocabtransfer.data import auxiliary
from vocabtransfer.data import corpus
from vocabtransfer.data import overlap
from vocabtransfer.data import pretokenize
from vocabtransfer.data import tokenizer
from vocabtransfer.init import word_fasttext
from vocabtransfer.evaluate import finetune_eval
from vocabtransfer.evaluate import floor
from vocabtransfer.evaluate import gradient_scenarios
from vocabtransfer.evaluate import harness
from vocabtransfer.evaluate import init_eval
from vocabtransfer.evaluate import token_frequency_loss
from vocabtransfer.init import initialise
from vocabtransfer.init import source_head
from vocabtransfer.init import source_model
from vocabtransfer.init import source_snmf
from vocabtransfer.report import build
from vocabtransfer.train import pretrain

STAGES = {stage.name: stage for stage in (
    corpus.STAGE,
    source_model.STAGE,
    tokenizer.STAGE,
    pretokenize.STAGE,
    auxiliary.FASTTEXT,
    overlap.STAGE,
    source_head.STAGE,
    word_fasttext.SOURCE_WORDS,
    word_fasttext.TARGET_WORDS,
    source_snmf.STAGE,
    initialise.STAGE,
    init_eval.STAGE,
    pretrain.STAGE,
    build.STAGE,  # the report
    finetune_eval.STAGE,
    floor.STAGE,
    token_frequency_loss.STAGE,
    gradient_scenarios.STAGE,
    harness.STAGE,  # lm_eval
)}
