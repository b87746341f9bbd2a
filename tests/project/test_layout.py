"""The package's shape: grouped by the phase each module serves, no module over 450 lines and no function
over 80, layers in the pipeline's order with no import running back up, and no import cycle among its
modules (imports inside functions count too)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

from conftest import REPO
from vocabtransfer.plan.params_root import Params

PACKAGE = REPO / "src" / "vocabtransfer"
# the layers from the bottom up, in the pipeline's order: a module imports only from its own layer and
# those below it. `base`: the package's top-level helpers; `pipeline`: config, paths, names and the
# `Stage` declaration; `plan`: what planning knows before any job (the stage table, every params section's
# dataclass, the job planners, the methods' catalog), which the phases import; `model`: loading, swapping and
# saving models, LM data and heads (what every phase uses); the phases in DAG order; `app`: the runner, the
# run's plan and the cli.
LAYERS = ("base", "pipeline", "plan", "model", "data", "init", "train", "evaluate", "report", "app")
COMPUTE = ("model", "data", "init", "train", "evaluate", "report")  # the packages whose code runs in a job
BASE = {"errors", "io", "log", "registry", "version"}  # vocabtransfer.<name>
APP = {"vocabtransfer", "vocabtransfer.__main__"}  # the package's lazy exports and `python -m vocabtransfer`
PHASES = LAYERS[1:]
TOP_LEVEL = {"__init__.py", "__main__.py", *(f"{name}.py" for name in BASE)}
MAX_LINES = 450
MAX_FUNCTION_LINES = 80  # from `def` to its last line, docstring included: one screen


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """module -> the vocabtransfer modules it imports anywhere in its source (read, not imported)."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, path in modules.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets = [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            deps |= {r for t in targets if t.startswith("vocabtransfer") and (r := resolve(t)) and r != name}
        graph[name] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle():
    graph = import_graph()
    assert (
        "vocabtransfer.pipeline.stage_spec" in graph and "vocabtransfer.plan.stages" in graph["vocabtransfer.app.cli"]
    )
    assert "vocabtransfer.app.runner" in graph["vocabtransfer.app.cli"]
    assert cycles(graph) == []


def layer(module: str) -> int:
    """The index in LAYERS of a vocabtransfer module's layer."""
    if module in APP:
        return LAYERS.index("app")
    first = module.split(".")[1]
    return LAYERS.index("base" if first in BASE else first)


def imports_up(graph: dict[str, set[str]]) -> list[str]:
    """`module -> imported (layer -> layer)` for each import that runs up the layers."""
    return [
        f"{m} -> {d} ({LAYERS[layer(m)]} -> {LAYERS[layer(d)]})"
        for m, deps in sorted(graph.items())
        for d in sorted(deps)
        if layer(d) > layer(m)
    ]


def test_no_import_runs_up_the_layers():
    """model at the bottom (above config and paths), the phases above it in DAG order, the application on
    top: every module's imports, inside functions too, stay in its layer or below."""
    graph = import_graph()
    assert {LAYERS[layer(m)] for m in graph} == set(LAYERS)
    assert imports_up(graph) == []


def test_the_layer_check_finds_an_import_up():
    graph = {
        "vocabtransfer.plan.availability": {"vocabtransfer.pipeline.paths", "vocabtransfer.init.methods.registry"},
        "vocabtransfer.app.cli": {"vocabtransfer.report.build"},
        "vocabtransfer.io": {"vocabtransfer.errors"},
    }
    up = "vocabtransfer.plan.availability -> vocabtransfer.init.methods.registry (plan -> init)"
    assert imports_up(graph) == [up]


