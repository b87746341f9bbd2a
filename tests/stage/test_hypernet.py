"""Init method `hypernet` and stage `hypernet` (model/hypernet.py, init/methods/hypernet.py, train/hypernet.py) on a
tiny random BERT with MiniLM's real tokenizer as the source and real Swahili text: the untrained network is FVT
row for row, training lowers the frozen model's loss under sampled tokenizers, a killed training resumes to the
same weights, and a bad option is one clear error."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import MINILM, save_dir, text_lines, tiny_bert, wordpiece_tokenizer

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.init.methods.fvt import fvt
from vocabtransfer.init.methods.hypernet import hypernet
from vocabtransfer.plan.method_options import HypernetOptions
from vocabtransfer.init.methods.registry import TransferProblem
from vocabtransfer.model import hypernet as network
from vocabtransfer.model.hub import load_tokenizer, resolve_model_path

SMALL = dict(
    steps=60,
    batch_size=32,
    seq_len=64,
    learning_rate=1e-2,
    warmup_steps=3,
    vocab_min=300,
    vocab_max=300,
    tokenizer_lines=300,
    steps_per_tokenizer=20,
    save_every=100,
    precision="fp32",
)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A tiny random BERT over MiniLM's 30,522-token vocabulary, saved with that tokenizer."""
    tokenizer = load_tokenizer(resolve_model_path(MINILM))
    return save_dir(tiny_bert(len(tokenizer)), tokenizer, tmp_path_factory.mktemp("hypernet") / "source")


def _problem(source_dir, target) -> TransferProblem:
    from vocabtransfer.model.modeling import load_source_model

    model, _ = load_source_model(source_dir)
    tokenizer = load_tokenizer(source_dir)
    vocab = tokenizer.get_vocab()
    pairs = sorted((i, vocab[t]) for t, i in target.get_vocab().items() if t in vocab)
    return TransferProblem(
        source_embeddings=model.get_input_embeddings().weight.detach().clone(),
        source_tokenizer=tokenizer,
        target_tokenizer=target,
        overlap_target_ids=np.asarray([a for a, _ in pairs], dtype=np.int64),
        overlap_source_ids=np.asarray([b for _, b in pairs], dtype=np.int64),
        seed=5,
    )


def test_the_untrained_network_is_drawn_from_the_seed_alone():
    """Loading the source leaves torch's global generator in a state that differs from process to process; the
    stage's network is drawn from its seed alone, so two runs train the same network (docs/reproducibility.md)."""
    from vocabtransfer.train import hypernet as stage

    config = network.HyperNetConfig(dim=16, width=16, layers=1, heads=2, max_pieces=4)
    torch.manual_seed(1)
    first = stage.new_network(config, seed=7).state_dict()
    torch.rand(13)  # another global state, as another process's loading leaves it
    second = stage.new_network(config, seed=7).state_dict()
    other = stage.new_network(config, seed=8).state_dict()
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert not torch.equal(first["project.weight"], other["project.weight"])
    torch.manual_seed(3)
    expected = torch.rand(1)
    torch.manual_seed(3)
    stage.new_network(config, seed=7)
    assert torch.equal(torch.rand(1), expected)  # the global generator is left as it was


def test_the_untrained_network_is_fvt_row_for_row_and_a_trained_one_moves_only_its_tokens(source, tmp_path):
    target = wordpiece_tokenizer("sw", 300)
    problem = _problem(source, target)
    config = network.HyperNetConfig(dim=32, width=32, layers=2, heads=4, max_pieces=8)
    torch.manual_seed(0)
    network.HyperNet(config).save(tmp_path / "untrained")
    problem.resources = {"hypernet": tmp_path / "untrained"}
    expected = fvt(problem).embeddings
    result = hypernet(problem, HypernetOptions(batch_rows=50))  # several batches
    assert torch.equal(result.embeddings, expected)
    assert result.stats["hypernet_rows"] > 250 and result.stats["method"] == "hypernet"

    moved = network.HyperNet(config)
    torch.nn.init.normal_(moved.head.weight, std=0.1)
    moved.save(tmp_path / "moved")
    problem.resources = {"hypernet": tmp_path / "moved"}
    rows = hypernet(problem, HypernetOptions()).embeddings
    changed = (rows != expected).any(1)
    specials = sorted(set(target.all_special_ids))
    assert not changed[specials].any() and int(changed.sum()) == result.stats["hypernet_rows"]


