"""`pretrain.schedule: wsd` and its cool-down branches (train.cooldown) on a tiny GPT-2 and real Swahili text.

The property that makes a branch worth having: its end is what a run of its length reaches. A 40-step wsd run
with a 25 % decay branches at 3,000 target positions (12 steps of 8 × 32, forking at step 9); a separate wsd run of
12 steps decays over the same last 3 steps after the same 9 stable ones, so both end on the same weights.
"""

from __future__ import annotations

import json
import math
import re
import shutil

import pyarrow.parquet as pq
import pytest

from vocabtransfer.app.params import validate_params
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.train import cooldown
from vocabtransfer.plan.pretrain_params import CooldownOptions, PretrainParams

from helpers import bpe_tokenizer, pretrain_outputs, pretrain_project, run_pretrain, tiny_gpt2

WSD = {
    "schedule": "wsd",
    "steps": 40,
    "warmup_steps": 4,
    "eval_schedule": "log_tokens",
    "cooldown": {"fraction": 0.25, "per_decade": 2},
}
# a params tree that validates with only its pretrain section to add (the refusals below read that section)
BASE = {
    "languages": ["sw"],
    "source_model": "unused",
    "corpus": {"sources": {"sw": {"path": "unused.txt"}}},
    "init": {"methods": ["focus"]},
}


@pytest.fixture(scope="module")
def sw_bpe():
    return bpe_tokenizer("sw", vocab_size=280)


def test_the_plan_puts_no_branch_inside_the_warm_up_or_the_runs_own_decay():
    # MiniLM's study at 4 passes: 644 steps of 32 x 128 positions, 15 warm-up steps
    plan = cooldown.plan(644, 4096, 15, CooldownOptions(fraction=0.2, per_decade=2))
    assert [(b.budget, b.end, b.fork) for b in plan] == [(100_000, 24, 19), (300_000, 73, 58), (1_000_000, 244, 195)]
    # 3,000 and 10,000 positions (1 and 2 steps, forks 0 and 1) and 30,000 (7 steps, fork 5) fork inside the warm-up
    assert all(b.fork >= 15 for b in plan)
    # Gemma's: 270 steps of 4 x 64; 10k -> 39 steps (fork 31), 30k -> 117 (fork 93); the run decays from step 216
    gemma = cooldown.plan(270, 256, 20, CooldownOptions(fraction=0.2, per_decade=2))
    assert [(b.end, b.fork) for b in gemma] == [(39, 31), (117, 93)]
    assert cooldown.decay_steps(117, 0.2) == 24 and cooldown.decay_steps(270, 0.2) == 54
    assert cooldown.plan(644, 4096, 15, CooldownOptions(per_decade=0)) == []


def test_budget_grids():
    assert cooldown.budget_grid(40_000, 2) == [1000, 3000, 10_000, 30_000]
    assert cooldown.budget_grid(20_000, 4) == [1000, 1800, 3200, 5600, 10_000, 18_000]
    assert cooldown.budget_grid(1000, 2) == []