def import_time_graph() -> dict[str, set[str]]:
    """module -> the vocabtransfer modules importing it runs: its imports outside functions, and for each
    the packages above the imported module (Python runs their `__init__` first), its own excepted."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        deps = set()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        inside = {
            id(n)
            for f in ast.walk(tree)
            for n in ast.walk(f)  # in functions, or for type checkers only
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
            or isinstance(f, ast.If)
            and "TYPE_CHECKING" in ast.unparse(f.test)
        }
        for node in ast.walk(tree):
            if id(node) in inside:
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for target in targets:
                parts = target.split(".")
                deps |= {m for i in range(2, len(parts) + 1) if (m := ".".join(parts[:i])) in modules}
        own = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 2)}
        graph[name] = deps - own
    return graph


def test_no_import_cycle_at_import_time():
    """Importing any module first never needs a module that is still half-imported: no cycle among the
    imports that run at import (module level, with the packages they pass through)."""
    assert cycles(import_time_graph()) == []


def test_the_cycle_check_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_stage_modules_never_import_the_stage_table():
    """The declarations name the stages' code by reference, one way: no stage module imports them."""
    graph = import_graph()
    table = "vocabtransfer.plan.stages"
    users = {m for m, deps in graph.items() if table in deps}
    assert users <= {
        "vocabtransfer.app.cli",
        "vocabtransfer.app.runner",
        "vocabtransfer.app.plan",
        "vocabtransfer.app.dvcgen",
        "vocabtransfer.app.dag",
        "vocabtransfer.app.producers",
    }, users


def test_stages_are_declared_in_one_place_and_their_code_is_declared():
    """Every `Stage` is declared in the DAG, vocabtransfer.plan.stages; a stage module holds only code (no
    `Stage` import), and each stage's declared code (`Stage.code`: entry modules, followed through their
    imports) holds the module its `run` names."""
    from vocabtransfer.plan.stages import STAGES
    from vocabtransfer.app.params import load_params
    from vocabtransfer.pipeline.stage_spec import PACKAGE as package, module_file

    for path in PACKAGE.rglob("*.py"):
        if path.relative_to(PACKAGE).parts[0] in ("app", "plan") or path.name == "stage_spec.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "vocabtransfer.pipeline.stage_spec":
                assert "Stage" not in {a.name for a in node.names}, f"{path}: declares a stage outside plan/stages.py"
    params = Params(load_params(REPO / "params.yaml"))
    for stage in STAGES.values():
        run_module = str(module_file(stage.run.partition(":")[0]).relative_to(package))
        for lang in params.languages if "lang" in stage.wildcards else [None]:
            for wildcards in stage.jobs(params, lang)[:1]:
                assert run_module in stage.code_modules(params, wildcards), (stage.name, run_module)


# the libraries a job computes with: planning (the stage table, the CLI, Snakemake) loads none of them
HEAVY = ("torch", "transformers", "tokenizers", "safetensors", "datasets", "scipy", "pandas", "sklearn", "matplotlib")


def loaded_by(statement: str) -> list[str]:
    """The compute modules (of COMPUTE's packages, and the HEAVY libraries) a fresh interpreter has loaded after
    running `statement`."""
    check = (
        f"import sys; {statement}; "
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r} "
        f"or m.startswith('vocabtransfer.') and m.split('.')[1] in {COMPUTE!r}))"
    )
    proc = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return eval(proc.stdout)


def test_planning_loads_no_compute_module():
    """Snakemake and the CLI import the stage table before any job: the table and the command line load the
    planning layer and what lies below it, no module of a phase's package (a stage's `run` is a lazy reference)
    and no library a job computes with; and no planning module imports a compute package."""
    assert loaded_by("import vocabtransfer.plan.stages") == []
    assert loaded_by("import vocabtransfer.app.cli; vocabtransfer.app.cli.build_parser()") == []
    graph = import_graph()
    planning = [f"{m} -> {d}" for m in sorted(graph) if layer(m) == LAYERS.index("plan") for d in sorted(graph[m])]
    assert [edge for edge in planning if layer(edge.split(" -> ")[1]) > LAYERS.index("plan")] == []


def test_the_planning_check_finds_a_compute_module():
    assert {"vocabtransfer.data.corpus", "vocabtransfer.evaluate.stats"} <= set(
        loaded_by("import vocabtransfer.data.corpus, vocabtransfer.evaluate.coverage")
    )


def test_modules_are_grouped_by_phase_and_small():
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE)
        assert rel.parts[0] in PHASES or str(rel) in TOP_LEVEL, rel
        lines = len(path.read_text(encoding="utf-8").splitlines())
        assert lines <= MAX_LINES, f"{rel}: {lines} lines (split it along its concepts)"


