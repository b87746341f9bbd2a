"""Stage `pretrain` on tiny random-weight models (BERT and GPT-2 configs) and real Swahili text.

Each test lays out a small project directory (results/sw/init/<method>/model and the
pre-tokenised splits) and runs the real stage in it, in-process or as a subprocess.
"""

from __future__ import annotations

import math
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from vocabtransfer import io
from vocabtransfer.data import token_ids
from vocabtransfer.train import pretrain
from vocabtransfer.train.checkpoints import complete_checkpoints
from vocabtransfer.train.pretrain_outputs import BLOCKS_SCHEMA, CURVE_SCHEMA, METRICS_SCHEMA, unigram_block_sums
from vocabtransfer.app.params import validate_params
from vocabtransfer.errors import VocabTransferError

from conftest import REPO
from helpers import (
    bpe_tokenizer,
    killed,
    launch,
    pretrain_outputs,
    pretrain_project,
    run_pretrain,
    tiny_bert,
    tiny_gpt2,
    wordpiece_tokenizer,
    write_ids,
)


@pytest.fixture(scope="module")
def sw_wp():
    return wordpiece_tokenizer("sw", vocab_size=250)


@pytest.fixture(scope="module")
def sw_bpe():
    return bpe_tokenizer("sw", vocab_size=280)


@pytest.mark.parametrize("kind", ["masked", "causal"])
@pytest.mark.parametrize("objective", ["standard", "selfish"])
def test_tiny_models_learn_under_both_objectives(tmp_path, monkeypatch, one_thread, sw_wp, sw_bpe, kind, objective):
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer

    monkeypatch.chdir(tmp_path)
    tok = sw_wp if kind == "masked" else sw_bpe
    model = tiny_bert(len(tok)) if kind == "masked" else tiny_gpt2(len(tok))
    params = pretrain_project(tmp_path, model, tok)
    run_pretrain(params, objective=objective)
    out, metrics, stats = pretrain_outputs(tmp_path, objective=objective)
    assert metrics.schema == METRICS_SCHEMA
    rows = metrics.to_pylist()
    assert rows[0]["step"] == 0 and rows[0]["tokens_seen"] == 0 and math.isnan(rows[0]["train_loss"])
    valid = [(r["step"], r["valid_loss"]) for r in rows if not math.isnan(r["valid_loss"])]
    assert [s for s, _ in valid] == [0, 8, 16, 24]
    assert valid[-1][1] < valid[0][1] - 0.1, valid  # random weights: ~ln V at the start
    assert stats["kind"] == kind and stats["objective"] == objective and stats["steps"] == 24
    assert stats["initial_valid_loss"] == valid[0][1] and stats["final_valid_loss"] == valid[-1][1]
    assert stats["resumed_from_step"] is None and stats["tokens_seen"] == rows[-1]["tokens_seen"] > 0
    trained = [r for r in rows if not math.isnan(r["train_loss"])]
    assert [r["step"] for r in trained] == [4, 8, 12, 16, 20, 24]
    assert all(r["tokens_per_second"] > 0 for r in trained)
    tokens = [r["tokens_seen"] for r in rows]
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)
    # the saved model loads with transformers alone and has the final valid loss
    auto = AutoModelForMaskedLM if kind == "masked" else AutoModelForCausalLM
    loaded = auto.from_pretrained(str(out / "model"))
    assert len(AutoTokenizer.from_pretrained(str(out / "model"))) == len(tok)
    assert not torch.equal(loaded.get_input_embeddings().weight, model.get_input_embeddings().weight)
    assert not (tmp_path / "checkpoints").joinpath("sw/pretrain/focus", objective, "pseed1").exists()  # not kept
    # the final valid loss per evaluation block: its totals give the final valid loss
    blocks = pq.read_table(out / "valid_blocks.parquet")
    assert blocks.schema == BLOCKS_SCHEMA and len(blocks) == stats["valid_blocks"]
    total = sum(blocks.column("loss_sum").to_pylist()) / sum(blocks.column("n_tokens").to_pylist())
    assert total == pytest.approx(valid[-1][1], rel=1e-5)
    assert sum(blocks.column("n_tokens").to_pylist()) == stats["valid_tokens"]
    # the learning curve's clusters: every evaluation's block sums give that evaluation's valid loss
    curve = pq.read_table(out / "valid_curve.parquet")
    assert curve.schema == CURVE_SCHEMA
    n = sum(blocks.column("n_tokens").to_pylist())
    by_step = curve.to_pandas().groupby("step")
    assert sorted(by_step.groups) == [s for s, _ in valid]
    for step, loss in valid:
        group = by_step.get_group(step)
        assert list(group["block"]) == list(range(stats["valid_blocks"]))
        assert group["loss_sum"].sum() / n == pytest.approx(loss, rel=1e-9)
        assert set(group["tokens_seen"]) == {next(r["tokens_seen"] for r in rows if r["step"] == step)}
    np.testing.assert_allclose(
        by_step.get_group(24)["loss_sum"].to_numpy(), blocks.column("loss_sum").to_numpy(), rtol=1e-6
    )
    # the floors on the same tokens: no model (unigram of the train split) and the uniform guess, ln V
    assert stats["uniform_valid_loss"] == pytest.approx(math.log(len(tok)))
    assert 0 < stats["unigram_valid_loss"] < stats["uniform_valid_loss"]
    assert sum(blocks.column("unigram_sum").to_pylist()) / n == pytest.approx(stats["unigram_valid_loss"])


