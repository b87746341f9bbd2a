"""What an initialisation is worth in tokens (report.token_equivalent), on curves whose answers are known.

random's valid loss is 10 − log2(t / 1000) nats from t = 1000 tokens on (12 at t = 0), focus's is random's at
4 t: 8 − log2(t / 1000). Both are linear in log tokens, so reading them at the grid's budgets by interpolation
in log tokens is exact, and random needs exactly 4× the tokens to reach focus's loss at any budget b with
4 b inside the run; the unigram floor of 5 nats is reached by random at 32,000 tokens and by focus at 8,000.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from helpers import filled_params

from vocabtransfer.report import token_equivalent as te
from vocabtransfer.report import token_worth as tw
from vocabtransfer.report.read import Language

TOKENS = [0] + [1000 * 2**i for i in range(7)]  # 0, 1000, 2000, …, 64000
BLOCKS, PER_BLOCK = 40, 10
BLOCK_EFFECT = 0.05 * np.where(np.arange(BLOCKS) % 2 == 0, 1.0, -1.0)  # sums to zero: the mean is exact


def loss(method: str, t: float) -> float:
    if t == 0:
        return 12.0 if method == "random" else 10.5
    return (10.0 if method == "random" else 8.0) - math.log2(t / 1000)


def language(seeds: int = 3) -> Language:
    lang = Language(lang="sw")
    for method in ("random", "focus"):
        for s in range(1, seeds + 1):
            offset = 0.001 * (s - (seeds + 1) / 2)  # the seeds' mean is the curve
            rows = [
                {
                    "step": i,
                    "tokens_seen": t,
                    "block": b,
                    "loss_sum": PER_BLOCK * (loss(method, t) + offset + BLOCK_EFFECT[b]),
                }
                for i, t in enumerate(TOKENS)
                for b in range(BLOCKS)
            ]
            lang.curve_blocks[(method, "standard", s)] = pd.DataFrame(rows)
            lang.blocks[(method, "standard", s)] = pd.DataFrame(
                {
                    "block": range(BLOCKS),
                    "loss_sum": 0.0,
                    "n_tokens": PER_BLOCK,
                    "unigram_sum": PER_BLOCK * (5.0 + BLOCK_EFFECT),
                }
            )
            lang.runs[(method, "standard", s)] = {"uniform_valid_loss": 11.0}
    return lang


def test_interpolation_and_crossing_by_hand():
    grid = np.array([0.0, 1000, 3000, 10000])
    curve = np.array([[10.0, 8.0, 6.0, 4.0]] * 4)
    got = te.crossing(curve, np.array([7.0, 9.0, 11.0, 3.0]), grid)
    assert got[0] == pytest.approx(1000 * math.sqrt(3))  # halfway between 1000 and 3000 in log tokens
    assert got[1] == pytest.approx(500)  # halfway between 0 and 1000, linear in tokens
    assert got[2] == 0 and math.isinf(got[3])  # there from the start; never within the run
    weights = te.interpolation(np.array([0.0, 1000, 4000]), np.array([0.0, 500, 2000, 4000]))
    np.testing.assert_allclose(weights, [[1, 0, 0], [0.5, 0.5, 0], [0, 0.5, 0.5], [0, 0, 1]])


def test_token_equivalent_of_a_curve_shifted_fourfold():
    curves = te.read_curves(language())
    assert list(curves.grid()) == [0, 1000, 3000, 10000, 30000, 64000]
    reps = te.replicate(curves, resamples=400, seed=1)
    assert reps.seeds[("focus", "standard")] == 3 and reps.blocks == BLOCKS
    np.testing.assert_allclose(reps.mean[("random", "standard")][0], [loss("random", t) for t in reps.grid], atol=1e-9)
    eqs = {e.budget: e for e in te.equivalents(reps, "random", 0.95)}
    assert sorted(eqs) == [1000, 10000, 64000]
    for budget in (1000, 10000):
        assert eqs[budget].tokens.value == pytest.approx(4 * budget, rel=1e-6)
        assert eqs[budget].ratio.value == pytest.approx(4, rel=1e-6)
        assert 3.9 < eqs[budget].ratio.low <= 4 <= eqs[budget].ratio.high < 4.1  # seeds and blocks barely move it
    assert math.isinf(eqs[64000].ratio.value)  # random does not reach focus's final loss within 64,000 tokens
    floors = {c.method: c for c in te.floor_crossings(reps, 0.95)}
    assert floors["random"].unigram.value == pytest.approx(32000, rel=1e-6)
    assert floors["focus"].unigram.value == pytest.approx(8000, rel=1e-6)
    # the uniform guess (11 nats): random from 12 at 0 to 10 at 1000 tokens, linear: 500; focus starts below it
    assert floors["random"].uniform.value == pytest.approx(500) and floors["focus"].uniform.value == 0
    lines = tw.verdict(reps, list(eqs.values()), list(floors.values()), "random")
    assert lines[0].startswith("**focus-standard is worth more than the run's random's tokens at 64.0k tokens**")
    assert "at 1.0k: 4.0× [" in lines[0] and "at 10.0k: 4.0× [" in lines[0]
    assert "focus-standard after 8.0k [" in lines[1] and "random-standard after 32.0k [" in lines[1]
    table = "\n".join(tw.section(reps, list(eqs.values()), list(floors.values()), "random", 0.95, None))
    rows = [
        [c.strip() for c in line.strip("|").split("|")] for line in table.splitlines() if line.startswith("| focus")
    ]
    row = next(r for r in rows if r[1] == "10.0k")
    assert row[2:4] == ["4.678", "6.678"] and row[4].startswith("40.0k [") and row[5].startswith("4.0× [")
    assert tw.NO_UPDATE not in table and tw.NO_UPDATE not in lines[0]  # every model changes by 1,000 tokens


def test_a_budget_before_the_first_update_is_marked_and_compares_the_initialisations():
    """Every run's evaluation at 1,000 tokens equals its initial one (the first step at learning rate 0): the
    1.0k budget is marked "(no update yet)" in the table and the verdict, and the note says up to where.
    focus at 1.0k is its initial 10.5 nats. On the grid random goes from 12 (still, at 1,000) to
    10 − log2(3) at 3,000 tokens, linear in log tokens: it crosses 10.5 at 1000 × 3^(1.5 / (2 + log2 3))
    = 1584 tokens, 1.6x."""
    lang = language()
    for table in lang.curve_blocks.values():
        first = table["step"] == 0
        table.loc[table["step"] == 1, "loss_sum"] = table.loc[first, "loss_sum"].to_numpy()
    curves = te.read_curves(lang)
    assert curves.unchanged() == 1000
    reps = te.replicate(curves, resamples=200, seed=1)
    eqs = te.equivalents(reps, "random", 0.95)
    first = next(e for e in eqs if e.budget == 1000)
    assert first.loss == pytest.approx(10.5) and first.tokens.value == pytest.approx(
        1000 * 3 ** (1.5 / (2 + math.log2(3)))
    )
    sentence = tw.verdict(reps, eqs, [], "random")[0]
    assert "at 1.0k (no update yet): 1.6× [" in sentence and "at 10.0k: 4.0× [" in sentence
    table = "\n".join(tw.section(reps, eqs, [], "random", 0.95, None))
    assert "| 1.0k (no update yet)" in table and "| 10.0k " in table
    assert "(up to 1.0k tokens: under linear warm-up the first optimizer step's learning rate is 0)" in table


def test_no_advantage_is_worded_as_such():
    """focus equal to random: the ratio's interval holds 1 and the verdict says no detectable advantage."""
    lang = language()
    for s in (1, 2, 3):
        lang.curve_blocks[("focus", "standard", s)] = lang.curve_blocks[("random", "standard", 4 - s)].copy()
    reps = te.replicate(te.read_curves(lang), resamples=400, seed=1)
    eqs = te.equivalents(reps, "random", 0.95)
    end = [e for e in eqs if e.budget == 64000][0]
    assert end.ratio.low <= 1 <= end.ratio.high
    assert tw.verdict(reps, eqs, [], "random")[0].startswith(
        "**focus-standard: no detectable token advantage over random at 64.0k tokens**"
    )