def test_training_beats_fvt_under_a_tokenizer_it_never_saw(source, tmp_path, monkeypatch):
    """60 steps under 3 sampled tokenizers; then, under a 4th the training never drew, the frozen model's masked-LM
    loss on 6 batches is lower with the trained network's rows than with FVT's (the untrained network), batch by
    batch: on this random model about 0.1 nats (measured 0.088-0.116), a context-free gain, since the model's
    hidden states carry nothing."""
    from vocabtransfer.train import hypernet as stage

    monkeypatch.chdir(tmp_path)
    options = HypernetOptions(**SMALL)
    setup = stage.Setup(source, text_lines("sw", 1500), options, seed=3)
    torch.manual_seed(3)
    net = network.HyperNet(stage.config_for(setup, options))
    curve, _, _ = stage.fit(setup, net, options, tmp_path / "checkpoints", seed=3)
    assert [row["step"] for row in curve] == list(range(1, 61)) and {row["vocab"] for row in curve} == {300}
    assert np.isclose(np.mean([r["lm_loss"] for r in curve[:10]]), np.log(300), atol=0.3)  # FVT: near uniform
    fvt_net = network.HyperNet(stage.config_for(setup, options))
    unseen = range(10_000, 10_006)  # tokenizer 500
    with torch.no_grad():
        gains = [setup.loss(net, s)[1]["lm_loss"] - setup.loss(fvt_net, s)[1]["lm_loss"] for s in unseen]
    assert max(gains) < -0.03 and np.mean(gains) < -0.05, gains
    # a tokenizer is a function of the seed and its index: the same again in another process's setup
    again = stage.Setup(source, text_lines("sw", 1500), options, seed=3).episode(500).tokenizer.get_vocab()
    assert setup.episode(500).tokenizer.get_vocab() == again


def test_a_killed_training_resumes_to_the_same_weights(source, tmp_path, monkeypatch):
    from vocabtransfer.train import hypernet as stage

    monkeypatch.chdir(tmp_path)
    options = HypernetOptions(
        **{**SMALL, "steps": 9, "save_every": 3, "batch_size": 8, "seq_len": 32, "steps_per_tokenizer": 4}
    )
    lines = text_lines("sw", 600)

    def trained(directory, kill_at=None):
        setup = stage.Setup(source, lines, options, seed=3)
        if kill_at is not None:
            loss = setup.loss

            def killed(net, step):
                if step == kill_at:
                    raise KeyboardInterrupt("killed")
                return loss(net, step)

            setup.loss = killed
        torch.manual_seed(3)
        net = network.HyperNet(stage.config_for(setup, options))
        curve, _, _ = stage.fit(setup, net, options, directory, seed=3)
        return net, curve

    whole, whole_curve = trained(tmp_path / "whole")
    with pytest.raises(KeyboardInterrupt):
        trained(tmp_path / "killed", kill_at=7)  # after the checkpoint of step 6
    resumed, resumed_curve = trained(tmp_path / "killed")
    for (name, a), (_, b) in zip(whole.state_dict().items(), resumed.state_dict().items()):
        assert torch.equal(a, b), name
    assert resumed_curve == whole_curve