def test_unigram_floor_by_hand():
    """Two blocks of a causal batch, ids 0..3 counted 5, 0, 3, 2 times in training: the add-one unigram's nats
    on each block's predicted tokens (the first position is never predicted; -100 is padding)."""
    batch = {"labels": torch.tensor([[1, 0, 0, 2], [3, 2, -100, -100]])}
    p = {i: (c + 1) / (10 + 4) for i, c in enumerate([5, 0, 3, 2])}
    sums = unigram_block_sums([batch], "causal", [5, 0, 3, 2])
    assert sums == pytest.approx([-2 * math.log(p[0]) - math.log(p[2]), -math.log(p[2])])
    masked = unigram_block_sums([batch], "masked", [5, 0, 3, 2])
    assert masked[1] == pytest.approx(-math.log(p[3]) - math.log(p[2]))


def test_passes_set_the_steps(tmp_path, monkeypatch, one_thread, sw_wp):
    """`pretrain.passes: 1` trains ceil(train blocks / batch) steps: one pass over the training blocks."""
    monkeypatch.chdir(tmp_path)
    run_pretrain(pretrain_project(tmp_path, tiny_bert(len(sw_wp)), sw_wp, passes=1, batch_size=16, eval_every=100))
    _, metrics, stats = pretrain_outputs(tmp_path)
    assert (
        stats["steps"] == math.ceil(stats["train_blocks"] / 16)
        and metrics.column("step").to_pylist()[-1] == stats["steps"]
    )
    assert 1 <= stats["passes"] < 1 + 16 / stats["train_blocks"]


def test_pretraining_seeds_change_the_data_order_not_the_evaluation(tmp_path, monkeypatch, one_thread, sw_wp):
    """Pretraining seed 2 starts from the same init (a tiny BERT saved as pseed1 of a method here) and is
    scored on the same valid blocks and masks, but sees the training blocks in another order: the
    valid loss at step 0 is equal, the trained models differ; seed value = seed + 1000 (k - 1)."""
    monkeypatch.chdir(tmp_path)
    params = pretrain_project(
        tmp_path, tiny_bert(len(sw_wp)), sw_wp, method="mean", steps=8, eval_every=8, save_every=8, seeds=2
    )
    params["init"]["methods"] = ["mean"]  # no random rows: every pretraining seed starts from pseed1's init
    run_pretrain(params, method="mean", pseed=1)
    run_pretrain(params, method="mean", pseed=2)
    (_, a, sa), (_, b, sb) = pretrain_outputs(tmp_path, "mean", pseed=1), pretrain_outputs(tmp_path, "mean", pseed=2)
    assert (sa["pseed"], sa["seed"], sb["pseed"], sb["seed"]) == (1, 42, 2, 1042)
    assert a.column("valid_loss")[0] == b.column("valid_loss")[0]
    assert a.column("valid_loss")[-1] != b.column("valid_loss")[-1]
    with pytest.raises(VocabTransferError, match="pseed3: not a job"):
        run_pretrain(params, method="mean", pseed=3)


