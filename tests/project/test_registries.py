"""The method and task registries carry their metadata: the schema's names, the report's tasks and
every stage that treats a method specially read them, so adding a method or a task is one module
(plus its schema section)."""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
import textwrap
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import pytest
import torch

import vocabtransfer.init.methods as methods_package
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.evaluate import tasks
from vocabtransfer.init import initialise
from vocabtransfer.init.factorize import FACTORIZATIONS
from vocabtransfer.init.methods import available, get_method
from vocabtransfer.init.methods.registry import TransferResult, discover, register
from vocabtransfer.plan.methods import INFO, METHODS, MethodInfo, info
from vocabtransfer.model.losses import OBJECTIVES
from vocabtransfer.pipeline.stage_spec import contract_fault
from vocabtransfer.registry import Registry
from vocabtransfer.plan.init_plans import uses_snmf
from vocabtransfer.plan import availability
from vocabtransfer.app.params import load_params, schema
from vocabtransfer.pipeline.typed import option, section_schema
from vocabtransfer.plan.stages import STAGES
from vocabtransfer.plan.task_options import task_references
from vocabtransfer.report import markdown, read
from vocabtransfer.plan.params_root import Params
from vocabtransfer.plan import init_plans

from conftest import REPO
from helpers import make_ctx, tiny_bert, wordpiece_tokenizer, write_inputs

METHOD_NAMES = re.compile(r"\^\((?P<names>[a-z0-9_|]+)\)(?P<rest>.*)")


def _schema_patterns() -> dict[str, str]:
    props = schema()["properties"]
    return {
        "init.methods": props["init"]["properties"]["methods"]["items"]["pattern"],
        "pretrain.methods": props["pretrain"]["properties"]["methods"]["items"]["pattern"],
        "pretrain.pairs": props["pretrain"]["properties"]["pairs"]["items"]["pattern"],
    }


# --------------------------------------------------------------------------- the schema and the registries


def test_schema_method_patterns_name_exactly_the_registered_methods():
    objectives = schema()["properties"]["pretrain"]["properties"]["objectives"]["items"]["enum"]
    factorized = rf"(\+({'|'.join(FACTORIZATIONS)}))?"
    rests = {
        "init.methods": factorized + "$",
        "pretrain.methods": factorized + "$",
        "pretrain.pairs": factorized + f"-({'|'.join(objectives)})$",
    }
    for key, pattern in _schema_patterns().items():
        m = METHOD_NAMES.fullmatch(pattern)
        assert m, f"{key}: pattern {pattern!r} is not ^(<methods>)…"
        assert sorted(m["names"].split("|")) == available(), f"{key}: the pattern's methods differ from the registry"
        assert m["rest"] == rests[key], key
    for name in available():  # and the names themselves pass
        assert re.fullmatch(_schema_patterns()["init.methods"], name)
        if info(name).factorizable:
            assert all(re.fullmatch(_schema_patterns()["init.methods"], f"{name}+{f}") for f in FACTORIZATIONS)


def test_every_method_has_its_options_section():
    init = schema()["properties"]["init"]["properties"]
    assert [m for m in available() if m not in init] == []


def test_every_method_module_is_named_by_a_lazy_reference_that_its_register_fulfils():
    package = Path(methods_package.__file__).parent
    infrastructure = {"registry", "options", "variants", "catalog"}  # modules of the package that hold no method
    modules = {p.stem for p in package.glob("*.py") if not p.stem.startswith("_")} - infrastructure
    assert set(discover()) == set(available())
    # every method module is referenced, and every reference resolves to the function its @register added
    assert {METHODS[m].__module__.rsplit(".", 1)[-1] for m in available()} == modules
    assert set(INFO) == set(METHODS) and all(INFO[m].name == m for m in INFO)


