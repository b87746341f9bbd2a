"""What the pipeline knows about each built-in init method, declared without importing its code: `BUILTINS`, the
one list of them.

One `MethodInfo` per method (its function's lazy reference `run`, its options class, the extra inputs its init job
reads, whether its rows depend on the seed, when it cannot run for a language, its local data files, …): planning
(the CLI, Snakemake, dvc.yaml, `vocabtransfer validate`) reads these, so it starts without torch; the method's own
module (named by `run`) is imported only when a job runs it. The registries `METHODS` (the functions) and `INFO`
(these entries) of vocabtransfer.plan.methods are derived from this list, in its order (the schema's `init.<name>`
sections). Adding a method is its module with `@register("name")` on its function and its entry here, plus its
section in params.yaml. A method registered at run time (a plugin, a test's throwaway method) declares its metadata
at its `@register` instead.
"""

from __future__ import annotations

import json
from pathlib import Path

from vocabtransfer.plan.method_options import (
    FocusOptions,
    FvtOptions,
    FvtPriorOptions,
    HypernetOptions,
    MeanOptions,
    OfaOptions,
    OmpDonorOptions,
    OmpOptions,
    OverlapOptions,
    RandomOptions,
    SnmfOptions,
    WechselOptions,
)
from vocabtransfer.plan.availability import network_seeds
from vocabtransfer.plan.methods import MethodInfo
from vocabtransfer.pipeline import paths
from vocabtransfer.plan.params_root import Params


def wechsel_dictionary(params: Params, lang: str) -> Path | None:
    """The local bilingual dictionary of `lang` (`init.wechsel.dictionaries.<lang>`), None without an entry."""
    entry = params.init.wechsel.dictionaries.get(lang)
    return paths.data_path(entry) if entry else None


def wechsel_unavailable(params: Params, lang: str) -> str | None:
    """Why `wechsel` cannot run for `lang` (None when it can)."""
    path = wechsel_dictionary(params, lang)
    if path is None:
        return f"no dictionary: init.wechsel.dictionaries has no entry for {lang}"
    if not path.is_file():
        return f"no dictionary: {path} not found (init.wechsel.dictionaries.{lang})"
    text = paths.data_path(params.init.wechsel.source_text)
    if not text.is_file():
        return f"no source-language text: {text} not found (init.wechsel.source_text)"
    return None


def wechsel_refusal(params: Params, lang: str) -> str | None:
    """A file params name for wechsel and `lang` that is not there (its dictionary, or the source-language text where
    it has one): refused, not skipped, as init.methods asks for wechsel by name. No dictionary entry for `lang` is
    a skip (`wechsel_unavailable`): params name nothing for it."""
    path = wechsel_dictionary(params, lang)
    if path is None:
        return None
    options = params.init.wechsel
    where = "relative paths resolve against $VOCABTRANSFER_DATA"
    if not path.is_file():
        return (
            f"init.wechsel.dictionaries.{lang}: {path} not found, and init.methods asks for wechsel; fix the path "
            f"({where}), or remove wechsel from init.methods"
        )
    text = paths.data_path(options.source_text)
    if not text.is_file():
        return (
            f"init.wechsel.source_text: {text} not found, and init.methods asks for wechsel; fix the path ({where}), "
            "or remove wechsel from init.methods"
        )
    return None


def hypernet_network(params: Params) -> Path | None:
    """The trained network's folder `init.hypernet.network` names (None: the study trains its own)."""
    entry = params.init.hypernet.network
    return paths.data_path(entry) if entry else None


def network_folder(directory: Path, pseed: int | str) -> Path:
    """Network seed `pseed`'s folder in the folder `init.hypernet.network` names (another study's
    results/source/hypernet, one `pseed<k>` folder a network seed)."""
    return directory / f"pseed{pseed}"


def network_languages(params: Params) -> list[str]:
    """The languages whose train splits stage hypernet trains on: `init.hypernet.languages`, else every language."""
    chosen = params.init.hypernet.languages
    return list(chosen) if chosen is not None else list(params.languages)


