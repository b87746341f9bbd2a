"""The DAG's edges, read from the declarations (vocabtransfer.plan.stages): a stage reads another when a
path among its jobs' inputs is one of the other's outputs (or lies inside an output directory).
`vocabtransfer dag` prints the picture docs/stages.md shows (a Mermaid flowchart, checked against the
declarations by tests/project/test_docs.py), and tests/project/test_dag.py checks that the table is in
topological order."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping

from vocabtransfer.plan.stages import STAGES
from vocabtransfer.pipeline import paths
from vocabtransfer.app.params import validate_params
from vocabtransfer.pipeline.config import merge_overlay, read_yaml
from vocabtransfer.plan.params_root import Params


def _pattern(template: str) -> re.Pattern:
    """An output template as a regex over concrete paths: each `{wildcard}` one path component, and any
    path under it (an output directory's files)."""
    parts = re.split(r"(\{\w+\})", template)
    body = "".join("[^/]+" if p.startswith("{") else re.escape(p) for p in parts)
    return re.compile(f"{body}(?:/.*)?")


def _job_inputs(params: Params):
    """(stage name, concrete input path) of every job the params ask for, the skipped ones too (a picture
    of the DAG shows a stage that these params happen to rule out)."""
    for stage in STAGES.values():
        for lang in params.languages if "lang" in stage.wildcards else (None,):
            for wildcards, _reason in stage.candidates(params, lang):
                try:
                    templates = stage.input_templates(params, wildcards)
                except Exception:  # a ruled-out job may have no inputs to name
                    continue
                for template in templates.values():
                    yield stage.name, paths.fill(template, **wildcards)


def edges(*params: Params | Mapping[str, Any]) -> dict[str, set[str]]:
    """{stage: the stages whose outputs it reads}, over the jobs of each params given."""
    producers = [(stage.name, _pattern(t)) for stage in STAGES.values() for t in stage.outputs.values()]
    out: dict[str, set[str]] = {name: set() for name in STAGES}
    for p in params:
        for consumer, path in _job_inputs(Params.of(p)):
            out[consumer] |= {name for name, pattern in producers if pattern.fullmatch(path)}
    return out


def out_of_order(graph: dict[str, set[str]]) -> list[str]:
    """`consumer <- producer` for every edge whose producer the table lists after its consumer."""
    order = list(STAGES)
    return [f"{c} <- {p}" for c, ps in graph.items() for p in sorted(ps) if order.index(p) >= order.index(c)]


def mermaid(graph: dict[str, set[str]]) -> str:
    """The DAG as a Mermaid flowchart, stages in table order, one line per edge."""
    lines = ["flowchart TD"]
    for consumer in STAGES:
        lines += [f"    {producer} --> {consumer}" for producer in STAGES if producer in graph[consumer]]
    return "\n".join(lines) + "\n"


def shipped_params(root: Path = Path(".")) -> list[Params]:
    """params.yaml and each config/*.yaml laid over it: between them every stage has jobs."""
    base = read_yaml(root / "params.yaml")
    overlays = sorted((root / "config").glob("*.yaml"))
    return [Params(validate_params(base))] + [
        Params(validate_params(merge_overlay(base, read_yaml(f)), source=str(f))) for f in overlays
    ]


def picture(root: Path = Path(".")) -> str:
    """docs/stages.md's picture of the DAG: the edges of the shipped configs' jobs (`vocabtransfer dag`)."""
    return mermaid(edges(*shipped_params(root)))
