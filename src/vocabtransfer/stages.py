"""The stage table: for every pipeline stage, its wildcards, input and output path
templates, the params leaves it reads and the code it runs.

This table is the single source of truth. The CLI builds `vocabtransfer <stage>` from it,
the Snakemake rules take their input/output/params from it (workflow/rules/common.smk),
and `vocabtransfer dvc-yaml` generates dvc.yaml from it.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from vocabtransfer import config as C
from vocabtransfer import paths as P


@dataclass(frozen=True)
class Stage:
    name: str
    func: str  # "module:function", called with a Context
    help: str
    wildcards: tuple[str, ...] = ("lang",)
    inputs: dict[str, str] | Callable[[dict, dict], dict[str, str]] = field(default_factory=dict)  # or (params, wildcards) -> dict
    outputs: dict[str, str] = field(default_factory=dict)
    directories: frozenset[str] = frozenset()  # output names that are directories
    params: tuple[str, ...] = ()  # dotted params leaves; may contain {lang}
    extra_params: Callable[[dict, dict], list[str]] | None = None  # (params, wildcards) -> more leaves
    # the stage's entry modules under src/vocabtransfer, or (params, wildcards) -> them; DVC reruns the
    # stage when one of them or any vocabtransfer module they import changes (`code_for`)
    code: tuple[str, ...] | Callable[[dict, dict], tuple[str, ...]] = ()
    parallel: bool = False  # uses all the cores it is given
    gpu: bool = False  # benefits from a GPU (SLURM profile asks for one)
    # the values of the wildcards other than `lang` that params ask for, e.g. init: one
    # {"method": m} per `init.methods` entry; dvc.yaml gets one (lang-matrix) stage per entry
    expand: Callable[[dict], list[dict[str, str]]] | None = None

    def combinations(self, params: dict) -> list[dict[str, str]]:
        """The non-`lang` wildcard values params ask for (one empty dict when there are none)."""
        return self.expand(params) if self.expand else [{}]

    def leaves(self, params: dict, wildcards: dict) -> list[str]:
        """The concrete params leaves this stage reads for these wildcards."""
        out = [leaf.format(**wildcards) for leaf in self.params]
        if self.extra_params:
            out += self.extra_params(params, wildcards)
        return out

    def code_for(self, params: dict, wildcards: dict) -> tuple[str, ...]:
        """The stage's code dependencies for these wildcards (paths relative to src/vocabtransfer):
        its entry modules and everything they import (`module_closure`)."""
        entries = self.code(params, wildcards) if callable(self.code) else self.code
        return module_closure(*entries)

    def input_templates(self, params: dict, wildcards: dict) -> dict[str, str]:
        """Input path templates; a stage whose inputs depend on params or wildcards computes them."""
        return self.inputs(params, wildcards) if callable(self.inputs) else dict(self.inputs)

    def resolve(self, templates: dict[str, str], wildcards: dict) -> dict[str, Path]:
        return {k: Path(P.fill(v, **wildcards)) for k, v in templates.items()}


STAGES: dict[str, Stage] = {}


def register(stage: Stage) -> Stage:
    STAGES[stage.name] = stage
    return stage


register(Stage(
    name="corpus",
    func="vocabtransfer.corpus:run",
    help="fetch, normalise, deduplicate, cap and split a language's raw text",
    outputs={"train": P.CORPUS_TRAIN, "valid": P.CORPUS_VALID, "stats": P.CORPUS_STATS},
    params=("seed", "corpus.sources.{lang}", "corpus.normalization", "corpus.max_bytes",
            "corpus.valid_fraction", "corpus.min_chars"),
    code=("corpus.py", "download.py"),
))
register(Stage(
    name="tokenizer",
    func="vocabtransfer.tokenizer:run",
    help="train the target tokenizer (the source tokenizer's family and conventions)",
    inputs={"train": P.CORPUS_TRAIN},
    outputs={"tokenizer": P.TOKENIZER, "stats": P.TOKENIZER_STATS},
    directories=frozenset({"tokenizer"}),
    params=("source_model", "tokenizer.family", "tokenizer.vocab_size", "tokenizer.min_frequency"),
    code=("tokenizer.py",),
    parallel=True,
))
register(Stage(
    name="pretokenize",
    func="vocabtransfer.pretokenize:run",
    help="encode the corpus with the target tokenizer; fertility stats against the source tokenizer",
    inputs={"tokenizer": P.TOKENIZER, "train": P.CORPUS_TRAIN, "valid": P.CORPUS_VALID},
    outputs={"train_ids": P.PRETOK_TRAIN, "valid_ids": P.PRETOK_VALID, "text": P.PRETOK_TEXT,
             "stats": P.PRETOK_STATS},
    params=("source_model", "pretokenize.batch_size"),
    code=("pretokenize.py",),
    parallel=True,
))
register(Stage(
    name="fasttext",
    func="vocabtransfer.auxiliary:run",
    help="fastText auxiliary embeddings for the target tokens",
    inputs={"text": P.PRETOK_TEXT, "tokenizer": P.TOKENIZER},
    outputs={"model": P.FASTTEXT_BIN, "embeddings": P.FASTTEXT_EMB, "stats": P.FASTTEXT_STATS},
    params=("seed", "fasttext.mode", "fasttext.pretrained_path", "fasttext.model", "fasttext.dim",
            "fasttext.epochs", "fasttext.min_count", "fasttext.neg", "fasttext.reproducible"),
    code=("auxiliary.py",),
    parallel=True,
))
register(Stage(
    name="overlap",
    func="vocabtransfer.overlap:run",
    help="source vs target vocabulary overlap on canonical token forms",
    inputs={"tokenizer": P.TOKENIZER},
    outputs={"overlap": P.OVERLAP, "stats": P.OVERLAP_STATS},
    params=("source_model", "overlap.exact_match_all", "overlap.fuzzy_match_all", "overlap.match_symbols"),
    code=("overlap.py",),
))


def section_leaves(params: dict, section: str) -> list[str]:
    """Every leaf under a params section, e.g. `init.focus` -> [`init.focus.block_size`, …]."""
    node = C.get(params, section)
    if not isinstance(node, dict):
        return [section]
    return [leaf for key in node for leaf in section_leaves(params, f"{section}.{key}")]


def _init_inputs(params: dict, wildcards: dict) -> dict[str, str]:
    from vocabtransfer import init

    return init.inputs(params, wildcards)


def _init_leaves(params: dict, wildcards: dict) -> list[str]:
    base, _, fact = wildcards["method"].partition("+")
    return [leaf for name in (base, fact) if name and name in params["init"]
            for leaf in section_leaves(params, f"init.{name}")]


PACKAGE = Path(__file__).resolve().parent


def _module_file(dotted: str) -> Path | None:
    """src/vocabtransfer/<…>.py (or <…>/__init__.py) of a `vocabtransfer.…` module name, if it exists."""
    parts = dotted.split(".")
    if parts[0] != "vocabtransfer":
        return None
    base = PACKAGE.joinpath(*parts[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


# the stage table and the command line (what they change reaches DVC as params and paths, not as
# code), and the package's lazy exports
NOT_FOLLOWED = ("stages.py", "cli.py", "dvcgen.py", "__init__.py")


@lru_cache(maxsize=None)
def module_closure(*files: str) -> tuple[str, ...]:
    """These modules (paths relative to src/vocabtransfer) and every vocabtransfer module they import,
    at any depth and inside functions too (read from the source, nothing is imported), sorted.
    Imports of NOT_FOLLOWED modules are not followed."""
    import ast

    todo = [PACKAGE / f for f in files]
    boundary = {PACKAGE / f for f in NOT_FOLLOWED} - set(todo)
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                found = _module_file(name)
                if found is not None and found not in seen and found not in boundary:
                    todo.append(found)
    return tuple(sorted(str(p.relative_to(PACKAGE)) for p in seen))


def _init_code(params: dict, wildcards: dict) -> tuple[str, ...]:
    """The entry modules of one init job: init.py, the method's module and, for base+fact, the
    factorised wrapper; editing another method does not rerun this one."""
    from vocabtransfer.methods import get_method

    base, _, fact = wildcards["method"].partition("+")
    module = _module_file(get_method(base).__module__)  # e.g. random lives in methods/baselines.py
    return ("init.py", str(module.relative_to(PACKAGE))) + (("methods/factorized.py",) if fact else ())


def _init_eval_inputs(params: dict, wildcards: dict) -> dict[str, str]:
    from vocabtransfer import init_eval

    return init_eval.inputs(params, wildcards)


WORD_FASTTEXT_LEAVES = ("seed", "fasttext.reproducible", "init.wechsel.fasttext.model", "init.wechsel.fasttext.dim",
                        "init.wechsel.fasttext.epochs", "init.wechsel.fasttext.min_count")

register(Stage(
    name="source_head",
    func="vocabtransfer.source_head:run",
    help="complete the source model with a trained LM head when its checkpoint has none",
    wildcards=(),
    outputs={"model": P.SOURCE_MODEL, "stats": P.SOURCE_HEAD_STATS},
    directories=frozenset({"model"}),
    params=("seed", "source_model"),
    extra_params=lambda params, wildcards: section_leaves(params, "source_head"),
    code=("source_head.py",),
    parallel=True,
    gpu=True,
))
register(Stage(
    name="source_fasttext",
    func="vocabtransfer.auxiliary:run_source_words",
    help="word-level fastText on source-language text (WECHSEL)",
    wildcards=(),
    outputs={"model": P.SOURCE_WORD_FASTTEXT},
    params=WORD_FASTTEXT_LEAVES + ("init.wechsel.source_text",),
    code=("auxiliary.py",),
    parallel=True,
))
register(Stage(
    name="word_fasttext",
    func="vocabtransfer.auxiliary:run_target_words",
    help="word-level fastText on the target corpus (WECHSEL)",
    inputs={"train": P.CORPUS_TRAIN},
    outputs={"model": P.WORD_FASTTEXT},
    params=WORD_FASTTEXT_LEAVES,
    code=("auxiliary.py",),
    parallel=True,
))
register(Stage(
    name="source_snmf",
    func="vocabtransfer.source_snmf:run",
    help="semi-NMF of the source embeddings, shared by the snmf and <method>+snmf init jobs",
    wildcards=(),
    inputs={"source_model": P.SOURCE_MODEL},
    outputs={"factors": P.SOURCE_SNMF},
    params=("seed", "init.snmf.rank", "init.snmf.max_iter", "init.snmf.tol", "init.snmf.init"),
    code=("source_snmf.py",),
    parallel=True,
    gpu=True,
))
register(Stage(
    name="init",
    func="vocabtransfer.init:run",
    help="initialise the target embeddings with one method and save the model",
    wildcards=("lang", "method"),
    inputs=_init_inputs,
    outputs={"init": P.INIT_DIR},
    directories=frozenset({"init"}),
    params=("seed",),
    extra_params=_init_leaves,
    code=_init_code,
    expand=lambda params: [{"method": m} for m in params["init"]["methods"]],
    parallel=True,
    gpu=True,
))
register(Stage(
    name="init_eval",
    func="vocabtransfer.init_eval:run",
    help="loss right after initialisation and parallel-sentence retrieval, per method",
    inputs=_init_eval_inputs,
    outputs={"init_eval": P.INIT_EVAL, "plot": P.INIT_EVAL_PLOT},
    params=("seed", "init.methods", "source_head.text", "source_head.eval_lines"),
    extra_params=lambda params, wildcards: section_leaves(params, "init_eval"),
    code=("init_eval.py",),
    parallel=True,
    gpu=True,
))

@dataclass
class Context:
    """What a stage function gets: validated params, its wildcards and resolved paths."""

    stage: Stage
    params: dict
    wildcards: dict[str, str]
    input: dict[str, Path]
    output: dict[str, Path]
    threads: int = 1
    device: str = "cpu"

    @property
    def lang(self) -> str:
        return self.wildcards["lang"]

    @property
    def method(self) -> str:
        return self.wildcards["method"]

    @property
    def seed(self) -> int:
        return int(self.params["seed"])

    def param(self, dotted: str) -> Any:
        return C.get(self.params, dotted)


def make_context(name: str, params: dict, wildcards: dict[str, str], threads: int | None = None,
                 device: str = "cpu") -> Context:
    stage = STAGES[name]
    if "lang" in wildcards:
        C.check_language(params, wildcards["lang"])
    return Context(
        stage=stage,
        params=params,
        wildcards=wildcards,
        input=stage.resolve(stage.input_templates(params, wildcards), wildcards),
        output=stage.resolve(stage.outputs, wildcards),
        threads=threads or os.cpu_count() or 1,
        device=device,
    )


def run_stage(name: str, params: dict, wildcards: dict[str, str], threads: int | None = None,
              device: str = "cpu") -> Context:
    """Run one stage in-process (what `vocabtransfer <stage>` does)."""
    ctx = make_context(name, params, wildcards, threads=threads, device=device)
    module_name, func_name = ctx.stage.func.split(":")
    getattr(importlib.import_module(module_name), func_name)(ctx)
    return ctx


def param_values(params: dict, name: str, wildcards: dict) -> dict[str, Any]:
    """The params leaves a stage reads and their values (Snakemake's params, which rerun jobs on change)."""
    stage = STAGES[name]
    return {leaf: C.get(params, leaf) for leaf in stage.leaves(params, dict(wildcards))}


# ---------------------------------------------------------------- analyses of continued pretraining

def _pretrain_jobs(params: dict) -> list[tuple[str, str]]:
    from vocabtransfer.token_frequency_loss import pretrain_jobs

    return pretrain_jobs(params)


def _token_frequency_inputs(params: dict, wildcards: dict) -> dict[str, str]:
    from vocabtransfer import token_frequency_loss

    return token_frequency_loss.inputs(params, wildcards)


def _pretrain_leaves(params: dict, *leaves: str) -> list[str]:
    """`pretrain.*` leaves that params set (none before the pretrain section exists)."""
    return [leaf for leaf in leaves if "pretrain" in params]


register(Stage(
    name="token_frequency_loss",
    func="vocabtransfer.token_frequency_loss:run",
    help="held-out loss per train-frequency bucket: init vs standard vs selfish pretraining",
    inputs=_token_frequency_inputs,
    outputs={"table": P.TOKEN_FREQUENCY_LOSS, "plot": P.TOKEN_FREQUENCY_PLOT},
    params=("seed",),
    extra_params=lambda params, wildcards: (section_leaves(params, "token_frequency_loss")
                                            + _pretrain_leaves(params, "pretrain.methods", "pretrain.objectives")),
    code=("token_frequency_loss.py",),
    parallel=True,
    gpu=True,
))
register(Stage(
    name="gradient_scenarios",
    func="vocabtransfer.gradient_scenarios:run",
    help="gradient reaching each token's embedding: as input, as target, as non-target (start and end)",
    wildcards=("lang", "method", "objective"),
    inputs={"train_ids": P.PRETOK_TRAIN, "init": P.INIT_DIR, "pretrain": P.PRETRAIN_DIR},
    outputs={"table": P.GRADIENT_SCENARIOS, "plot": P.GRADIENT_PLOT},
    params=("seed",),
    extra_params=lambda params, wildcards: (section_leaves(params, "gradient_scenarios") + _pretrain_leaves(
        params, *(["pretrain.selfish.margin"] if wildcards.get("objective") == "selfish" else []))),
    code=("gradient_scenarios.py",),
    expand=lambda params: [{"method": m, "objective": o} for m, o in _pretrain_jobs(params)],
    parallel=True,
    gpu=True,
))
