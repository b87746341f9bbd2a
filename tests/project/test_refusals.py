"""The rule behind three refusals (issue #72, item 4): every skip of something the user asked for by name is a
refusal, before any job; what the user did not name is still skipped with a line. The refusals themselves, through
`vocabtransfer validate` and `snakemake -n`, are cases of tests/overlays/broken.yaml; these are their edges."""

from __future__ import annotations

import shutil

import pytest

from vocabtransfer.app.params import load_params, validate_params
from vocabtransfer.app.plan import preflight
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.evaluate.tasks import check_held_out
from vocabtransfer.plan.finetune_plans import same_source
from vocabtransfer.plan import availability
from vocabtransfer.pipeline.config import merge_overlay
from vocabtransfer.plan.params_root import Params

from conftest import REPO


def demo(overlay: dict) -> dict:
    return merge_overlay(load_params(REPO / "params.yaml"), overlay)


# ------------------------------------------------------------------ report.baseline must be pretrained


def test_a_baseline_the_run_does_not_pretrain_is_refused_where_methods_are_compared():
    with pytest.raises(VocabTransferError, match=r"report.baseline: mean is not pretrained .*add mean to pretrain"):
        validate_params(demo({"report": {"baseline": "mean"}}))
    # pretrain.pairs decide which methods are pretrained: random in pretrain.methods but in no pair is not
    with pytest.raises(VocabTransferError, match=r"report.baseline: random is not pretrained \(.* fvt, focus\)"):
        validate_params(demo({"pretrain": {"pairs": ["fvt-standard", "focus-standard"]}}))
    # a list of baselines: each must be pretrained
    schema_free = demo({"report": {"baseline": ["random", "mean"]}})
    from vocabtransfer.app.params import schema
    from vocabtransfer.pipeline.config import check_baseline

    with pytest.raises(VocabTransferError, match=r"report.baseline: mean is not pretrained"):
        check_baseline(schema_free, schema())
    check_baseline(demo({"report": {"baseline": ["random", "fvt"]}}), schema())


def test_a_run_that_compares_no_methods_has_no_baseline_to_check():
    """One pretrained method (config/gemma-distill.yaml compares objectives) or none (config/hypernet.yaml): the
    report has no method comparison, so the baseline is not refused."""
    one = validate_params(demo({"init": {"methods": ["focus"]}, "pretrain": {"methods": ["focus"]}}))
    assert one["report"]["baseline"] == "random"
    validate_params(demo({"pretrain": {"pairs": []}}))


# ------------------------------------------------------------------ a method's named data missing


