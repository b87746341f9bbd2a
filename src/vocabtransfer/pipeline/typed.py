"""Params sections declared in code: a frozen dataclass whose fields carry their default, description
and bounds (`option`), and the JSON Schema it makes (`section_schema`). The schema of such a section
is generated, never written: `init.<name>` of every init method comes from the options class it
declares (`MethodInfo("omp", options=OmpOptions)`, init/methods/catalog.py), so a default is written once,
in its field.

    @dataclass(frozen=True)
    class OmpOptions:
        \"\"\"tokensurgeon: …\"\"\"              # the section's description

        k: int = option(64, "most atoms per new token", minimum=1)
        norm: Literal["combination", "atoms"] = option("combination", "…", type="string")

A field's type gives the schema's `type` (int: integer, float: number, bool: boolean, str: string,
`Literal[...]`: enum, `dict`: object, `tuple[...]`: array, `X | None`: X or null, a nested dataclass: a
subsection); the keywords of `option`
add JSON Schema keywords (minimum, exclusiveMinimum, propertyNames, …).
"""

from __future__ import annotations

import copy
import dataclasses
import types
import typing
from typing import Any

# the schema type of a field's Python type (bool before int: bool is an int)
_TYPES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"))


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """a method that takes no options"""


def option(default: Any, description: str, *, rerun: bool = True, **keywords: Any) -> Any:
    """A field of a typed section: its `default`, its `description` and its JSON Schema `keywords`;
    `rerun=False` for a leaf that does not change a job's outputs (which jobs run, whether checkpoints
    are kept): no rerun key (`config.field_leaves`)."""
    metadata = {"description": description, "schema": keywords, "default": default}
    if not rerun:
        metadata["rerun"] = False
    if isinstance(default, dict):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    if isinstance(default, list):  # the schema's default stays a list; the field's, as `from_dict` reads it, a tuple
        return dataclasses.field(default=tuple(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def subsection(cls: type, description: str | None = None, **metadata: Any) -> Any:
    """A field holding a nested section (its defaults: `cls()`), with `description` instead of its docstring
    and any further field `metadata` (e.g. `objective="selfish"`: the options of one objective)."""
    if description:
        metadata["description"] = description
    return dataclasses.field(default_factory=cls, metadata=metadata)


def docstring(cls: type) -> str | None:
    """A class's own docstring as one line, None for the one `dataclass` makes up (`Name(field: type, …)`)."""
    doc = cls.__dict__.get("__doc__")
    if not doc or doc.startswith(f"{cls.__name__}("):
        return None
    return " ".join(doc.split())


def _type_schema(tp: Any) -> dict:
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return {"enum": list(typing.get_args(tp))}
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return {"type": [_type_schema(args[0])["type"], "null"]}
    if origin is dict or tp is dict:
        return {"type": "object"}
    if origin is tuple:  # an array, read as a tuple (`config.from_dict`); its items' schema is a keyword
        return {"type": "array"}
    for python, name in _TYPES:
        if tp is python:
            return {"type": name}
    raise TypeError(f"no schema type for {tp!r}; declare the field with a bool, int, float, str, Literal, dict or "
                    "dataclass type")


def section_schema(cls: type, description: str | None = None) -> dict:
    """The JSON Schema object of the typed section `cls`: its docstring (or `description`) as the
    description, no keys but its fields, `{}` as default (every field has its own), a property per field."""
    about = description or docstring(cls)
    node: dict = {"description": about} if about else {}
    node.update(type="object", additionalProperties=False, default={}, properties={})
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            node["properties"][f.name] = section_schema(hints[f.name], f.metadata.get("description"))
            continue
        if "description" not in f.metadata:
            raise TypeError(f"{cls.__name__}.{f.name}: a typed section's field is declared with option(default, "
                            "description, …)")
        node["properties"][f.name] = {**_type_schema(hints[f.name]), **copy.deepcopy(f.metadata["schema"]),
                                      "default": copy.deepcopy(f.metadata["default"]),
                                      "description": f.metadata["description"]}
    return node


def with_init_sections(schema: dict, methods: dict[str, type], factorizations: dict[str, type]) -> dict:
    """`schema` (the YAML file's) completed with the sections declared in code: `init.<name>` of every
    init method (`methods`: name -> options class) and factorisation, and the names in the patterns
    that spell a method (`<methods>`, `<factorizations>`). The methods of `init.methods`' default
    come first, in its order, then the others in the order they registered."""
    init = schema["properties"]["init"]["properties"]
    default_bases = [m.partition("+")[0] for m in init["methods"]["default"]]
    names = list(dict.fromkeys([m for m in default_bases if m in methods] + list(methods)))
    sections = {**{name: methods[name] for name in names}, **factorizations}
    for name, cls in sections.items():
        if name in methods and name in factorizations and methods[name] is not factorizations[name]:
            raise TypeError(f"init.{name}: the method and the factorisation declare other options classes")
        init[name] = section_schema(cls)
    fill = {"<methods>": "|".join(names), "<factorizations>": "|".join(factorizations)}

    def patterns(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "pattern" and isinstance(value, str):
                    for token, text in fill.items():
                        value = value.replace(token, text)
                    node[key] = value
                else:
                    patterns(value)
        elif isinstance(node, list):
            for item in node:
                patterns(item)

    patterns(schema)
    return schema
