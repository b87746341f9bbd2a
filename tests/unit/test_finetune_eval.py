"""finetune_eval: which jobs params and data ask for, model names, data specs and bad input."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from vocabtransfer.plan.stages import STAGES
from vocabtransfer.evaluate import tasks
from vocabtransfer.plan import availability
from vocabtransfer.app.params import load_params, validate_params
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.evaluate.tasks import get_task, load_splits, open_source
from vocabtransfer.plan.params_root import Params
from vocabtransfer.plan import finetune_plans
from vocabtransfer.plan import task_options

from conftest import REPO


@pytest.fixture(scope="module")
def params():
    return load_params(REPO / "params.yaml")


def with_eval(params, **changes):
    out = copy.deepcopy(params)
    out["eval"].update(changes)
    return out


def test_jobs_cover_models_tasks_and_seeds(params):
    p = with_eval(params, models=["pretrained", "init", "source", "wechsel-init"], seeds=2)
    p["pretrain"]["seeds"] = 2
    models = finetune_plans.eval_models(Params(p))
    pairs = availability.pretrain_pairs(Params(p))
    assert models[: 2 * len(pairs)] == [f"{m}-{o}-pseed{s}" for m, o in pairs for s in (1, 2)]
    assert models[-2:] == ["source", "wechsel-init-pseed1"]
    # every pretrained method's init, per pretraining seed (random, fvt and focus all have random rows)
    assert [m for m in models if "-init-" in m] == [
        f"{m}-init-pseed{s}" for m in ("random", "fvt", "focus") for s in (1, 2)
    ] + ["wechsel-init-pseed1"]
    jobs = STAGES["finetune_eval"].jobs(Params(p), "sw")
    assert len(jobs) == 3 * len(models) * 2
    assert {j["seed"] for j in jobs} == {"1", "2"}
    assert finetune_plans.skipped_tasks(Params(p), "sw") == {}
    # a name without its pretraining seed stands for every pretraining seed of it
    assert finetune_plans.eval_models(Params(with_eval(p, models=["focus-standard"]))) == [
        "focus-standard-pseed1",
        "focus-standard-pseed2",
    ]


def test_language_with_only_ner_data(params):
    p = copy.deepcopy(params)
    p["languages"] = ["sw", "de", "ha"]
    p["corpus"]["sources"]["ha"] = {"path": "pretrain_text/ha.txt"}
    p["eval"]["tasks"]["ner"]["data"]["ha"] = {"train": {"path": "masakhaner2/hau/train.txt"}}
    p = validate_params(p)
    assert {j["task"] for j in STAGES["finetune_eval"].jobs(Params(p), "ha")} == {"ner"}
    reasons = finetune_plans.skipped_tasks(Params(p), "ha")
    assert set(reasons) == {"nli", "qa"} and "no data for 'ha'" in reasons["qa"]
    jobs = {lang: STAGES["finetune_eval"].jobs(Params(p), lang) for lang in p["languages"]}
    assert [lang for lang, js in jobs.items() if any(j["task"] == "qa" for j in js)] == ["sw", "de"]
    assert all(any(j["task"] == "ner" for j in js) for js in jobs.values())


def test_dvc_stages_list_only_languages_with_data_and_their_files(params):
    from vocabtransfer.app import dvcgen

    p = copy.deepcopy(params)
    p["languages"] = ["sw", "de", "ha"]
    p["corpus"]["sources"]["ha"] = {"path": "pretrain_text/ha.txt"}
    p["eval"]["tasks"]["ner"]["data"]["ha"] = {"train": {"path": "masakhaner2/hau/train.txt"}}
    stages = yaml.safe_load(dvcgen.generate(validate_params(p)))["stages"]
    # sw has its own QA test file, de one file split in two: their jobs read different inputs
    assert list(stages["finetune_eval_qa_source_1"]["foreach"]) == ["sw"]
    assert list(stages["finetune_eval_qa_source_1_de"]["foreach"]) == ["de"]
    # ha has one NER file (split in two), sw and de a train and a test file
    assert list(stages["finetune_eval_ner_source_1"]["foreach"]) == ["sw", "de"]
    assert list(stages["finetune_eval_ner_source_1_ha"]["foreach"]) == ["ha"]
    # each language's own data files are its dependencies
    assert stages["finetune_eval_ner_source_1_ha"]["foreach"]["ha"]["data_train"].endswith("masakhaner2/hau/train.txt")
    ner = stages["finetune_eval_ner_source_1"]["do"]
    assert "${item.data_train}" in ner["deps"]
    assert ner["cmd"].startswith("vocabtransfer finetune_eval --lang ${item.lang} --task ner --model source --seed 1")
    assert "eval.tasks.ner.data.${item.lang}" in ner["params"]
    assert "eval.tasks.ner.strict" in ner["params"] and "src/vocabtransfer/evaluate/tasks/ner.py" in ner["deps"]
    assert "src/vocabtransfer/evaluate/tasks/qa.py" not in ner["deps"]
    assert ner["outs"] == ["results/${item.lang}/eval/ner/source/seed1.json"]


def test_model_names_and_directories(params):
    params = copy.deepcopy(params)
    params["init"]["methods"].append("focus+svd")
    assert finetune_plans.parse_model(Params(params), "source")["input"] == "results/source/model"
    init = finetune_plans.parse_model(Params(params), "focus+svd-init-pseed1")
    assert (init["method"], init["objective"], init["input"]) == (
        "focus+svd",
        "init",
        "results/{lang}/init/focus+svd/pseed1",
    )
    pre = finetune_plans.parse_model(Params(params), "focus-selfish-pseed1")
    assert (pre["method"], pre["objective"], pre["pseed"], pre["input"]) == (
        "focus",
        "selfish",
        1,
        "results/{lang}/pretrain/focus/selfish/pseed1",
    )
    for bad in ("focus-finetuned-pseed1", "nomethod-init-pseed1", "focus-selfish-pseed2", "bert"):
        with pytest.raises(VocabTransferError, match=f"model '{bad}' is produced by no stage"):
            finetune_plans.parse_model(Params(params), bad)
    with pytest.raises(VocabTransferError, match="produced by no stage"):
        finetune_plans.eval_models(Params(with_eval(params, models=["source", "focus-sgd"])))


def test_data_spec_for_a_language_not_in_languages_is_a_reported_skip(params):
    """A task data spec for a language the run does not have (say, an overlay narrowed `languages`) runs
    nothing and is reported before any job."""
    from vocabtransfer.app import plan

    p = copy.deepcopy(params)
    p["eval"]["tasks"]["qa"]["data"]["ar"] = {"train": {"path": "tydiqa_goldp/arabic_tydiqa_dev.json"}}
    note = "eval.tasks.qa.data: ar not in `languages` (sw, de); their data specs are not used"
    assert note in plan.notes(validate_params(p)) and note not in plan.notes(params)


def task(params, name, **opts):
    return get_task(name, {**params["eval"]["tasks"][name], **opts})


def test_a_task_gets_its_typed_section_and_a_mapping_over_the_schemas_defaults(params):
    """The stage hands a task its section of `EvalParams` as it is; a call from Python with a mapping
    gets the typed options over the schema's defaults, checked by the schema."""
    import dataclasses

    from vocabtransfer.pipeline.config import typed_section
    from vocabtransfer.pipeline.typed import from_dict

    typed = from_dict(task_options.EvalParams, params["eval"])
    assert get_task("qa", typed.tasks.qa).options is typed.tasks.qa
    assert isinstance(typed.tasks.nli.epochs, float) and typed.models == tuple(params["eval"]["models"])
    qa = get_task("qa", {"n_best": 5}).options
    assert qa == dataclasses.replace(typed_section(task_options.QaOptions, "eval.tasks.qa"), n_best=5)
    with pytest.raises(VocabTransferError, match=r"^eval\.tasks\.qa\.cluster: 'page' is not allowed"):
        get_task("qa", {"cluster": "page"})


