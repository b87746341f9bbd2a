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


def test_positions_point_and_rounding_by_hand():
    """A curve 10, 8, 6, 4 at 0, 1000, 3000, 10000 tokens: loss 7 is reached halfway between 1000 and 3000 (in
    log tokens: 1000 √3), 9 before the first budget ("≤ 1000", never a number inside the first step), 11 at the
    start, 3 only after the run; the interval's ends go out to the measured points around them."""
    grid = np.array([0.0, 1000, 3000, 10000])
    pos = te.position(np.array([[10.0, 8.0, 6.0, 4.0]] * 4), np.array([7.0, 9.0, 11.0, 3.0]))
    np.testing.assert_allclose(pos, [1.5, 0.5, -0.5, 3.5])  # the first and the last step extended past the ends
    assert te.point_tokens(1.5, grid) == (pytest.approx(1000 * math.sqrt(3)), False)
    assert te.point_tokens(0.5, grid) == (1000, True) and te.point_tokens(-0.5, grid) == (0, False)
    assert te.point_tokens(3.5, grid)[0] == math.inf
    assert [te.rounded(1.5, grid, up) for up in (False, True)] == [1000, 3000]
    assert [te.rounded(0.5, grid, up) for up in (False, True)] == [0, 1000]
    assert [te.rounded(3.2, grid, up) for up in (False, True)] == [math.inf, math.inf]
    assert te.position(np.array([[10.0, 8.0, 8.0]]), np.array([7.0]))[0] == math.inf  # flat at the end: never
    weights = te.interpolation(np.array([0.0, 1000, 4000]), np.array([0.0, 500, 2000, 4000]))
    np.testing.assert_allclose(weights, [[1, 0, 0], [0.5, 0.5, 0], [0, 0.5, 0.5], [0, 0, 1]])


def _ends_measured(e: te.Estimate, grid: np.ndarray) -> bool:
    return all(v == 0 or math.isinf(v) or np.isclose(grid, v).any() for v in (e.low, e.high))


def test_token_equivalent_of_a_curve_shifted_fourfold():
    curves = te.read_curves(language())
    assert list(curves.grid()) == TOKENS  # the measured points
    reps = te.replicate(curves, resamples=400, seed=1)
    assert reps.seeds[("focus", "standard")] == 3 and reps.blocks == BLOCKS
    np.testing.assert_allclose(reps.mean[("random", "standard")][0], [loss("random", t) for t in reps.grid], atol=1e-9)
    eqs = {e.budget: e for e in te.equivalents(reps, "random", 0.95)}
    assert sorted(eqs) == [1000, 8000, 64000]  # 7 measured budgets: those nearest 10^3, 10^4, and the last
    for budget in (1000, 8000):
        assert eqs[budget].tokens.value == pytest.approx(4 * budget, rel=1e-6)
        assert eqs[budget].ratio.value == pytest.approx(4, rel=1e-6)
        # the crossing is a measured point: the interval may reach the next one out on either side, no further
        assert eqs[budget].ratio.low in (2, 4) and eqs[budget].ratio.high in (4, 8)
        assert _ends_measured(eqs[budget].tokens, reps.grid)
    assert math.isinf(eqs[64000].ratio.value)  # random does not reach focus's final loss within 64,000 tokens
    assert math.isinf(eqs[64000].ratio.low)  # nor does the interval: more than the run
    floors = {c.method: c for c in te.floor_crossings(reps, 0.95)}
    assert floors["random"].unigram.value == pytest.approx(32000, rel=1e-6)
    assert floors["focus"].unigram.value == pytest.approx(8000, rel=1e-6)
    # the uniform guess (11 nats): random goes from 12 at 0 to 10 at 1000 tokens: "≤ 1000"; focus starts below
    assert (floors["random"].uniform.value, floors["random"].uniform.upto) == (1000, True)
    assert (floors["random"].uniform.low, floors["random"].uniform.high) == (0, 1000)
    assert floors["focus"].uniform.value == 0
    assert all(_ends_measured(e, reps.grid) for c in floors.values() for e in (c.unigram, c.uniform))
    lines = tw.verdict(reps, list(eqs.values()), list(floors.values()), "random")
    assert lines[0].startswith("**focus-standard is worth more than the run's random's tokens at 64.0k tokens**")
    assert "at 1.0k: 4.0× [" in lines[0] and "at 8.0k: 4.0× [" in lines[0]
    assert "focus-standard after 8.0k [" in lines[1] and "random-standard after 32.0k [" in lines[1]
    table = "\n".join(tw.section(reps, list(eqs.values()), list(floors.values()), "random", 0.95, None))
    rows = [
        [c.strip() for c in line.strip("|").split("|")] for line in table.splitlines() if line.startswith("| focus")
    ]
    row = next(r for r in rows if r[1] == "8.0k")
    assert row[2:4] == ["5.000", "7.000"] and row[4].startswith("32.0k [") and row[5].startswith("4.0× [")
    cells = [c.strip() for line in table.splitlines() if line.startswith("| random") for c in line.split("|")]
    assert cells[2].startswith("32.0k [") and cells[3] == "≤ 1.0k [0, 1.0k]"