def test_every_top_level_function_and_class_is_used():
    """Dead code is deleted: each module-level function or class (not registered by a decorator) is named
    somewhere besides its definition: in the package, its lm-eval task files, the tests, the workflow or
    the benchmarks."""
    tasks = [p for p in (PACKAGE / "evaluate" / "harness_tasks").iterdir() if p.is_file() and p.suffix != ".py"]
    sources = [
        *PACKAGE.rglob("*.py"),
        *tasks,
        *(REPO / "tests").rglob("*.py"),
        *(REPO / "workflow").rglob("*.smk"),
        REPO / "Snakefile",
        *(REPO / "benchmarks").glob("*.py"),
    ]
    words = Counter(w for path in sources for w in re.findall(r"\w+", path.read_text(encoding="utf-8")))
    unused = [
        f"{path.relative_to(PACKAGE)}: {node.name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for node in ast.parse(path.read_text(encoding="utf-8")).body
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.decorator_list and words[node.name] < 2
    ]
    assert unused == []


# names that once meant two things in two modules: each is defined by one module now
ONE_MEANING = ("SOURCE_KEYS", "options_class")


def test_a_name_means_one_thing():
    defined: dict[str, list[str]] = {name: [] for name in ONE_MEANING}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            targets = (
                [node.name]
                if isinstance(node, (ast.FunctionDef, ast.ClassDef))
                else [
                    t.id for t in getattr(node, "targets", [getattr(node, "target", None)]) if isinstance(t, ast.Name)
                ]
            )
            for name in set(targets) & set(ONE_MEANING):
                defined[name].append(str(path.relative_to(PACKAGE)))
    assert all(len(where) <= 1 for where in defined.values()), defined


def function_lengths(source: str) -> list[tuple[str, int]]:
    """(name, lines) of every function and method in `source` (methods of two classes may share a name),
    from its `def` to its last line."""
    return [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]