def test_a_branch_end_is_what_a_run_of_its_length_reaches(tmp_path, monkeypatch, one_thread, sw_bpe):
    """The 40-step run's branch to step 12 equals a 12-step wsd run on the same data: same tokens, same valid loss
    per block; its curve marks the branch ends and its own end `decayed`; no evaluation is read inside the warm-up."""
    model = tiny_gpt2(len(sw_bpe))
    long, short = tmp_path / "long", tmp_path / "short"
    for root, steps in ((long, 40), (short, 12)):
        root.mkdir()
        monkeypatch.chdir(root)
        run_pretrain(pretrain_project(root, model, sw_bpe, **{**WSD, "steps": steps}))
    out, metrics, stats = pretrain_outputs(long)
    assert [(b["budget"], b["step"], b["fork_step"]) for b in stats["cooldown"]["branches"]] == [(3000, 12, 9)]
    assert stats["cooldown"]["branch_steps"] == 3 and stats["cooldown"]["decay_steps"] == 10
    ends = pq.read_table(out / "cooldown.parquet").to_pylist()
    assert [(e["step"], e["fork_step"]) for e in ends] == [(12, 9), (40, 30)]

    short_out, short_metrics, short_stats = pretrain_outputs(short)
    assert ends[0]["tokens_seen"] == short_stats["tokens_seen"]
    assert math.isclose(ends[0]["valid_loss"], short_stats["final_valid_loss"], abs_tol=1e-5)
    curve = pq.read_table(out / "valid_curve.parquet").to_pandas()
    short_curve = pq.read_table(short_out / "valid_curve.parquet").to_pandas()
    branch = curve[(curve.step == 12) & curve.decayed].sort_values("block")["loss_sum"].to_numpy()
    own_end = short_curve[(short_curve.step == 12) & short_curve.decayed].sort_values("block")["loss_sum"].to_numpy()
    assert len(branch) == len(own_end) > 0 and abs(branch - own_end).max() < 1e-4
    # decayed: the branch end and the run's own end; the stable run's step-12 evaluation is not one
    assert sorted(set(curve[curve.decayed].step)) == [12, 40]
    assert not curve[(curve.step == 12) & ~curve.decayed].empty
    # the learning rate: peak through the stable phase, decayed at the end (1 - sqrt(9/10) of the peak)
    lr = dict(zip(metrics.column("step").to_pylist(), metrics.column("learning_rate").to_pylist()))
    assert lr[8] == lr[28] == 0.01 and math.isclose(lr[40], 0.01 * (1 - math.sqrt(0.9)), rel_tol=1e-6)
    # log_tokens evaluations start after the warm-up's 4 x 256 positions: 3000 (step 12), not 1000 (step 4)
    evaluated = [r["step"] for r in metrics.to_pylist() if not math.isnan(r["valid_loss"])]
    assert evaluated == [0, 12, 40]


def test_killed_branches_are_redone_from_their_fork_or_from_the_start(tmp_path, monkeypatch, one_thread, sw_bpe):
    """A job that stopped after the stable run resumes it at its last checkpoint and trains only the branches whose
    end it had not written; without the fork checkpoint a branch starts from the initialisation: the same end."""
    monkeypatch.chdir(tmp_path)
    params = pretrain_project(tmp_path, tiny_gpt2(len(sw_bpe)), sw_bpe, keep_checkpoints=True, **WSD)
    run_pretrain(params)
    out, _, stats = pretrain_outputs(tmp_path)
    reference = stats["cooldown"]["branches"][0]
    checkpoints = tmp_path / "checkpoints/sw/pretrain/focus/standard/pseed1"
    end = checkpoints / cooldown.BRANCHES / "end-12.json"
    assert json.loads(end.read_text())["valid_loss"] == reference["valid_loss"]
    assert (checkpoints / cooldown.FORKS / "checkpoint-9").is_dir()

    for missing in (end, checkpoints / cooldown.FORKS):  # the branch's end, then its fork too
        shutil.rmtree(out)
        shutil.rmtree(missing) if missing.is_dir() else missing.unlink()
        end.unlink(missing_ok=True)
        run_pretrain(params)
        _, _, again = pretrain_outputs(tmp_path)
        assert again["resumed_from_step"] == 40  # the stable run had finished: nothing of it is trained again
        branch = again["cooldown"]["branches"][0]
        assert branch["tokens_seen"] == reference["tokens_seen"]
        assert math.isclose(branch["valid_loss"], reference["valid_loss"], abs_tol=1e-5)


def test_wsd_options_that_cannot_hold_a_branch_are_refused_before_any_job():
    with pytest.raises(VocabTransferError, match=r"pretrain.warmup_steps: 40 .* wsd"):
        validate_params(
            {**BASE, "pretrain": {"methods": ["focus"], "schedule": "wsd", "steps": 45, "warmup_steps": 40}}
        )
    with pytest.raises(VocabTransferError, match=r"pretrain.factorized"):
        validate_params({**BASE, "pretrain": {"methods": ["focus"], "schedule": "wsd", "factorized": True}})
    validate_params(
        {
            **BASE,
            "pretrain": {"methods": ["focus"], "schedule": "wsd", "factorized": True, "cooldown": {"per_decade": 0}},
        }
    )


