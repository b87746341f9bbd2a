"""Typed params: the validated params of a run as `ParamsTree` (the low-level view under the typed root every
planner and job reads by attribute, vocabtransfer.plan.params_root.Params), and the sections declared in code:
a frozen dataclass whose fields carry their default, description and bounds (`option`), the JSON Schema it makes
(`section_schema`), built from the tree by `from_dict`.
The schema of such a section is generated, never written: `init.<name>` of every init method comes from the options
class it declares (`MethodInfo("omp", options=OmpOptions)`, plan/method_catalog.py), so a default is written once,
in its field.

    @dataclass(frozen=True)
    class OmpOptions:
        \"\"\"tokensurgeon: …\"\"\"              # the section's description

        k: int = option(64, "most atoms per new token", minimum=1)
        norm: Literal["combination", "atoms"] = option("combination", "…", type="string")

A field's type gives the schema's `type` (int: integer, float: number, bool: boolean, str: string,
`Literal[...]`: enum, `dict`: object, `tuple[...]`: array, `X | None`: X or null, a nested dataclass: a
subsection); the keywords of `option`
add JSON Schema keywords (minimum, exclusiveMinimum, propertyNames, …), and its `choices` the enum of names a
registry holds (`pretrain.objectives`: `choices=OBJECTIVE_NAMES`, vocabtransfer.plan.objectives), where a
`Literal` would list them by hand.
"""

from __future__ import annotations

import copy
import dataclasses
import types
import typing
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, TypeVar

from vocabtransfer.errors import VocabTransferError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance  # a dataclass (instance or class), to the type checker

# a params section's frozen dataclass (`from_dict`)
T = TypeVar("T", bound="DataclassInstance")
F = TypeVar("F", bound=Callable[..., Any])

# the schema type of a field's Python type (bool before int: bool is an int)
_TYPES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"))


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """a method that takes no options"""


