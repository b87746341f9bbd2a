"""The stage table's per-job planners that belong to no one phase: what one init job reads of params
(`init_reads`), and one job's inputs, entry modules, data files, jobs or reason to skip where
the table works them out itself (fasttext, source_snmf, hypernet, init, init_eval, pretrain, finetune_eval,
gradient_scenarios). A phase's own planners live in its planning module (e.g. `init_plans.init_inputs`);
vocabtransfer.plan.stages names both.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.pipeline import names, paths
from vocabtransfer.pipeline.stage_spec import PACKAGE, module_file
from vocabtransfer.pipeline.typed import key_of
from vocabtransfer.plan.data_params import TokenizerParams
from vocabtransfer.plan.params_root import Params
from vocabtransfer.plan import availability, finetune_plans, init_plans, pretrain_plans
from vocabtransfer.plan.method_catalog import hypernet_network, network_folder, network_languages
from vocabtransfer.plan.method_options import HypernetOptions
from vocabtransfer.plan.methods import METHODS, info
from vocabtransfer.plan.objectives import TEACHER_OBJECTIVES


def tokenizer_reads(params: Params, wc: dict[str, str]) -> tuple[str, ...]:
    """What the tokenizer stage reads: `tokenizer.from` alone when it names an existing tokenizer (the training
    keys are not used then), else the training keys (`from` and `donor_model`, stage donor's, left out)."""
    if params.tokenizer.from_ is not None:
        return ("source_model", "tokenizer.from")
    untrained = ("from", "donor_model")
    return ("source_model", *(f"tokenizer.{key_of(f)}" for f in fields(TokenizerParams) if key_of(f) not in untrained))


def tokenizer_data(params: Params, wc: dict) -> dict[str, Path]:
    """The local folder or file `tokenizer.from` names (a hub id, `hf://…` file or `package:…` is pinned by its
    name, a rerun key)."""
    path = paths.local_model_path(params.tokenizer.from_)
    return {"data_tokenizer": path} if path is not None else {}


def donor_data(params: Params, wc: dict) -> dict[str, Path]:
    """The local folder or file `tokenizer.donor_model` names and the one `tokenizer.from` names (stage donor checks
    that they are of one vocabulary; a hub id, `hf://…` file or `package:…` is pinned by its name)."""
    donor = paths.local_model_path(params.tokenizer.donor_model)
    return {**({"data_donor": donor} if donor is not None else {}), **tokenizer_data(params, wc)}


def overlap_reads(params: Params, wc: dict[str, str]) -> tuple[str, ...]:
    """What overlap reads: its section, and `tokenizer.from` where it is set (an existing target's special tokens
    are not refused for differing from the source's: data.overlap)."""
    return ("source_model", "overlap") + (("tokenizer.from",) if params.tokenizer.from_ is not None else ())


def fasttext_data(params: Params, wc: dict) -> dict[str, Path]:
    """The pretrained word vectors fasttext's wordlevel mode reads, when it names them."""
    opts = params.fasttext
    return (
        {"data_pretrained": paths.data_path(opts.pretrained_path)}
        if opts.mode == "wordlevel" and opts.pretrained_path
        else {}
    )


def snmf_skip_reason(params: Params, wc: dict) -> str | None:
    """source_snmf runs when some init method is snmf or <method>+snmf."""
    if any(init_plans.uses_snmf(m) for m in params.init.methods):
        return None
    return "init.methods has no snmf or <method>+snmf"


def hypernet_inputs(params: Params, wc: dict) -> dict[str, str]:
    """The source model and the training text of each language it trains on (`init.hypernet.languages`, else every
    language): the hypernet samples tokenizers from them."""
    return {
        "source": paths.SOURCE_MODEL,
        **{f"train_{lang}": paths.fill(paths.CORPUS_TRAIN, lang=lang) for lang in network_languages(params)},
    }


def hypernet_data(params: Params, wc: dict) -> dict[str, Path]:
    """`init.hypernet.network`'s stats.json (rewritten whenever that network is trained again), a data input of the
    hypernet job that copies it: a retrained network reruns it and the init jobs that apply it."""
    directory = hypernet_network(params)
    return {"data_network": network_folder(directory, wc["pseed"]) / "stats.json"} if directory is not None else {}


# what the hypernet job reads: the training keys of init.hypernet (HypernetOptions.TRAINING, save_every aside: it
# changes no output)
HYPERNET_READS = (
    "seed",
    "languages",
    *(
        f"init.hypernet.{f.name}"
        for f in fields(HypernetOptions)
        if f.name in HypernetOptions.TRAINING and f.metadata.get("rerun", True)
    ),
)


def init_reads(params: Params, wildcards: dict) -> list[str]:
    """What one init job reads: the seed and the options of its method (`init.<method>`, the class its catalog entry
    declares) and, for `base+fact`, of the factorisation's (e.g. init.focus and init.svd)."""
    base, fact = names.split_method(wildcards["method"])
    return ["seed", f"init.{base}"] + ([f"init.{fact}"] if fact else [])


def init_code(params: Params, wildcards: dict) -> tuple[str, ...]:
    """The entry modules of one init job: initialise.py, the methods' catalog (what the job reads of its method's
    MethodInfo), the method's module and, for base+fact, the factorised wrapper; editing another method's module
    does not rerun this one."""
    base, fact = names.split_method(wildcards["method"])
    dotted = METHODS.module_of(base) if base in METHODS else ""  # from its lazy reference: no import
    module = module_file(dotted)  # e.g. random lives in methods/baselines.py
    if module is None:  # a method registered from outside the package: no code file to rerun on
        raise VocabTransferError(
            f"init method {base}: its module {dotted or '(unregistered)'} is not a file "
            "under src/vocabtransfer; register methods in vocabtransfer.init.methods"
        )
    entries = ("init/initialise.py", "plan/method_catalog.py", str(module.relative_to(PACKAGE)))
    return entries + (("init/methods/variants.py",) if fact else ())


def init_data(params: Params, wildcards: dict) -> dict[str, Path | None]:
    """The local data files of one init job: what the method's `data=` (plan/method_catalog.py) names
    (wechsel: the language's bilingual dictionary)."""
    data = info(wildcards["method"]).data
    return data(params, wildcards["lang"]) if data else {}


def init_eval_data(params: Params, wildcards: dict) -> dict[str, Path]:
    """The held-out text of the reference row and, when retrieval runs, the XNLI files."""
    out = {"data_source_text": paths.data_path(params.source_head.text)}
    if availability.retrieval_reason(params, wildcards["lang"]) is None:
        out.update(zip(("data_xnli_source", "data_xnli"), availability.xnli_files(params, wildcards["lang"])))
    return out


def pretrain_inputs(params: Params, wildcards: dict) -> dict[str, str]:
    """The run's init model (pseed 1's for a method without random rows) and pre-tokenised splits; for the
    distill objective also its teacher, the source model with its own tokenizer."""
    init = paths.partial(
        paths.INIT_DIR,
        method=wildcards["method"],
        pseed=availability.init_pseed(wildcards["method"], wildcards["pseed"]),
    )
    teacher = {"source": paths.SOURCE_MODEL} if wildcards.get("objective") in TEACHER_OBJECTIVES else {}
    tuning = (
        {"tuning": paths.partial(paths.PRETRAIN_TUNE, method=wildcards["method"], objective=wildcards["objective"])}
        if pretrain_plans.tune_expand(params) and not teacher
        else {}
    )  # pretrain.tune: the peak rate picked on the dev split
    return {
        "init": init,
        "train": paths.PRETOK_TRAIN,
        "valid": paths.PRETOK_VALID,
        "valid_text": paths.CORPUS_VALID,
        **teacher,
        **tuning,
    }  # valid_text: bits per byte at every evaluation


def tune_inputs(params: Params, wildcards: dict) -> dict[str, str]:
    """A pretrain_tune job's inputs: pretraining seed 1's (`pretrain_inputs`) and the dev split's text."""
    inputs = pretrain_inputs(params, {**wildcards, "pseed": "1"})
    return {**{k: v for k, v in inputs.items() if k != "tuning"}, "dev_text": paths.CORPUS_DEV}


def finetune_jobs(params: Params) -> list[dict[str, str]]:
    """Every (task, model, seed) params ask for; `skip_reason` rules out, per language, the tasks
    without data and the models that do not exist there (and says why)."""
    opts = params.eval
    return [
        {"task": t, "model": m, "seed": str(s)}
        for t, section in opts.task_sections().items()
        if section.enabled
        for m in finetune_plans.eval_models(params)
        for s in range(1, opts.seeds + 1)
    ]


def gradient_scenarios_inputs(params: Params, wc: dict) -> dict[str, str]:
    """The run's training ids, its pretrained model and the init model it started from."""
    return {
        "train_ids": paths.PRETOK_TRAIN,
        "pretrain": paths.PRETRAIN_DIR,
        "init": paths.partial(
            paths.INIT_DIR, method=wc["method"], pseed=availability.init_pseed(wc["method"], wc["pseed"])
        ),
    }