def test_selfish_and_standard_differ(tmp_path, monkeypatch, one_thread, sw_wp):
    """Same data and seed: the objective changes the trajectory, the valid loss is measured the same way.

    A random tiny BERT's logits at a position span less than 1 (0.64 on average), so with the
    default margin 2.0 few or no negatives are dropped in 8 steps and both objectives could end
    equal (seen once, with one of the tokenizers the fixture learns); a margin of 0.05 drops most."""
    monkeypatch.chdir(tmp_path)
    params = pretrain_project(
        tmp_path, tiny_bert(len(sw_wp)), sw_wp, steps=8, eval_every=8, save_every=8, selfish={"margin": 0.05}
    )
    run_pretrain(params, objective="standard")
    run_pretrain(params, objective="selfish")
    a, b = pretrain_outputs(tmp_path, objective="standard")[1], pretrain_outputs(tmp_path, objective="selfish")[1]
    assert a.column("valid_loss")[0] == b.column("valid_loss")[0]  # same init, same masks
    assert a.column("valid_loss")[-1] != b.column("valid_loss")[-1]


@pytest.mark.slow  # a pretraining subprocess killed and resumed
def test_kill_and_resume_equals_uninterrupted_run(tmp_path, monkeypatch, one_thread, sw_wp):
    """`accelerate launch` (one CPU process) of the stage, killed with SIGKILL after its first checkpoint,
    then started again: same metrics rows and the same final valid loss as an uninterrupted run."""
    monkeypatch.chdir(tmp_path)
    params = pretrain_project(
        tmp_path, tiny_bert(len(sw_wp)), sw_wp, steps=40, eval_every=8, save_every=8, keep_checkpoints=True
    )
    run_pretrain(params)  # uninterrupted, in-process
    _, reference, ref_stats = pretrain_outputs(tmp_path)
    shutil.rmtree(tmp_path / "results/sw/pretrain")
    shutil.rmtree(tmp_path / "checkpoints")

    killed(launch(tmp_path, 1, objective="standard", kill_after=8))
    ckpt = tmp_path / "checkpoints/sw/pretrain/focus/standard/pseed1"
    assert not (tmp_path / "results/sw/pretrain/focus/standard/pseed1").exists()
    killed_at = max(s for s, _ in complete_checkpoints(ckpt))
    assert killed_at == 8

    proc = launch(tmp_path, 1, objective="standard")
    log, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, log
    _, resumed, stats = pretrain_outputs(tmp_path)
    assert stats["resumed_from_step"] is not None and stats["resumed_from_step"] >= killed_at
    assert abs(stats["final_valid_loss"] - ref_stats["final_valid_loss"]) < 1e-4
    for column in ("step", "tokens_seen", "train_loss", "valid_loss", "learning_rate"):
        np.testing.assert_allclose(
            resumed.column(column).to_numpy(), reference.column(column).to_numpy(), rtol=0, atol=1e-4, err_msg=column
        )


def test_checkpoint_of_other_params_is_refused(tmp_path, monkeypatch, one_thread, sw_wp):
    monkeypatch.chdir(tmp_path)
    params = pretrain_project(tmp_path, tiny_bert(len(sw_wp)), sw_wp, steps=8, save_every=4, keep_checkpoints=True)
    run_pretrain(params)
    changed = validate_params({**params, "pretrain": {**params["pretrain"], "learning_rate": 0.02, "seq_len": 16}})
    with pytest.raises(VocabTransferError, match=r"other params \(pretrain.learning_rate, pretrain.seq_len\)") as err:
        run_pretrain(changed)
    assert "\n" not in str(err.value)
    # keep_checkpoints does not change the trajectory: changing it resumes
    run_pretrain(validate_params({**params, "pretrain": {**params["pretrain"], "keep_checkpoints": False}}))
    assert pretrain_outputs(tmp_path)[2]["resumed_from_step"] == 8


def test_nan_loss_stops_naming_the_step_and_keeps_the_checkpoint(tmp_path, monkeypatch, one_thread, sw_wp):
    monkeypatch.chdir(tmp_path)
    params = pretrain_project(tmp_path, tiny_bert(len(sw_wp)), sw_wp, steps=12, save_every=4, log_every=2)
    from vocabtransfer.model import heads

    calls = []
    real = heads.head_loss

    def poisoned(*args, **kwargs):  # the training losses (with gradients), not the valid losses
        calls.extend([1] if torch.is_grad_enabled() else [])
        loss = real(*args, **kwargs)
        return loss * float("nan") if len(calls) >= 6 else loss

    monkeypatch.setattr(heads, "head_loss", poisoned)
    with pytest.raises(VocabTransferError, match=r"^step 6: the standard training loss is nan; .*checkpoint-4"):
        run_pretrain(params)
    assert not (tmp_path / "results/sw/pretrain/focus/standard/pseed1").exists()
    assert [s for s, _ in complete_checkpoints(tmp_path / "checkpoints/sw/pretrain/focus/standard/pseed1")] == [4]


