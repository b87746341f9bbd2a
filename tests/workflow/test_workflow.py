"""End to end: `snakemake --cores 2` on small slices of ../shared/data (the session's one shared run,
tests/conftest.py `workflow_run`), `dvc repro` giving the same artefacts, and a params change marking
exactly the affected stages stale in both."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import BIN, PRETOKENIZED, WORKFLOW_GROUP
from helpers import digest, run_command, setup_workdir, snakemake_jobs, wide_table_rows, wording_faults

from vocabtransfer.app.params import validate_params
from vocabtransfer.plan.params_root import Params

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(WORKFLOW_GROUP)]
# artefacts that must be byte-identical between two runs (fasttext.reproducible is on by default)
DETERMINISTIC = [
    "results/{lang}/fasttext/embeddings.safetensors",
    "results/{lang}/corpus/train.parquet",
    "results/{lang}/corpus/valid.parquet",
    "results/{lang}/tokenizer/tokenizer.json",
    *PRETOKENIZED,
    "results/{lang}/overlap/overlap.parquet",
]


def targets(params: dict) -> list[str]:
    """The whole study: every stage, up to the report."""
    return ["results/report.md"]


@pytest.fixture(scope="module")
def params(workflow_run) -> dict:
    return workflow_run.params


@pytest.fixture(scope="module")
def workdir(workflow_run):
    return workflow_run.work, workflow_run.env, workflow_run.params


def test_snakemake_builds_every_artefact(workdir):
    work, _, params = workdir
    for lang in params["languages"]:
        for template in DETERMINISTIC + [
            "results/{lang}/fasttext/model.bin",
            "results/{lang}/corpus/stats.json",
            "results/{lang}/overlap/stats.json",
            "results/{lang}/pretokenized/stats.json",
        ]:
            assert (work / template.format(lang=lang)).stat().st_size > 0, template
        # one log and one benchmark table per job
        for stage in ("corpus", "tokenizer", "pretokenize", "fasttext", "overlap"):
            assert (work / f"logs/{stage}/{lang}.log").is_file()
            assert (work / f"logs/benchmarks/{stage}/{lang}.tsv").read_text().startswith("s\t")
    # no temporary leftovers that could look like artefacts
    assert not list(work.glob("results/**/.*.tmp-*"))


def test_init_eval_focus_ranks_above_random_right_after_initialisation(workdir):
    import pyarrow.parquet as pq
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    work, _, params = workdir
    table = pq.read_table(work / "results/sw/init_eval.parquet").to_pandas()
    floor = table[table["kind"] == "floor"].set_index("method")
    table = table[table["kind"] != "floor"]
    rows = table.set_index("method")
    assert set(params["init"]["methods"]) | {"source"} <= set(rows.index)
    # the unigram floor on the methods' own tokens, every method's per-block sums beside it
    assert list(floor.index) == ["floor:unigram-target"] and 0 < floor.loc["floor:unigram-target", "loss"] < 9
    assert all(
        list(tokens) == list(floor.loc["floor:unigram-target", "block_tokens"])
        for tokens in rows.drop(index="source")["block_tokens"]
    )
    assert rows["loss"].notna().all() and (rows["loss"] > 0).all()
    # ranked on the calibrated loss (the raw loss right after initialisation mostly measures how
    # over-confident the copied embeddings make the head; see init_eval)
    assert rows.loc["focus", "calibrated_loss"] < rows.loc["random", "calibrated_loss"], table[
        ["method", "loss", "calibrated_loss"]
    ].to_string()
    assert (rows["calibrated_loss"] <= rows["loss"] + 1e-9).all() and (rows["temperature"] > 0).all()
    # every method's directory: embeddings, stats and a model that loads with transformers alone
    for method in params["init"]["methods"]:
        d = work / f"results/sw/init/{method}/pseed1"
        assert (d / "embeddings.safetensors").is_file() and (d / "stats.json").is_file()
    # the second pretraining seed of a pretrained method redraws its random rows, and only those
    from safetensors.torch import load_file

    first, second = (
        load_file(work / f"results/sw/init/random/pseed{s}/embeddings.safetensors")["input_embeddings"] for s in (1, 2)
    )
    stats = json.loads((work / "results/sw/init/random/pseed2/stats.json").read_text())
    assert (stats["pseed"], stats["seed"]) == (2, params["seed"] + 1000)
    differ = (first != second).any(dim=1)
    assert 0 < int(differ.sum()) <= stats["method_stats"]["random"]
    assert not (work / "results/sw/init/mean/pseed2").exists()  # not pretrained, and deterministic anyway
    model_dir = work / "results/sw/init/focus/pseed1/model"
    model = AutoModelForMaskedLM.from_pretrained(model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    assert model.get_input_embeddings().weight.shape[0] == len(tok) == params["tokenizer"]["vocab_size"]
    assert (work / "results/sw/init/ofa/pseed1/coordinates.safetensors").is_file()
    assert (work / "results/sw/init_eval.png").read_bytes().startswith(b"\x89PNG")
    # every *snmf method used the one shared factorisation of the source_snmf job
    for method in (m for m in params["init"]["methods"] if m == "snmf" or m.endswith("+snmf")):
        stats = json.loads((work / f"results/sw/init/{method}/pseed1/stats.json").read_text())
        assert stats["method_stats"]["factorization"]["cached"] == "results/source/snmf.safetensors", method


def test_the_hypernet_stage_trains_once_for_the_source_and_its_init_job_applies_it(workdir):
    """Stage hypernet ran once (no language), checkpointed, and wrote its network and curve; the init job of
    method hypernet read it, and init_eval scored it beside FVT's own starting point (the shared config has no fvt:
    the untrained network's rows are FVT's, tests/stage/test_hypernet.py)."""
    import pyarrow.parquet as pq

    work, _, params = workdir
    stats = json.loads((work / "results/source/hypernet/pseed1/stats.json").read_text())
    assert stats["network_seed"] == 1 and stats["seed"] == params["seed"]  # hypernet not pretrained: one network
    options = params["init"]["hypernet"]
    assert stats["steps"] == options["steps"] == len(stats["curve"]) and stats["tokens"] > 0
    assert [row["step"] for row in stats["curve"]] == list(range(1, options["steps"] + 1))
    assert len({row["vocab"] for row in stats["curve"]}) == options["steps"] // options["steps_per_tokenizer"]
    assert (work / "results/source/hypernet/pseed1/hypernet.safetensors").is_file()
    assert sorted(p.name for p in (work / "checkpoints/source/hypernet/pseed1").glob("checkpoint-*")) == [
        "checkpoint-10",
        "checkpoint-5",
    ]
    init = json.loads((work / "results/sw/init/hypernet/pseed1/stats.json").read_text())
    assert init["method_stats"]["hypernet_rows"] > 0.9 * params["tokenizer"]["vocab_size"]
    rows = pq.read_table(work / "results/sw/init_eval.parquet").to_pandas().set_index("method")
    assert rows.loc["hypernet", "loss"] > 0


def test_dvc_repro_reproduces_the_same_artefacts_and_params_change_marks_exactly_fasttext(workdir, tmp_path_factory):
    work, env, params = workdir
    # the same DAG through DVC in a fresh checkout-like directory
    fresh = tmp_path_factory.mktemp("dvc")
    setup_workdir(fresh, params, env)
    stages = ["overlap", "fasttext", "pretokenize"]
    run_command([str(BIN / "dvc"), "repro", "--quiet", *stages], fresh, env)
    for lang in params["languages"]:
        for template in DETERMINISTIC:
            path = template.format(lang=lang)
            assert digest(fresh / path) == digest(work / path), path

    assert "up to date" in run_command([str(BIN / "dvc"), "status", "--with-deps", *stages], fresh, env).lower()
    assert snakemake_jobs(run_command([str(BIN / "snakemake"), "-n", *targets(params)], work, env)) == {}
    # Snakemake, like DVC, takes the modules a job runs as an input, one fingerprint file of their sha256:
    # its own method's, not the others'
    shown = run_command([str(BIN / "snakemake"), "-n", "-p", "-f", "results/sw/init/focus/pseed1"], work, env)
    job_input = next(
        line
        for block in shown.split("\n\n")
        if "rule init:" in block
        for line in block.splitlines()
        if line.strip().startswith("input:")
    )
    code = (work / next(p.strip() for p in job_input.split(":", 1)[1].split(",") if "/code/init-" in p)).read_text()
    assert "src/vocabtransfer/init/methods/focus.py" in code and "src/vocabtransfer/init/initialise.py" in code
    assert "init/methods/wechsel.py" not in code

    for d in (fresh, work):
        p = yaml.safe_load((d / "params.yaml").read_text())
        p["fasttext"]["epochs"] += 1
        (d / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))

    status = run_command([str(BIN / "dvc"), "status", "--with-deps", *stages], fresh, env)
    stale = set(re.findall(r"^(\S+):\s*$", status, re.M))
    assert stale == {f"fasttext@{lang}" for lang in params["languages"]}, status
    assert "fasttext.epochs" in status

    # Snakemake: the fastText jobs and what depends on them (every init job, and everything after init),
    # nothing before or beside them
    from vocabtransfer.plan import availability

    jobs = snakemake_jobs(run_command([str(BIN / "snakemake"), "-n", *targets(params)], work, env))
    n = len(params["languages"])
    assert {
        k: jobs.get(k) for k in ("fasttext", "init", "init_eval", "pretrain", "token_frequency_loss", "report")
    } == {
        "fasttext": n,
        "init": n * len(availability.init_runs(Params(validate_params(params)))),
        "init_eval": n,
        "pretrain": n * len(availability.pretrain_runs(Params(validate_params(params)))),
        "token_frequency_loss": n,
        "report": 1,
    }, jobs
    assert not {"corpus", "tokenizer", "pretokenize", "overlap", "source_head", "source_snmf", "word_fasttext"} & set(
        jobs
    )


def test_init_artefacts_are_byte_identical_when_recomputed(workdir, tmp_path):
    """source_snmf, two init jobs and init_eval (on those two and random) recomputed by the CLI from the run's
    own inputs give the same bytes (init_eval: the same rows but for their timing column). (The DVC run above
    reproduces the stages up to fastText and the overlap; the init stages are compared here instead of under
    DVC, which would retrain the source LM head.)"""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    work, env, params = workdir
    again = tmp_path / "again"
    for part in (
        "results/source/model",
        "results/sw/tokenizer",
        "results/sw/overlap",
        "results/sw/fasttext",
        "results/sw/corpus",
        "results/sw/pretokenized",
    ):
        (again / part).parent.mkdir(parents=True, exist_ok=True)
        (again / part).symlink_to(work / part)
    recomputed = ["focus", "snmf"]
    for method in params["init"]["methods"]:
        if method not in recomputed:
            (again / "results/sw/init").mkdir(parents=True, exist_ok=True)
            (again / f"results/sw/init/{method}").symlink_to(work / f"results/sw/init/{method}")
    common = ["--params", str(work / "params.yaml"), "--threads", "2"]
    one_thread = ["--params", str(work / "params.yaml"), "--threads", "1"]  # as the run's init and pretrain jobs
    pseed1 = "pseed1"
    run_command([str(BIN / "vocabtransfer"), "source_snmf", *common], again, env)
    assert digest(again / "results/source/snmf.safetensors") == digest(work / "results/source/snmf.safetensors")
    for method in recomputed:
        run_command(
            [str(BIN / "vocabtransfer"), "init", "--lang", "sw", "--method", method, "--pseed", "1", *one_thread],
            again,
            env,
        )
        out = f"results/sw/init/{method}/{pseed1}"
        files = sorted(p.relative_to(work / out) for p in (work / out).rglob("*.safetensors"))
        assert any(str(f).startswith("model") for f in files), files
        for f in files:
            assert digest(again / out / f) == digest(work / out / f), f
    # init_eval on the recomputed methods and random (params with only those): the run's rows of them, of the
    # source and of the floor, byte for byte (a row does not depend on the other methods; scoring all eight
    # again would double the test's time)
    subset = {**params, "init": {**params["init"], "methods": ["random", *recomputed]}}
    (again / "params.yaml").write_text(yaml.safe_dump(subset, sort_keys=False))
    run_command(
        [str(BIN / "vocabtransfer"), "init_eval", "--lang", "sw", "--params", "params.yaml", "--threads", "2"],
        again,
        env,
    )
    first, second = (pq.read_table(d / "results/sw/init_eval.parquet").drop(["seconds"]) for d in (work, again))
    assert second.column("method").to_pylist() == ["source", "random", *recomputed, "floor:unigram-target"]
    assert first.filter(pc.is_in(first["method"], value_set=second["method"])).equals(second)
    # a pretraining run of the second pretraining seed, recomputed: the same metrics and valid blocks
    (again / "results/sw/init/focus/pseed2").symlink_to(work / "results/sw/init/focus/pseed2")
    run_command(
        [
            str(BIN / "vocabtransfer"),
            "pretrain",
            "--lang",
            "sw",
            "--method",
            "focus",
            "--objective",
            "selfish",
            "--pseed",
            "2",
            *one_thread,
        ],
        again,
        env,
    )
    run_dir = "results/sw/pretrain/focus/selfish/pseed2"
    for name, drop in (
        ("metrics.parquet", ["tokens_per_second"]),
        ("valid_blocks.parquet", []),
        ("valid_curve.parquet", []),
    ):
        first, second = (pq.read_table(d / run_dir / name).drop(drop).to_pandas() for d in (work, again))
        assert first.equals(second), name  # pandas: NaN (no valid loss at that step) equals NaN
    # a fine-tuning evaluation of that model, recomputed: the same per-example scores and metrics
    model = "focus-standard-pseed2"
    assert model in params["eval"]["models"]
    (again / "results/sw/pretrain/focus/standard").mkdir(parents=True)
    (again / "results/sw/pretrain/focus/standard/pseed2").symlink_to(work / "results/sw/pretrain/focus/standard/pseed2")
    run_command(
        [
            str(BIN / "vocabtransfer"),
            "finetune_eval",
            "--lang",
            "sw",
            "--task",
            "qa",
            "--model",
            model,
            "--seed",
            "1",
            *common,
        ],
        again,
        env,
    )
    result = f"results/sw/eval/qa/{model}/seed1.json"
    first, second = (json.loads((d / result).read_text()) for d in (work, again))
    for key in ("metrics", "examples"):
        assert first[key] == second[key], key


def test_pretraining_analyses_and_downstream_evaluation_reach_the_report(workdir):
    import pyarrow.parquet as pq
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from vocabtransfer.plan.finetune_plans import eval_models
    from vocabtransfer.plan import availability

    work, _, params = workdir
    assert params["pretrain"]["seeds"] == 2 and len(availability.pretrain_runs(Params(validate_params(params)))) == 6
    for lang in params["languages"]:
        for method, objective, pseed in availability.pretrain_runs(Params(validate_params(params))):
            run_dir = work / f"results/{lang}/pretrain/{method}/{objective}/pseed{pseed}"
            metrics = pq.read_table(run_dir / "metrics.parquet").to_pandas()
            valid = metrics.dropna(subset=["valid_loss"])
            assert valid["step"].iloc[0] == 0 and valid["step"].iloc[-1] == params["pretrain"]["steps"]
            # the standard valid loss falls during pretraining, under either objective
            assert valid["valid_loss"].iloc[-1] < valid["valid_loss"].iloc[0], (lang, method, objective)
            stats = json.loads((run_dir / "stats.json").read_text())
            assert stats["final_valid_loss"] == pytest.approx(valid["valid_loss"].iloc[-1])
            assert stats["pseed"] == pseed and stats["seed"] == params["seed"] + 1000 * (pseed - 1)
            blocks = pq.read_table(run_dir / "valid_blocks.parquet").to_pandas()
            assert blocks["loss_sum"].sum() / blocks["n_tokens"].sum() == pytest.approx(
                stats["final_valid_loss"], rel=1e-4
            )
            if pseed > 1:
                continue  # the gradient decomposition is drawn for the first pretraining seed
            grads = pq.read_table(work / f"results/{lang}/gradients/{method}/{objective}/pseed1.parquet").to_pandas()
            assert set(grads["phase"]) == {"start", "end"}
            assert (grads[["input_norm", "output_target_norm", "output_nontarget_norm"]] >= 0).all().all()
        # step 0 and both objectives, every method, in the frequency-bucket table
        buckets = pq.read_table(work / f"results/{lang}/token_frequency_loss.parquet").to_pandas()
        assert set(buckets["objective"]) == {"init", *params["pretrain"]["objectives"]}
        assert set(buckets["method"]) == set(params["pretrain"]["methods"]) and set(buckets["pseed"]) == {1, 2}
        scored = buckets["n_tokens"] > 0  # a bucket without valid tokens (e.g. no unseen token) has no loss
        assert scored.any() and (buckets.loc[scored, "loss"] > 0).all() and buckets.loc[~scored, "loss"].isna().all()
        for task in ("nli", "qa", "ner"):
            floor = json.loads((work / f"results/{lang}/eval/{task}/floor.json").read_text())
            assert 0 <= floor["value"] <= 100 and floor["name"]
            for model in eval_models(Params(validate_params(params))):
                result = json.loads((work / f"results/{lang}/eval/{task}/{model}/seed1.json").read_text())
                assert 0 <= result["metrics"][result["metric"]] <= 100 and result["n_test"] > 0, result
                assert len(result["examples"]["clusters"]) == result["n_test"]
                # the floor is scored on the very test examples the models are
                assert floor["examples"]["ids"] == result["examples"]["ids"]
    model = work / "results/sw/pretrain/focus/selfish/pseed2/model"
    assert AutoModelForMaskedLM.from_pretrained(model).get_input_embeddings().weight.shape[0] == len(
        AutoTokenizer.from_pretrained(model)
    )
    report = (work / "results/report.md").read_text()
    sections = report.split("\n## ")
    assert sections[1].startswith("In brief\n") and sections[2].startswith("Verdict\n")  # the answer first
    assert params["languages"] == ["sw"]
    for heading in (
        "## sw",
        "## What was skipped and why",
        "### Comparisons",
        "### What an initialisation is worth in tokens",
    ):
        assert heading in report, heading
    # what focus is worth in random's tokens: a verdict bullet per focus run (against random-standard for selfish,
    # which random is not pretrained with), its table, and the floors
    verdict = report.split("\n## Verdict\n", 1)[1].split("\n## ", 1)[0]
    for run in ("focus-standard", "focus-selfish"):
        assert re.search(rf"\*\*{run}(?: is worth|: no detectable token advantage)", verdict), (run, verdict)
    assert "tokens to the unigram floor" in report and "random's tokens to reach it" in report
    # its form and words: tables within 160 characters a line, counts in agreement (the source is fine-tuned with
    # one seed: `1 fine-tuning seed`), the job time as computed
    assert not wide_table_rows(report), wide_table_rows(report)[:3]
    assert not wording_faults(report) and re.search(r"\b1 fine-tuning seed\b(?!s)", report)
    assert "the sum of the `s` column (each job's wall-clock seconds) of Snakemake's per-job benchmark" in report
    figures = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", report)  # every figure, relative to results/
    assert any(f.startswith("report/figures/") for f in figures), figures
    assert figures and all((work / "results" / f).read_bytes().startswith(b"\x89PNG") for f in figures)


def test_export_gives_a_folder_from_pretrained_loads_with_a_model_card_the_hub_parses(workdir, tmp_path):
    """The run's export (results/sw/export): the recommended run (the report's pick, here the lowest mean final
    valid loss of the standard runs as the tiny run's methods tie, and its median seed, recomputed from the
    metrics) as a folder transformers loads, with a model card whose metadata huggingface_hub parses; `vocabtransfer
    export` with a run named in export.model exports that one, and one that does not exist is refused in one
    line."""
    import pandas as pd
    from huggingface_hub import ModelCard
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    work, env, params = workdir
    folder = work / "results/sw/export"
    finals: dict = {}  # method-objective -> pretraining seed -> final valid loss, random (report.baseline) left out
    for path in work.glob("results/sw/pretrain/*/*/pseed*/metrics.parquet"):
        method, objective, pseed = path.parts[-4], path.parts[-3], int(path.parts[-2][len("pseed") :])
        if method != "random" and objective == "standard":  # the report's candidates
            loss = pd.read_parquet(path).dropna(subset=["valid_loss"]).sort_values("step")["valid_loss"].iloc[-1]
            finals.setdefault(f"{method}-{objective}", {})[pseed] = float(loss)
    best = min(finals, key=lambda g: sum(finals[g].values()) / len(finals[g]))
    seed = sorted(finals[best], key=finals[best].get)[(len(finals[best]) - 1) // 2]
    assert json.loads((folder / "export.json").read_text())["model"] == f"{best}-pseed{seed}", finals
    model, tokenizer = AutoModelForMaskedLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    assert model.get_input_embeddings().weight.shape[0] == len(tokenizer) == params["tokenizer"]["vocab_size"]
    card = ModelCard.load(folder / "README.md")
    assert card.data.base_model == "sentence-transformers/all-MiniLM-L6-v2"
    assert card.data.language == ["sw"] and card.data.license == "apache-2.0"
    assert card.data.library_name == "transformers" and card.data.pipeline_tag == "fill-mask"
    assert {"vocabtransfer", f"init-{best.split('-')[0]}"} <= set(card.data.tags)
    text = card.text
    assert "Recommended by the report's rule" in text and f"pretraining seed {seed} of {best}" in text
    assert "tokens trained" in text and "valid loss" in text and "snakemake --cores 2 results/sw/export" in text
    # downstream scores with intervals for every task, the source's beside them (eval.models lists both)
    for task in ("nli", "qa", "ner"):
        row = next(line for line in text.splitlines() if line.startswith(f"| {task} |"))
        assert row.count("[") == 2, row
    assert not list(folder.glob("*.gguf")) and "No GGUF file: the source is an encoder" in text

    _restore_params(work, params)
    kept = tmp_path / "export"
    shutil.move(folder, kept)  # the run's own export, put back below
    try:
        named = tmp_path / "named.yaml"
        named.write_text("export: {model: focus-selfish-pseed1}\n")
        command = [str(BIN / "vocabtransfer"), "export", "--params", "params.yaml", str(named), "--lang", "sw"]
        run_command(command + ["--threads", "1"], work, env)
        assert json.loads((folder / "export.json").read_text())["model"] == "focus-selfish-pseed1"
        assert "The run `export.model` names (focus-selfish-pseed1)" in (folder / "README.md").read_text()
        named.write_text("export: {model: focus-selfish-pseed7}\n")
        bad = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True)
        errors = [line for line in bad.stderr.splitlines() if line.startswith("error:")]
        assert bad.returncode == 1 and len(errors) == 1, bad.stderr
        assert "export.model: 'focus-selfish-pseed7' is no pretraining run of sw" in bad.stderr
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        shutil.move(kept, folder)


def _restore_params(work: Path, params: dict) -> None:
    """The run's own params.yaml (an earlier test edits fasttext.epochs)."""
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