def _stated_tokens(text: str) -> list[float]:
    """Every token count an interval states in `text` (value, low, high; ratios left out)."""
    import re

    def parse(word: str) -> float:
        if word == "> run":
            return math.inf
        scale = {"k": 1e3, "M": 1e6}.get(word[-1], 1.0)
        return float(word.rstrip("kM")) * scale

    out = []
    word = r"(> run|[\d.]+[kM]?)"
    for value, low, high in re.findall(rf"(?:≤ )?{word} \[{word}, {word}\]", text):
        out += [parse(value), parse(low), parse(high)]
    return out


def test_nothing_is_stated_inside_the_first_step():
    """Every run's first evaluation after 0 equals its initial one (as under linear warm-up, the first step at
    learning rate 0): the first budget, 1,000 tokens, is still a budget like any other (no "no update yet"
    rows), and no token count between 0 and it is ever stated: a crossing before it is "≤ 1.0k". focus at 1.0k
    is its initial 10.5 nats; random goes from 12 (still, at 1,000) to 9 at 2,000: it crosses 10.5 halfway,
    1000 √2 = 1414 tokens in log tokens, inside [1000, 2000]."""
    lang = language()
    for table in lang.curve_blocks.values():
        first = table["step"] == 0
        table.loc[table["step"] == 1, "loss_sum"] = table.loc[first, "loss_sum"].to_numpy()
    reps = te.replicate(te.read_curves(lang), resamples=200, seed=1)
    eqs = te.equivalents(reps, "random", 0.95)
    first = next(e for e in eqs if e.budget == 1000)
    assert first.loss == pytest.approx(10.5) and first.tokens.value == pytest.approx(1000 * math.sqrt(2))
    assert (first.tokens.low, first.tokens.high) == (1000, 2000)
    floors = te.floor_crossings(reps, 0.95)
    text = "\n".join(tw.verdict(reps, eqs, floors, "random") + tw.section(reps, eqs, floors, "random", 0.95, None))
    assert "at 1.0k: 1.4× [1.0×, 2.0×]" in text
    assert "no update" not in text and not hasattr(tw, "NO_UPDATE") and not hasattr(te.Curves, "unchanged")
    stated = _stated_tokens(text)
    assert len(stated) > 20 and 0 in stated and math.inf in stated
    assert all(t == 0 or t >= 1000 for t in stated), sorted(stated)


def test_read_curves_keeps_the_initialisation_and_the_decayed_rows():
    """A run with cool-down branches: the main run's evaluations at steps 10, 20, 30 (not decayed) and the
    ends of branches at steps 14 and 24 (decayed) and the run's own end at 40 (decayed), rows shuffled. The
    curve is step 0, then the decayed rows ordered by tokens; another step 20 row that is decayed (a branch
    end with the main run's step number) is a separate evaluation."""
    rows = []
    for step, tokens, decayed, value in [
        (0, 0, False, 9.0),
        (10, 1000, False, 8.0),
        (14, 1400, True, 7.0),
        (20, 2000, False, 7.5),
        (24, 2400, True, 6.0),
        (30, 3000, False, 6.5),
        (20, 3500, True, 5.5),
        (40, 4000, True, 5.0),
    ]:
        rows += [
            {"step": step, "tokens_seen": tokens, "block": b, "loss_sum": value + b, "decayed": decayed}
            for b in range(3)
        ]
    table = pd.DataFrame(rows).sample(frac=1.0, random_state=0)
    tokens, sums = te.evaluations(table)
    assert list(tokens) == [0, 1400, 2400, 3500, 4000]
    np.testing.assert_allclose(sums[:, 0], [9.0, 7.0, 6.0, 5.5, 5.0])
    np.testing.assert_allclose(sums[:, 2], [11.0, 9.0, 8.0, 7.5, 7.0])
    old = te.evaluations(table.drop(columns="decayed").query("not (step == 20 and tokens_seen == 3500)"))
    assert list(old[0]) == [0, 1000, 1400, 2000, 2400, 3000, 4000]  # without the column: every row