@pytest.mark.parametrize("torn", ["optimizer.pt", "model.safetensors", "trainer_state.json"])
def test_a_checkpoint_torn_from_outside_is_one_error_and_deleting_it_starts_over(
    tmp_path, monkeypatch, one_thread, sw_wp, torn
):
    """A complete checkpoint whose file was cut short by something else (a copy, a full disk) is refused before the
    Trainer loads it, naming the file and the folder to delete; once it is deleted the same command trains from the
    checkpoint before it (here none: from the start) to the end."""
    from vocabtransfer.model import heads

    monkeypatch.chdir(tmp_path)
    params = pretrain_project(tmp_path, tiny_bert(len(sw_wp)), sw_wp, steps=8, save_every=4, log_every=2)
    real, calls = heads.head_loss, []

    def poisoned(*args, **kwargs):  # a run stopped after checkpoint-4 (as in the NaN test), its checkpoint kept
        calls.extend([1] if torch.is_grad_enabled() else [])
        loss = real(*args, **kwargs)
        return loss * float("nan") if len(calls) >= 6 else loss

    monkeypatch.setattr(heads, "head_loss", poisoned)
    with pytest.raises(VocabTransferError, match="training loss is nan"):
        run_pretrain(params)
    monkeypatch.setattr(heads, "head_loss", real)
    checkpoint = tmp_path / "checkpoints/sw/pretrain/focus/standard/pseed1/checkpoint-4"
    path = checkpoint / torn
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(
        VocabTransferError,
        match=rf"checkpoint-4/{torn.replace('.', '[.]')}: torn checkpoint file "
        r".*; delete .*checkpoint-4 and run the same command",
    ):
        run_pretrain(params)
    assert not (tmp_path / "results/sw/pretrain/focus/standard/pseed1").exists()
    shutil.rmtree(checkpoint)  # as the message says
    run_pretrain(params)
    _, metrics, stats = pretrain_outputs(tmp_path)
    assert stats["resumed_from_step"] in (None, 0) and metrics.column("step").to_pylist()[-1] == 8


def test_factorized_training_saves_full_embeddings_in_the_primitives_span(tmp_path, monkeypatch, one_thread, sw_wp):
    from transformers import AutoModelForMaskedLM

    monkeypatch.chdir(tmp_path)
    g = torch.Generator().manual_seed(0)
    coords, prims = torch.rand(len(sw_wp), 4, generator=g), torch.randn(4, 32, generator=g)
    model = tiny_bert(len(sw_wp))
    with torch.no_grad():
        model.get_input_embeddings().weight.copy_(coords @ prims)
    params = pretrain_project(
        tmp_path, model, sw_wp, method="focus+svd", steps=8, factorized=True, train_primitives=False
    )
    init = tmp_path / "results/sw/init/focus+svd/pseed1"
    io.save_tensors({"coordinates": coords}, init / "coordinates.safetensors")
    io.save_tensors({"primitives": prims}, init / "primitives.safetensors")
    run_pretrain(params, method="focus+svd")
    out, metrics, stats = pretrain_outputs(tmp_path, method="focus+svd")
    assert stats["factorized"] is True
    loaded = AutoModelForMaskedLM.from_pretrained(str(out / "model"))
    E = loaded.get_input_embeddings().weight.detach()
    assert loaded.get_output_embeddings().weight.data_ptr() == E.data_ptr()  # still tied
    assert not torch.allclose(E, coords @ prims, atol=1e-4)  # trained
    trained_coords = E @ torch.linalg.pinv(prims)
    torch.testing.assert_close(trained_coords @ prims, E, atol=1e-4, rtol=0)  # frozen primitives: E = C' @ P