def test_nli_reads_string_labels_and_splits_by_premise(params, shared_data, monkeypatch):
    monkeypatch.setenv("VOCABTRANSFER_DATA", str(shared_data))
    nli = task(params, "nli", max_train=0, max_test=0)
    splits = load_splits(nli, {"train": {"path": "xnli/dev-sw.tsv"}}, "k", seed=42)
    assert len(splits.train) + len(splits.test) == 2490
    assert {e["label"] for e in splits.train} == {0, 1, 2}
    assert not {e["premise"] for e in splits.train} & {e["premise"] for e in splits.test}
    assert 0.1 < len(splits.test) / 2490 < 0.3
    again = load_splits(nli, {"train": {"path": "xnli/dev-sw.tsv"}}, "k", seed=42)
    assert [e["id"] for e in again.test] == [e["id"] for e in splits.test]
    other = load_splits(nli, {"train": {"path": "xnli/dev-sw.tsv"}}, "k", seed=7)
    assert [e["id"] for e in other.test] != [e["id"] for e in splits.test]


def test_bad_nli_label_and_unlabelled_file(params, shared_data, data_root):
    (data_root / "bad.tsv").write_text("a\tb\tentailment\nc\td\tmaybe\n")
    with pytest.raises(VocabTransferError, match=r"bad.tsv: line 2: label 'maybe' is not one of entailment"):
        load_splits(task(params, "nli"), {"train": {"path": "bad.tsv"}}, "k", seed=1)
    (data_root / "unlabelled.tsv").write_text("a\tb\n")
    with pytest.raises(VocabTransferError, match="unlabelled.tsv: line 1 has 2 tab-separated column"):
        load_splits(task(params, "nli"), {"train": {"path": "unlabelled.tsv"}}, "k", seed=1)
    with pytest.raises(VocabTransferError, match="missing.tsv: data file not found"):
        load_splits(task(params, "nli"), {"train": {"path": "missing.tsv"}}, "k", seed=1)