def hypernet_refusal(params: Params, lang: str) -> str | None:
    """`init.hypernet.languages` naming a language the study has no corpus for; `init.hypernet.network` lacking a
    network seed this study applies, or holding one whose stats.json records another source model than
    `source_model` (the job checks the weights' sha256 too)."""
    directory = hypernet_network(params)
    if directory is None:
        unknown = [x for x in network_languages(params) if x not in params.languages]
        return (
            f"init.hypernet.languages: {', '.join(unknown)} not in languages ({', '.join(params.languages)}); the "
            "network trains on the train splits of the study's own languages: add them to languages or drop them here"
            if unknown
            else None
        )
    for seed in network_seeds(params):
        stats = network_folder(directory, seed) / "stats.json"
        if not stats.is_file():
            return (
                f"init.hypernet.network: {stats} not found (network seed {seed}: the init of pretraining seed {seed} "
                "applies it); point it at the results/source/hypernet folder of a study that trained as many network "
                "seeds (pretrain.seeds with hypernet pretrained), or unset it to train the networks here"
            )
        recorded = json.loads(stats.read_text(encoding="utf-8")).get("source_model")
        if recorded != params.source_model:
            return (
                f"init.hypernet.network: {stats.parent} was trained on source model {recorded or '(not recorded)'}, "
                f"and source_model is {params.source_model}; point it at networks trained on this source "
                "model, or unset it to train them here"
            )
    return None


def donor_refusal(params: Params, lang: str) -> str | None:
    """omp_donor asked for without `tokenizer.donor_model`, whose embeddings it codes in."""
    if params.tokenizer.donor_model is not None:
        return None
    return (
        "init.methods asks for omp_donor, which codes the new tokens in the embeddings of tokenizer.donor_model, and "
        "it is not set; set tokenizer.donor_model to the model that owns the target tokenizer (tokenizer.from), or "
        "use omp (the fastText space)"
    )


# every built-in method, in the order they register
BUILTINS: tuple[MethodInfo, ...] = (
    MethodInfo("random", run="vocabtransfer.init.methods.baselines:random_init", options=RandomOptions),
    MethodInfo("overlap", run="vocabtransfer.init.methods.baselines:overlap_init", options=OverlapOptions),
    # every row a copy or the mean: no seed
    MethodInfo("mean", run="vocabtransfer.init.methods.baselines:mean_init", options=MeanOptions, deterministic=True),
    MethodInfo("focus", run="vocabtransfer.init.methods.focus:focus", options=FocusOptions, auxiliary_rows=True),
    MethodInfo("fvt", run="vocabtransfer.init.methods.fvt:fvt", options=FvtOptions),
    MethodInfo(  # the unigram of the train split's ids, and its first lines to fit the prior's weight on
        "fvt_prior",
        run="vocabtransfer.init.methods.fvt_prior:fvt_prior",
        options=FvtPriorOptions,
        inputs={"prior_ids": paths.PRETOK_TRAIN, "calibration_text": paths.CORPUS_TRAIN},
    ),
    MethodInfo(
        "hypernet",
        run="vocabtransfer.init.methods.hypernet:hypernet",
        options=HypernetOptions,
        inputs={"hypernet": paths.HYPERNET},
        stage_options=HypernetOptions.TRAINING,
        factorizable=False,
        refusal=hypernet_refusal,
    ),
    MethodInfo(
        "ofa", run="vocabtransfer.init.methods.ofa:ofa", options=OfaOptions, auxiliary_rows=True, factorizable=False
    ),
    MethodInfo("omp", run="vocabtransfer.init.methods.omp:omp", options=OmpOptions, auxiliary_rows=True),
    MethodInfo(  # omp in the space of tokenizer.donor_model, the model that owns the target tokenizer (stage donor)
        "omp_donor",
        run="vocabtransfer.init.methods.omp:omp_donor",
        options=OmpDonorOptions,
        inputs={"donor": paths.DONOR_EMB},
        auxiliary_rows=True,
        refusal=donor_refusal,
    ),
    MethodInfo(
        "snmf",
        run="vocabtransfer.init.methods.snmf:snmf",
        options=SnmfOptions,
        auxiliary_rows=True,
        factors=("snmf",),
        factorizable=False,
    ),
    MethodInfo(
        "wechsel",
        run="vocabtransfer.init.methods.wechsel:wechsel",
        options=WechselOptions,
        # the word-level fastText models of the source_fasttext / word_fasttext stages
        inputs={"source_fasttext": paths.SOURCE_WORD_FASTTEXT, "target_fasttext": paths.WORD_FASTTEXT},
        stage_options=("source_text", "fasttext"),  # read by the source_fasttext / word_fasttext stages
        condition=wechsel_unavailable,
        refusal=wechsel_refusal,
        data=lambda params, lang: {"data_dictionary": wechsel_dictionary(params, lang)},
    ),
)