def test_bad_inputs(tmp_path, monkeypatch, one_thread, sw_wp):
    monkeypatch.chdir(tmp_path)
    params = pretrain_project(tmp_path, tiny_bert(len(sw_wp)), sw_wp, steps=4)
    write_ids(sw_wp, ["habari"], tmp_path / "results/sw/pretokenized/valid")
    token_ids.write_lines(tmp_path / "results/sw/pretokenized/train", sw_wp, [[5, len(sw_wp) + 3]])
    with pytest.raises(VocabTransferError, match=rf"train/ids.npy: token id {len(sw_wp) + 3} is outside"):
        run_pretrain(params)
    assert not (tmp_path / "results/sw/pretrain").exists()
    with pytest.raises(VocabTransferError, match=r"pretrain.methods: wechsel not in init.methods"):
        validate_params({**params, "pretrain": {**params["pretrain"], "methods": ["focus", "wechsel"]}})
    with pytest.raises(VocabTransferError, match=r"pretrain.objectives: 'bold' is not allowed"):
        validate_params({**params, "pretrain": {**params["pretrain"], "objectives": ["bold"]}})
    with pytest.raises(VocabTransferError, match=r"pretrain.selfish.margin"):
        validate_params({**params, "pretrain": {**params["pretrain"], "selfish": {"margin": 0}}})
    with pytest.raises(VocabTransferError, match=r"pretrain.seeds: 0 is less than the minimum of 1"):
        validate_params({**params, "pretrain": {**params["pretrain"], "seeds": 0}})


def test_pretrain_runs_and_init_seeds():
    """Every method × objective × pretraining seed is a run; a method with random rows has one init per
    pretraining seed, a deterministic one (mean) one init that all its runs share."""
    from vocabtransfer.plan import availability
    from vocabtransfer.pipeline import names

    from vocabtransfer.plan.params_root import Params

    params = Params(
        {
            "seed": 7,
            "init": {"methods": ["focus", "mean", "fvt"]},
            "pretrain": {"methods": ["focus", "mean"], "objectives": ["standard", "selfish"], "seeds": 2},
        }
    )
    assert availability.pretrain_pairs(params) == [
        ("focus", "standard"),
        ("focus", "selfish"),
        ("mean", "standard"),
        ("mean", "selfish"),
    ]
    runs = availability.pretrain_runs(params)
    assert len(runs) == 8 and runs[1] == ("focus", "standard", 2)
    assert availability.init_runs(params) == [("focus", 1), ("focus", 2), ("mean", 1), ("fvt", 1)]
    assert (availability.init_pseed("focus+svd", 2), availability.init_pseed("mean+svd", 2)) == (2, 1)
    assert (names.seed_value(params, 1), names.seed_value(params, 3)) == (7, 2007)
    assert names.parse_model_name("focus+svd-selfish-pseed2") == names.Model("focus+svd", "selfish", 2)
    assert names.parse_model_name("focus+svd-selfish-pseed2").group == "focus+svd-selfish"
    with pytest.raises(VocabTransferError, match="expected `source`"):
        names.parse_model_name("focus-selfish")


def test_paper_config_is_valid_and_dry_runs_offline(tmp_path):
    """config/paper.yaml merged into params.yaml (as the workflow merges a --configfile) passes the schema, and
    the planner `snakemake -n --configfile config/paper.yaml` runs plans every pretrain job (the dry run itself, as
    docs/cluster.md shows it, is tests/project/test_docs.py's)."""
    from vocabtransfer.pipeline.config import merge_overlay, read_yaml

    params = merge_overlay(read_yaml(REPO / "params.yaml"), read_yaml(REPO / "config/paper.yaml"))
    checked = validate_params(params, "config/paper.yaml")
    # the overlay's hub corpus replaces params.yaml's local file for sw as a whole
    source = checked["corpus"]["sources"]["sw"]
    assert "path" not in source and source["dataset"]["path"] == "uonlp/CulturaX" and source["dataset"]["name"] == "sw"
    assert checked["source_model"] == "xlm-roberta-base" and checked["pretrain"]["learning_rate"] == 5e-5
    assert checked["pretrain"]["batch_size"] * checked["pretrain"]["gradient_accumulation_steps"] == 128
    from vocabtransfer.app import plan  # the planner `snakemake -n` runs (docs/cluster.md's dry run: test_docs.py)

    assert plan.job_counts(checked)["pretrain"] == len(checked["pretrain"]["methods"]) * 2