def test_a_name_registered_twice_is_one_error_naming_both_places():
    discover()
    with pytest.raises(
        VocabTransferError,
        match=r"init method 'focus' is registered twice: by "
        r"vocabtransfer\.init\.methods\.focus:focus and by .*:_fake",
    ):
        register("focus")(_fake)
    assert METHODS["focus"].__module__ == "vocabtransfer.init.methods.focus"
    with pytest.raises(VocabTransferError, match="task 'qa' is registered twice"):
        tasks.register("qa")(type("QA2", (tasks.Task,), {}))
    assert tasks.task_class("qa").__name__ == "QA"
    with pytest.raises(VocabTransferError, match="stage 'init' is registered twice"):
        STAGES.register("init")(STAGES["init"])
    with pytest.raises(VocabTransferError, match="objective 'selfish' is registered twice"):
        OBJECTIVES.register("selfish")(OBJECTIVES["standard"])


def test_a_registry_imports_a_lazy_reference_only_when_it_is_looked_up(tmp_path, monkeypatch):
    (tmp_path / "lazy_things.py").write_text("def shout(x):\n    return x.upper()\n\nNOT_CALLABLE = 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "lazy_things", raising=False)
    things = Registry(
        "thing",
        lazy={"shout": "lazy_things:shout", "three": "lazy_things:NOT_CALLABLE"},
        check=lambda f: None if callable(f) else "a thing is a function",
    )
    assert list(things) == ["shout", "three"] and "lazy_things" not in sys.modules
    assert things["shout"]("a") == "A" and "lazy_things" in sys.modules
    with pytest.raises(VocabTransferError, match=r"thing 'three' \(lazy_things:NOT_CALLABLE\): a thing is a function"):
        things["three"]
    with pytest.raises(VocabTransferError, match=r"unknown thing 'nope' \(x\.y\); available: shout, three"):
        things.get_or_raise("nope", "x.y")
    with pytest.raises(VocabTransferError, match="a reference is 'package.module:attribute'"):
        Registry("thing", lazy={"bad": "no_colon"})["bad"]


def test_every_stage_keeps_the_stage_contract():
    assert len(STAGES) == 23 and all(contract_fault(s) is None for s in STAGES.values())
    init = STAGES["init"]
    assert "not a wildcard" in contract_fault(replace(init, outputs={"x": "results/{lang}/{nope}"}))
    assert "'package.module:function' reference" in contract_fault(replace(init, run=lambda ctx: None))
    assert "'package.module:function' reference" in contract_fault(replace(init, run="vocabtransfer.init.initialise"))
    assert "no module vocabtransfer.init.ghost" in contract_fault(replace(init, run="vocabtransfer.init.ghost:run"))
    assert "no module vocabtransfer.ghost.x" in contract_fault(replace(init, run="vocabtransfer.ghost.x:run"))
    assert "are no outputs" in contract_fault(replace(init, directories=frozenset({"ghost"})))
    assert "does not exist" in contract_fault(replace(init, code=("init/ghost.py",)))
    assert "(params, wildcards)" in contract_fault(replace(init, skip_reason=lambda params: None))
    with pytest.raises(VocabTransferError, match=r"stage 'ghost' .*not a wildcard"):
        Registry("stage", check=contract_fault).register("ghost")(replace(init, outputs={"x": "{nope}"}))


def test_every_stage_s_run_names_a_function_of_the_job_s_context():
    """Each `Stage.run` reference imports (the contract check only finds its module) and names a function of one
    argument, the job's Context; the stage table itself names them without importing any."""
    for stage in STAGES.values():
        function = stage.function()
        assert inspect.isfunction(function), (stage.name, stage.run)
        assert len(inspect.signature(function).parameters) == 1, (stage.name, stage.run)
        assert f"{function.__module__}:{function.__name__}" == stage.run


def test_the_metadata_of_the_real_methods():
    assert [m for m in available() if info(m).deterministic] == ["mean"]
    assert [m for m in available() if not info(m).factorizable] == ["hypernet", "ofa", "snmf"]
    assert info("mean+svd").deterministic and not availability.seeded("mean+snmf") and availability.seeded("focus")
    assert uses_snmf("snmf") and uses_snmf("fvt+snmf") and not uses_snmf("ofa")
    assert set(info("wechsel").inputs) == {"source_fasttext", "target_fasttext"}
    with pytest.raises(VocabTransferError, match="ofa factorises on its own"):
        get_method("ofa+svd")
    with pytest.raises(VocabTransferError, match="except hypernet, ofa and snmf"):
        get_method("nope")
    with pytest.raises(TypeError):
        register("test_typo", deterministc=True)  # a misspelt keyword fails at import, not silently
    assert "test_typo" not in METHODS


def test_tasks_schema_report_and_registry_agree():
    keys = list(schema()["properties"]["eval"]["properties"]["tasks"]["properties"])
    assert sorted(keys) == tasks.available(), "the params section eval.tasks (EvalTasks) and the task registry differ"
    assert read.task_order() == tuple(keys)  # the report shows the tasks in the schema's order
    assert {cls.__module__.rsplit(".", 1)[-1] for cls in tasks.TASKS.values()} == set(tasks.TASKS)
    # the registry's built-ins are the sections of eval.tasks, each naming its class (no list of them by hand)
    assert list(tasks.TASKS)[:3] == keys == list(task_references())
    assert all(f"{tasks.TASKS[t].__module__}:{tasks.TASKS[t].__name__}" == ref for t, ref in task_references().items())
    for name in tasks.available():
        cls = tasks.task_class(name)
        assert cls.name == name and cls.metric and cls.head.startswith("AutoModelFor") and cls.floor_text
        assert markdown.floor_text(name) == cls.floor_text
    assert markdown.floor_text("unknown") == "see docs/evaluation.md"


# --------------------------------------------------------------------------- a fake method's metadata is used


@dataclass(frozen=True)
class FakeOptions:
    alpha: int = option(0, "an option of the method")
    other_stage: str = option("", "an option another stage reads (`stage_options`)")


def _fake(problem, options):
    g = torch.Generator().manual_seed(problem.seed)
    emb = torch.randn(problem.target_size, problem.source_embeddings.shape[1], generator=g)
    return TransferResult(emb, {"options": asdict(options), "resources": sorted(problem.resources)})


def _condition(params: dict, lang: str) -> str | None:
    return None if lang == "sw" else f"no test vectors for {lang}"


FAKE = dict(
    options=FakeOptions,
    inputs={"test_vectors": "results/{lang}/test/vectors.bin"},
    deterministic=True,
    auxiliary_rows=True,
    stage_options=("other_stage",),
    condition=_condition,
    data=lambda params, lang: {"data_test": Path(f"data/test/{lang}.txt")},
    factorizable=False,
)


@pytest.fixture
def fake_methods():
    """`test_meta` (every kind of metadata) and `test_snmf_reader` (reads the source_snmf factors),
    registered through `register` for one test; the registry is as it was afterwards."""
    available()  # the real methods register first
    register("test_meta", **FAKE)(_fake)
    register("test_snmf_reader", factors=("snmf",))(_fake)
    try:
        yield
    finally:
        for name in ("test_meta", "test_snmf_reader"):
            METHODS.pop(name, None)
            INFO.pop(name, None)


@pytest.fixture(scope="module")
def params():
    base = load_params(REPO / "params.yaml")
    base["init"] = {
        **base["init"],
        "methods": ["random", "test_meta", "test_snmf_reader"],
        "test_meta": {"alpha": 1, "other_stage": "x"},
    }
    base["pretrain"] = {**base["pretrain"], "methods": ["random", "test_meta"], "pairs": None, "seeds": 3}
    return Params(base)


def test_a_registered_methods_metadata_reaches_the_pipeline(fake_methods, params):
    init = STAGES["init"]
    wc = {"lang": "sw", "method": "test_meta", "pseed": "1"}
    # inputs: the core ones plus its own; factors=("snmf",): the shared semi-NMF too
    assert init.input_templates(params, wc) == {
        "source_model": "results/source/model",
        "tokenizer": "results/{lang}/tokenizer",
        "overlap": "results/{lang}/overlap/overlap.parquet",
        "fasttext": "results/{lang}/fasttext/embeddings.safetensors",
        "test_vectors": "results/{lang}/test/vectors.bin",
    }
    assert (
        init.input_templates(params, {**wc, "method": "test_snmf_reader"})["snmf_factors"]
        == "results/source/snmf.safetensors"
    )
    assert "snmf_factors" not in init.input_templates(params, {**wc, "method": "random"})
    assert STAGES["source_snmf"].why_skipped(params, {}) is None
    assert STAGES["source_snmf"].why_skipped(
        Params({**params.tree, "init": {**params.tree["init"], "methods": ["test_meta"]}}), {}
    )
    # deterministic: one initialisation for every pretraining seed (random gets one per seed)
    assert availability.init_runs(params) == [
        ("random", 1),
        ("random", 2),
        ("random", 3),
        ("test_meta", 1),
        ("test_snmf_reader", 1),
    ]
    assert (
        STAGES["pretrain"].input_templates(params, {**wc, "objective": "standard", "pseed": "3"})["init"]
        == "results/{lang}/init/test_meta/pseed1"
    )
    # condition: runs for sw only, and so do its pretraining runs
    assert init.why_skipped(params, wc) is None
    assert init.why_skipped(params, {**wc, "lang": "de"}) == "no test vectors for de"
    assert "test_meta" not in availability.methods(params, "de")
    assert {m for m, _, _ in availability.pretrain_runs(params, "de")} == {"random"}
    assert availability.needed_by(params, "test_meta", "de") == "init test_meta does not run: no test vectors for de"
    # data: the local files the job reads
    assert init.data_files(params, wc) == {"data_test": "data/test/sw.txt"}
    assert init.data_files(params, {**wc, "method": "random"}) == {}
    # stage_options: keys other stages read are not recorded as the method's options
    assert initialise.options_record("test_meta", FakeOptions(alpha=1, other_stage="x")) == {"alpha": 1}
    # auxiliary_rows: the init stats count where the rows came from
    rows = initialise.target_rows("test_meta", 4, np.array([0]), torch.tensor([True, True, False, False]), None)
    assert rows == {"overlap": 1, "dictionary": 1, "subword": 0, "random": 2}
    assert initialise.target_rows("random", 4, np.array([0]), torch.tensor([True] * 4), None) is None
    # factorizable=False: no +svd / +snmf around it
    with pytest.raises(VocabTransferError, match="test_meta factorises on its own"):
        get_method("test_meta+svd")
    with pytest.raises(VocabTransferError, match="except hypernet, ofa, snmf and test_meta"):
        get_method("nope")


def test_the_init_stage_runs_a_registered_method_with_its_metadata(fake_methods, params, tmp_path):
    source_tok = wordpiece_tokenizer("en")
    inputs, _ = write_inputs(tmp_path, tiny_bert(len(source_tok)), source_tok, wordpiece_tokenizer("sw", 250))
    inputs["test_vectors"] = tmp_path / "vectors.bin"  # its declared input reaches it as a resource
    ctx = make_ctx(
        "vocabtransfer.init.initialise:run",
        {"lang": "sw", "method": "test_meta"},
        inputs,
        {"init": tmp_path / "sw" / "init" / "test_meta"},
        params,
    )
    initialise.run(ctx)
    stats = json.loads((tmp_path / "sw" / "init" / "test_meta" / "stats.json").read_text())
    assert stats["method_stats"] == {"options": {"alpha": 1, "other_stage": "x"}, "resources": ["test_vectors"]}
    assert stats["options"] == {"alpha": 1} and set(stats["target_rows"]) == {
        "overlap",
        "dictionary",
        "subword",
        "random",
    }


def test_a_method_registered_without_metadata_gets_the_defaults(monkeypatch, params):
    available()
    monkeypatch.setitem(METHODS, "test_plain", _fake)
    assert info("test_plain") == MethodInfo("test_plain") and info("test_plain+svd") == MethodInfo("test_plain")
    assert availability.seeded("test_plain") and not uses_snmf("test_plain")
    # no snmf factors, and no calibration text (only random and overlap calibrate their drawn rows)
    assert set(init_plans.init_inputs(params, {"method": "test_plain"})) == set(initialise.CORE_INPUTS) - {
        "snmf_factors",
        "calibration_text",
    }


def test_planning_reads_the_catalog_and_imports_no_method_nor_torch():
    """Validating params, planning every job (with each job's code and data files) and generating dvc.yaml read
    the methods' catalog alone: no method module, no torch (Snakemake and every CLI command plan first)."""
    code = textwrap.dedent("""
        import sys
        from vocabtransfer.app import dvcgen
        from vocabtransfer.app.params import validate_params
        from vocabtransfer.plan.stages import STAGES
        from vocabtransfer.pipeline.config import read_yaml
        from vocabtransfer.plan.params_root import Params

        params = Params(validate_params(read_yaml("params.yaml")))
        jobs = [(stage, wc) for stage in STAGES.values()
                for lang in (params.languages if "lang" in stage.wildcards else [None])
                for wc in stage.jobs(params, lang)]
        assert any(stage.name == "init" for stage, _ in jobs)
        for stage, wc in jobs:
            stage.code_modules(params, wc), stage.data_files(params, wc), stage.input_templates(params, wc)
        dvcgen.generate(params)
        loaded = sorted(m for m in sys.modules if m.startswith(("torch", "vocabtransfer.init.methods")))
        print(loaded)
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "[]"


def test_a_built_in_method_declares_its_metadata_once_in_the_catalog():
    """The catalog's `BUILTINS` is the one list of the built-in methods: `METHODS` (their functions, by the lazy
    reference each entry carries) and `INFO` (the entries themselves) are derived from it, in its order."""
    from vocabtransfer.plan.method_catalog import BUILTINS

    names = [spec.name for spec in BUILTINS]
    assert len(set(names)) == len(names) == 12
    assert [m for m in METHODS if m in names] == names == [m for m in INFO if m in names]
    assert set(available()) == set(names)  # no method but the catalog's (no plugin registered here)
    for spec in BUILTINS:
        assert INFO[spec.name] is spec
        assert METHODS.module_of(spec.name) == spec.run.partition(":")[0]
    discover()
    for spec in BUILTINS:
        assert f"{METHODS[spec.name].__module__}:{METHODS[spec.name].__name__}" == spec.run
    with pytest.raises(VocabTransferError, match="init method's metadata 'omp' is registered twice"):
        INFO.register("omp")(INFO["omp"])


def test_a_name_declared_twice_or_without_its_reference_is_one_error(tmp_path, monkeypatch):
    (tmp_path / "spec_lists.py").write_text(
        "from types import SimpleNamespace as S\n"
        "TWICE = (S(name='a', run='m:f'), S(name='b', run='m:g'), S(name='a', run='m:h'))\n"
        "NO_RUN = (S(name='a', run=''),)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "spec_lists", raising=False)
    twice = Registry("thing", declared="spec_lists:TWICE", entry=lambda spec: spec.run)
    with pytest.raises(VocabTransferError, match=r"thing 'a' is declared twice in spec_lists:TWICE; rename one"):
        list(twice)
    no_run = Registry("thing", declared="spec_lists:NO_RUN", entry=lambda spec: spec.run)
    with pytest.raises(VocabTransferError, match=r"thing 'a' \(spec_lists:NO_RUN\): '' is no 'package.module:attr"):
        assert "a" not in no_run
    fine = Registry("thing", declared="spec_lists:NO_RUN")  # the specs themselves, as INFO holds them
    fine.register("b")(_fake)
    assert list(fine) == ["a", "b"] and fine["a"].name == "a"  # the declared entries first, read on first use


def _with_an_extra_entry(module: str, marker: str, replacement: str, check: str) -> dict:
    """Runs `check` (code printing one JSON value) in a fresh interpreter where `module`'s source has `marker`
    replaced (an entry added to the one list of declarations): what such an entry reaches."""
    code = textwrap.dedent(f"""
        import importlib.util, json, sys
        spec = importlib.util.find_spec({module!r})
        source = spec.loader.get_source(spec.name)
        assert source.count({marker!r}) == 1, "the marker is not in the module once"
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        exec(compile(source.replace({marker!r}, {replacement!r}), spec.origin, "exec"), module.__dict__)
    """) + textwrap.dedent(check)
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_a_method_added_to_the_catalog_is_everywhere_a_method_is_named():
    """An entry added to the catalog alone becomes an init method of the registries, the schema (its section, the
    patterns) and the typed root, no other edit: no list of the methods is kept by hand."""
    marker = "BUILTINS: tuple[MethodInfo, ...] = (\n"
    entry = '    MethodInfo("test_extra", run="vocabtransfer.init.methods.baselines:mean_init", options=MeanOptions),\n'
    got = _with_an_extra_entry(
        "vocabtransfer.plan.method_catalog",
        marker,
        marker + entry,
        """
        from vocabtransfer.app.params import load_params, schema
        from vocabtransfer.plan.methods import INFO, METHODS
        from vocabtransfer.plan.params_root import Params

        init = schema()["properties"]["init"]["properties"]
        tree = load_params("params.yaml")
        print(json.dumps({
            "methods": list(METHODS), "info": INFO["test_extra"].run, "module": METHODS.module_of("test_extra"),
            "section": "test_extra" in init, "pattern": init["methods"]["items"]["pattern"],
            "typed": repr(Params(tree).init.test_extra),
        }))
        """,
    )
    assert got["methods"][0] == "test_extra" and len(got["methods"]) == 13
    assert got["info"] == "vocabtransfer.init.methods.baselines:mean_init"
    assert got["module"] == "vocabtransfer.init.methods.baselines" and got["section"]
    assert "|test_extra|" in got["pattern"] and got["typed"] == "MeanOptions()"


def test_an_objective_added_to_its_registry_is_everywhere_an_objective_is_named():
    """An objective declared in plan/objectives.py alone reaches the schema's choices and pairs pattern, the teacher
    objectives (planning and the distill options' rerun keys), the report's order and the model layer's registry;
    the fused head computes the objectives that are their own kernel."""
    marker = "):\n    OBJECTIVES.register(_objective.name)(_objective)"
    entry = '    Objective("test_focal", "a test", "vocabtransfer.model.losses:standard_loss", teacher=True),\n'
    got = _with_an_extra_entry(
        "vocabtransfer.plan.objectives",
        marker,
        entry + marker,
        """
        import dataclasses
        from vocabtransfer.app.params import schema
        from vocabtransfer.model import fused_head, losses
        from vocabtransfer.plan import job_plans, objectives, pretrain_plans
        from vocabtransfer.plan.pretrain_params import PretrainParams
        from vocabtransfer.report import read

        pretrain = schema()["properties"]["pretrain"]["properties"]
        meta = {f.name: f.metadata.get("objective") for f in dataclasses.fields(PretrainParams)}
        print(json.dumps({
            "enum": pretrain["objectives"]["items"]["enum"], "pairs": pretrain["pairs"]["items"]["pattern"],
            "teacher": [list(objectives.TEACHER_OBJECTIVES), list(pretrain_plans.TEACHER_OBJECTIVES),
                        list(job_plans.TEACHER_OBJECTIVES), list(meta["distill"])],
            "margin": list(meta["selfish"]), "order": list(read.OBJECTIVE_ORDER), "model": list(losses.OBJECTIVES),
            "kernels": list(fused_head.OBJECTIVE_NAMES),
        }))
        """,
    )
    names = ["standard", "selfish", "distill", "alm", "test_focal"]
    assert got["enum"] == names == got["model"] and got["order"] == ["init", *names]
    assert got["pairs"].endswith("-(standard|selfish|distill|alm|test_focal)$")
    assert got["teacher"] == [["distill", "alm", "test_focal"]] * 4
    assert got["margin"] == ["selfish"] and got["kernels"] == ["standard", "selfish"]


def test_the_objectives_and_every_list_of_them_agree():
    from vocabtransfer.model import fused_head, losses
    from vocabtransfer.plan import objectives

    pretrain = schema()["properties"]["pretrain"]["properties"]
    assert (
        pretrain["objectives"]["items"]["enum"]
        == list(objectives.OBJECTIVES)
        == ["standard", "selfish", "distill", "alm"]
    )
    assert read.OBJECTIVE_ORDER == ("init", "standard", "selfish", "distill", "alm")
    assert objectives.TEACHER_OBJECTIVES == ("distill", "alm") and objectives.MARGIN_OBJECTIVES == ("selfish",)
    assert fused_head.OBJECTIVE_NAMES is objectives.KERNELS and objectives.KERNELS == ("standard", "selfish")
    assert losses.OBJECTIVES is objectives.OBJECTIVES and losses.get_objective("alm").alpha == 1.0
    logits, labels = torch.tensor([[2.0, 0.0, -9.0]]), torch.tensor([0])
    standard = losses.objective_loss("standard", logits, labels)
    assert torch.allclose(standard, torch.log1p(torch.exp(torch.tensor(-2.0)) + torch.exp(torch.tensor(-11.0))))
    assert torch.allclose(
        losses.objective_loss("selfish", logits, labels, margin=3.0), torch.log1p(torch.exp(torch.tensor(-2.0)))
    )
    with pytest.raises(VocabTransferError, match="objective 'alm' is registered twice"):
        objectives.OBJECTIVES.register("alm")(objectives.OBJECTIVES["distill"])
    bad = objectives.Objective("test_bad", "x", "vocabtransfer.model.losses:standard_loss", kernel="distill")
    with pytest.raises(VocabTransferError, match="its kernel 'distill' is no objective declared before it"):
        objectives.OBJECTIVES.register("test_bad")(bad)
    assert "test_bad" not in objectives.OBJECTIVES


def test_an_option_takes_its_choices_from_a_registry():
    @dataclass(frozen=True)
    class Picks:
        many: tuple[str, ...] = option(["b"], "several", uniqueItems=True, choices=("a", "b"))
        one: str = option("a", "one", choices=iter(["a", "b"]))

    props = section_schema(Picks)["properties"]
    assert props["many"] == {
        "type": "array",
        "uniqueItems": True,
        "items": {"enum": ["a", "b"]},
        "default": ["b"],
        "description": "several",
    }
    assert props["one"] == {"type": "string", "enum": ["a", "b"], "default": "a", "description": "one"}
    with pytest.raises(TypeError, match=r"its default \['c'\] is not among \['a', 'b'\]"):
        option(["c"], "several", choices=("a", "b"))


def test_a_registered_method_s_options_are_read_by_attribute(params, fake_methods):
    assert params.init.omp.k == params.init.options("omp").k == 64
    assert params.init.test_meta == FakeOptions(alpha=1, other_stage="x")  # registered at run time
    assert params.init.svd == params.init.options("svd")  # a factorisation
    with pytest.raises(AttributeError, match=r"params init has no 'nope': no init method nor factorisation .*omp"):
        _ = params.init.nope
    assert not hasattr(params.init, "_hidden") and not hasattr(params.init, "__deepcopy__")