def test_empty_test_split_is_an_error(params, data_root):
    (data_root / "train.tsv").write_text("a\tb\tentailment\n")
    (data_root / "test.tsv").write_text("\n")
    with pytest.raises(VocabTransferError, match="the test split is empty"):
        load_splits(task(params, "nli"), {"train": {"path": "train.tsv"}, "test": {"path": "test.tsv"}}, "k", seed=1)


def test_qa_answers_not_in_context_are_counted_and_skipped(params, data_root):
    squad = {
        "data": [
            {
                "title": "t",
                "paragraphs": [
                    {
                        "context": "Mto Nile ni mrefu. Uko Afrika.",
                        "qas": [
                            {"id": "q1", "question": "Mto gani?", "answers": [{"text": "Nile", "answer_start": 4}]},
                            {
                                "id": "q2",
                                "question": "Wapi?",
                                "answers": [{"text": "Afrika", "answer_start": 0}],
                            },  # start off: moved
                            {
                                "id": "q3",
                                "question": "Nini?",
                                "answers": [{"text": "Ulaya", "answer_start": 3}],
                            },  # not in context
                        ],
                    }
                ],
            }
        ]
    }
    (data_root / "qa.json").write_text(json.dumps(squad))
    qa = task(params, "qa")
    examples, skipped = qa.read(open_source({"path": "qa.json"}, "k"))
    assert skipped == {"answer_not_in_context": 1}
    assert [e["id"] for e in examples] == ["q1", "q2"]
    assert examples[1]["answers"][0]["answer_start"] == 23
    (data_root / "notsquad.json").write_text(json.dumps({"rows": []}))
    with pytest.raises(VocabTransferError, match="notsquad.json: not a SQuAD-format JSON file"):
        qa.read(open_source({"path": "notsquad.json"}, "k"))


