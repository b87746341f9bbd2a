"""report.baseline: one method, or a list of which each language takes the stronger (the lower final valid loss),
and the init table's ln V beside each method's initial loss."""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.report import markdown, read
from vocabtransfer.report.baseline_choice import final_losses, mean_final_losses, stronger_baseline
from vocabtransfer.plan.report_params import ReportParams
from vocabtransfer.pipeline.typed import from_dict


def curve(*losses: float, steps=None) -> pd.DataFrame:
    steps = steps or [10 * (i + 1) for i in range(len(losses))]
    return pd.DataFrame({"step": steps, "valid_loss": list(losses)})


def language(**runs) -> read.Language:
    """runs: method -> {(objective, seed): curve}."""
    return read.Language("sw", curves={(m, o, s): c for m, per in runs.items() for (o, s), c in per.items()})


def test_the_stronger_baseline_has_the_lower_final_valid_loss():
    lang = language(
        random={("standard", 1): curve(9.0, 6.0), ("standard", 2): curve(9.0, 6.2)},
        # mean ends lower (each seed's LAST evaluated loss: seed 2 evaluated later, at 5.5), and its selfish runs
        # (lower still) do not count
        mean={("standard", 1): curve(8.0, 5.9), ("standard", 2): curve(8.0, float("nan"), 5.5, steps=[10, 20, 30])},
        focus={("standard", 1): curve(5.0, 4.0)},  # not a listed baseline
    )
    lang.curves[("mean", "selfish", 1)] = curve(1.0)
    means = mean_final_losses(final_losses(lang))
    assert means == pytest.approx(
        {("random", "standard"): 6.1, ("mean", "standard"): 5.7, ("focus", "standard"): 4.0, ("mean", "selfish"): 1.0}
    )
    choice = stronger_baseline(lang, ("random", "mean"))
    assert choice.method == "mean" and choice.final_loss == pytest.approx({"random": 6.1, "mean": 5.7})
    assert "Baseline: mean, the stronger of report.baseline (random, mean)" in choice.sentence()
    assert "conservative" in choice.sentence()
    # the other way round, and a single name: itself, with no sentence
    lang.curves[("random", "standard", 1)] = curve(9.0, 5.0)
    assert stronger_baseline(lang, ["random", "mean"]).method == "random"
    single = stronger_baseline(lang, "mean")
    assert single.method == "mean" and single.sentence() == ""


def test_a_baseline_without_runs_is_left_out_and_none_means_the_first():
    lang = language(mean={("standard", 1): curve(7.0)})
    assert stronger_baseline(lang, ("random", "mean")).method == "mean"
    none = stronger_baseline(language(), ("random", "mean"))
    assert none.method == "random" and "none of them" in none.sentence()


def test_report_baseline_takes_a_name_or_a_list():
    from vocabtransfer.app.params import section_defaults, validate_params
    from vocabtransfer.pipeline.config import merge_overlay

    assert from_dict(ReportParams, merge_overlay(section_defaults("report"), {})).baseline == "random"
    listed = from_dict(ReportParams, merge_overlay(section_defaults("report"), {"baseline": ["random", "mean"]}))
    assert listed.baseline == ("random", "mean")
    import yaml

    from conftest import REPO

    tree = yaml.safe_load((REPO / "params.yaml").read_text())
    tree["report"]["baseline"] = ["random", "mean"]
    with pytest.raises(VocabTransferError, match=r"report.baseline: mean is not pretrained"):  # the demo's: not
        validate_params(tree)
    tree["init"]["methods"] = list(dict.fromkeys(tree["init"]["methods"] + ["mean"]))
    tree["pretrain"]["methods"] = tree["pretrain"]["methods"] + ["mean"]
    validate_params(tree)
    tree["report"]["baseline"] = ["random", "maen"]
    with pytest.raises(VocabTransferError, match=r"report.baseline: 'maen' is not an init method.*mean"):
        validate_params(tree)
    tree["report"]["baseline"] = []
    with pytest.raises(VocabTransferError, match="report.baseline"):
        validate_params(tree)


def test_the_init_table_shows_ln_v_beside_each_loss():
    rows = [
        {"lang": "sw", "method": "random", "kind": "causal", "loss": 15.9, "calibrated_loss": 9.6},
        {"lang": "sw", "method": "mean", "kind": "causal", "loss": 9.4, "calibrated_loss": 8.1},
        {"lang": "en", "method": "source", "kind": "causal", "loss": 4.1, "calibrated_loss": 4.0},
    ]
    lang = read.Language("sw", init_eval=rows, tokenizer={"vocab_size": 16000, "vocab_size_reached": 16000})
    text = re.sub(" +", " ", "\n".join(markdown.init_section(lang)))  # the table's padding collapsed
    ln_v = math.log(16000)
    assert "| method | loss | loss − ln V | calibrated loss |" in text
    assert f"| random | 15.900 | {15.9 - ln_v:.3f} |" in text and f"| mean | **9.400** | {9.4 - ln_v:.3f} |" in text
    assert f"| uniform guess (ln V, V = 16,000) | {ln_v:.3f} | 0.000 | – |" in text
    assert "| source (own tokenizer) | 4.100 | – | 4.000 |" in text
    assert f"ln V = {ln_v:.3f}" in text
    # without the tokenizer's stats: the table as before
    assert "ln V" not in "\n".join(markdown.init_section(read.Language("sw", init_eval=rows)))