def test_a_named_dictionary_that_is_missing_is_refused_but_no_entry_is_a_skip(shared_data, data_root):
    """wechsel in init.methods: a dictionary path params name that is not there refuses the run (the key, the file,
    the fix); a language without any dictionary entry is skipped, as params name nothing for it."""
    for folder in ("pretrain_text", "wechsel_dicts"):
        (data_root / folder).mkdir()
    for name in ("pretrain_text/sw.txt", "pretrain_text/en.txt", "wechsel_dicts/swahili.txt"):
        (data_root / name).symlink_to(shared_data / name)
    base = {
        "languages": ["sw"],
        "source_model": "sentence-transformers/all-MiniLM-L6-v2",
        "corpus": {"sources": {"sw": {"path": "pretrain_text/sw.txt"}}},
        "init": {"methods": ["random", "wechsel"]},
        "pretrain": {"methods": ["random"]},
        "eval": {"tasks": {"nli": {"enabled": False}, "qa": {"enabled": False}, "ner": {"enabled": False}}},
    }

    def params(dictionaries: dict) -> Params:
        return Params(validate_params(merge_overlay(base, {"init": {"wechsel": {"dictionaries": dictionaries}}})))

    assert availability.method_refusal(params({"sw": "wechsel_dicts/swahili.txt"}), "sw") is None
    assert not any("wechsel" in line for line in preflight(params({"sw": "wechsel_dicts/swahili.txt"}))), "runs"
    missing = params({"sw": "wechsel_dicts/swahli.txt"})
    with pytest.raises(
        VocabTransferError,
        match=r"^params.yaml: init.wechsel.dictionaries.sw: .*wechsel_dicts/swahli.txt not found, and init.methods "
        r"asks for wechsel; fix the path .* or remove wechsel from init.methods$",
    ):
        preflight(missing)
    # not named: no entry for sw (only one for another language) is a skip line, as before
    lines = preflight(params({"de": "wechsel_dicts/german.txt"}))
    assert "sw: skipping init wechsel pseed1 (no dictionary: init.wechsel.dictionaries has no entry for sw)" in lines
    # without wechsel in init.methods, its dictionaries are not read at all
    unused = merge_overlay(base, {"init": {"methods": ["random"], "wechsel": {"dictionaries": {"sw": "absent.txt"}}}})
    preflight(Params(validate_params(unused)))
    # the source-language text params name for it, missing: refused too
    (data_root / "pretrain_text/en.txt").unlink()
    shutil.copy(shared_data / "pretrain_text/sw.txt", data_root / "pretrain_text/en2.txt")
    text = merge_overlay(
        base,
        {
            "source_head": {"text": "pretrain_text/en2.txt"},
            "init": {"wechsel": {"dictionaries": {"sw": "wechsel_dicts/swahili.txt"}}},
        },
    )
    with pytest.raises(VocabTransferError, match=r"init.wechsel.source_text: .*pretrain_text/en.txt not found"):
        preflight(Params(validate_params(text)))


# ------------------------------------------------------------------ tested on the training data


def test_a_test_source_that_is_the_training_source_is_named(shared_data, data_root, tmp_path):
    (data_root / "xquad").mkdir()
    (data_root / "xquad/de.json").symlink_to(shared_data / "xquad/xquad.de.json")
    shutil.copy(shared_data / "xquad/xquad.de.json", data_root / "xquad/copy.json")
    train = {"path": "xquad/de.json"}
    assert same_source(train, {"path": "xquad/../xquad/de.json"}) == f"the same file ({data_root}/xquad/de.json)"
    assert same_source(train, {"path": str(shared_data / "xquad/xquad.de.json")}).startswith("the same file")
    assert same_source(train, {"path": "xquad/copy.json"}).startswith("a file of the same bytes")
    assert same_source(train, {"path": "xquad/absent.json"}) is None  # its own error: not found
    (data_root / "xquad/en.json").symlink_to(shared_data / "xquad/xquad.en.json")
    assert same_source(train, {"path": "xquad/en.json"}) is None
    url = {"url": "https://x/a.json", "sha256": "0" * 64}
    assert same_source(url, {"url": "https://x/b.json", "sha256": "0" * 64}).startswith("the same download")
    assert same_source({"dataset": {"path": "squad"}}, {"dataset": {"path": "squad", "split": "train"}})
    assert same_source({"dataset": {"path": "squad"}}, {"dataset": {"path": "squad", "split": "validation"}}) is None


def test_test_examples_that_are_all_training_examples_are_refused_when_read():
    """A different file whose every test example is a training one (a copy cut and renumbered) is refused by the job
    that reads it; an overlap of some examples is not (real splits share a few sentences)."""
    train = [{"id": str(i), "group": str(i), "cluster": str(i), "tokens": [f"w{i}"], "tags": ["O"]} for i in range(5)]
    renumbered = [{**ex, "id": str(int(ex["id"]) + 100), "group": "g", "cluster": "c"} for ex in train[1:3]]
    with pytest.raises(VocabTransferError, match=r"eval.tasks.ner.data.sw.test: every test example is also a train"):
        check_held_out(train, renumbered, "eval.tasks.ner.data.sw", "ner")
    check_held_out(train, renumbered + [{"id": "x", "tokens": ["new"], "tags": ["O"]}], "eval.tasks.ner.data.sw", "ner")