# the stages of one pretraining job and everything upstream of it, for sw
PRETRAIN_TARGET = "pretrain_focus_standard_pseed1@sw"
UPSTREAM_STAGES = [
    "source_model",
    "corpus@sw",
    "tokenizer@sw",
    "pretokenize@sw",
    "fasttext@sw",
    "overlap@sw",
    "source_head",
    "init_focus_pseed1@sw",
    PRETRAIN_TARGET,
]


@pytest.fixture(scope="module")
def dvc_tracked(workdir):
    """The Snakemake run's artefacts of one pretraining job and its upstream, recorded in dvc.lock and
    committed to git (what a user does after `snakemake`: `dvc commit`, `git commit`)."""
    work, env, params = workdir
    _restore_params(work, params)
    (work / ".gitignore").write_text("/logs/\n/.snakemake/\n/checkpoints/\n/results/\n")
    run_command([str(BIN / "dvc"), "commit", "-f", "-q", *UPSTREAM_STAGES], work, env)
    run_command(["git", "add", "-A"], work, env)
    run_command(["git", "commit", "-qm", "a run"], work, env)
    return work, env, params


def test_dvc_remote_push_then_pull_gives_byte_identical_artefacts(dvc_tracked, tmp_path):
    """`vocabtransfer remote <dir>` (what `make remote REMOTE=<dir>` runs), `dvc push`, the local cache and
    the outputs gone, `dvc pull`: the same bytes back."""
    work, env, _ = dvc_tracked
    store = tmp_path / "store"
    bad = subprocess.run(
        [str(BIN / "vocabtransfer"), "remote", str(tmp_path / "missing")],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 1 and "missing is not a directory" in bad.stderr and len(bad.stderr.splitlines()) == 1
    store.mkdir()
    run_command([str(BIN / "vocabtransfer"), "remote", str(store)], work, env)
    assert f"url = {store}" in (work / ".dvc/config").read_text()
    stages = ["corpus@sw", "overlap@sw"]
    files = [
        work / f
        for f in (
            "results/sw/corpus/train.parquet",
            "results/sw/corpus/valid.parquet",
            "results/sw/overlap/overlap.parquet",
            "results/sw/overlap/stats.json",
        )
    ]
    before = {f: digest(f) for f in files}
    run_command([str(BIN / "dvc"), "push", "-q", *stages], work, env)
    kept = tmp_path / "cache"  # the local cache moved away (and back after: the next test needs all of it)
    shutil.move(work / ".dvc/cache", kept)
    try:
        for f in files:
            f.unlink()
        run_command([str(BIN / "dvc"), "pull", "-q", *stages], work, env)
        assert {f: digest(f) for f in files} == before
        assert "up to date" in run_command([str(BIN / "dvc"), "status", *stages], work, env).lower()
    finally:
        shutil.rmtree(work / ".dvc/cache", ignore_errors=True)
        shutil.move(kept, work / ".dvc/cache")


def test_dvc_exp_run_sweeps_a_parameter_and_exp_show_lists_it(dvc_tracked):
    """`dvc exp run -S pretrain.steps=…` reruns the pretraining job only (its upstream is up to date);
    `dvc exp show` lists the experiment with its parameter; a key that is no parameter is refused."""
    work, env, params = dvc_tracked
    steps = params["pretrain"]["steps"] // 2
    out = run_command(
        [str(BIN / "dvc"), "exp", "run", "-n", "half-steps", "-S", f"pretrain.steps={steps}", PRETRAIN_TARGET],
        work,
        env,
    )
    assert "Running stage 'pretrain_focus_standard_pseed1@sw'" in out and "Running stage 'init" not in out
    stats = json.loads((work / "results/sw/pretrain/focus/standard/pseed1/stats.json").read_text())
    assert stats["steps"] == steps
    shown = json.loads(run_command([str(BIN / "dvc"), "exp", "show", "--json"], work, env))
    experiments = [e for baseline in shown for e in (baseline.get("experiments") or [])]
    names = {e["name"]: e for e in experiments}
    assert "half-steps" in names, shown
    revs = names["half-steps"]["revs"][0]["data"]["params"]["params.yaml"]["data"]
    assert revs["pretrain"]["steps"] == steps
    # a key that is not a parameter: DVC refuses it, naming it; appended with +, DVC writes it (no stage
    # reads it, so nothing reruns) and the workflow refuses the params file, naming the key
    refused = subprocess.run(
        [str(BIN / "dvc"), "exp", "run", "-S", "pretrain.stepz=3", PRETRAIN_TARGET],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
    )
    assert refused.returncode != 0 and "pretrain.stepz" in refused.stdout + refused.stderr
    run_command([str(BIN / "dvc"), "exp", "run", "-S", "+pretrain.stepz=3", PRETRAIN_TARGET], work, env)
    assert yaml.safe_load((work / "params.yaml").read_text())["pretrain"]["stepz"] == 3
    checked = subprocess.run([str(BIN / "snakemake"), "-n"], cwd=work, env=env, capture_output=True, text=True)
    assert checked.returncode != 0
    assert "pretrain: unknown key(s) 'stepz'" in checked.stdout + checked.stderr