def test_a_mean_curve_that_never_gets_there_with_an_interval_that_does_is_no_advantage():
    """The baseline's mean curve does not reach the method's loss within the run, but the interval's low end is
    under 1x: no detectable advantage, and the sentence says the mean misses while its interval gets there."""
    from types import SimpleNamespace

    inf = math.inf
    end = te.Equivalent(
        "focus", "selfish", 64000.0, 6.705, 6.734, te.Estimate(inf, 42900.0, inf), te.Estimate(inf, 0.67, inf)
    )
    reps = SimpleNamespace(
        seeds={("focus", "selfish"): 3}, blocks=67, grid=np.array([0.0, 1000.0, 64000.0]), unchanged=0.0
    )
    sentence = tw.worth_sentence([end], "random", reps)
    assert sentence.startswith("**focus-selfish: no detectable token advantage over random at 64.0k tokens** (")
    assert (
        "random's mean curve does not reach its valid loss 6.705 within the run (64.0k tokens), but its "
        "interval does: ratio > run [0.7×, > run]; 3 pretraining seeds each, 67 valid blocks)"
    ) in sentence


def test_the_report_shows_tokens_curves_table_and_verdict(tmp_path):
    """Through `write_report`: runs with valid_curve.parquet get the tokens figure (log axis, floors), the
    token-equivalent section and a verdict bullet per method; metrics.json keeps the ratios (null: > run)."""
    import pyarrow as pa

    from test_report import PARAMS, _report, make_results, write
    from vocabtransfer import io
    from vocabtransfer.pipeline import paths
    from vocabtransfer.report import build

    plan = make_results(tmp_path, langs=("sw",), with_evals=False)
    for m, o, s in plan.pretrain:
        lang = language()
        src = ("random" if m == "random" else "focus", "standard", s)
        run = dict(lang="sw", method=m, objective=o, pseed=s)
        write(
            tmp_path,
            paths.PRETRAIN_DIR + "/valid_curve.parquet",
            pa.Table.from_pandas(lang.curve_blocks[src], preserve_index=False),
            **run,
        )
        write(
            tmp_path,
            paths.PRETRAIN_DIR + "/valid_blocks.parquet",
            pa.Table.from_pandas(lang.blocks[src], preserve_index=False),
            **run,
        )
        write(tmp_path, paths.PRETRAIN_DIR + "/stats.json", {"steps": 7, "uniform_valid_loss": 11.0}, **run)
    build.write_report(
        filled_params({**PARAMS, "languages": ["sw"]}),
        _report({**PARAMS, "report": {"bootstrap_resamples": 200}}),
        plan,
        tmp_path,
    )
    text = (tmp_path / paths.REPORT).read_text()
    assert "### What an initialisation is worth in tokens" in text
    assert "**focus-standard is worth more than the run's random's tokens at 64.0k tokens**" in text
    assert "**focus-selfish is worth more than the run's random's tokens" in text  # against random-selfish
    figure = tmp_path / paths.REPORT_FIGURES / "sw_valid_loss.png"
    assert figure.read_bytes().startswith(b"\x89PNG")
    ratios = io.read_json(tmp_path / paths.REPORT_METRICS)["sw"]["token_equivalent"]
    assert ratios["focus-standard@10000"] == pytest.approx(4, rel=1e-6) and ratios["focus-standard@64000"] is None


