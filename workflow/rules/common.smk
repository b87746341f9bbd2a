# Helpers shared by all rule files: config validation and the stage table lookups.
# (The only file with helper functions; rule files hold rules.)

import os
import re
import sys

import yaml

from vocabtransfer.pipeline import paths
from vocabtransfer.app import plan
from vocabtransfer.app.params import schema, validate_params
from vocabtransfer.pipeline.config import load_yaml, merge_overlay, read_yaml, write_merged
from vocabtransfer.plan.params_root import Params
from vocabtransfer.app.runner import param_values
from vocabtransfer.pipeline import fingerprint
from vocabtransfer.plan.stages import STAGES
from vocabtransfer.errors import VocabTransferError

# the config Snakemake sees: params.yaml, then every --configfile over it, then --config. It is
# rebuilt here with `merge_overlay`, which merges key by key as Snakemake does, except that an
# overlay's data source (`path`/`url`/`dataset`) replaces params.yaml's source for that language.
_overlays = [os.path.relpath(str(f)) for f in workflow.overwrite_configfiles]
_sources = ["params.yaml"] + _overlays


def _typed(value):
    """--config values as YAML: Snakemake types `seed=7` but leaves `corpus={max_bytes: 9}`'s 9 a string."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, str):
        try:
            return load_yaml(value)
        except yaml.YAMLError:
            return value
    return value


try:
    _merged = read_yaml("params.yaml")
    for _overlay in _overlays:
        _merged = merge_overlay(_merged, read_yaml(_overlay))
    if workflow.config_settings.config:
        _sources.append("--config")
        _merged = merge_overlay(_merged, _typed(dict(workflow.config_settings.config)))
except VocabTransferError as exc:
    sys.exit("\n".join(f"error: {line}" for line in str(exc).splitlines()))
config.clear()
config.update(_merged or {})
PARAMS_SOURCE = " + ".join(dict.fromkeys(_sources))

try:
    _validated = validate_params(dict(config), source=PARAMS_SOURCE)
    # the stages read exactly this merged, validated config: written once per distinct config
    # (the name is its hash, so concurrent runs with other configs never share a file)
    PARAMS_FILE = write_merged(_validated, ".snakemake/vocabtransfer")
    # the validated params, typed: what every planner below reads
    PARAMS = Params(_validated)
    # what `vocabtransfer validate` checks, a dry run included (a source HF_HUB_OFFLINE keeps out stops it too)
    _lines = plan.preflight(PARAMS, source=PARAMS_SOURCE)
except VocabTransferError as exc:
    sys.exit("\n".join(f"error: {line}" for line in str(exc).splitlines()))
config.clear()
config.update(_validated)
# one line per job that params ask for but the data do not allow, before any job starts
for _line in _lines:
    print(_line, file=sys.stderr)
# every planned job's code fingerprint, written before the DAG is built: Snakemake caches what a directory
# holds, so a fingerprint first written by an input function while the DAG is built (a job reached only through
# an explicit target's inputs) would be reported missing
for _name, _stage in STAGES.items():
    for _lang in PARAMS.languages if "lang" in _stage.wildcards else [None]:
        for _wc in _stage.jobs(PARAMS, _lang):
            fingerprint.write(_name, _stage.code_modules(PARAMS, _wc))


def _asks_for_job_listing(argv):
    """--quiet (any value) or -p/--printshellcmds (also inside -np) on the command line."""
    short = [a[1:] for a in argv if a.startswith("-") and not a.startswith("--") and a[1:].isalpha()]
    return any(a in ("--quiet", "--printshellcmds") for a in argv) or any(set(s) & {"q", "p"} for s in short)


# A dry run prints the plan a person can read: the jobs per stage (with the skip lines above), as
# `snakemake -n --quiet` does, rather than a dozen lines per job; `snakemake -n -p` (or any --quiet,
# e.g. `--quiet host`) lists every job with its inputs, outputs, reason and shell command.
if workflow.output_settings.dryrun and workflow.output_settings.quiet is None and not _asks_for_job_listing(sys.argv[1:]):
    from snakemake.settings.enums import Quietness

    workflow.output_settings.quiet = {Quietness.RULES, Quietness.PROGRESS}
    print("dry run: the jobs per stage; `snakemake -n -p` lists every job", file=sys.stderr)
# what every rule's shell passes as --params (an environment variable, so that the command line
# itself, which Snakemake compares to decide reruns, stays the same whatever the config)
os.environ["VOCABTRANSFER_PARAMS"] = PARAMS_FILE

wildcard_constraints:
    lang="|".join(PARAMS.languages),
    method="|".join(re.escape(m) for m in PARAMS.init.methods),
    objective="|".join(schema()["properties"]["pretrain"]["properties"]["objectives"]["items"]["enum"]),
    pseed=r"[1-9][0-9]*",
    task="|".join(PARAMS.eval.task_sections()),
    model=r"source|[A-Za-z0-9_+]+-[a-z]+-pseed[1-9][0-9]*",
    seed=r"[0-9]+",


def stage_input(name):
    """The stage's inputs (use with `unpack`): the artefacts it reads, computed from params and
    wildcards where they depend on them, the local data files it reads (`Stage.data`, so an edited
    corpus or dictionary reruns its jobs), and as `code` one file with the sha256 of every
    vocabtransfer module it runs (vocabtransfer.pipeline.fingerprint; it carries the newest module's
    mtime), so that editing a module reruns its jobs, as under DVC. A job that params or
    the data present rule out (`Stage.skip_reason`) is an error naming the reason."""
    stage = STAGES[name]

    def inputs(wildcards):
        wc = dict(wildcards)
        reason = stage.why_skipped(PARAMS, wc)
        if reason is not None:
            raise VocabTransferError(f"{name} {' '.join(wc.values())}: not possible with these params: {reason}")
        code = fingerprint.write(name, stage.code_modules(PARAMS, wc))
        return {**stage.input_templates(PARAMS, wc), **stage.data_files(PARAMS, wc), "code": code}

    return inputs


def stage_output(name):
    stage = STAGES[name]
    return {k: directory(v) if k in stage.directories else v for k, v in stage.outputs.items()}


def stage_params(name):
    """The params leaves a stage reads, as a Snakemake param: changing one reruns the job."""
    return lambda wildcards: param_values(PARAMS, name, dict(wildcards))


def _job_name(name):
    return "-".join("{" + w + "}" for w in STAGES[name].wildcards) or "all"


def stage_log(name):
    return paths.LOG.format(stage=name, name=_job_name(name))


def stage_benchmark(name):
    return paths.BENCHMARK.format(stage=name, name=_job_name(name))


def stage_threads(name):
    """1, or for a parallel stage every core it may use: --max-threads when given (the SLURM
    profile sets it: cores per cluster job), else --cores. A stage that is bit-reproducible only on
    one thread (fastText) gets one while its `Stage.one_thread_if` is true of params (`Stage.one_thread`)."""
    stage = STAGES[name]
    if stage.one_thread(PARAMS):
        return 1
    return workflow.resource_settings.max_threads or workflow.cores


# Among the jobs that are ready, Snakemake starts those of higher priority first: the stages that
# later jobs wait for go before the leaves of the DAG, so that on a few cores the long pretrain jobs
# do not queue behind dozens of evaluation jobs and end up last.
LEAF_STAGES = ("init_eval", "token_frequency_loss", "gradient_scenarios", "finetune_eval", "floor", "lm_eval", "report")


def stage_priority(name):
    return 0 if name in LEAF_STAGES else 1


# Cluster settings come from the environment, so that one profile fits every cluster
# (workflow/profiles/slurm; local runs ignore them): the account, the partition of the CPU
# stages (unset: the cluster's default), and the GPU partition (`none`: no GPU partition, the
# GPU stages run on CPU nodes without asking for a GPU).
SLURM_ACCOUNT = os.environ.get("VOCABTRANSFER_SLURM_ACCOUNT", "")
SLURM_PARTITION = os.environ.get("VOCABTRANSFER_SLURM_PARTITION", "")
SLURM_GPU_PARTITION = os.environ.get("VOCABTRANSFER_SLURM_GPU_PARTITION", "gpu")


def stage_processes(name):
    """The job's data-parallel processes (`Stage.processes`, e.g. pretrain.processes), else 1."""
    processes = STAGES[name].processes
    return processes(PARAMS) if processes else 1