def test_each_method_trains_at_the_rate_its_dev_split_picks(tmp_path, monkeypatch, one_thread, sw_bpe):
    """pretrain_tune trains pseed 1 at each rate for tune.steps and scores the dev lines (not the valid split):
    a far too small rate barely moves the dev loss, so the larger one is picked; the pretrain job then trains at
    it, and stats.json says so."""
    from vocabtransfer import io
    from vocabtransfer.app.runner import run_stage
    import pyarrow as pa
    import yaml

    from helpers import text_lines

    monkeypatch.chdir(tmp_path)
    params = pretrain_project(tmp_path, tiny_gpt2(len(sw_bpe)), sw_bpe)
    tune = {"learning_rates": [1e-6, 0.01], "steps": 12, "dev_lines": 40, "extend": 0}  # search: its own test
    params["pretrain"]["tune"] = tune
    with pytest.raises(VocabTransferError, match="corpus.dev_fraction"):
        validate_params(params)
    params = validate_params({**params, "corpus": {**params["corpus"], "dev_fraction": 0.05}})
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    io.write_parquet(pa.table({"text": text_lines("sw", 40, start=8000)}), tmp_path / "results/sw/corpus/dev.parquet")
    run_stage("pretrain_tune", params, {"lang": "sw", "method": "focus", "objective": "standard"}, threads=1)
    tuning = json.loads((tmp_path / "results/sw/pretrain_tune/focus/standard/tuning.json").read_text())
    small, large = tuning["results"]
    assert tuning["pick"] == 0.01 and large["dev_loss"] < small["dev_loss"] - 0.1
    assert abs(small["dev_loss"] - small["initial_dev_loss"]) < 0.01  # 1e-6 for 12 steps: nearly no change
    assert small["initial_dev_loss"] == large["initial_dev_loss"]  # the same dev blocks and masks
    assert large["tokens_seen"] > 0 and not (tmp_path / "checkpoints/sw/pretrain_tune/focus/standard").exists()
    run_pretrain(params)
    _, metrics, stats = pretrain_outputs(tmp_path)
    assert stats["learning_rate"] == 0.01 and stats["tuning"].endswith("tuning.json")
    # the valid split is not the dev split: the pretrain run's initial loss is scored on other lines
    assert stats["initial_valid_loss"] != small["initial_dev_loss"]


def test_the_pick_is_the_lowest_dev_loss_and_the_smaller_rate_on_a_tie():
    from vocabtransfer.train import tune_lr

    assert tune_lr.pick([1e-4, 3e-4, 1e-3], [5.0, 4.5, 4.7]) == 3e-4
    assert tune_lr.pick([1e-4, 3e-4], [4.5, 4.5]) == 1e-4
    assert tune_lr.pick([1e-4, 3e-3], [4.9, math.nan]) == 1e-4
    with pytest.raises(VocabTransferError, match="diverged"):
        tune_lr.pick([1e-3], [math.nan])


def test_a_pick_at_the_grids_edge_extends_the_grid_beyond_it_at_the_grids_ratio():
    """A dev loss smallest at 2e-5 (a parabola in log rate): the grid [1e-4, 3e-4, 1e-3] picks its smallest rate, so
    1e-4 / 3 and then 1e-4 / 9 are tried; the second puts the pick inside. With `extend` 1 the pick stays at the
    edge; a pick inside the grid adds nothing; the top edge extends upwards."""
    from vocabtransfer.train import tune_lr

    def score_at(best: float):
        return lambda k, rate: {"learning_rate": rate, "dev_loss": (math.log10(rate) - math.log10(best)) ** 2}

    results, extended = tune_lr.search([1e-4, 3e-4, 1e-3], 2, score_at(2e-5))
    assert extended == pytest.approx([1e-4 / 3.0, 1e-4 / 9.0])
    rates, losses = [r["learning_rate"] for r in results], [r["dev_loss"] for r in results]
    assert tune_lr.pick(rates, losses) == pytest.approx(1e-4 / 3.0) and tune_lr.beyond_edge(rates, losses) is None
    results, extended = tune_lr.search([1e-4, 3e-4, 1e-3], 1, score_at(1e-6))
    rates, losses = [r["learning_rate"] for r in results], [r["dev_loss"] for r in results]
    assert len(extended) == 1 and tune_lr.beyond_edge(rates, losses) == pytest.approx(1e-4 / 9.0)  # still the edge
    assert tune_lr.search([1e-4, 3e-4, 1e-3], 2, score_at(3e-4))[1] == []
    assert tune_lr.search([1e-4, 3e-4, 1e-3], 2, score_at(5e-3))[1] == pytest.approx([1e-3 * 10 / 3, 1e-3 * 100 / 9])
    # a diverged rate above the pick: the pick is not at the top edge
    assert tune_lr.beyond_edge([1e-4, 3e-4, 1e-3], [4.0, 3.0, math.nan]) is None
    assert tune_lr.search([1e-4], 2, score_at(1e-6))[1] == []  # one rate: no ratio to step by