def test_test_examples_carry_their_cluster_key(params, data_root):
    """The bootstrap's clusters: the premise (XNLI), the article (QA, `cluster: article`) or the context
    (`cluster: context`); a rows source without the article's title is one error naming the key."""
    (data_root / "nli.tsv").write_text("p1\th1\tentailment\np1\th2\tneutral\np2\th3\tcontradiction\n")
    examples, _ = task(params, "nli").read(open_source({"path": "nli.tsv"}, "k"))
    assert [e["cluster"] for e in examples] == ["p1", "p1", "p2"]
    assert tasks.test_clusters(examples, "nli") == ["p1", "p1", "p2"]
    with pytest.raises(VocabTransferError, match="test example '2' has no cluster key"):
        tasks.test_clusters([{"id": "2", "cluster": ""}], "nli")
    squad = {
        "data": [
            {
                "title": "Nile",
                "paragraphs": [
                    {
                        "context": "Mto Nile ni mrefu.",
                        "qas": [{"id": "q1", "question": "Mto?", "answers": [{"text": "Nile", "answer_start": 4}]}],
                    },
                    {
                        "context": "Uko Afrika.",
                        "qas": [{"id": "q2", "question": "Wapi?", "answers": [{"text": "Afrika", "answer_start": 4}]}],
                    },
                ],
            }
        ]
    }
    (data_root / "qa.json").write_text(json.dumps(squad))
    by_article, _ = task(params, "qa").read(open_source({"path": "qa.json"}, "k"))
    by_context, _ = task(params, "qa", cluster="context").read(open_source({"path": "qa.json"}, "k"))
    assert [e["cluster"] for e in by_article] == ["Nile", "Nile"]
    assert [e["cluster"] for e in by_context] == ["Mto Nile ni mrefu.", "Uko Afrika."]
    rows = [
        {
            "id": "q1",
            "context": "Uko Afrika.",
            "question": "Wapi?",
            "answers": {"text": ["Afrika"], "answer_start": [4]},
        }
    ]
    (data_root / "qa.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    spec = {"dataset": {"path": "json", "data_files": str(data_root / "qa.jsonl"), "split": "train"}}
    with pytest.raises(VocabTransferError, match="no `title`.*eval.tasks.qa.cluster: context"):
        task(params, "qa").read(open_source(spec, "k"))
    assert task(params, "qa", cluster="context").read(open_source(spec, "k"))[0][0]["cluster"] == "Uko Afrika."


def test_qa_windows_point_at_the_answer(params, shared_data, monkeypatch):
    from vocabtransfer.model.hub import load_tokenizer

    monkeypatch.setenv("VOCABTRANSFER_DATA", str(shared_data))
    qa = task(params, "qa", max_length=96, doc_stride=32)
    examples, _ = qa.read(open_source({"path": "xquad/xquad.de.json"}, "k"))
    tok = load_tokenizer(params["source_model"])
    feats = qa.features(examples[:20], tok)
    assert len(feats) > 20  # long contexts give several windows
    found = 0
    for f in feats:
        if f["start_positions"]:
            span = tok.decode(f["input_ids"][f["start_positions"] : f["end_positions"] + 1])
            found += 1
            assert span.strip(), span
    assert found >= 20


def test_ner_reads_germeval_columns_and_rejects_bad_tags(params, shared_data, data_root, monkeypatch):
    ner = task(params, "ner")
    (data_root / "bad.txt").write_text("Juma B-PER\nalikwenda O\n\nDodoma X-LOC\n")
    with pytest.raises(VocabTransferError, match=r"bad.txt: line 4: tag 'X-LOC' is not O, B-<type> or I-<type>"):
        ner.read(open_source({"path": "bad.txt"}, "k"))
    monkeypatch.setenv("VOCABTRANSFER_DATA", str(shared_data))
    spec = {"path": "germeval2014/NER-de-dev.tsv", "token_column": 1, "tag_column": 2, "comment": "#"}
    sentences, _ = ner.read(open_source(spec, "k"))
    assert len(sentences) == 2200
    assert sentences[0]["tokens"][:3] == ["Gleich", "darauf", "entwirft"]
    assert sentences[0]["tags"][7:9] == ["B-OTH", "I-OTH"]
    labels = ner.labels(sentences)
    assert labels[0] == "O" and "B-LOCderiv" in labels
