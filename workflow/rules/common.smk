# Helpers shared by all rule files: config validation and the stage table lookups.
# (The only file with helper functions; rule files hold rules.)

import os
import re
import sys

from vocabtransfer import paths as P
from vocabtransfer import stages as S
from vocabtransfer.config import validate_params
from vocabtransfer.errors import VocabTransferError

PARAMS_FILE = str(workflow.overwrite_configfiles[-1]) if workflow.overwrite_configfiles else "params.yaml"

try:
    _validated = validate_params(dict(config), source=PARAMS_FILE)
except VocabTransferError as exc:
    sys.exit(f"error: {exc}")
config.clear()
config.update(_validated)

wildcard_constraints:
    lang="|".join(config["languages"]),
    method="|".join(re.escape(m) for m in config["init"]["methods"]),


def stage_input(name):
    """The stage's inputs (use with `unpack`): the artefacts it reads, computed from params and
    wildcards where they depend on them, and as `code` the vocabtransfer modules it runs (the
    installed ones), so that editing a module reruns its jobs, as under DVC."""
    stage = S.STAGES[name]

    def inputs(wildcards):
        wc = dict(wildcards)
        code = [str(S.PACKAGE / module) for module in stage.code_for(config, wc)]
        return {**stage.input_templates(config, wc), "code": code}

    return inputs


def stage_output(name):
    stage = S.STAGES[name]
    return {k: directory(v) if k in stage.directories else v for k, v in stage.outputs.items()}


def stage_params(name):
    """The params leaves a stage reads, as a Snakemake param: changing one reruns the job."""
    return lambda wildcards: S.param_values(config, name, dict(wildcards))


def _job_name(name):
    return "-".join("{" + w + "}" for w in S.STAGES[name].wildcards) or "all"


def stage_log(name):
    return P.LOG.format(stage=name, name=_job_name(name))


def stage_benchmark(name):
    return P.BENCHMARK.format(stage=name, name=_job_name(name))


def stage_threads(name):
    """1, or for a parallel stage every core it may use: --max-threads when given (the SLURM
    profile sets it: cores per cluster job), else --cores."""
    if not S.STAGES[name].parallel:
        return 1
    return workflow.resource_settings.max_threads or workflow.cores


# Cluster settings come from the environment, so that one profile fits every cluster
# (workflow/profiles/slurm; local runs ignore them): the account, the partition of the CPU
# stages (unset: the cluster's default), and the GPU partition (`none`: no GPU partition, the
# GPU stages run on CPU nodes without asking for a GPU).
SLURM_ACCOUNT = os.environ.get("VOCABTRANSFER_SLURM_ACCOUNT", "")
SLURM_PARTITION = os.environ.get("VOCABTRANSFER_SLURM_PARTITION", "")
SLURM_GPU_PARTITION = os.environ.get("VOCABTRANSFER_SLURM_GPU_PARTITION", "gpu")


def stage_resources(name):
    """A job's cluster resources from the stage table: a GPU stage (`Stage.gpu`) asks for one
    GPU in the GPU partition, every other stage runs in the CPU partition."""
    res = {"slurm_account": SLURM_ACCOUNT} if SLURM_ACCOUNT else {}
    if S.STAGES[name].gpu and SLURM_GPU_PARTITION != "none":
        return {**res, "gpu": 1, "slurm_partition": SLURM_GPU_PARTITION}
    return {**res, "slurm_partition": SLURM_PARTITION} if SLURM_PARTITION else res


# appended to every `vocabtransfer <stage>` shell command
STAGE_ARGS = f"--params {PARAMS_FILE} --threads {{threads}} --log-file {{log}}"


def all_targets():
    targets = []
    for lang in config["languages"]:
        targets += [
            P.fill(P.PRETOK_STATS, lang=lang),
            P.fill(P.INIT_EVAL, lang=lang),
        ]
    return targets