def test_a_bad_option_is_one_clear_error():
    from vocabtransfer.app.params import validate_params
    from vocabtransfer.pipeline.config import merge_overlay, read_yaml
    from conftest import REPO

    overlay = {
        "init": {"methods": ["random", "focus", "fvt", "hypernet"], "hypernet": {"vocab_min": 9000, "vocab_max": 3000}}
    }
    with pytest.raises(VocabTransferError) as error:
        validate_params(merge_overlay(read_yaml(REPO / "params.yaml"), overlay))
    assert str(error.value) == (
        "params.yaml: init.hypernet.vocab_min (9000) is above init.hypernet.vocab_max (3000); "
        "make vocab_min ≤ vocab_max"
    )
    with pytest.raises(VocabTransferError, match="width 30 is not a multiple of heads 4"):
        network.HyperNetConfig(dim=32, width=30, layers=1, heads=4, max_pieces=4)


def test_a_tied_causal_source_trains_through_its_causal_loss_and_an_untied_one_is_refused(tmp_path, monkeypatch):
    """A tied tiny Llama over an English byte-level BPE of 2,000 pieces (Gemma 3's case: a tied decoder): the sampled
    tokenizers are byte-level BPE like the source's, the loss is the causal one (step 0: FVT's rows, about the
    uniform guess on a random model), and 30 steps lower it under a tokenizer the training never drew. The same
    model untied is one clear error."""
    from helpers import bpe_tokenizer, tiny_llama

    from vocabtransfer.train import hypernet as stage

    monkeypatch.chdir(tmp_path)
    tokenizer = bpe_tokenizer("en", 2000, n_lines=2000)
    tied = save_dir(tiny_llama(len(tokenizer), tie=True), tokenizer, tmp_path / "tied")
    options = HypernetOptions(**{**SMALL, "steps": 30, "batch_size": 16, "steps_per_tokenizer": 10})
    setup = stage.Setup(tied, text_lines("sw", 1500), options, seed=3)
    assert setup.kind == "causal" and "Ġ" in "".join(setup.episode(0).tokenizer.get_vocab())  # byte-level pieces
    torch.manual_seed(3)
    net = network.HyperNet(stage.config_for(setup, options))
    curve, _, _ = stage.fit(setup, net, options, tmp_path / "checkpoints", seed=3)
    assert np.isclose(np.mean([r["lm_loss"] for r in curve[:5]]), np.log(300), atol=0.3)
    fvt_net = network.HyperNet(stage.config_for(setup, options))
    with torch.no_grad():
        gains = [setup.loss(net, s)[1]["lm_loss"] - setup.loss(fvt_net, s)[1]["lm_loss"] for s in range(5_000, 5_004)]
    assert max(gains) < -0.2, gains  # measured -0.60 to -0.63
    untied = save_dir(tiny_llama(len(tokenizer)), tokenizer, tmp_path / "untied")
    with pytest.raises(VocabTransferError, match="untied output embeddings; init method hypernet"):
        stage.Setup(untied, text_lines("sw", 100), options, seed=3)


def _stage_ctx(root, source_dir, train, network_dir=None, pseed=1):
    """The hypernet stage's context for network seed `pseed`: a 2-step training (or, with `network_dir`, the copy of
    a trained network), written to root/hypernet/pseed<k> as a study's results/source/hypernet/pseed<k>."""
    from helpers import init_params, make_ctx, over_defaults

    small = {**SMALL, "steps": 2, "batch_size": 4, "seq_len": 32, "steps_per_tokenizer": 2}
    params = init_params({"methods": ["hypernet"], "hypernet": {**small, "network": network_dir}}, seed=3)
    return make_ctx(
        "vocabtransfer.train.hypernet:run",
        {"pseed": str(pseed)},
        {"source": source_dir, "train_sw": train},
        {"hypernet": root / "hypernet" / f"pseed{pseed}"},
        {**params, "pretrain": over_defaults("pretrain", {}), "source_model": "package:tiny-bert", "languages": ["sw"]},
    )