def test_log_token_budgets_are_two_a_decade_below_the_runs_tokens():
    assert pretrain.log_token_budgets(6144) == [1000, 3000]
    assert pretrain.log_token_budgets(600_000) == [1000, 3000, 10_000, 30_000, 100_000, 300_000]
    assert pretrain.log_token_budgets(1000) == [] and pretrain.log_token_budgets(1001) == [1000]


def test_evaluations_at_log_spaced_token_budgets(tmp_path, monkeypatch, one_thread, sw_bpe):
    """`eval_schedule: log_tokens`: the valid loss at step 0, at the first step whose tokens seen reach 1000 and
    3000 (8 blocks of 32 ids a step: steps 4 and 12), and at the end (24), whatever eval_every says."""
    monkeypatch.chdir(tmp_path)
    params = pretrain_project(tmp_path, tiny_gpt2(len(sw_bpe)), sw_bpe, eval_schedule="log_tokens", eval_every=5)
    run_pretrain(params)
    _, metrics, _ = pretrain_outputs(tmp_path)
    valid = [(r["step"], r["tokens_seen"]) for r in metrics.to_pylist() if not math.isnan(r["valid_loss"])]
    # at most 8 x 32 = 256 tokens a step (a short last block has fewer): steps 3 and 11 had not reached 1000 and 3000
    assert [s for s, _ in valid] == [0, 4, 12, 24], valid
    assert valid[1][1] >= 1000 and valid[2][1] >= 3000 and 3 * 256 < 1000 and 11 * 256 < 3000


def test_a_resumed_run_keeps_the_budgets_it_has_not_reached(one_thread):
    """The callback drops the budgets the checkpoint's tokens already passed, and evaluates once per budget
    reached (two budgets passed in one step: one evaluation)."""
    from types import SimpleNamespace

    from vocabtransfer.train.objective_trainer import MetricsCallback

    seen = []
    callback = MetricsCallback(lambda m: seen.append(1) or 1.0, 50, {}, 0, set(), budgets=[1000, 3000, 10_000])
    state = SimpleNamespace(global_step=7, num_input_tokens_seen=1500, max_steps=40, is_world_process_zero=False)
    callback.on_train_begin(None, state, None)
    assert callback.budgets == [3000, 10_000]
    steps = [(8, 2000), (9, 10_500), (10, 11_000), (40, 20_000)]
    due = []
    for step, tokens in steps:
        state.global_step, state.num_input_tokens_seen = step, tokens
        due.append(callback._due(state))
    assert due == [False, True, False, True] and callback.budgets == []


def test_bits_per_byte_at_every_evaluation(tmp_path, monkeypatch, one_thread, sw_wp, sw_bpe):
    """A causal model's metrics carry bits per byte of the first eval_lines valid lines at every evaluation; the
    last equals `line_bits.score_lines` on the saved model (each line alone, windows of seq_len); a masked LM's
    are NaN (no probability of the text); `bits_per_byte: false` leaves them NaN."""
    from transformers import AutoModelForCausalLM

    from vocabtransfer.model import line_bits

    for kind, tok in (("causal", sw_bpe), ("masked", sw_wp)):
        root = tmp_path / kind
        root.mkdir()
        monkeypatch.chdir(root)
        model = tiny_gpt2(len(tok)) if kind == "causal" else tiny_bert(len(tok))
        run_pretrain(pretrain_project(root, model, tok, eval_lines=30))
        out, metrics, _ = pretrain_outputs(root)
        rows = [r for r in metrics.to_pylist() if not math.isnan(r["valid_loss"])]
        bits = [r["valid_bits_per_byte"] for r in rows]
        if kind == "masked":
            assert all(math.isnan(b) for b in bits)
            continue
        assert len(bits) == 4 and all(0 < b < 20 for b in bits) and bits[-1] < bits[0] - 0.1, bits
        lines = line_bits.valid_lines(root / "results/sw/corpus/valid.parquet", 30)
        final = line_bits.score_lines(
            AutoModelForCausalLM.from_pretrained(str(out / "model")), tok, lines, seq_len=32, batch_size=16
        ).bits_per_byte
        assert bits[-1] == pytest.approx(final, rel=1e-5)
    root = tmp_path / "off"
    root.mkdir()
    monkeypatch.chdir(root)
    run_pretrain(pretrain_project(root, tiny_gpt2(len(sw_bpe)), sw_bpe, bits_per_byte=False))
    assert all(math.isnan(b) for b in pretrain_outputs(root)[1].column("valid_bits_per_byte").to_pylist())