def test_read_curves_grid_is_the_mean_tokens_and_runs_are_cut_to_a_common_length(caplog):
    """Seeds see slightly different token counts (padding): the grid is each evaluation's mean; a run with
    fewer evaluations cuts every run to the shortest (logged)."""
    lang = language()
    table = lang.curve_blocks[("focus", "standard", 1)]
    table["tokens_seen"] = table["tokens_seen"] + 30 * (table["step"] > 0)  # 10 more a budget on the mean
    curves = te.read_curves(lang)
    np.testing.assert_allclose(curves.grid(), [0] + [t + 5 for t in TOKENS[1:]])
    assert [r.seed for r in curves.runs[("focus", "standard")]] == [1, 2, 3]
    lang.curve_blocks[("random", "standard", 2)] = table[table["step"] < 5]
    with caplog.at_level("WARNING"):
        cut = te.read_curves(lang)
    assert len(cut.grid()) == 5 and "5/8 evaluations" in caplog.text


def test_seeds_that_disagree_widen_the_interval_by_the_t2_quantile():
    """Seed k of focus is random's seed k at 4 t plus d_k nats, d = (−0.3, 0, 0.3); the blocks' effects are
    shared by both, so the cluster part is 0. random falls 1 nat an evaluation, so seed pair k crosses at
    position i + 2 − d_k: sample sd 0.3, seed variance 0.3² / 3, half-width t(2) · 0.3 / √3 in positions
    (0.745 at 95 %, 4.30 where a normal quantile would give 1.96). In the table (3 rows, Bonferroni 98.33 %):
    t = 7.65, half 1.33: at 1,000 tokens (position 1, crossing at 3) the interval spans positions 1.67 to 4.33,
    rounded out to 1,000 and 16,000 tokens (1× to 16×), where equal seeds give 4,000 (4×) with its neighbours
    at most."""
    from scipy import stats

    half = te.half_width(np.zeros(100), np.array([2.7, 3.0, 3.3]), BLOCKS, 0.95)
    assert half == pytest.approx(stats.t.ppf(0.975, 2) * 0.3 / math.sqrt(3)) and half == pytest.approx(0.7453, abs=1e-4)
    assert te.half_width(None, np.array([2.7, 3.0, 3.3]), BLOCKS, 1 - 0.05 / 3) == pytest.approx(1.3252, abs=1e-3)
    lang = language()
    for s, d in zip((1, 2, 3), (-0.3, 0.0, 0.3)):
        table = lang.curve_blocks[("focus", "standard", s)]
        table["loss_sum"] = table["loss_sum"] + PER_BLOCK * d * (table["step"] > 0)
    eqs = te.equivalents(te.replicate(te.read_curves(lang), resamples=400, seed=1), "random", 0.95)
    first = next(e for e in eqs if e.budget == 1000)
    assert first.tokens.value == pytest.approx(4000, rel=1e-6)
    assert (first.tokens.low, first.tokens.high) == (1000, 16000)
    assert (first.ratio.low, first.ratio.high) == (1, 16)
    same = te.equivalents(te.replicate(te.read_curves(language()), resamples=400, seed=1), "random", 0.95)[0]
    assert same.tokens.low >= 2000 and same.tokens.high <= 8000


def test_no_advantage_is_worded_as_such():
    """focus equal to random: the ratio's interval holds 1 and the verdict says no detectable advantage."""
    lang = language()
    for s in (1, 2, 3):
        lang.curve_blocks[("focus", "standard", s)] = lang.curve_blocks[("random", "standard", 4 - s)].copy()
    reps = te.replicate(te.read_curves(lang), resamples=400, seed=1)
    eqs = te.equivalents(reps, "random", 0.95)
    end = [e for e in eqs if e.budget == 64000][0]
    assert end.ratio.value == pytest.approx(1) and end.ratio.low <= 1 <= end.ratio.high
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
    reps = SimpleNamespace(seeds={("focus", "selfish"): 3}, blocks=67, grid=np.array([0.0, 1000.0, 64000.0]))
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
    # beside "In brief": each method's worth in the baseline's tokens against the budget
    worth = tmp_path / paths.REPORT_FIGURES / "sw_worth.png"
    assert worth.read_bytes().startswith(b"\x89PNG")
    brief = text.split("## In brief", 1)[1].split("\n## ", 1)[0]
    assert "](report/figures/sw_worth.png)" in brief  # relative to results/report.md
    ratios = io.read_json(tmp_path / paths.REPORT_METRICS)["sw"]["token_equivalent"]
    assert ratios["focus-standard@8000"] == pytest.approx(4, rel=1e-6) and ratios["focus-standard@64000"] is None


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


