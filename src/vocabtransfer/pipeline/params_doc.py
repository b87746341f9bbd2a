"""`vocabtransfer params-doc` (`make docs`): docs/parameters.md generated from the params schema.

1. walk the schema's `properties`: an object with properties of its own is a section (heading,
   description, a table of its direct leaves, then its subsections); anything else is a leaf,
   maps keyed by language (`corpus.sources.<lang>`) and objects without options included;
2. a leaf's row: key, schema default, the params.yaml value where it differs, allowed values, description;
3. the keys of one data source (corpus and task data) get a table of their own at the end.
tests/test_docs.py fails when the committed file differs from `render()` or misses a schema leaf.
"""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

from vocabtransfer import io
from vocabtransfer.pipeline import config

OUTPUT = "docs/parameters.md"
MISSING = object()
INTRO = """\
# Parameters

Generated from `src/vocabtransfer/pipeline/params.schema.yaml` and the init methods' options classes
(`init.<name>`, vocabtransfer.init.methods.options) by `make docs` (`vocabtransfer params-doc`); edit those,
not this file. `params.yaml` is validated against the schema before any work, and a key it
leaves out takes the default below; the params.yaml column shows the shipped demo's value where it differs.
How overlays (`--configfile`, `--config`) combine with it: [reproducibility.md](reproducibility.md#the-config-the-stages-read).
"""
SOURCES = ("A data source has exactly one of `path` (a local file, relative to `$VOCABTRANSFER_DATA`), `url` with "
           "`sha256`, or `dataset` (a `datasets.load_dataset` spec); a task's `test` source takes the keys of its "
           "`train` source ([data.md](data.md), [evaluation.md](evaluation.md#task-data)).")
BOUNDS = (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"), ("exclusiveMaximum", "<"))


def _resolve(node: dict, schema: dict) -> dict:
    ref = node.get("$ref", "")
    return schema["$defs"][ref.rsplit("/", 1)[1]] if ref.startswith("#/$defs/") else node


def _is_section(node: dict) -> bool:
    return node.get("type") == "object" and bool(node.get("properties"))


def sections(schema: dict, node: dict | None = None, path: str = "") -> list[tuple[str, dict, list]]:
    """(path, section node, [(key, leaf node)]) for every section, depth first."""
    node = schema if node is None else node
    leaves, subsections = [], []
    for name, sub in node.get("properties", {}).items():
        sub, key = _resolve(sub, schema), f"{path}.{name}" if path else name
        if _is_section(sub):
            subsections += sections(schema, sub, key)
        else:
            leaves.append((key + (".<lang>" if "propertyNames" in sub else ""), sub))
    return [(path, node, leaves)] + subsections


def source_leaves(node: dict, prefix: str, schema: dict) -> list[tuple[str, dict]]:
    """Every leaf of one data source spec, with dotted keys under `prefix`."""
    out = []
    for name, sub in node.get("properties", {}).items():
        sub = _resolve(sub, schema)
        out += source_leaves(sub, f"{prefix}.{name}", schema) if _is_section(sub) else [(f"{prefix}.{name}", sub)]
    return out


def data_sources(schema: dict) -> list[tuple[str, dict]]:
    task = schema["properties"]["eval"]["properties"]["tasks"]["properties"]["nli"]["properties"]["data"]
    train = task["additionalProperties"]["properties"]["train"]
    return (source_leaves(schema["$defs"]["corpus_source"], "corpus.sources.<lang>", schema)
            + source_leaves(train, "eval.tasks.<task>.data.<lang>.train", schema))


def value(v) -> str:
    if isinstance(v, str):
        return "`" + (v or "''") + "`"
    text = yaml.safe_dump(v, default_flow_style=True, sort_keys=False, width=10**6, allow_unicode=True)
    return f"`{text.strip().removesuffix('...').strip()}`"


def allowed(node: dict) -> str:
    items = node.get("items", {})
    if "enum" in node:
        return ", ".join(value(v) for v in node["enum"])
    if "enum" in items:
        return "list of " + ", ".join(value(v) for v in items["enum"])
    if "pattern" in items:
        return f"list of names matching `{items['pattern']}`"
    if "$ref" in items:
        return "list of language codes"
    kind = " or ".join(node["type"]) if isinstance(node.get("type"), list) else node.get("type", "")
    if kind == "object":
        kind = "mapping of language codes" if "propertyNames" in node else "object without keys"
    bounds = [f"{op} {node[k]}" for k, op in BOUNDS if k in node] + (
        [f"matching `{node['pattern']}`"] if "pattern" in node else [])
    return kind + (" " + ", ".join(bounds) if bounds else "")


def _cell(text) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")  # one line; a `|` would end the cell


def _shipped(params: dict, key: str):
    """The value params.yaml gives `key` (for a `<lang>` map: the whole map), or MISSING."""
    node = params
    for part in key.removesuffix(".<lang>").split("."):
        if not isinstance(node, dict) or part not in node:
            return MISSING
        node = node[part]
    return node


def table(leaves: list[tuple[str, dict]], params: dict | None, required=()) -> list[str]:
    """One row per leaf; without `params`, no params.yaml column; `required`: the names the schema requires."""
    columns = ["key", "default"] + (["params.yaml"] if params is not None else []) + ["allowed", "meaning"]
    rows = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for key, node in leaves:
        default = "required" if key.rsplit(".", 1)[-1] in required else "–"
        cells = [f"`{key}`", value(node["default"]) if "default" in node else default]
        if params is not None:
            shipped = _shipped(params, key)
            differs = shipped is not MISSING and shipped != node.get("default", MISSING)
            cells.append(value(shipped) if differs else "")
        rows.append("| " + " | ".join(_cell(c) for c in cells + [allowed(node), node.get("description", "")]) + " |")
    return rows


def anchor(heading: str) -> str:  # GitHub's: lower case, punctuation but `-`/`_` dropped, spaces to `-`
    return "".join(c for c in heading.lower() if c.isalnum() or c in " -_").replace(" ", "-")


def render(params_path: str | Path = "params.yaml") -> str:
    schema = copy.deepcopy(config.schema())
    params = yaml.safe_load(Path(params_path).read_text(encoding="utf-8")) or {}
    parts = sections(schema)
    tops = [p or "top level" for p, _, _ in parts if "." not in p] + ["data sources"]
    lines = [INTRO, "Sections: " + ", ".join(f"[{t}](#{anchor(t)})" for t in tops) + ".", ""]
    for path, node, leaves in parts:
        lines += [f"{'#' * min(2 + path.count('.'), 4)} {path or 'top level'}", ""]
        lines += [_cell(node["description"]), ""] if path and node.get("description") else []
        lines += table(leaves, params, node.get("required", ())) + [""] if leaves else []
    lines += ["## data sources", "", SOURCES, ""] + table(data_sources(schema), None)
    return "\n".join(lines).rstrip() + "\n"


def write(output: str | Path = OUTPUT, params_path: str | Path = "params.yaml") -> Path:
    with io.atomic_output(output) as tmp:
        tmp.write_text(render(params_path), encoding="utf-8")
    return Path(output)
