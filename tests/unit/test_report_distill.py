"""The report's distill note: the runs' τ, α, chunks and steps from stats.json, and each term's gradient norm
from metrics.parquet, alone and weighted, by hand; said plainly where the norms were not logged."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from vocabtransfer.report import distill_terms, read

STATS = {"steps": 20, "distill": {"temperature": 100.0, "alpha": 0.5, "chunks": "unbiased", "bias_threshold": 1e-4}}


def metrics(g_d, g_lm, g_all):
    nan = math.nan
    return pd.DataFrame(
        {
            "step": [0, 5, 10],
            "valid_loss": [9.0, nan, 8.0],
            "grad_norm_distill": [nan, *g_d],
            "grad_norm_lm": [nan, *g_lm],
            "grad_norm_total": [nan, *g_all],
        }
    )


def test_the_note_states_the_settings_and_both_terms_gradient_norms():
    lang = read.Language("sw")
    lang.runs = {
        ("focus", "distill", 1): STATS,
        ("focus", "distill", 2): STATS,
        ("focus", "standard", 1): {"steps": 20},
    }
    lang.curves = {
        ("focus", "distill", 1): metrics([0.2, 0.4], [3.0, 5.0], [2.0, 3.0]),
        ("focus", "distill", 2): metrics([0.3, 0.1], [4.0, 4.0], [2.5, 2.5]),
    }
    lines = distill_terms.note(lang)
    assert lines[0] == "The distill runs:" and len(lines) == 4
    line = lines[2]
    g_d, g_lm = np.mean([0.2, 0.4, 0.3, 0.1]), np.mean([3.0, 5.0, 4.0, 4.0])  # 0.25, 4.0
    assert line.startswith(
        "* focus: τ = 100.0, α = 0.5, unbiased chunks (bias threshold 0.0001), 20 steps; 2 pretraining seeds."
    )
    assert f"chunk term {g_d:.3g}, cross-entropy term {g_lm:.3g}, the step 2.5" in line
    assert f"{0.5 * g_d:.3g} against {0.5 * g_lm:.3g}" in line and f"{g_d / g_lm:.3g}×" in line


def test_runs_without_logged_norms_are_said_so_and_no_distill_no_note():
    lang = read.Language("sw")
    lang.runs = {("focus", "distill", 1): {"steps": 20, "distill": {"temperature": 1.0, "alpha": 0.5}}}
    lang.curves = {("focus", "distill", 1): pd.DataFrame({"step": [0, 10], "valid_loss": [9.0, 8.0]})}
    line = distill_terms.note(lang)[2]
    assert line.startswith("* focus: τ = 1.0, α = 0.5, exact chunks, 20 steps; 1 pretraining seed;")
    assert "gradient norms were not logged" in line
    lang.runs = {("focus", "standard", 1): {"steps": 20}}
    assert distill_terms.note(lang) == []


def test_the_alm_note_has_alpha_one_and_no_cross_entropy_weight():
    """`alm` runs (distill's chunk term alone) get their own note: α = 1, the cross-entropy term weighs 0."""
    lang = read.Language("de")
    alm = {"steps": 20, "distill": {**STATS["distill"], "alpha": 1.0}}
    lang.runs = {("focus", "alm", 1): alm, ("focus", "distill", 1): STATS}
    lang.curves = {("focus", "alm", 1): metrics([0.2, 0.4], [3.0, 5.0], [0.2, 0.4])}
    lines = distill_terms.note(lang, "alm")
    assert lines[0] == "The alm runs:" and len(lines) == 4
    assert lines[2].startswith("* focus: τ = 100.0, α = 1.0, unbiased chunks")
    assert "weighted by α and 1 − α: 0.3 against 0. With α = 1 there is no cross-entropy term" in lines[2]
    assert "begin- and end-of-sequence tokens around each line) gets no training signal" in lines[2]
    assert "moves the model" not in lines[2]
    lang.runs = {("focus", "selfish", 1): {"steps": 20, "distill": None}}  # no teacher: no note
    assert distill_terms.note(lang, "selfish") == []
