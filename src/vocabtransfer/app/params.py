"""The whole params: its schema, assembled from where each part is declared, and the functions that
read a params file against it.

The schema is `pipeline/params.schema.yaml`'s root (`languages`, `seed`, `source_model`, `init.methods`
and the shared `$defs`) with every section generated from the typed dataclass the typed root reads it as
(`params_root.SECTIONS`, in params.yaml's order) and every init method's and factorisation's `init.<name>` from
the options class it registers. A default, a description and a bound are written once, in a field
(`typed.option`); the typed root (plan/params_root.py) is the one place that knows every section.
"""

from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

import yaml

from vocabtransfer.pipeline import config, typed
from vocabtransfer.plan.method_options import FACTORIZATIONS
from vocabtransfer.plan.methods import declared_sections
from vocabtransfer.plan.params_root import SECTIONS


def schema() -> dict:
    """The params schema (JSON Schema), built once per set of registered init methods."""
    return _schema(tuple(declared_sections().items()))


@lru_cache(maxsize=4)
def _schema(methods: tuple) -> dict:
    root = config.root_schema()
    props = root["properties"]
    for name, cls in SECTIONS.items():
        props[name] = props.pop(name) if name == "init" else typed.section_schema(cls)
    return typed.with_init_sections(root, dict(methods), FACTORIZATIONS)


def validate_params(params: Any, source: str = "params.yaml") -> dict:
    """`params` validated against the schema with every default filled in (`config.validate`)."""
    return config.validate(params, schema(), source)


def load_params(path: str | Path = "params.yaml") -> dict:
    """Read, validate and default-fill a params file."""
    return validate_params(config.read_yaml(path), source=str(path))


def load(files: Sequence[str | Path]) -> dict:
    """The params a command runs with: a merged file that `config.write_merged` wrote (Snakemake's,
    validated where it was merged) as it is, trusted; any other file, or several laid over each other,
    validated."""
    if len(files) == 1 and config.MERGED.fullmatch(Path(files[0]).name):
        text = Path(files[0]).read_text(encoding="utf-8")
        if Path(files[0]).name == config.merged_name(text):  # its content is what was written: not edited since
            return yaml.safe_load(text)
    return load_layered(files)


def load_layered(files: Sequence[str | Path]) -> dict:
    """The first params file with every further one laid over it (`merge_overlay`, as Snakemake lays
    --configfile over params.yaml), validated; errors name the files as `params.yaml + config/x.yaml`."""
    merged = config.read_yaml(files[0])
    for overlay in files[1:]:
        merged = config.merge_overlay(merged, config.read_yaml(overlay))
    return validate_params(merged, source=" + ".join(map(str, files)))


def section_defaults(*path: str) -> dict:
    """The schema's defaults of one params section (e.g. `init`, `focus` or `eval`, `tasks`, `ner`),
    nested objects filled in as validation fills them: what a library call with partial options gets."""
    node = schema()
    for key in path:
        node = (node.get("properties") or {}).get(key) or {}
    return _defaults_of(node)


def _defaults_of(node: dict) -> dict:
    out = {}
    for key, sub in (node.get("properties") or {}).items():
        if "default" in sub:
            out[key] = copy.deepcopy(sub["default"])
            if isinstance(sub["default"], dict) and "properties" in sub:
                out[key] = {**_defaults_of(sub), **sub["default"]}
    return out
