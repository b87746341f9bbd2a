"""OFA, snmf (UNKs Everywhere) and the factorised variants (<base>+svd / <base>+snmf) on tiny,
hand-checkable problems."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.init.factorize import FACTORIZATIONS
from vocabtransfer.init.svd import truncated_svd
from vocabtransfer.init.methods import get_method
from vocabtransfer.pipeline.typed import NoOptions
from vocabtransfer.plan.method_options import OfaOptions, SvdOptions
from vocabtransfer.init.methods.registry import TransferProblem, TransferResult
from vocabtransfer.plan.methods import METHODS, info
from vocabtransfer.init.methods.variants import FactorizedOptions, factorized, resolve
from vocabtransfer.pipeline.config import typed_section
from vocabtransfer.init.methods.ofa import neighbour_coordinates, ofa
from vocabtransfer.init.methods.snmf import snmf  # noqa: F401 (registers snmf in METHODS)

from helpers import Tok


pytestmark = pytest.mark.usefixtures("one_thread")


# 4 source tokens in 3 dimensions; 6 target tokens:
#   t0, t1, t2 overlap s2, s0, s3;  t3, t4 are new with vectors;  t5 has no vector.
E = torch.tensor([[1.0, 0, 0], [0, 2, 0], [0, 0, 3], [1, 1, 1]])
AUX = torch.tensor([[1.0, 0], [0, 1], [-1, 0], [1, 1], [2, 0], [0, 0]])
MASK = torch.tensor([True, True, True, True, True, False])
OV_T, OV_S = np.array([0, 1, 2]), np.array([2, 0, 3])
SIG1 = 1 / (1 + math.exp(-1))  # softmax([1, 0]) at temperature 1


def problem(*, source=E, aux=AUX, mask=MASK, ov_t=OV_T, ov_s=OV_S, seed=42, n_target=6):
    return TransferProblem(
        source_embeddings=source,
        source_tokenizer=Tok(source.shape[0], "s"),
        target_tokenizer=Tok(n_target, "t"),
        overlap_target_ids=ov_t,
        overlap_source_ids=ov_s,
        auxiliary=aux,
        auxiliary_mask=mask,
        seed=seed,
    )


def typed(cls, section: str, given):
    """Options from a mapping over the defaults, checked as params are (a section outside the schema: the defaults)."""
    return cls() if given is None else typed_section(cls, section, given)


def call(name: str, options=None, *, factorization=None, **problem_args):
    """Method `name` run on problem(**problem_args) as the init stage runs it: with its typed options, here from
    the mappings `options` (init.<base>) and `factorization` (init.<fact>) over their defaults."""
    base, _, fact = name.partition("+")
    opts = typed(info(base).options, f"init.{base}", options)
    if fact:
        opts = FactorizedOptions(opts, typed(FACTORIZATIONS[fact], f"init.{fact}", factorization))
    return get_method(name)(problem(**problem_args), opts)


def expected_mixes(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """rows = coordinates of (t0, t1, t2). t3 = (1,1): cos 1/√2 to t0 and t1 (tie), -1/√2 to t2 →
    top-2 {t0, t1}, weights ½, ½. t4 = (2,0): cos 1, 0, -1 → top-2 {t0, t1}, softmax([1, 0])."""
    return 0.5 * rows[0] + 0.5 * rows[1], SIG1 * rows[0] + (1 - SIG1) * rows[1]


# ------------------------------------------------------------------------------ ofa


def test_ofa_full_dim_hand_computed_rows():
    res = call("ofa", {"keep_dim": 3, "neighbors": 2, "temperature": 1.0})
    out = res.embeddings
    assert out.shape == (6, 3) and out.dtype == torch.float32
    # overlapping tokens: exactly their source rows (keep_dim = D: no factorisation, as in OFA)
    assert torch.equal(out[0], E[2]) and torch.equal(out[1], E[0]) and torch.equal(out[2], E[3])
    t3, t4 = expected_mixes(torch.stack([E[2], E[0], E[3]]))
    torch.testing.assert_close(out[3], t3)  # (0.5, 0, 1.5)
    torch.testing.assert_close(out[4], t4)  # (0.269, 0, 2.193)
    assert torch.equal(res.extra["primitives"], torch.eye(3))
    assert torch.equal(res.extra["coordinates"], out)
    s = res.stats
    assert (s["copied"], s["combined"], s["random"], s["target_size"]) == (3, 2, 1, 6)
    assert s["reasons"]["random"] == {"no auxiliary vector": 1}
    assert s["neighbour_candidates"] == 3 and s["neighbors_used"] == 2


def test_ofa_low_rank_coordinates_and_random_rows():
    res = call("ofa", {"keep_dim": 2, "neighbors": 2, "temperature": 1.0}, seed=7)
    C, P = truncated_svd(E.double(), 2)
    coords = res.extra["coordinates"]
    assert coords.shape == (6, 2) and res.extra["primitives"].shape == (2, 3)
    torch.testing.assert_close(res.extra["primitives"], P.float())
    # overlapping tokens copy their source coordinates; new ones mix them
    torch.testing.assert_close(coords[:3], C[[2, 0, 3]].float())
    t3, t4 = expected_mixes(C[[2, 0, 3]])
    torch.testing.assert_close(coords[3], t3.float())
    torch.testing.assert_close(coords[4], t4.float())
    # t5 (no vector): row 5 of one seeded N(0, 1) draw for the whole vocabulary, scaled to
    # the per-dimension mean / std of the source coordinates
    z = torch.randn(6, 2, generator=torch.Generator().manual_seed(7))[5].double()
    torch.testing.assert_close(coords[5], (C.mean(0) + C.std(0, unbiased=False) * z).float())
    torch.testing.assert_close(res.embeddings, (coords.double() @ P).float(), atol=1e-6, rtol=0)
    assert res.stats["factorization"]["relative_error"] > 0


def test_ofa_seed_changes_only_random_rows():
    opts = {"keep_dim": 2, "neighbors": 2}
    a, b, c = (call("ofa", opts, seed=s).embeddings for s in (1, 1, 2))
    assert torch.equal(a, b)
    assert torch.equal(a[:5], c[:5]) and not torch.equal(a[5], c[5])


def test_ofa_copies_special_tokens_by_role():
    # target t5 (no vector, not in the overlap) is the [CLS] of the target tokenizer; the
    # source's cls_token is s1 -> t5 copies s1 instead of getting a random row
    p = problem()
    p.source_tokenizer = Tok(4, "s", {"cls_token": 1})
    p.target_tokenizer = Tok(6, "t", {"cls_token": 5})
    res = ofa(p, OfaOptions(keep_dim=3))
    assert torch.equal(res.embeddings[5], E[1])
    assert res.stats["copied"] == 4 and res.stats["random"] == 0
    assert res.stats["reasons"]["copied"] == {"overlap": 3, "special token (same role cls_token)": 1}


def test_ofa_neighbour_candidates_need_vectors():
    # t1 (overlap) loses its vector -> only t0, t2 are candidates; t4 gets an all-zero vector
    mask = MASK.clone()
    mask[1] = False
    aux = AUX.clone()
    aux[4] = 0
    res = call("ofa", {"keep_dim": 3, "neighbors": 2, "temperature": 1.0}, aux=aux, mask=mask)
    # t3 = (1,1): cos to t0 1/√2, to t2 -1/√2 → softmax([√½, -√½])
    w = torch.softmax(torch.tensor([2**-0.5, -(2**-0.5)]), 0)
    torch.testing.assert_close(res.embeddings[3], w[0] * E[2] + w[1] * E[3])
    assert torch.equal(res.embeddings[1], E[0])  # still copied
    assert res.stats["neighbour_candidates"] == 2
    assert res.stats["reasons"]["random"] == {"no auxiliary vector": 1, "all-zero auxiliary vector": 1}


def test_ofa_no_overlapping_vectors_falls_back_to_random_with_reason():
    mask = torch.tensor([False, False, False, True, True, False])
    res = call("ofa", {"keep_dim": 3}, mask=mask)
    assert res.stats["random"] == 3 and res.stats["combined"] == 0
    assert res.stats["reasons"]["random"]["no overlapping token has an auxiliary vector"] == 2


def test_neighbour_blocks_give_the_same_rows():
    g = torch.Generator().manual_seed(0)
    src = torch.randn(50, 8, generator=g)
    aux = torch.randn(200, 5, generator=g)
    mask = torch.rand(200, generator=g) > 0.1
    ov_t = torch.randperm(200, generator=g)[:40].numpy()
    ov_s = torch.randperm(50, generator=g)[:40].numpy()
    p = problem(source=src, aux=aux, mask=mask, ov_t=ov_t, ov_s=ov_s, n_target=200)
    one, _ = neighbour_coordinates(p, src, OfaOptions(neighbors=5, temperature=0.1), section="t", block_size=1)
    big, stats = neighbour_coordinates(p, src, OfaOptions(neighbors=5, temperature=0.1), section="t", block_size=4096)
    torch.testing.assert_close(one, big, atol=1e-6, rtol=0)
    assert stats["copied"] + stats["combined"] + stats["random"] == 200


@pytest.mark.parametrize(
    "change, words",
    [
        (
            {"ov_t": np.array([], dtype=np.int64), "ov_s": np.array([], dtype=np.int64)},
            ["shares no tokens", "random", "fuzzy"],
        ),
        ({"options": {"keep_dim": 4}}, ["init.ofa.keep_dim", "hidden size 3"]),
        ({"options": {"keep_dim": 100}}, ["init.ofa.keep_dim=100"]),  # the default, on a 3-d toy model
        ({"aux": None}, ["fasttext"]),
        ({"options": {"neighbors": 0}}, ["init.ofa.neighbors"]),
        ({"options": {"temperature": 0}}, ["init.ofa.temperature"]),
        ({"ov_t": np.array([0, 9]), "ov_s": np.array([0, 1])}, ["target_id 9 is outside", "overlap"]),
    ],
)
def test_ofa_errors_are_one_line(change, words):
    change = dict(change)
    opts = {"keep_dim": 3, **change.pop("options", {})}
    with pytest.raises(VocabTransferError) as err:
        call("ofa", opts, **change)
    msg = str(err.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


# ------------------------------------------------------------------------------ snmf


def _clustered_source():
    """12 source rows that are exactly 3 prototypes: semi-NMF at rank 3 is exact."""
    protos = torch.tensor([[1.0, 0, 0, 2], [0, 3, 0, -1], [0, 0, -2, 1]])
    return protos[torch.arange(12) % 3]


def test_snmf_tiny_problem():
    src = _clustered_source()
    res = call(
        "snmf", {"rank": 3, "neighbors": 2, "temperature": 1.0, "max_iter": 50}, source=src, ov_s=np.array([0, 1, 5])
    )
    W, H = res.extra["coordinates"], res.extra["primitives"]
    assert W.shape == (6, 3) and H.shape == (3, 4)
    assert bool((W >= 0).all())  # non-negative coefficients, random row included
    # exact factorisation: overlapping rows come back as their source rows
    torch.testing.assert_close(res.embeddings[:3], src[[0, 1, 5]], atol=1e-4, rtol=0)
    # new tokens: the OFA neighbour mix of the overlapping tokens' coefficients
    t3, t4 = expected_mixes(W[:3])
    torch.testing.assert_close(W[3], t3)
    torch.testing.assert_close(W[4], t4)
    torch.testing.assert_close(res.embeddings, W @ H, atol=1e-5, rtol=0)
    s = res.stats
    assert (s["copied"], s["combined"], s["random"]) == (3, 2, 1)
    assert "random_negative_entries_clamped" in s
    assert s["factorization"]["kind"] == "snmf" and s["factorization"]["relative_error"] < 1e-3


def test_snmf_is_reproducible_and_checks_rank():
    src = _clustered_source()
    opts = {"rank": 3, "max_iter": 20}
    a, b = call("snmf", opts, source=src), call("snmf", opts, source=src)
    assert torch.equal(a.embeddings, b.embeddings) and torch.equal(a.extra["coordinates"], b.extra["coordinates"])
    with pytest.raises(VocabTransferError, match=r"init\.snmf\.rank=5: larger than .* hidden size 4"):
        call("snmf", {"rank": 5}, source=src)
    with pytest.raises(VocabTransferError, match="shares no tokens"):
        call("snmf", {"rank": 3}, source=src, ov_t=np.array([], dtype=np.int64), ov_s=np.array([], dtype=np.int64))


# ------------------------------------------------------------------------------ factorised variants


def copy_mean(problem: TransferProblem, options=NoOptions()) -> TransferResult:
    """A trivial base method: overlapping rows copied, every other row the mean source row."""
    src = problem.source_embeddings
    out = src.mean(0, keepdim=True).repeat(problem.target_size, 1)
    out[torch.from_numpy(problem.overlap_target_ids)] = src[torch.from_numpy(problem.overlap_source_ids)]
    copy_mean.seen.append(problem)
    copy_mean.options.append(options)
    return TransferResult(out, {"copied": len(problem.overlap_target_ids)})


copy_mean.seen, copy_mean.options = [], []


def negative_rows(problem: TransferProblem, options=NoOptions()) -> TransferResult:
    """A base method that writes negative coordinates into the non-overlapping rows."""
    out = -torch.ones(problem.target_size, problem.source_embeddings.shape[1])
    out[torch.from_numpy(problem.overlap_target_ids)] = problem.source_embeddings[
        torch.from_numpy(problem.overlap_source_ids)
    ]
    return TransferResult(out, {})


@pytest.fixture
def bases(monkeypatch):
    monkeypatch.setitem(METHODS, "copymean", copy_mean)
    monkeypatch.setitem(METHODS, "negative", negative_rows)
    copy_mean.seen.clear()
    copy_mean.options.clear()


def test_svd_variant_full_dim_equals_the_base_method(bases):
    base_options = NoOptions()
    res = resolve("copymean+svd")(problem(), FactorizedOptions(base_options, SvdOptions(keep_dim=3)))
    plain = copy_mean(problem())
    assert torch.equal(res.embeddings, plain.embeddings)  # overlap rows and the mean row, exactly
    assert copy_mean.options[0] is base_options  # the base gets init.<base> alone
    assert res.stats["method"] == "copymean+svd" and res.stats["base"] == {"copied": 3}


def test_svd_variant_low_rank(bases):
    res = call("copymean+svd", factorization={"keep_dim": 2})
    C, P = truncated_svd(E.double(), 2)
    inner = copy_mean.seen[0]
    assert inner.source_embeddings.shape == (4, 2)  # the base ran on the coordinates
    coords = res.extra["coordinates"]
    torch.testing.assert_close(coords[:3], C[[2, 0, 3]].float())
    torch.testing.assert_close(coords[3], C.mean(0).float())  # the mean in coordinate space
    torch.testing.assert_close(res.embeddings, (coords.double() @ P).float(), atol=1e-6, rtol=0)
    # the mean commutes with the linear up-projection: the mean of the rank-2 reconstruction
    torch.testing.assert_close(res.embeddings[5], (C @ P).mean(0).float(), atol=1e-6, rtol=0)
    fstats = res.stats["factorization"]
    assert (fstats["kind"], fstats["keep_dim"]) == ("svd", 2)
    # the reported error is the Frobenius error of the rank-2 reconstruction, computed here directly
    expected = float(torch.linalg.norm(E.double() - C @ P) / torch.linalg.norm(E.double()))
    assert 0 < expected < 1 and fstats["relative_error"] == pytest.approx(expected, rel=1e-9)


def test_snmf_variant_keeps_coordinates_nonnegative(bases):
    src = _clustered_source()
    opts = {"rank": 3, "max_iter": 30}
    res = call("copymean+snmf", factorization=opts, source=src)
    W = res.extra["coordinates"]
    assert bool((W >= 0).all()) and res.stats["clamped_negative_entries"] == 0
    torch.testing.assert_close(res.embeddings[:3], src[[2, 0, 3]], atol=1e-4, rtol=0)
    torch.testing.assert_close(res.embeddings, W @ res.extra["primitives"], atol=1e-5, rtol=0)
    # a base that writes negative coordinates: clamped to 0 and counted
    neg = call("negative+snmf", factorization=opts, source=src)
    assert neg.stats["clamped_negative_entries"] == 3 * 3 and neg.stats["clamped_rows"] == 3
    assert bool((neg.extra["coordinates"][3:] == 0).all())


def test_factorized_checks_base_output_and_options(bases):
    def wrong_shape(p, options):
        return TransferResult(torch.zeros(p.target_size, 7), {})

    with pytest.raises(VocabTransferError, match=r"wrong\+svd: base method returned shape \(6, 7\)"):
        factorized(wrong_shape, "svd", name="wrong+svd")(problem(), FactorizedOptions(NoOptions(), SvdOptions(2)))
    with pytest.raises(
        VocabTransferError, match=r"init\.svd\.keep_dim=4: larger than the source model's hidden size 3"
    ):
        call("copymean+svd", factorization={"keep_dim": 4})
    with pytest.raises(
        VocabTransferError, match=r"init\.snmf\.init: 'nndsvd' is not allowed; allowed values: 'kmeans', 'svd'"
    ):
        call("copymean+snmf", factorization={"rank": 2, "init": "nndsvd"})


def test_get_method_style_call_uses_the_registry_name(bases):
    # methods.get_method passes the base function itself: the name comes from the registry
    res = factorized(copy_mean, "svd")(problem(), FactorizedOptions(NoOptions(), SvdOptions(keep_dim=2)))
    assert res.stats["method"] == "copymean+svd"
    with pytest.raises(VocabTransferError, match="factorises on its own"):
        factorized(ofa, "snmf")


def test_resolve_names(bases):
    for bad, words in [
        ("nope+svd", ["unknown base method 'nope'", "copymean"]),
        ("ofa+svd", ["factorises on its own"]),
        ("copymean+pca", ["svd, snmf"]),
        ("copymean", ["<base>+<factorization>"]),
    ]:
        with pytest.raises(VocabTransferError) as err:
            resolve(bad)
        assert all(w in str(err.value) for w in words), str(err.value)