def test_tokens_to_the_sources_bits_per_byte():
    """Causal runs' bits per byte, 3 − 0.25 log2(t / 1000) for random (3.5 at 0) and random's at 4 t for focus:
    the source's 1.5 is reached by random at 64,000 tokens (the run's end) and by focus at 16,000."""
    lang = language()
    for m, o, s in list(lang.curve_blocks):
        bits = [3.5 if t == 0 else 3.0 - 0.25 * math.log2((t if m == "random" else 4 * t) / 1000) for t in TOKENS]
        lang.curves[(m, o, s)] = pd.DataFrame(
            {"step": range(len(TOKENS)), "tokens_seen": TOKENS, "valid_bits_per_byte": np.array(bits) + 0.001 * (s - 2)}
        )
    reps = te.replicate(te.read_curves(lang), resamples=200, seed=1)
    reach = te.bits_crossings(lang, reps, 1.5, 200, 1, 0.95)
    assert reach[("focus", "standard")].value == pytest.approx(16000, rel=1e-3)
    assert reach[("random", "standard")].value == pytest.approx(64000, rel=1e-3)
    sentence = tw.source_sentence(reach, 1.5, reps)
    assert sentence.startswith("The source's bits per byte with its own tokenizer (1.500): reached by ")
    assert "focus-standard after 16.0k [" in sentence
