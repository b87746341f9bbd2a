# vocabtransfer workflow: `snakemake --cores N` reproduces the whole study.
# Every rule's shell is `vocabtransfer <stage> …`; inputs, outputs and the params each
# stage reads come from src/vocabtransfer/stages.py (the same table that generates dvc.yaml).

from snakemake.utils import min_version

min_version("9.0")


configfile: "params.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/auxiliary.smk"
include: "workflow/rules/init.smk"
include: "workflow/rules/pretrain.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/eval.smk"
include: "workflow/rules/analysis.smk"


rule all:
    input:
        all_targets(),
    default_target: True
