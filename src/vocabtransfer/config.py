"""Load and validate params.yaml against workflow/schemas/params.schema.yaml.

`load_params` returns the config with every default filled in, or raises a
VocabTransferError naming the key path, what was wrong and the allowed values.
"""

from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from vocabtransfer.errors import VocabTransferError

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "params.schema.yaml"


@lru_cache(maxsize=1)
def schema() -> dict:
    if not SCHEMA_PATH.is_file():
        raise VocabTransferError(f"{SCHEMA_PATH}: schema file missing; is vocabtransfer installed from its checkout (pip install -e .)?")
    return yaml.safe_load(SCHEMA_PATH.read_text())


def _with_defaults(validator_cls):
    """A validator that fills `default` values into objects as it validates them."""
    validate_props = validator_cls.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, sch):
        if isinstance(instance, dict):
            for key, sub in properties.items():
                if "default" in sub and key not in instance:
                    instance[key] = copy.deepcopy(sub["default"])
        yield from validate_props(validator, properties, instance, sch)

    return jsonschema.validators.extend(validator_cls, {"properties": set_defaults})


_Validator = _with_defaults(jsonschema.Draft202012Validator)


def _key_path(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "(top level)"


def _describe(error: jsonschema.ValidationError) -> str:
    """One readable sentence for a schema error, with the allowed values where the schema has them."""
    sch = error.schema if isinstance(error.schema, dict) else {}
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = sorted(sch.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed))
        return f"unknown key(s) {', '.join(map(repr, extra))}; allowed keys: {', '.join(allowed)}"
    if error.validator == "enum":
        return f"{error.instance!r} is not allowed; allowed values: {', '.join(map(repr, error.validator_value))}"
    if error.validator == "oneOf":
        return (
            f"{error.instance!r} must have exactly one of: `path` (local file), `url` with `sha256`, "
            "or `dataset` (a datasets.load_dataset spec)"
        )
    if error.validator == "type":
        return f"{error.instance!r} is not of type {error.validator_value!r}"
    return error.message


def validate_params(params: Any, source: str = "params.yaml") -> dict:
    """Validate a parsed config, fill defaults, and check the cross-key rules the schema cannot express."""
    if not isinstance(params, dict):
        raise VocabTransferError(f"{source}: expected a mapping of keys at the top level, got {type(params).__name__}")
    params = copy.deepcopy(params)
    errors = sorted(_Validator(schema()).iter_errors(params), key=lambda e: (len(e.absolute_path), str(e.absolute_path)))
    if errors:
        err = errors[0]
        more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
        raise VocabTransferError(f"{source}: {_key_path(err)}: {_describe(err)}{more}")
    missing = [lang for lang in params["languages"] if lang not in params["corpus"]["sources"]]
    if missing:
        raise VocabTransferError(
            f"{source}: corpus.sources: no source for language(s) {', '.join(missing)}; "
            f"add e.g. `corpus.sources.{missing[0]}: {{path: pretrain_text/{missing[0]}.txt}}`"
        )
    for task, section in params["eval"]["tasks"].items():
        unknown = [lang for lang in section["data"] if lang not in params["languages"]]
        if unknown:
            raise VocabTransferError(
                f"{source}: eval.tasks.{task}.data: language(s) {', '.join(unknown)} not in `languages` "
                f"({', '.join(params['languages'])}); add them to `languages` or remove their data specs"
            )
    return params


def load_params(path: str | Path = "params.yaml") -> dict:
    """Read, validate and default-fill a params file."""
    path = Path(path)
    if not path.is_file():
        raise VocabTransferError(f"{path}: params file not found; run from the repository root or pass --params")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise VocabTransferError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from exc
    return validate_params(raw, source=str(path))


def get(params: dict, dotted: str) -> Any:
    """Look up a dotted key such as `fasttext.epochs`."""
    node: Any = params
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise VocabTransferError(f"params: key {dotted!r} not found (at {part!r})")
        node = node[part]
    return node


def check_language(params: dict, lang: str) -> None:
    if lang not in params["languages"]:
        raise VocabTransferError(
            f"unknown language {lang!r}: params.yaml `languages` lists {', '.join(params['languages'])}"
        )