def option(
    default: Any,
    description: str,
    *,
    rerun: bool = True,
    per_language: bool = False,
    key: str | None = None,
    choices: Iterable[str] | None = None,
    **keywords: Any,
) -> Any:
    """A field of a typed section: its `default`, its `description` and its JSON Schema `keywords`;
    `rerun=False` for a leaf that does not change a job's outputs (which jobs run, whether checkpoints
    are kept): no rerun key (`params_root.section_leaves`); `per_language=True` for a mapping keyed by language,
    of which a job's rerun keys hold its language's entry only; `key` for a params key that is no Python name
    (`tokenizer.from`, the field `from_`); `choices` for the names a registry holds (a `Literal` lists them by
    hand): the schema's `enum`, of the items for a list (a `tuple[str, ...]` field), and the default must be
    among them."""
    if choices is not None:
        names = list(choices)
        given = list(default) if isinstance(default, list) else [default]
        if not names or any(value not in names for value in given):
            raise TypeError(f"option {description[:40]!r}…: its default {default!r} is not among {names}")
        if isinstance(default, list):
            keywords = {**keywords, "items": {**keywords.get("items", {}), "enum": names}}
        else:
            keywords = {"enum": names, **keywords}
    metadata = {"description": description, "schema": keywords, "default": default}
    if not rerun:
        metadata["rerun"] = False
    if per_language:
        metadata["per_language"] = True
    if key is not None:
        metadata["key"] = key
    if isinstance(default, dict):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    if isinstance(default, list):  # the schema's default stays a list; the field's, as `from_dict` reads it, a tuple
        return dataclasses.field(default=tuple(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def named_child(under: str = "") -> Callable[[F], F]:
    """Marks a section's method `(self, name) -> its subsection` as reading that subsection alone, at
    `<section>.<under>.<name>` (`EvalParams.task`: `eval.tasks.<name>`; `InitParams.options`: `init.<name>`): what
    tests/project/test_params_reads.py records of a read through it."""

    def mark(method: F) -> F:
        method.__dict__["named_child"] = under
        return method

    return mark


def subsection(cls: type, description: str | None = None, **metadata: Any) -> Any:
    """A field holding a nested section (its defaults: `cls()`), with `description` instead of its docstring
    and any further field `metadata` (e.g. `objective="selfish"`: the options of one objective)."""
    if description:
        metadata["description"] = description
    return dataclasses.field(default_factory=cls, metadata=metadata)


def key_of(f: dataclasses.Field) -> str:
    """A field's params key: its name, or the `key` its `option` gives."""
    return f.metadata.get("key", f.name)


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
    if origin is tuple:  # an array, read as a tuple (`from_dict`); its items' schema is a keyword
        return {"type": "array"}
    for python, name in _TYPES:
        if tp is python:
            return {"type": name}
    raise TypeError(
        f"no schema type for {tp!r}; declare the field with a bool, int, float, str, Literal, dict or dataclass type"
    )


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
            raise TypeError(
                f"{cls.__name__}.{f.name}: a typed section's field is declared with option(default, description, …)"
            )
        node["properties"][key_of(f)] = {
            **_type_schema(hints[f.name]),
            **copy.deepcopy(f.metadata["schema"]),
            "default": copy.deepcopy(f.metadata["default"]),
            "description": f.metadata["description"],
        }
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

    def patterns(node: object) -> None:
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


# ------------------------------------------------------------------------------- reading sections


def from_dict(cls: type[T], data: Mapping[str, Any]) -> T:
    """The frozen dataclass `cls` of a validated params section: nested dataclass fields recursively,
    arrays as tuples, numbers of `float` fields as floats; keys that are not fields are not read, and a field
    without its key (a tree given in part, as a test's) keeps its default, as validation would fill it."""
    hints = typing.get_type_hints(cls)
    return cls(
        **{f.name: _typed_value(hints[f.name], data[key_of(f)]) for f in dataclasses.fields(cls) if key_of(f) in data}
    )


def _typed_value(tp: Any, value: Any) -> Any:  # tp: a field's type hint, of any form
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):  # a hint is a class, never an instance
        return from_dict(tp, value)
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        return _typed_value(next(a for a in typing.get_args(tp) if a is not type(None)), value)
    if tp is float:
        return float(value)
    if origin is tuple:
        return tuple(value)
    if origin is dict:
        return dict(value)
    return value


def field_leaves(
    cls: type, prefix: str, data: Mapping, keep: Callable[[dataclasses.Field], bool] = lambda f: True
) -> list[str]:
    """The dotted params leaves of the fields of `cls` under `prefix` (e.g. `init.omp.k`) that `keep`
    keeps, nested dataclasses recursively and a mapping field by its keys in `data`; in the order of
    `data` (the validated params', as Snakemake records a job's params): a stage's rerun keys."""
    by_key = {key_of(f): f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    out: list[str] = []
    for key, value in data.items():
        if key not in by_key or not keep(by_key[key]):
            continue
        name = by_key[key].name
        if dataclasses.is_dataclass(hints[name]):
            out += field_leaves(hints[name], f"{prefix}.{key}", value, keep)
        elif typing.get_origin(hints[name]) is dict:
            out += [f"{prefix}.{key}.{k}" for k in value]
        else:
            out.append(f"{prefix}.{key}")
    return out


P = TypeVar("P", bound="ParamsTree")


class ParamsTree:
    """The validated params of one run (what `config.validate` returns, or the merged file Snakemake wrote),
    read-only: the low-level view the pipeline layer plans with. Its top-level leaves are attributes; the sections
    are read by attribute from the typed root over it, `vocabtransfer.plan.params_root.Params` (`params.pretrain`,
    `params.init.omp`), which every planner and job above this layer takes. `leaf` reads a dotted key, for code that
    walks leaves by name (a job's rerun keys and their values, launchers), and `tree` is the tree itself, for what
    writes or hashes it whole."""

    def __init__(self, tree: Mapping[str, Any]):
        if isinstance(tree, ParamsTree):
            raise TypeError("Params(Params(...)): pass the validated tree, or the Params object itself")
        self._tree = tree

    @classmethod
    def of(cls: type[P], value: "ParamsTree | Mapping[str, Any]") -> P:
        """`value` as this class: one of it as it is, a validated tree (or another view's) wrapped (the app's entry
        points take either)."""
        if isinstance(value, cls):
            return value
        return cls(value.tree if isinstance(value, ParamsTree) else value)

    def __repr__(self) -> str:
        return f"Params(languages={self._tree.get('languages')}, source_model={self._tree.get('source_model')!r})"

    @property
    def tree(self) -> Mapping[str, Any]:
        """The validated tree, as the schema filled it in (not to be changed)."""
        return self._tree

    @property
    def languages(self) -> tuple[str, ...]:
        return tuple(self._tree["languages"])

    @property
    def seed(self) -> int:
        return int(self._tree["seed"])

    @property
    def source_model(self) -> str:
        return str(self._tree["source_model"])

    def leaf(self, dotted: str) -> Any:
        """The value at a dotted key such as `fasttext.epochs` (a subtree for a section's key): for code that walks
        leaves by name (rerun keys), never to read a param a job uses (read it by attribute from the typed root)."""
        node: Any = self._tree
        for part in dotted.split("."):
            if not isinstance(node, Mapping) or part not in node:
                raise VocabTransferError(f"params: key {dotted!r} not found (at {part!r})")
            node = node[part]
        return node

    def rerun_leaves(self, names: Iterable[str], wildcards: Mapping[str, str]) -> list[str]:
        """The rerun keys of a job that reads the sections and leaves `names`: the typed root's
        (vocabtransfer.plan.params_root.Params), which knows the sections' classes."""
        raise NotImplementedError("rerun keys come from the typed params root, vocabtransfer.plan.params_root.Params")

    def check_language(self, lang: str) -> None:
        """One error unless `lang` is one of `languages`."""
        if lang not in self.languages:
            raise VocabTransferError(
                f"unknown language {lang!r}: params.yaml `languages` lists {', '.join(self.languages)}"
            )