def stage_resources(name):
    """A job's cluster resources from the stage table: a GPU stage (`Stage.gpu`) asks for one GPU per
    data-parallel process in the GPU partition, every other stage runs in the CPU partition."""
    res = {"slurm_account": SLURM_ACCOUNT} if SLURM_ACCOUNT else {}
    if STAGES[name].gpu and SLURM_GPU_PARTITION != "none":
        return {**res, "gpu": stage_processes(name), "slurm_partition": SLURM_GPU_PARTITION}
    return {**res, "slurm_partition": SLURM_PARTITION} if SLURM_PARTITION else res


# appended to every `vocabtransfer <stage>` shell command
STAGE_ARGS = '--params "$VOCABTRANSFER_PARAMS" --threads {threads} --log-file {log}'


def stage_args(name):
    """The job's `--<wildcard> <value>` options (a param: it is computed per job and bound to the stage
    when the rule is defined, while a `shell:` string in a loop is formatted later)."""
    import shlex

    return lambda wildcards: " ".join(f"--{w} {shlex.quote(str(wildcards[w]))}" for w in STAGES[name].wildcards)


def stage_launch(name):
    """`vocabtransfer`, or for a job of N > 1 data-parallel processes `accelerate launch … -m vocabtransfer`."""
    return STAGES[name].launch(PARAMS)


# every rule's shell: the stage is the rule's name
STAGE_SHELL = "{params.launch} {rule} {params.args} " + STAGE_ARGS


def stage_targets(name, output=None):
    """The outputs (all, or the one named `output`) of every job of a stage that params and the data
    present give, for every language (the job planner, `Stage.jobs`)."""
    stage = STAGES[name]
    keys = [output] if output else list(stage.outputs)
    targets = []
    for lang in PARAMS.languages if "lang" in stage.wildcards else [None]:
        for wc in stage.jobs(PARAMS, lang):
            targets += [paths.fill(stage.outputs[k], **wc) for k in keys]
    return targets


def all_targets():
    targets = stage_targets("pretokenize", "stats") + stage_targets("init_eval", "init_eval")
    targets += stage_targets("pretrain", "pretrain") + stage_targets("finetune_eval", "result")
    targets += stage_targets("token_frequency_loss", "table") + stage_targets("gradient_scenarios", "table")
    targets += stage_targets("lm_eval", "scores")
    # the export (results/<lang>/export) is a target of its own, not of `all`: `snakemake results/sw/export`
    return targets + [paths.REPORT]  # the report reads every other result


# a lock left by a local run killed hard is released when its owner is gone (vocabtransfer.pipeline.locks)
from vocabtransfer.pipeline import locks

locks.on_load(workflow)


onstart:
    locks.on_start(workflow)
