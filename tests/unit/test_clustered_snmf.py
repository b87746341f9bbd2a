"""Clustered semi-NMF (`init.snmf.clusters`, UNKs Everywhere's C up-projections): the block-structured
factorisation, the snmf method on it, and the source_snmf file that stores it compactly."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from vocabtransfer.init import initialise
from vocabtransfer import io
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.init.factorize import factorize_source
from vocabtransfer.init.factors import relative_error
from vocabtransfer.init.semi_nmf import SemiNmfSettings, block_coefficients, clustered_semi_nmf, expand_blocks, semi_nmf
from vocabtransfer.init.methods.registry import TransferProblem
from vocabtransfer.plan.method_options import SnmfOptions
from vocabtransfer.pipeline.typed import from_dict
from vocabtransfer.init.methods.snmf import snmf

from helpers import Tok, bpe_tokenizer, init_params, make_ctx, tiny_llama, write_inputs

pytestmark = pytest.mark.usefixtures("one_thread")


def separated_groups(n_groups: int = 4, per_group: int = 40, dim: int = 24, sub: int = 3, seed: int = 0):
    """Rows in `n_groups` groups, each a non-negative mix of its own `sub` random directions plus
    its own offset (so every group is an affine `sub`-dim subspace, far from the others), shuffled.
    Returns (X, group of each row)."""
    g = torch.Generator().manual_seed(seed)
    rows, groups = [], []
    for c in range(n_groups):
        basis = torch.randn(sub, dim, generator=g)
        offset = 4.0 * torch.randn(dim, generator=g)
        rows.append(torch.rand(per_group, sub, generator=g) @ basis + offset)
        groups.append(torch.full((per_group,), c))
    perm = torch.randperm(n_groups * per_group, generator=g)
    return torch.cat(rows)[perm], torch.cat(groups)[perm]


def test_clusters_fit_separated_groups_better_than_one_factorisation():
    X, groups = separated_groups()
    rank = 4
    W, H, labels, info = clustered_semi_nmf(X, rank, 4, SemiNmfSettings(max_iter=150, tol=0.0), seed=0)
    W1, H1 = semi_nmf(X, rank, SemiNmfSettings(max_iter=150, tol=0.0), seed=0)
    single, clustered = relative_error(X, W1, H1), relative_error(X, W, H)
    # every group has its own rank-4 fit instead of sharing one: far closer
    assert clustered < 0.5 * single
    assert info["relative_error"] == pytest.approx(clustered, rel=1e-9)  # the reported error is the true one
    # the clusters are the groups (up to their names), 40 rows each
    assert len({(int(a), int(b)) for a, b in zip(groups, labels)}) == 4
    assert info["sizes"] == [40] * 4 and info["ranks"] == [rank] * 4
    # the overall error combines the clusters' errors weighted by their squared norms
    norms = torch.stack([(X[labels == c].double() ** 2).sum() for c in range(4)])
    combined = math.sqrt(
        float((torch.tensor(info["relative_errors"], dtype=torch.float64) ** 2 * norms).sum() / norms.sum())
    )
    assert info["relative_error"] == pytest.approx(combined, rel=1e-9)


def test_one_cluster_is_todays_factorisation_byte_for_byte():
    X, _ = separated_groups(seed=1)
    W, H = semi_nmf(X, 5, SemiNmfSettings(max_iter=60), seed=3)
    C, P, stats = factorize_source(X, "snmf", SnmfOptions(rank=5, max_iter=60, clusters=1, init="kmeans"), seed=3)
    assert torch.equal(C, W) and torch.equal(P, H) and stats["clusters"] == 1
    Wc, Hc, labels, info = clustered_semi_nmf(X, 5, 1, SemiNmfSettings(max_iter=60), seed=3)
    assert torch.equal(Wc, W) and torch.equal(Hc, H) and not bool(labels.any())
    # the default is one cluster (and, since init_scale, the svd start)
    Ws, Hs = semi_nmf(X, 5, SemiNmfSettings(max_iter=60, init="svd"), seed=3)
    C0, P0, _ = factorize_source(X, "snmf", SnmfOptions(rank=5, max_iter=60), seed=3)
    assert torch.equal(C0, Ws) and torch.equal(P0, Hs)


def test_block_structure_and_small_clusters():
    # 3 groups, one of only 2 rows: at rank 3 its block has one zero column and one zero primitive row
    X, _ = separated_groups(n_groups=3, per_group=20, dim=10, seed=2)
    X = torch.cat([X[:40], X[-2:] * 0 + torch.tensor([[50.0] * 10, [50.0] * 9 + [60.0]])])
    rank, C = 3, 3
    W, H, stats, labels = factorize_source(
        X, "snmf", SnmfOptions(rank=rank, max_iter=80, clusters=C), seed=0, return_labels=True
    )
    assert W.shape == (42, C * rank) and H.shape == (C * rank, 10) and bool((W >= 0).all())
    blocks = W.reshape(42, C, rank)
    own = torch.zeros(42, C, dtype=torch.bool)
    own[torch.arange(42), labels] = True
    assert not bool(blocks[~own].any())  # zero outside each row's own cluster block
    small = int(labels[-1])
    assert int((labels == small).sum()) == 2 and stats["cluster_ranks"][small] == 2
    assert not bool(W[:, small * rank + 2].any()) and not bool(H[small * rank + 2].any())  # the padding
    # each row's reconstruction uses its cluster's primitives only
    for i in (0, 17, 41):
        c = int(labels[i])
        Hc = H[c * rank : (c + 1) * rank]
        torch.testing.assert_close(W[i] @ H, blocks[i, c] @ Hc)
    # the compact form (own-block coefficients) expands back exactly
    assert torch.equal(expand_blocks(block_coefficients(W, labels, C), labels, C), W)
    assert stats["cluster_sizes"] == torch.bincount(labels, minlength=C).tolist()
    with pytest.raises(VocabTransferError, match=r"init\.snmf\.clusters=50: more clusters than the 42"):
        factorize_source(X, "snmf", SnmfOptions(rank=rank, clusters=50), seed=0)


# ------------------------------------------------------------------------------ the snmf method

# 8 source rows in two far-apart groups (rows 0–3 and 4–7), each a mix of 2 directions + offset.
SRC = torch.cat(
    [
        torch.tensor([[1.0, 0, 0, 0], [0, 1, 0, 0], [1, 1, 0, 0], [2, 1, 0, 0]]) + torch.tensor([20.0, 20, 0, 0]),
        torch.tensor([[0.0, 0, 1, 0], [0, 0, 0, 1], [0, 0, 1, 2], [0, 0, 2, 2]]) + torch.tensor([0.0, 0, -20, 20]),
    ]
)
# target: t0–t3 overlap s0, s1 (group A), s4, s5 (group B); t4 is new, t5 has no vector.
# t4's auxiliary vector: cosine 1.0 to t2 (group B) but 0.9 to both t0 and t1 (group A); at
# temperature 1 group A's summed weight 2·e^0.9 beats e^1.0, so t4 joins A and mixes t0, t1 ½:½.
S = math.sqrt(1 - 0.81)
AUX = torch.tensor([[0.9, S], [0.9, -S], [1.0, 0], [-1.0, 0], [1.0, 0], [0, 0]])
MASK = torch.tensor([True, True, True, True, True, False])


def snmf_problem(clusters: int, seed: int = 5) -> TransferProblem:
    return TransferProblem(
        source_embeddings=SRC,
        source_tokenizer=Tok(8, "s"),
        target_tokenizer=Tok(6, "t"),
        overlap_target_ids=np.array([0, 1, 2, 3]),
        overlap_source_ids=np.array([0, 1, 4, 5]),
        auxiliary=AUX,
        auxiliary_mask=MASK,
        seed=seed,
    )


def run_snmf(clusters: int, seed: int = 5):
    return snmf(
        snmf_problem(clusters, seed), SnmfOptions(rank=3, clusters=clusters, max_iter=100, neighbors=3, temperature=1.0)
    )


def test_snmf_method_with_clusters():
    res = run_snmf(2)
    W_src, H, fstats, labels = factorize_source(
        SRC, "snmf", SnmfOptions(rank=3, clusters=2, max_iter=100), seed=5, return_labels=True
    )
    a, b = int(labels[0]), int(labels[4])
    assert a != b and labels.tolist() == [a] * 4 + [b] * 4  # the two groups are the two clusters
    W = res.extra["coordinates"]
    assert W.shape == (6, 6) and torch.equal(res.extra["primitives"], H) and bool((W >= 0).all())
    # overlapping tokens: their source rows' W' rows, so their cluster's reconstruction
    assert torch.equal(W[:4], W_src[[0, 1, 4, 5]])
    torch.testing.assert_close(res.embeddings[:4], (W_src[[0, 1, 4, 5]].double() @ H.double()).float())
    assert fstats["relative_error"] < 0.05
    torch.testing.assert_close(res.embeddings[:4], SRC[[0, 1, 4, 5]], atol=0.05 * float(SRC.norm()), rtol=0)
    # the new token joins cluster A (largest summed weight) and mixes only A's neighbours, renormalised
    torch.testing.assert_close(W[4], 0.5 * W_src[0] + 0.5 * W_src[1])
    assert not bool(W[4, b * 3 : (b + 1) * 3].any())
    # the token without a vector: random, non-negative, inside one cluster's block
    blocks_used = W[5].reshape(2, 3).any(dim=1)
    assert int(blocks_used.sum()) == 1
    c = int(blocks_used.nonzero())
    s = res.stats["clusters"]
    assert s["clusters"] == 2 and s["source_tokens"] == [4, 4]
    expected_combined = [0, 0]
    expected_combined[a] = 1
    assert s["combined_tokens"] == expected_combined
    assert s["random_tokens"][c] == 1 and sum(s["random_tokens"]) == 1
    assert (res.stats["copied"], res.stats["combined"], res.stats["random"]) == (4, 1, 1)
    torch.testing.assert_close(res.embeddings, (W.double() @ H.double()).float())
    # the same seed gives the same result
    again = run_snmf(2)
    assert torch.equal(again.embeddings, res.embeddings)


def test_snmf_method_without_clusters_mixes_across_groups():
    """The contrast: one factorisation mixes all top-3 neighbours (softmax weights e^0.9, e^0.9, e^1)."""
    res = run_snmf(1)
    W_src, _, _ = factorize_source(SRC, "snmf", SnmfOptions(rank=3, max_iter=100), seed=5)
    w = torch.softmax(torch.tensor([1.0, 0.9, 0.9]), dim=0)
    expected = w[0] * W_src[4] + w[1] * W_src[0] + w[2] * W_src[1]
    torch.testing.assert_close(res.extra["coordinates"][4], expected)
    assert "clusters" not in res.stats


# ------------------------------------------------------------------------------ the source_snmf file


def snmf_params(**snmf_opts):
    section = {
        "rank": 4,
        "max_iter": 30,
        "tol": 1e-4,
        "init": "kmeans",
        "neighbors": 3,
        "temperature": 0.1,
        **snmf_opts,
    }
    return init_params({"methods": ["snmf"], "snmf": section})


def test_source_snmf_stores_clusters_compactly_and_refuses_other_clusters(tmp_path):
    from vocabtransfer.init import source_snmf

    en, sw = bpe_tokenizer("en"), bpe_tokenizer("sw", 280)
    source = tiny_llama(len(en))  # untied: input and output embeddings, two clustered factorisations
    inputs, pairs = write_inputs(tmp_path, source, en, sw)
    factors = tmp_path / "source" / "snmf.safetensors"
    source_snmf.run(
        make_ctx(
            "vocabtransfer.init.source_snmf:run",
            {},
            {"source_model": inputs["source_model"]},
            {"factors": factors},
            snmf_params(clusters=3),
        )
    )
    saved = load_file(str(factors))
    V, D = source.get_input_embeddings().weight.shape
    assert {k: tuple(v.shape) for k, v in saved.items()} == {
        "input_coordinates": (V, 4),
        "input_clusters": (V,),
        "input_primitives": (12, D),
        "output_coordinates": (V, 4),
        "output_clusters": (V,),
        "output_primitives": (12, D),
    }
    meta = io.tensor_metadata(factors)
    assert meta["options"]["clusters"] == 3 and meta["input"]["stats"]["clusters"] == 3
    assert sum(meta["input"]["stats"]["cluster_sizes"]) == V

    # load_factors expands to the block-structured W', equal to the inline factorisation
    from vocabtransfer.model import modeling
    from vocabtransfer.model.hub import load_tokenizer

    model, _ = modeling.load_source_model(inputs["source_model"])
    matrices = modeling.embedding_matrices(model, load_tokenizer(inputs["source_model"]))
    section = from_dict(SnmfOptions, snmf_params(clusters=3)["init"]["snmf"])
    loaded = source_snmf.load_factors(factors, matrices, section, seed=7)
    W, H, stats, labels = loaded["input"]
    W_in, H_in, _, labels_in = factorize_source(matrices["input"], "snmf", section, seed=7, return_labels=True)
    assert torch.equal(W, W_in) and torch.equal(H, H_in) and torch.equal(labels, labels_in)
    assert stats["cached"] == str(factors)

    # init with the stored factors gives the same artefact as factorising inline
    def run(params, out, extra):
        initialise.run(
            make_ctx(
                "vocabtransfer.init.initialise:run",
                {"lang": "sw", "method": "snmf"},
                {**inputs, **extra},
                {"init": tmp_path / out},
                params,
            )
        )

    run(snmf_params(clusters=3), "shared", {"snmf_factors": factors})
    run(snmf_params(clusters=3), "inline", {})
    assert (tmp_path / "shared" / "embeddings.safetensors").read_bytes() == (
        tmp_path / "inline" / "embeddings.safetensors"
    ).read_bytes()
    st = json.loads((tmp_path / "shared" / "stats.json").read_text())
    assert sum(st["method_stats"]["clusters"]["combined_tokens"]) == st["method_stats"]["combined"]

    # factorised training (lowrank) takes the wide W' / stacked H' unchanged: same logits, gradients on W'
    from transformers import AutoModelForCausalLM

    from vocabtransfer.train.lowrank import factorize_model

    model = AutoModelForCausalLM.from_pretrained(str(tmp_path / "shared" / "model"))
    ids = torch.tensor([[1, 5, 9, 17, 30]])
    with torch.no_grad():
        full = model(input_ids=ids).logits
    factorize_model(model, tmp_path / "shared", train_primitives=True)
    assert model.get_input_embeddings().coordinates.shape == (len(sw), 12)
    low = model(input_ids=ids).logits
    torch.testing.assert_close(low, full, atol=1e-4, rtol=1e-4)
    low.sum().backward()
    assert model.get_input_embeddings().coordinates.grad is not None

    # factors computed with other clusters are refused, in both directions
    with pytest.raises(
        VocabTransferError,
        match=r"computed with other init.snmf options: clusters=3 \(params: 1\); "
        r"rerun the source_snmf stage",
    ):
        run(snmf_params(clusters=1), "a", {"snmf_factors": factors})
    one = tmp_path / "source" / "one.safetensors"
    source_snmf.run(
        make_ctx(
            "vocabtransfer.init.source_snmf:run",
            {},
            {"source_model": inputs["source_model"]},
            {"factors": one},
            snmf_params(),
        )
    )
    assert set(load_file(str(one))) == {
        "input_coordinates",
        "input_primitives",
        "output_coordinates",
        "output_primitives",
    }
    with pytest.raises(VocabTransferError, match=r"clusters=1 \(params: 2\)"):
        source_snmf.load_factors(one, matrices, from_dict(SnmfOptions, snmf_params(clusters=2)["init"]["snmf"]), seed=7)
    # a file from before the option existed (no `clusters` in its options) counts as one cluster
    tensors = load_file(str(one))
    old_meta = io.tensor_metadata(one)
    old_meta["options"].pop("clusters")
    old = tmp_path / "source" / "old.safetensors"
    io.save_tensors(tensors, old, metadata=old_meta)
    W1, H1, _, l1 = source_snmf.load_factors(
        old, matrices, from_dict(SnmfOptions, snmf_params(clusters=1)["init"]["snmf"]), seed=7
    )["input"]
    assert torch.equal(W1, tensors["input_coordinates"]) and not bool(l1.any())
    with pytest.raises(VocabTransferError, match=r"clusters=1 \(params: 4\)"):
        source_snmf.load_factors(old, matrices, from_dict(SnmfOptions, snmf_params(clusters=4)["init"]["snmf"]), seed=7)
    assert not (tmp_path / "a").exists()