def test_a_network_trained_by_another_study_is_checked_and_applied_as_its_own(source, tmp_path, monkeypatch):
    """`init.hypernet.network`: a second study copies the first's network of each seed (weights byte for byte, the
    folder it came from recorded) instead of training; network seed 2 is another network, drawn from pretraining
    seed 2's seed; a network trained on another source model is refused, before any job by the name its stats.json
    records and in the job by the weights' sha256, and so is a folder without a network seed the study applies."""
    import pyarrow as pa

    from vocabtransfer import io
    from vocabtransfer.plan.method_catalog import hypernet_refusal
    from vocabtransfer.plan.params_root import Params
    from vocabtransfer.train import hypernet as stage

    monkeypatch.chdir(tmp_path)
    train = tmp_path / "train.parquet"
    io.write_parquet(pa.table({"text": text_lines("sw", 400)}), train)
    first = tmp_path / "first"
    for pseed in (1, 2):
        stage.run(_stage_ctx(first, source, train, pseed=pseed))
    trained = io.read_json(first / "hypernet/pseed1/stats.json")
    assert trained["source_model"] == "package:tiny-bert" and len(trained["source_sha256"]) == 64
    assert (trained["network_seed"], trained["seed"]) == (1, 3)  # network seed 1: params `seed` itself
    assert trained["languages"] == ["sw"]  # the train splits it read
    seed2 = io.read_json(first / "hypernet/pseed2/stats.json")
    assert (seed2["network_seed"], seed2["seed"]) == (2, 1003) and seed2["curve"] != trained["curve"]
    weights = [(first / f"hypernet/pseed{k}" / network.WEIGHTS).read_bytes() for k in (1, 2)]
    assert weights[0] != weights[1]

    second = tmp_path / "second"
    for pseed in (1, 2):
        ctx = _stage_ctx(second, source, train, network_dir=str(first / "hypernet"), pseed=pseed)
        assert hypernet_refusal(ctx.params, "sw") is None
        stage.run(ctx)
        for name in (network.WEIGHTS, network.CONFIG):
            assert (second / f"hypernet/pseed{pseed}" / name).read_bytes() == (
                first / f"hypernet/pseed{pseed}" / name
            ).read_bytes()
        copied = io.read_json(second / f"hypernet/pseed{pseed}/stats.json")
        assert copied["imported_from"] == str(first / f"hypernet/pseed{pseed}")
        assert copied["curve"] == io.read_json(first / f"hypernet/pseed{pseed}/stats.json")["curve"]
    # a study pretraining hypernet with 3 seeds applies network seeds 1-3: the first study trained 2
    three = Params(
        {
            **ctx.params.tree,
            "pretrain": {**ctx.params.tree["pretrain"], "methods": ["hypernet"], "seeds": 3},
        }
    )
    assert hypernet_refusal(three, "sw").startswith(
        f"init.hypernet.network: {first / 'hypernet/pseed3/stats.json'} not found (network seed 3"
    )

    other = save_dir(tiny_bert(len(load_tokenizer(source)), seed=9), load_tokenizer(source), tmp_path / "other")
    with pytest.raises(
        VocabTransferError, match=r"^init.hypernet.network: .*first/hypernet/pseed1 was trained on source mod"
    ):
        stage.run(_stage_ctx(tmp_path / "third", other, train, network_dir=str(first / "hypernet")))
    assert not (tmp_path / "third" / "hypernet").exists()
    renamed = Params({**ctx.params.tree, "source_model": "package:another"})
    assert "trained on source model package:tiny-bert, and source_model is package:another" in hypernet_refusal(
        renamed, "sw"
    )
    missing = _stage_ctx(second, source, train, network_dir=str(tmp_path / "nowhere")).params
    assert hypernet_refusal(missing, "sw").startswith(
        f"init.hypernet.network: {tmp_path / 'nowhere'}/pseed1/stats.json not found"
    )