def long_functions() -> dict[str, int]:
    """ "<module>:<function>" -> lines, of every function and method in the package over MAX_FUNCTION_LINES."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        for name, lines in function_lengths(path.read_text(encoding="utf-8")):
            if lines > MAX_FUNCTION_LINES:
                out[f"{rel}:{name}"] = max(lines, out.get(f"{rel}:{name}", 0))
    return out


def test_functions_fit_on_one_screen():
    long = long_functions()
    assert long == {}, f"functions over {MAX_FUNCTION_LINES} lines (split them along their steps): {long}"


def test_function_lengths_count_from_def_to_the_last_line():
    source = (
        'def f():\n    """doc"""\n\n    return 1\n\n\nclass C:\n    def f(self):\n        pass\n'
        "\n\n    async def g(self):\n        pass\n"
    )
    assert sorted(function_lengths(source)) == [("f", 2), ("f", 4), ("g", 2)]


MAX_ARGUMENTS = 8  # positional and keyword-only, `self`/`cls` aside, *args/**kwargs not counted
EXEMPT = {  # "<module>:<function>" -> why its argument list stays long
    "init/deepfocus.py:FOCUS": "a drop-in for deepfocus.FOCUS 1.0.1: its public signature, argument for argument",
    "model/fused_head_triton.py:_objective_kernel": "a Triton kernel: its arguments are its tensors' pointers and "
    "strides",
}


def argument_counts(source: str) -> list[tuple[str, int]]:
    """(name, arguments) of every function and method in `source`, a method named `Class.method`: its
    positional and keyword-only arguments, less a leading `self` or `cls`; *args and **kwargs not counted."""
    out = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = child.args
                names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
                if names[:1] in (["self"], ["cls"]):
                    names = names[1:]
                out.append((prefix + child.name, len(names)))
                visit(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return out


def long_argument_lists() -> dict[str, int]:
    """ "<module>:<function>" -> arguments, of every function and method in the package over MAX_ARGUMENTS."""
    return {
        f"{path.relative_to(PACKAGE).as_posix()}:{name}": count
        for path in sorted(PACKAGE.rglob("*.py"))
        for name, count in argument_counts(path.read_text(encoding="utf-8"))
        if count > MAX_ARGUMENTS
    }


def test_no_function_takes_more_than_eight_arguments():
    """Arguments that travel together are one object (the options dataclass the stage read, a small frozen
    dataclass along a concept): no argument list over MAX_ARGUMENTS but the exempt ones."""
    long = long_argument_lists()
    over = {name: count for name, count in long.items() if name not in EXEMPT}
    assert over == {}, f"functions over {MAX_ARGUMENTS} arguments (group those that travel together): {over}"
    assert set(EXEMPT) <= set(long), f"exempt but no longer over the limit: {sorted(set(EXEMPT) - set(long))}"


def test_argument_counts_leave_out_self_cls_and_star_arguments():
    source = (
        "def f(a, b=1, *args, c, d=2, **kwargs):\n    def inner(x, /, y):\n        pass\n\n\n"
        "class C:\n    def m(self, a, *, b):\n        pass\n\n    @classmethod\n    def k(cls):\n"
        "        pass\n\n    @staticmethod\n    def s(x, y, z):\n        pass\n\n\n"
        "async def g(self_, other):\n    pass\n"
    )
    assert argument_counts(source) == [("f", 4), ("f.inner", 2), ("C.m", 2), ("C.k", 0), ("C.s", 3), ("g", 2)]


NOQA = "# no" + "qa"  # spelt in two so that this module's own lines hold no such comment
NOQA_WITH_REASON = re.compile(NOQA + r": [A-Z]+[0-9]+(?:, ?[A-Z]+[0-9]+)* (?:\(|- )\S")


def bare_noqa(text: str) -> list[int]:
    """The lines of `text` whose noqa comment names no rule or gives no reason after it."""
    return [i for i, line in enumerate(text.splitlines(), 1) if NOQA in line and not NOQA_WITH_REASON.search(line)]


def test_every_noqa_names_its_rule_and_says_why():
    sample = f"x = 1  {NOQA}: F401 (re-exported)\ny = 2  {NOQA}: E731\nz = 3  {NOQA}\n"
    assert bare_noqa(sample) == [2, 3]
    bare = [
        f"{path.relative_to(REPO)}:{i}"
        for folder in ("src", "tests", "benchmarks")
        for path in sorted((REPO / folder).rglob("*.py"))
        for i in bare_noqa(path.read_text(encoding="utf-8"))
    ]
    assert bare == [], f"a noqa without its rule and reason: {bare}"


def test_the_readme_and_docs_layout_name_every_module_as_the_tree_has_it():
    """README.md's `src/vocabtransfer/` block and docs/layout.md are what `vocabtransfer layout --write` makes from
    the tree: a module added, moved or renamed without them fails here."""
    from vocabtransfer.app import layout

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert layout.with_readme_block(readme) == readme, "run `vocabtransfer layout --write` (make docs)"
    assert (REPO / "docs" / "layout.md").read_text(encoding="utf-8") == layout.layout_doc()
    named = {m for modules in layout.packages().values() for m in modules}
    on_disk = {p.stem for p in PACKAGE.rglob("*.py") if p.stem not in ("__init__", "__main__")}
    assert named == on_disk and all(f" {m}" in layout.readme_block().replace(",", " ") for m in on_disk)


MAX_FUNCTION_IMPORTS = 30  # imports inside functions: optional dependencies and start-up weight only


def function_imports(source: str) -> list[tuple[int, bool]]:
    """(line, whether its reason is written beside it) of every import inside a function of `source`: the reason is
    a comment on one of the statement's lines or on the line above it."""
    tree, lines = ast.parse(source), source.splitlines()
    found = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                span = lines[node.lineno - 2 : node.end_lineno]
                found.append((node.lineno, any("#" in line for line in span)))
    return sorted(set(found))


def test_imports_inside_functions_are_few_and_each_says_why():
    """Compute modules import at the top; an import inside a function is an optional dependency or start-up weight,
    with its reason on its line (the house's figure: at most 30)."""
    found = {
        f"{path.relative_to(PACKAGE)}:{line}": reasoned
        for path in sorted(PACKAGE.rglob("*.py"))
        for line, reasoned in function_imports(path.read_text(encoding="utf-8"))
    }
    assert len(found) <= MAX_FUNCTION_IMPORTS, sorted(found)
    assert [where for where, reasoned in found.items() if not reasoned] == []


def test_the_function_import_check_sees_nested_imports_and_missing_reasons():
    source = "import os\n\n\ndef f():\n    x = 1\n    import json\n    from a import (\n        b,\n    )  # a: why\n"
    assert function_imports(source) == [(6, False), (7, True)]
