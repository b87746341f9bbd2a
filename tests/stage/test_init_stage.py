"""Stage `init`: a throwaway method registered here runs through the real stage on tiny models."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pytest
import torch
from safetensors.torch import load_file

from vocabtransfer.init import initialise, output_bias
from vocabtransfer.plan.method_options import FocusOptions, SvdOptions, WechselOptions
from vocabtransfer.init.methods.variants import FactorizedOptions
from vocabtransfer.app.params import validate_params
from vocabtransfer.pipeline.typed import option
from vocabtransfer.plan.stages import STAGES
from vocabtransfer import io
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.init.methods.registry import TransferResult, register
from vocabtransfer.plan.methods import INFO, METHODS
from vocabtransfer.pipeline.typed import from_dict
from vocabtransfer.plan.params_root import Params
from vocabtransfer.plan import init_plans

from helpers import (
    bpe_tokenizer,
    init_params,
    make_ctx,
    save_dir,
    tiny_bert,
    tiny_llama,
    wordpiece_tokenizer,
    write_inputs,
)

CALLS: list[dict] = []


@dataclass(frozen=True)
class CopyOptions:
    """a throwaway method of the tests"""

    alpha: int = option(0, "a knob the method only records", minimum=0)


def _test_copy(problem, options: CopyOptions):
    """Overlapping rows copied, the rest the source mean plus seeded noise; one extra tensor."""
    CALLS.append(
        {"source_sum": float(problem.source_embeddings.sum()), "options": options, "resources": problem.resources}
    )
    src = problem.source_embeddings
    g = torch.Generator().manual_seed(problem.seed)
    emb = src.mean(0).repeat(problem.target_size, 1) + 0.01 * torch.randn(
        problem.target_size, src.shape[1], generator=g
    )
    t, s = torch.from_numpy(problem.overlap_target_ids), torch.from_numpy(problem.overlap_source_ids)
    emb[t] = src[s]
    return TransferResult(emb, {"copied": len(t)}, extra={"coordinates": torch.ones(problem.target_size, 3)})


def _test_broken(problem, options):
    return TransferResult(torch.zeros(problem.target_size - 1, problem.source_embeddings.shape[1]), {})


@pytest.fixture(autouse=True)
def throwaway_methods():
    """`test_copy` and `test_broken` are registered for each test of this module only: the global
    registry is as it was before and after (no other module sees them)."""
    register("test_copy", options=CopyOptions)(_test_copy)
    register("test_broken")(_test_broken)
    yield
    for name in ("test_copy", "test_broken"):  # removed again after the test
        METHODS.pop(name, None)
        INFO.pop(name, None)


def init_ctx(tmp_path, inputs, method="test_copy", params=None):
    params = params or init_params({"methods": [method], "test_copy": {"alpha": 1}})  # the schema has init.test_copy
    return make_ctx(
        "vocabtransfer.init.initialise:run",
        {"lang": "sw", "method": method},
        inputs,
        {"init": tmp_path / "sw" / "init" / method},
        params,
    )


@pytest.fixture(scope="module")
def tokenizers():
    return {
        "en_wp": wordpiece_tokenizer("en"),
        "sw_wp": wordpiece_tokenizer("sw", 250),
        "en_bpe": bpe_tokenizer("en"),
        "sw_bpe": bpe_tokenizer("sw", 280),
    }


def test_init_tied_bert(tmp_path, tokenizers):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    source = tiny_bert(len(tokenizers["en_wp"]))
    with torch.no_grad():
        source.cls.predictions.bias.copy_(torch.randn(len(tokenizers["en_wp"])))
    inputs, pairs = write_inputs(tmp_path, source, tokenizers["en_wp"], tokenizers["sw_wp"])
    assert len(pairs) > 20  # the special tokens and shared pieces
    CALLS.clear()
    initialise.run(init_ctx(tmp_path, inputs))
    out = tmp_path / "sw" / "init" / "test_copy"
    assert sorted(p.name for p in out.iterdir()) == [
        "coordinates.safetensors",
        "embeddings.safetensors",
        "model",
        "stats.json",
    ]
    assert len(CALLS) == 1 and CALLS[0]["options"] == CopyOptions(alpha=1)  # tied: one call, params init.test_copy
    emb = load_file(str(out / "embeddings.safetensors"))
    assert set(emb) == {"input_embeddings"} and emb["input_embeddings"].shape == (len(tokenizers["sw_wp"]), 32)
    assert load_file(str(out / "coordinates.safetensors"))["coordinates"].shape == (len(tokenizers["sw_wp"]), 3)
    source_emb = source.get_input_embeddings().weight.detach()
    t, s = map(torch.tensor, zip(*pairs))
    assert torch.equal(emb["input_embeddings"][t], source_emb[s])

    model = AutoModelForMaskedLM.from_pretrained(str(out / "model"))
    tok = AutoTokenizer.from_pretrained(str(out / "model"))
    assert tok.get_vocab() == tokenizers["sw_wp"].get_vocab()
    assert torch.equal(model.get_input_embeddings().weight, emb["input_embeddings"])
    # output bias moved with the tokens: copied where they overlap, the source mean elsewhere
    bias, src_bias = model.cls.predictions.bias.detach(), source.cls.predictions.bias.detach()
    assert torch.equal(bias[t], src_bias[s])
    others = torch.ones(len(tok), dtype=torch.bool)
    others[t] = False
    assert torch.allclose(bias[others], src_bias.mean().expand(int(others.sum())))
    stats = json.loads((out / "stats.json").read_text())
    assert stats["untied_output_embeddings"] is False and stats["method_stats"] == {"copied": len(pairs)}
    assert stats["overlap"] == len(pairs) and stats["seed"] == 7 and "torch" in stats["versions"]


def test_init_untied_llama_runs_the_method_twice(tmp_path, tokenizers):
    from transformers import AutoModelForCausalLM

    source = tiny_llama(len(tokenizers["en_bpe"]))
    inputs, pairs = write_inputs(tmp_path, source, tokenizers["en_bpe"], tokenizers["sw_bpe"])
    inputs["source_fasttext"] = tmp_path / "words.bin"  # extra inputs reach the method as resources
    CALLS.clear()
    initialise.run(init_ctx(tmp_path, inputs))
    out = tmp_path / "sw" / "init" / "test_copy"
    assert len(CALLS) == 2
    src_in, src_out = source.get_input_embeddings().weight.detach(), source.lm_head.weight.detach()
    assert CALLS[0]["source_sum"] == pytest.approx(float(src_in.sum()), rel=1e-5)
    assert CALLS[1]["source_sum"] == pytest.approx(float(src_out.sum()), rel=1e-5)
    assert CALLS[0]["resources"] == {"source_fasttext": tmp_path / "words.bin"}
    emb = load_file(str(out / "embeddings.safetensors"))
    assert set(emb) == {"input_embeddings", "output_embeddings"}
    t, s = map(torch.tensor, zip(*pairs))
    assert torch.equal(emb["output_embeddings"][t], src_out[s])
    assert (out / "output_coordinates.safetensors").is_file()
    model = AutoModelForCausalLM.from_pretrained(str(out / "model"))
    assert torch.equal(model.lm_head.weight, emb["output_embeddings"])
    assert torch.equal(model.get_input_embeddings().weight, emb["input_embeddings"])
    assert json.loads((out / "stats.json").read_text())["untied_output_embeddings"] is True


def test_init_is_deterministic(tmp_path, tokenizers):
    inputs, _ = write_inputs(tmp_path, tiny_bert(len(tokenizers["en_wp"])), tokenizers["en_wp"], tokenizers["sw_wp"])
    out = tmp_path / "sw" / "init" / "test_copy"
    initialise.run(init_ctx(tmp_path, inputs))
    first = {p.name: p.read_bytes() for p in [out / "embeddings.safetensors", out / "model" / "model.safetensors"]}
    initialise.run(init_ctx(tmp_path, inputs))  # replaces the directory atomically
    second = {p.name: p.read_bytes() for p in [out / "embeddings.safetensors", out / "model" / "model.safetensors"]}
    assert first == second
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]


def test_init_errors(tmp_path, tokenizers):
    inputs, _ = write_inputs(tmp_path, tiny_bert(len(tokenizers["en_wp"])), tokenizers["en_wp"], tokenizers["sw_wp"])
    with pytest.raises(VocabTransferError, match="unknown method 'no_such_method'"):
        initialise.run(init_ctx(tmp_path, inputs, method="no_such_method"))
    with pytest.raises(VocabTransferError, match=r"method 'test_broken': returned input embeddings of shape"):
        initialise.run(init_ctx(tmp_path, inputs, method="test_broken"))
    assert not (tmp_path / "sw" / "init" / "test_broken").exists()
    # an overlap table from another tokenizer
    bad = pa.table({"target_id": pa.array([0, 10_000], pa.int32()), "source_id": pa.array([0, 1], pa.int32())})
    io.write_parquet(bad, inputs["overlap"])
    with pytest.raises(VocabTransferError, match=r"overlap.parquet: target_id 10000 is outside the target tokenizer"):
        initialise.run(init_ctx(tmp_path, inputs))
    io.write_parquet(
        pa.table({"target_id": pa.array([0], pa.int32()), "source_id": pa.array([0], pa.int32())}), inputs["overlap"]
    )
    io.save_tensors({"embeddings": torch.zeros(3, 8), "mask": torch.ones(3, dtype=torch.bool)}, inputs["fasttext"])
    with pytest.raises(VocabTransferError, match="embeddings.safetensors: .* do not have one row per target token"):
        initialise.run(init_ctx(tmp_path, inputs))


def _params(**init):
    return validate_params(
        {
            "languages": ["sw"],
            "source_model": "sentence-transformers/all-MiniLM-L6-v2",
            "corpus": {"sources": {"sw": {"path": "pretrain_text/sw.txt"}}},
            "init": init,
        }
    )


def test_the_options_record_of_a_factorised_method():
    """A method gets its typed `init.<base>`, a factorised one also the typed `init.<fact>`."""
    params = _params(methods=["focus+svd"], focus={"topk": 3}, svd={"keep_dim": 8})
    focus = from_dict(FocusOptions, params["init"]["focus"])
    assert focus == FocusOptions(block_size=2048, topk=3)
    options = FactorizedOptions(focus, from_dict(SvdOptions, params["init"]["svd"]))
    assert initialise.options_record("focus+svd", options) == {
        "block_size": 2048,
        "topk": 3,
        "factorization": {"keep_dim": 8},
    }
    assert initialise.options_record("focus", focus) == {"block_size": 2048, "topk": 3}


def test_method_options_record_leaves_out_the_keys_of_other_stages():
    """init.wechsel.source_text / fasttext feed the word-level fastText stages: the typed options carry
    them, the stats' record of the method's options does not."""
    params = _params(
        wechsel={"neighbors": 3, "dictionaries": {"sw": "d.txt"}, "source_text": "en.txt", "fasttext": {"dim": 8}}
    )
    options = from_dict(WechselOptions, params["init"]["wechsel"])
    assert options.neighbors == 3 and options.fasttext.dim == 8
    assert initialise.options_record("wechsel", options) == {
        "neighbors": 3,
        "temperature": 0.1,
        "copy_overlap": False,
        "dictionary_in_vocab_only": False,
        "dictionaries": {"sw": "d.txt"},
    }


def test_init_rerun_keys_are_the_leaves_of_the_options_taken():
    params = _params(methods=["focus+svd", "wechsel", "random"])
    init = STAGES["init"]
    assert init.leaves(Params(params), {"lang": "sw", "method": "focus+svd", "pseed": "1"}) == [
        "seed",
        "init.focus.block_size",
        "init.focus.topk",
        "init.svd.keep_dim",
    ]
    assert init.leaves(Params(params), {"lang": "sw", "method": "random", "pseed": "1"}) == [
        "seed",
        "init.random.scale",
        "init.random.calibration_lines",
        "init.random.calibration_margin",
    ]
    assert init.leaves(Params(params), {"lang": "sw", "method": "mean", "pseed": "1"}) == ["seed"]
    wechsel = init.leaves(Params(params), {"lang": "sw", "method": "wechsel", "pseed": "1"})
    assert "init.wechsel.dictionaries.sw" in wechsel and "init.wechsel.fasttext.dim" in wechsel


def test_transfer_bias():
    bias = output_bias.transfer_bias(torch.tensor([1.0, 2.0, 3.0, 6.0]), 3, np.array([2]), np.array([3]))
    assert bias.tolist() == [3.0, 3.0, 6.0]


def test_inputs_follow_the_method():
    params = {"init": {"methods": ["wechsel", "focus+svd"], "wechsel": {}, "focus": {}, "svd": {}}}
    wechsel_inputs = init_plans.init_inputs(Params(params), {"lang": "sw", "method": "wechsel"})
    assert wechsel_inputs["target_fasttext"] == "results/{lang}/fasttext/words.bin"
    assert set(init_plans.init_inputs(Params(params), {"lang": "sw", "method": "focus+svd"})) == {
        "source_model",
        "tokenizer",
        "overlap",
        "fasttext",
    }


def snmf_params(**snmf):
    section = {"rank": 6, "max_iter": 40, "tol": 1e-4, "init": "kmeans", "neighbors": 3, "temperature": 0.1, **snmf}
    return init_params({"methods": ["overlap+snmf", "snmf"], "overlap": {}, "snmf": section})


def test_snmf_methods_use_the_shared_source_snmf_factors(tmp_path, tokenizers):
    """source_snmf factorises input and (untied) output embeddings once; init with those factors gives the
    same artefact as factorising inline, and says it used them."""
    from vocabtransfer.init import source_snmf

    source = tiny_llama(len(tokenizers["en_bpe"]))
    inputs, pairs = write_inputs(tmp_path, source, tokenizers["en_bpe"], tokenizers["sw_bpe"])
    factors = tmp_path / "source" / "snmf.safetensors"
    params = snmf_params()
    source_snmf.run(
        make_ctx(
            "vocabtransfer.init.source_snmf:run",
            {},
            {"source_model": inputs["source_model"]},
            {"factors": factors},
            params,
        )
    )
    saved = load_file(str(factors))
    V, D = source.get_input_embeddings().weight.shape
    assert {k: tuple(v.shape) for k, v in saved.items()} == {
        "input_coordinates": (V, 6),
        "input_primitives": (6, D),
        "output_coordinates": (V, 6),
        "output_primitives": (6, D),
    }
    assert bool((saved["input_coordinates"] >= 0).all()) and bool((saved["output_coordinates"] >= 0).all())
    assert not torch.equal(saved["input_primitives"], saved["output_primitives"])  # untied: two factorisations

    for method in ("overlap+snmf", "snmf"):
        shared = tmp_path / "shared" / method
        inline = tmp_path / "inline" / method
        ctx = make_ctx(
            "vocabtransfer.init.initialise:run",
            {"lang": "sw", "method": method},
            {**inputs, "snmf_factors": factors},
            {"init": shared},
            params,
        )
        initialise.run(ctx)
        ctx = make_ctx(
            "vocabtransfer.init.initialise:run", {"lang": "sw", "method": method}, inputs, {"init": inline}, params
        )
        initialise.run(ctx)
        assert (shared / "embeddings.safetensors").read_bytes() == (inline / "embeddings.safetensors").read_bytes()
        assert (shared / "primitives.safetensors").read_bytes() == (inline / "primitives.safetensors").read_bytes()
        stats = json.loads((shared / "stats.json").read_text())
        fact = stats["method_stats"]["factorization"]
        assert fact["cached"] == str(factors) and fact["rank"] == 6
        assert stats["output_method_stats"]["factorization"]["cached"] == str(factors)
        assert "cached" not in json.loads((inline / "stats.json").read_text())["method_stats"]["factorization"]
        # an overlapping token's row is its source row reconstructed from the shared factors
        t, s = pairs[5]
        emb = load_file(str(shared / "embeddings.safetensors"))["output_embeddings"]
        expected = (saved["output_coordinates"][s].double() @ saved["output_primitives"].double()).float()
        assert torch.allclose(emb[t], expected, atol=1e-6)


def test_stale_source_snmf_factors_are_refused(tmp_path, tokenizers):
    from vocabtransfer.init import source_snmf

    source = tiny_bert(len(tokenizers["en_wp"]))
    inputs, _ = write_inputs(tmp_path, source, tokenizers["en_wp"], tokenizers["sw_wp"])
    factors = tmp_path / "source" / "snmf.safetensors"
    source_snmf.run(
        make_ctx(
            "vocabtransfer.init.source_snmf:run",
            {},
            {"source_model": inputs["source_model"]},
            {"factors": factors},
            snmf_params(),
        )
    )
    assert set(load_file(str(factors))) == {"input_coordinates", "input_primitives"}  # tied: one factorisation

    def run(params, out):
        initialise.run(
            make_ctx(
                "vocabtransfer.init.initialise:run",
                {"lang": "sw", "method": "snmf"},
                {**inputs, "snmf_factors": factors},
                {"init": tmp_path / out},
                params,
            )
        )

    # other options than the factors were computed with
    with pytest.raises(
        VocabTransferError,
        match=r"snmf.safetensors: computed with other init.snmf options: "
        r"rank=6 \(params: 8\)",
    ):
        run(snmf_params(rank=8), "a")
    # neighbours / temperature do not change the factorisation
    run(snmf_params(neighbors=5), "b")
    # the same options with another seed: another k-means start, so other factors
    with pytest.raises(
        VocabTransferError,
        match=r"computed with other init.snmf options: seed=7 \(params: 8\); "
        r"rerun the source_snmf stage",
    ):
        run({**snmf_params(), "seed": 8}, "e")
    # factors of another source model
    other = tiny_bert(len(tokenizers["en_wp"]), seed=1)
    save_dir(other, tokenizers["en_wp"], inputs["source_model"])
    with pytest.raises(VocabTransferError, match=r"factorises other input embeddings .* rerun the source_snmf stage"):
        run(snmf_params(), "c")
    factors.unlink()
    with pytest.raises(VocabTransferError, match=r"snmf.safetensors: file not found"):
        run(snmf_params(), "d")
    assert not (tmp_path / "a").exists() and not (tmp_path / "c").exists() and not (tmp_path / "e").exists()


def test_snmf_methods_depend_on_source_snmf():
    params = {"init": {"methods": ["snmf", "focus+snmf", "ofa"], "snmf": {}, "focus": {}, "ofa": {}}}
    for method in ("snmf", "focus+snmf"):
        assert (
            init_plans.init_inputs(Params(params), {"lang": "sw", "method": method})["snmf_factors"]
            == "results/source/snmf.safetensors"
        )
    assert "snmf_factors" not in init_plans.init_inputs(Params(params), {"lang": "sw", "method": "ofa"})