def test_each_pretraining_seed_of_a_pretrained_hypernet_applies_its_own_network_seed():
    """Planning: with hypernet pretrained over 3 seeds, stage hypernet has one job per network seed and the init of
    pretraining seed k reads network seed k; a study that does not pretrain hypernet trains network seed 1 alone."""
    import copy

    from conftest import REPO
    from vocabtransfer.app.params import load_params
    from vocabtransfer.pipeline import paths
    from vocabtransfer.plan.params_root import Params
    from vocabtransfer.plan.stages import STAGES

    tree = copy.deepcopy(load_params(REPO / "params.yaml"))
    tree["init"]["methods"] = ["fvt", "hypernet"]
    assert STAGES["hypernet"].jobs(Params(tree)) == [{"pseed": "1"}]
    tree["pretrain"].update(methods=["fvt", "hypernet"], seeds=3)
    assert STAGES["hypernet"].jobs(Params(tree)) == [{"pseed": str(k)} for k in (1, 2, 3)]
    for k in (1, 2, 3):
        wildcards = {"lang": "sw", "method": "hypernet", "pseed": str(k)}
        template = STAGES["init"].input_templates(Params(tree), wildcards)["hypernet"]
        assert paths.fill(template, **wildcards) == f"results/source/hypernet/pseed{k}"
    tree["init"]["methods"] = ["fvt"]
    tree["pretrain"]["methods"] = ["fvt"]
    assert STAGES["hypernet"].why_skipped(Params(tree), {"pseed": "1"}) == "init.methods has no hypernet"


def test_a_network_trained_on_some_languages_is_applied_to_the_others_zero_shot():
    """`init.hypernet.languages`: stage hypernet reads the train splits of the named languages only
    (config/hypernet.yaml: sw and de, with ar the language it never saw), a language the study has no corpus for is
    refused before any job, and the report's set-up names the languages it trained on and the ones it never saw."""
    import copy

    from conftest import REPO
    from vocabtransfer.app.params import load_params
    from vocabtransfer.plan.method_catalog import hypernet_refusal
    from vocabtransfer.plan.params_root import Params
    from vocabtransfer.plan.stages import STAGES
    from vocabtransfer.report.study_setup import hypernet_lines

    tree = copy.deepcopy(load_params(REPO / "params.yaml"))
    tree["languages"] = ["sw", "de", "ar"]
    tree["init"]["methods"] = ["fvt", "hypernet"]
    trains = sorted(
        k for k in STAGES["hypernet"].input_templates(Params(tree), {"pseed": "1"}) if k.startswith("train")
    )
    assert trains == ["train_ar", "train_de", "train_sw"]  # null: every language
    assert hypernet_refusal(Params(tree), "sw") is None
    tree["init"]["hypernet"]["languages"] = ["sw", "de"]
    trains = sorted(
        k for k in STAGES["hypernet"].input_templates(Params(tree), {"pseed": "1"}) if k.startswith("train")
    )
    assert trains == ["train_de", "train_sw"]
    assert hypernet_refusal(Params(tree), "ar") is None
    tree["init"]["hypernet"]["languages"] = ["sw", "xx"]
    assert hypernet_refusal(Params(tree), "sw") == (
        "init.hypernet.languages: xx not in languages (sw, de, ar); the network trains on the train splits of the "
        "study's own languages: add them to languages or drop them here"
    )

    stats = {"steps": 600, "tokens": 1000, "train_seconds": 60.0, "vocab_sizes": [2000], "languages": ["de", "sw"]}
    line = hypernet_lines([stats], ["sw", "de", "ar"])[0]
    assert "trained once on the train splits of de, sw (never saw ar: applied there zero-shot" in line
    assert "never saw" not in hypernet_lines([stats], ["sw", "de"])[0]
    assert (
        "the study's train splits" in hypernet_lines([{k: v for k, v in stats.items() if k != "languages"}], ["sw"])[0]
    )
