# vocabtransfer workflow: `snakemake --cores N` reproduces the whole study.
# Every rule's shell is `vocabtransfer <stage> …`; the rules are generated from the stage table
# src/vocabtransfer/plan/stages.py (the same table that generates dvc.yaml).

from snakemake.utils import min_version

min_version("9.0")


configfile: "params.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/stages.smk"
include: "workflow/rules/report.smk"


rule all:
    input:
        all_targets(),
    default_target: True
