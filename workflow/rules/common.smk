# Helpers shared by all rule files: config validation and the stage table lookups.
# (The only file with helper functions; rule files hold rules.)

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
    return workflow.cores if S.STAGES[name].parallel else 1


# appended to every `vocabtransfer <stage>` shell command
STAGE_ARGS = f"--params {PARAMS_FILE} --threads {{threads}} --log-file {{log}}"


def all_targets():
    targets = []
    for lang in config["languages"]:
        targets += [
            P.fill(P.PRETOK_STATS, lang=lang),
            P.fill(P.INIT_EVAL, lang=lang),
        ]
        jobs = S.STAGES["gradient_scenarios"].combinations(config)  # the pretrained method × objective pairs
        if jobs:
            targets.append(P.fill(P.TOKEN_FREQUENCY_LOSS, lang=lang))
            targets += [P.fill(P.GRADIENT_SCENARIOS, lang=lang, **job) for job in jobs]
    return targets