def test_the_report_states_each_arms_rate_and_compute():
    """report.compute: the picked rate in bold among the rates tried, the steps of a run and of its branches, the
    tokens of a run and of its tuning runs; an untuned study says it trained at one rate."""
    from vocabtransfer.report import compute
    from vocabtransfer.report.read import Language

    run = {"learning_rate": 0.0003, "steps": 322, "tokens_seen": 1_300_000, "cooldown": {"branch_steps": 69}}
    tuning = {
        "pick": 0.0003,
        "rule": "the lowest dev loss",
        "steps": 30,
        "dev_blocks": 70,
        "results": [
            {"learning_rate": 0.0001, "dev_loss": 7.5, "tokens_seen": 120_000},
            {"learning_rate": 0.0003, "dev_loss": 7.1, "tokens_seen": 120_000},
        ],
    }
    lang = Language(lang="sw", runs={("fvt", "standard", 1): run, ("fvt", "standard", 2): run})
    lang.tuning[("fvt", "standard")] = tuning
    text = re.sub(r" *\| *", "|", "\n".join(compute.section(lang)))  # the table's cells without their padding
    assert "|fvt-standard|0.0003|0.0001: 7.500, **0.0003: 7.100**|2|322 + 69|" in text
    assert "|1.30M|240.0k|" in text
    assert "trained 30 optimiser steps at each rate" in text
    untuned = re.sub(
        r" *\| *", "|", "\n".join(compute.section(Language(lang="sw", runs={("fvt", "standard", 1): run})))
    )
    assert "not tuned per method" in untuned and "|not tuned|" in untuned


def test_a_language_can_run_fewer_passes_than_the_others():
    """pretrain.language_passes: de runs 1 pass where sw runs 2 (the second language cut first); a language the
    study does not run is refused before any job."""
    from vocabtransfer.train.pretrain import with_passes
    from vocabtransfer.plan.pretrain_params import PretrainParams

    opts = PretrainParams(passes=2, language_passes={"de": 1}, batch_size=32)
    assert with_passes(opts, 1000, "sw").steps == 63 and with_passes(opts, 1000, "de").steps == 32
    with pytest.raises(VocabTransferError, match=r"pretrain.language_passes: de not in languages \(sw\)"):
        validate_params({**BASE, "pretrain": {"methods": ["focus"], "language_passes": {"de": 1}}})


def test_the_studies_run_the_token_equivalent_design():
    """config/study.yaml and config/gemma.yaml validate with wsd, cool-down branches, mean pretrained beside random,
    three peak rates per arm picked on the dev split; Gemma's budgets (270 steps of 4 x 64) fork after its warm-up
    and end before its own decay, and it trains at least 51,200 positions' worth of target tokens."""
    from conftest import REPO

    from vocabtransfer.app.params import load_layered
    from vocabtransfer.train.pretrain import positions_per_step

    for overlay in ("study.yaml", "gemma.yaml"):
        params = load_layered([REPO / "params.yaml", REPO / "config" / overlay])
        pre = params["pretrain"]
        assert pre["schedule"] == "wsd" and pre["cooldown"]["per_decade"] >= 2, overlay
        assert {"random-standard", "mean-standard"} <= set(pre["pairs"]), overlay
        assert len(pre["tune"]["learning_rates"]) == 3 and params["corpus"]["dev_fraction"] > 0, overlay
    gemma = PretrainParams(**{k: v for k, v in pre.items() if k in ("steps", "batch_size", "seq_len", "warmup_steps")})
    options = CooldownOptions(**pre["cooldown"])
    plan = cooldown.plan(gemma.steps, positions_per_step(gemma, 1), gemma.warmup_steps, options)
    decay_start = gemma.steps - cooldown.decay_steps(gemma.steps, options.fraction)
    assert [b.end for b in plan] == [39, 86, 180] and all(gemma.warmup_steps <= b.fork for b in plan)
    assert all(b.end <= decay_start for b in plan) and gemma.steps * 196 > 51_200  # 196 of 256 positions are tokens