def _hypernet_language() -> Language:
    """`language()` with focus's curve (random's shifted fourfold in tokens) as hypernet's and random's as fvt's."""
    lang, names = language(), {"random": "fvt", "focus": "hypernet"}
    for table in (lang.curve_blocks, lang.blocks, lang.runs):
        for m, o, s in list(table):
            table[(names[m], o, s)] = table.pop((m, o, s))
    return lang


def test_the_hypernetwork_is_weighed_against_the_tokens_it_trained_on(tmp_path):
    """hypernet's curve is fvt's shifted fourfold, the same in every seed and block: at 1,000 tokens fvt needs
    4,000 (a measured point, no spread), so it saves 3,000 against a network trained on 6,000 tokens: it does not pay
    for itself for one target, and pays back after 2; at 8,000 it saves 24,000: at once. An interval holding the cost
    is undetermined, one that may hold no gain never pays back. Through the report's tokens section, with the
    networks' stats.json of two seeds."""
    from test_report import PARAMS, _report
    from vocabtransfer.report import build, hypernet_worth, tables

    reps = te.replicate(te.read_curves(_hypernet_language()), resamples=400, seed=1)
    rows = {p.worth.budget: p for p in hypernet_worth.paybacks(reps, 6000.0, 0.95)}
    assert sorted(rows) == [1000, 8000, 64000]
    assert (rows[1000].worth.tokens.low, rows[1000].worth.tokens.high) == pytest.approx((4000, 4000), rel=1e-6)
    assert rows[1000].gain == pytest.approx((3000, 3000, 3000), rel=1e-6)
    assert rows[1000].verdict() == "does not pay for itself" and rows[1000].targets() == "2 [2, 2]"
    assert rows[8000].gain[0] == pytest.approx(24000, rel=1e-6) and rows[8000].verdict() == "pays for itself"
    assert rows[8000].targets() == "1 [1, 1]" and rows[64000].verdict() == "pays for itself"

    def at(value: float, low: float, high: float) -> hypernet_worth.Payback:  # fvt's tokens at budget 1,000
        worth = te.Equivalent("hypernet", "standard", 1000, 1.0, 1.0, te.Estimate(value, low, high), None)
        return hypernet_worth.Payback(worth, 6000.0)

    assert at(2000, 1500, 9000).verdict() == "undetermined" and at(2000, 1500, 9000).targets() == "6 [1, 12]"
    assert at(1500, 500, 1500).verdict() == "does not pay for itself"
    assert at(1500, 500, 1500).targets() == "12 [12, none]"  # the saved tokens' interval reaches 0
    assert at(900, 800, 1100).targets() == "none (no detectable gain)"
    assert at(3000, 3000, 3000).targets() == "3 [3, 3]" and at(8000, 7500, 8000).verdict() == "pays for itself"

    networks = [{"tokens": 5000, "train_seconds": 60.0}, {"tokens": 7000, "train_seconds": 180.0}]
    settings = tables.Settings.of(_report({**PARAMS, "report": {"bootstrap_resamples": 200}}), 7)
    lang = _hypernet_language()
    section, bullets, _, _ = build._tokens_section(
        lang, te.read_curves(lang), "fvt", settings, None, tmp_path / "sw_valid_loss.png", None, networks
    )
    text = "\n".join(section)
    assert "### The hypernetwork against its own cost" in text
    assert "One network trained on 6,000 tokens (2.0 min; the mean over 2 network seeds)" in text
    assert bullets[-1].startswith("**The hypernetwork pays for itself for one target at 64.0k tokens**")
    assert (
        build._tokens_section(
            lang, te.read_curves(lang), "fvt", settings, None, tmp_path / "sw_valid_loss.png", None, []
        )[0]
        == section[: section.index("### The hypernetwork against its own cost")]
    )  # no network: no section
