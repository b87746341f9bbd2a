"""omp: OMP's choices and coefficients on hand-checkable atoms, equality with scikit-learn's
OrthogonalMatchingPursuit, the `omp` / `omp+svd` methods through the init stage on small real data, and OMP in a
donor's space (init method omp_donor) on a hand-made 5-token case, tied and untied."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from sklearn.linear_model import OrthogonalMatchingPursuit

from vocabtransfer.init import initialise
from vocabtransfer import io
from vocabtransfer.app.params import validate_params
from vocabtransfer.pipeline.config import typed_section
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.init.methods import available, get_method
from vocabtransfer.init.methods.focus import FocusInputs, focus_embeddings
from vocabtransfer.init.methods.omp import batch_omp, donor_embeddings, omp_donor, omp_embeddings
from vocabtransfer.init.methods.registry import TransferProblem
from vocabtransfer.plan.donor_vocab import vocabulary_sha256
from vocabtransfer.plan.method_options import OmpDonorOptions, OmpOptions

from helpers import make_ctx, text_lines, tiny_bert, wordpiece_tokenizer, write_inputs


def basis_and_pairs(d: int = 8) -> torch.Tensor:
    """Atoms 0..d-1: the unit vectors e_i; atoms d..2d-1: (e_i + e_{i+1 mod d}) / √2."""
    eye = torch.eye(d, dtype=torch.float64)
    return torch.cat([eye, (eye + eye.roll(-1, dims=0)) / math.sqrt(2)])


def dense(idx, coef, count, n) -> np.ndarray:
    out = np.zeros((idx.shape[0], n))
    for i, c in enumerate(count.tolist()):
        out[i, idx[i, :c].numpy()] = coef[i, :c].numpy()
    return out


# --------------------------------------------------------------------------- batch_omp on hand-made atoms


def test_omp_recovers_a_planted_sparse_combination_exactly():
    """x = 3 e1 - 2 e5 + 0.5 e7. Step 1: |<atom, x>| is 3 for e1, 3/√2 for the pairs with e1: e1 (coef 3).
    Step 2: residual -2 e5 + 0.5 e7, largest |correlation| 2 at e5. Step 3: residual 0.5 e7: e7 (0.5 against
    0.5/√2 for its pairs). Then the residual is 0 and the token stops with 3 of its k = 5 atoms. In the same
    batch, y = (e2 + e3)/√2 is atom 10 itself (correlation 1 against 1/√2 for e2, e3) and stops after it."""
    atoms = basis_and_pairs()
    x = 3 * atoms[1] - 2 * atoms[5] + 0.5 * atoms[7]
    idx, coef, count = batch_omp(atoms, torch.stack([x, atoms[10]]), k=5)
    assert count.tolist() == [3, 1]
    assert idx[0, :3].tolist() == [1, 5, 7] and idx[1, 0] == 10
    assert torch.allclose(coef[0, :3], torch.tensor([3.0, -2.0, 0.5], dtype=torch.float64), atol=1e-12)
    assert coef[1, 0] == pytest.approx(1.0, abs=1e-12)
    assert (coef[0, 3:] == 0).all() and (coef[1, 1:] == 0).all()  # no atom past the stop


def test_omp_signed_coefficients_reach_the_source_rows():
    """Through omp_embeddings: the new token's vector is normalised, so its coefficients are (3, -2, 0.5)/|x|,
    and they multiply the source rows of those atoms (one-hot rows here, so the row shows the coefficients);
    a token with an all-zero vector and one outside the fastText dictionary get FOCUS's rows."""
    atoms = basis_and_pairs().float()
    n = atoms.shape[0]  # 16 overlapping target tokens 0..15, target i <- source 15 - i
    source = torch.cat([torch.eye(n), torch.randn(2, n, generator=torch.Generator().manual_seed(0))])
    t_ov, s_ov = np.arange(n), n - 1 - np.arange(n)
    x = 3 * atoms[1] - 2 * atoms[5] + 0.5 * atoms[7]
    aux = torch.cat([atoms, x[None], torch.zeros(1, 8), torch.ones(1, 8)])
    mask = torch.ones(n + 3, dtype=torch.bool)
    mask[n + 2] = False  # not in the fastText dictionary
    inputs = FocusInputs(source, t_ov, s_ov, aux, mask, n + 3)
    out, stats = omp_embeddings(inputs, OmpOptions(k=5), seed=3)
    assert torch.equal(out[:n], source[s_ov])
    expected = torch.zeros(n)
    expected[[n - 1 - 1, n - 1 - 5, n - 1 - 7]] = torch.tensor([3.0, -2.0, 0.5]) / x.norm()
    assert torch.allclose(out[n], expected, atol=1e-6)
    focus, fstats = focus_embeddings(inputs, seed=3)
    assert torch.equal(out[n + 1 :], focus[n + 1 :])  # the same random rows as FOCUS, same seed
    assert (stats["copied"], stats["omp_combined"], stats["random"], stats["anchors"]) == (16, 1, 2, 16)
    assert stats["atoms_mean"] == 3 and stats["stopped_early"] == 1 and stats["residual_mean"] < 1e-6


def test_omp_norm_atoms_rescales_the_combined_row_to_its_atoms_norms():
    """init.omp.norm = atoms: the row of test_omp_signed_coefficients_reach_the_source_rows keeps its direction
    and takes the |γ|-weighted mean norm of its atoms' source rows. Source row s is (s + 1) e_s, so the
    atoms 1, 5, 7 (source rows 14, 10, 8) have norms 15, 11, 9 and γ ∝ (3, -2, 0.5): the norm is
    (3·15 + 2·11 + 0.5·9) / 5.5 = 13.0, where the raw combination's is |(45, -22, 4.5)| / |x| = 14.1 (a
    larger Σ|γ| would make it longer than any of its atoms); the copies and FOCUS's rows do not change."""
    atoms = basis_and_pairs().float()
    n = atoms.shape[0]
    source = torch.diag(torch.arange(1, n + 1, dtype=torch.float32))
    t_ov, s_ov = np.arange(n), n - 1 - np.arange(n)
    x = 3 * atoms[1] - 2 * atoms[5] + 0.5 * atoms[7]
    aux = torch.cat([atoms, x[None], torch.zeros(1, 8)])
    mask = torch.ones(n + 2, dtype=torch.bool)
    inputs = FocusInputs(source, t_ov, s_ov, aux, mask, n + 2)
    raw, raw_stats = omp_embeddings(inputs, OmpOptions(k=5), seed=3)
    out, stats = omp_embeddings(inputs, OmpOptions(k=5, norm="atoms"), seed=3)
    expected = torch.zeros(n)
    expected[[14, 10, 8]] = torch.tensor([45.0, -22.0, 4.5])
    expected = expected / expected.norm() * (3 * 15 + 2 * 11 + 0.5 * 9) / 5.5
    assert torch.allclose(out[n], expected, atol=1e-5)
    assert out[n].norm() == pytest.approx(13.0, abs=1e-5)
    assert raw[n].norm() == pytest.approx(float(torch.tensor([45.0, -22.0, 4.5]).norm() / x.norm()), rel=1e-5)
    assert torch.equal(out[:n], raw[:n]) and torch.equal(out[n + 1 :], raw[n + 1 :])
    assert stats["norm"] == "atoms" and raw_stats["norm"] == "combination"
    assert stats["combined_norm_max"] == pytest.approx(float(raw[n].norm()), rel=1e-4)
    with pytest.raises(VocabTransferError, match="init.omp.norm='unit'"):
        omp_embeddings(inputs, OmpOptions(k=5, norm="unit"))


def test_omp_k1_picks_the_nearest_atom_by_absolute_cosine():
    """Nearest, as OMP defines it: the atom with the largest |<â, x̂>| (unit atoms, either sign), and its
    coefficient is that cosine. x = (1, 0.1, 0): cos with a0 = (0.9, 0.44, 0) is 0.938, with a1 = (-1, 0, 0)
    -0.995, with a2 = (7, 7, 0) 0.774 (but the largest raw inner product, 7.7), with a3 = e3 0. So k = 1
    takes a1 and the row is -0.995 times a1's source row."""
    aux = torch.tensor([[0.9, 0.44, 0.0], [-1.0, 0.0, 0.0], [7.0, 7.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.1, 0.0]])
    source = torch.randn(4, 6, generator=torch.Generator().manual_seed(1))
    inputs = FocusInputs(source, np.arange(4), np.arange(4), aux, torch.ones(5, dtype=torch.bool), 5)
    out, stats = omp_embeddings(inputs, OmpOptions(k=1))
    cos = -1.0 / math.sqrt(1.01)
    assert torch.allclose(out[4], cos * source[1], atol=1e-6)
    assert stats["atoms_max"] == 1 and stats["stopped_early"] == 0


def test_omp_equals_scikit_learn_per_token():
    """Random unit atoms and signals: the same atoms and coefficients as scikit-learn's
    OrthogonalMatchingPursuit(n_nonzero_coefs=k, fit_intercept=False) fitted token by token."""
    g = torch.Generator().manual_seed(0)
    n, d, m, k = 80, 24, 40, 8
    atoms = torch.nn.functional.normalize(torch.randn(n, d, generator=g, dtype=torch.float64), dim=1)
    signals = torch.nn.functional.normalize(torch.randn(m, d, generator=g, dtype=torch.float64), dim=1)
    idx, coef, count = batch_omp(atoms, signals, k)
    assert (count == k).all()
    ref = np.stack(
        [
            OrthogonalMatchingPursuit(n_nonzero_coefs=k, fit_intercept=False).fit(atoms.T.numpy(), x.numpy()).coef_
            for x in signals
        ]
    )
    ours = dense(idx, coef, count, n)
    assert ((ours != 0) == (ref != 0)).all()
    assert np.abs(ours - ref).max() < 1e-10


def test_omp_stops_at_the_dimension_of_the_auxiliary_space():
    """k = 12 atoms in an 8-dimensional space: 8 atoms already reproduce any vector, so every token stops at
    8 or fewer with no residual (scikit-learn's rules: no correlation left, or a dependent atom)."""
    g = torch.Generator().manual_seed(2)
    atoms = torch.nn.functional.normalize(torch.randn(40, 8, generator=g, dtype=torch.float64), dim=1)
    signals = torch.randn(10, 8, generator=g, dtype=torch.float64)
    idx, coef, count = batch_omp(atoms, signals, 12)
    assert (count <= 8).all() and (count >= 7).all()
    recon = torch.stack([coef[i, :c] @ atoms[idx[i, :c]] for i, c in enumerate(count.tolist())])
    assert torch.allclose(recon, signals, atol=1e-9)


# --------------------------------------------------------------------------- through the init stage


@pytest.fixture(scope="module")
def tokenizers():
    return {"en": wordpiece_tokenizer("en"), "sw": wordpiece_tokenizer("sw", 250)}


@pytest.fixture
def stage_inputs(tmp_path, tokenizers):
    """A tiny BERT with an English WordPiece vocabulary, a Swahili target tokenizer, and token-level fastText
    vectors trained on 300 Swahili lines tokenised with it (the fasttext stage's recipe, dim 8)."""
    from vocabtransfer.data.fasttext_models import train_fasttext
    from vocabtransfer.data.fasttext_vectors import token_vectors

    inputs, pairs = write_inputs(tmp_path, tiny_bert(len(tokenizers["en"])), tokenizers["en"], tokenizers["sw"])
    text = tmp_path / "tokens.txt"
    text.write_text(
        "".join(" ".join(tokenizers["sw"].tokenize(line)) + "\n" for line in text_lines("sw", 300)), encoding="utf-8"
    )
    emb, mask = token_vectors(train_fasttext(text, dim=8, epochs=2, min_count=2, bucket=5000), tokenizers["sw"])
    io.save_tensors({"embeddings": emb, "mask": mask}, inputs["fasttext"])
    return inputs, pairs, mask


def omp_params(**omp):
    return validate_params(
        {
            "languages": ["sw"],
            "source_model": "x/y",
            "seed": 7,
            "corpus": {"sources": {"sw": {"path": "sw.txt"}}},
            "init": {"methods": ["omp", "omp+svd", "focus"], "omp": {"k": 4, **omp}, "svd": {"keep_dim": 8}},
        }
    )


def run_init(tmp_path, inputs, method, params, out="init"):
    path = tmp_path / out / method
    initialise.run(
        make_ctx("vocabtransfer.init.initialise:run", {"lang": "sw", "method": method}, inputs, {"init": path}, params)
    )
    return path


def test_omp_and_omp_svd_run_through_the_init_stage(tmp_path, stage_inputs, one_thread):
    inputs, pairs, mask = stage_inputs
    params = omp_params()
    assert params["init"]["omp"] == {"k": 4, "block_size": 256, "norm": "combination"}
    assert "omp" in available() and callable(get_method("omp")) and callable(get_method("omp+svd"))
    runs = {m: run_init(tmp_path, inputs, m, params) for m in ("omp", "omp+svd", "focus")}
    emb = {m: load_file(str(p / "embeddings.safetensors"))["input_embeddings"] for m, p in runs.items()}
    n = mask.shape[0]
    for m in ("omp", "omp+svd"):
        assert emb[m].shape == (n, 32) and bool(torch.isfinite(emb[m]).all())
    stats = json.loads((runs["omp"] / "stats.json").read_text())
    ms = stats["method_stats"]
    t, s = map(np.array, zip(*pairs))
    new_with_vec = mask.numpy().copy()
    new_with_vec[t] = False
    assert ms["omp_combined"] == int(new_with_vec.sum()) > 20 and ms["copied"] == len(pairs)
    assert 1 <= ms["atoms_mean"] <= 4 and ms["k"] == 4
    assert sum(stats["target_rows"].values()) == n and stats["target_rows"]["overlap"] == len(pairs)
    # copies are the source rows; tokens without a vector get exactly FOCUS's rows; the others OMP's
    other = np.ones(n, dtype=bool)
    other[t] = False
    no_vec = torch.from_numpy(other & ~mask.numpy())
    assert torch.equal(emb["omp"][torch.from_numpy(t)], emb["focus"][torch.from_numpy(t)])
    assert no_vec.any() and torch.equal(emb["omp"][no_vec], emb["focus"][no_vec])
    assert not torch.allclose(emb["omp"][torch.from_numpy(new_with_vec)], emb["focus"][torch.from_numpy(new_with_vec)])
    svd = json.loads((runs["omp+svd"] / "stats.json").read_text())["method_stats"]
    assert svd["base"]["method"] == "omp" and svd["factorization"]["keep_dim"] == 8
    assert (runs["omp+svd"] / "coordinates.safetensors").is_file()


def test_omp_same_seed_gives_byte_identical_artefacts(tmp_path, stage_inputs, one_thread):
    inputs, _, _ = stage_inputs
    params = omp_params()
    for method in ("omp", "omp+svd"):
        a, b = (run_init(tmp_path, inputs, method, params, out) for out in ("a", "b"))
        for name in ("embeddings.safetensors", "model/model.safetensors"):
            assert (a / name).read_bytes() == (b / name).read_bytes(), (method, name)


def test_omp_bad_k_is_one_line_naming_the_key(tmp_path, stage_inputs):
    inputs, _, _ = stage_inputs
    with pytest.raises(VocabTransferError, match=r"init\.omp\.k: 0 is less than the minimum of 1"):
        omp_params(k=0)
    with pytest.raises(VocabTransferError, match=r"init\.omp\.k: 0 is less than the minimum of 1"):
        typed_section(OmpOptions, "init.omp", {"k": 0})  # options from Python, checked by the same schema
    params = omp_params(k=1000)
    with pytest.raises(VocabTransferError) as err:
        run_init(tmp_path, inputs, "omp", params)
    message = str(err.value)
    assert "\n" not in message and message.startswith("init.omp.k=1000: larger than the ")
    assert "overlapping tokens with a fastText vector (sw)" in message and "set init.omp.k to at most" in message
    assert not (tmp_path / "init").exists() or not any((tmp_path / "init").iterdir())  # nothing written


# ---------------------------------------------------------------- the donor's space (init method omp_donor)
# Target vocabulary: <unk> a b x y (ids 0-4); source vocabulary: <unk> b a z (ids 0-3). The overlap: <unk>, a, b.
# In the donor's input space (width 4), with u, a, b the donor rows of <unk>, a, b (a and b not orthogonal):
#   x = 2 a - 0.5 b   and   y = -3 u + 0.5 a - 0.25 b,
# so x's row is 2 A - 0.5 B and y's -3 U + 0.5 A - 0.25 B of the source rows U, A, B of <unk>, a, b: every number a
# short binary fraction, the arithmetic exact in float32 and float64 alike. In an untied donor's output space (width
# 3) the codes differ: x = 0.5 a' + b', y = -u'.
DONOR_IN = torch.tensor(
    [[0, 0, 1, 0], [1, 0, 0, 0], [1, 1, 0, 0], [1.5, -0.5, 0, 0], [0.25, -0.25, -3, 0]], dtype=torch.float32
)
DONOR_OUT = torch.tensor([[0, 1, 0], [2, 0, 0], [0, 0, 1], [1, 0, 1], [0, -1, 0]], dtype=torch.float32)
SOURCE_IN = torch.tensor([[1, 0.5, -2], [0.25, 4, 1], [-1, 2, 0.5], [9, 9, 9]], dtype=torch.float32)  # <unk> b a z
SOURCE_OUT = torch.tensor([[-0.5, 1, 3], [2, -0.25, 0.5], [0.75, 1, -1], [7, 7, 7]], dtype=torch.float32)
OVERLAP_T, OVERLAP_S = np.array([0, 1, 2]), np.array([0, 2, 1])  # <unk> -> <unk>, a -> a (source 2), b -> b (1)


def hand_rows(source: torch.Tensor, codes: dict[int, dict[int, float]]) -> torch.Tensor:
    """The expected target rows: copies of U, A, B for <unk>, a, b; for x and y the hand-made codes {target atom id:
    coefficient} applied to the atoms' source rows, in float32."""
    u, a, b = source[0], source[2], source[1]
    atom = {0: u, 1: a, 2: b}
    rows = [u, a, b] + [sum(c * atom[j] for j, c in codes[i].items()) for i in (3, 4)]
    return torch.stack(rows)


INPUT_CODES = {3: {1: 2.0, 2: -0.5}, 4: {0: -3.0, 1: 0.5, 2: -0.25}}
OUTPUT_CODES = {3: {1: 0.5, 2: 1.0}, 4: {0: -1.0}}


def five_token_tokenizer():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(["<unk>", "a", "b", "x", "y"])}
    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="<unk>")), unk_token="<unk>"
    )


def test_donor_space_omp_is_the_hand_made_combination_byte_for_byte():
    assert torch.equal(DONOR_IN[3], 2 * DONOR_IN[1] - 0.5 * DONOR_IN[2])  # the planted codes hold in the donor
    assert torch.equal(DONOR_IN[4], -3 * DONOR_IN[0] + 0.5 * DONOR_IN[1] - 0.25 * DONOR_IN[2])
    rows, stats = donor_embeddings(SOURCE_IN, DONOR_IN, OVERLAP_T, OVERLAP_S, OmpDonorOptions(k=3))
    expected = hand_rows(SOURCE_IN, INPUT_CODES)
    assert rows.dtype == torch.float32 and torch.equal(rows, expected), (rows, expected)
    assert torch.equal(expected[3], 2 * SOURCE_IN[2] - 0.5 * SOURCE_IN[1])  # 2 A - 0.5 B, written out
    assert stats["copied"] == 3 and stats["omp_combined"] == 2 and stats["random"] == 0 and stats["anchors"] == 3
    assert stats["atoms_mean"] == 2.5 and stats["residual_mean"] == 0.0  # x: 2 atoms, y: 3; both exact
    # k = 2 cannot spell y: its best two atoms leave part of it, and the stats say so
    _, short = donor_embeddings(SOURCE_IN, DONOR_IN, OVERLAP_T, OVERLAP_S, OmpDonorOptions(k=2))
    assert short["atoms_max"] == 2 and short["residual_mean"] > 0
    with pytest.raises(VocabTransferError, match=r"init\.omp_donor\.k=4: larger than the 3 overlapping tokens"):
        donor_embeddings(SOURCE_IN, DONOR_IN, OVERLAP_T, OVERLAP_S, OmpDonorOptions(k=4))


def donor_problem(tmp_path, donor: dict[str, torch.Tensor], matrix: str, vocab_sha256: str | None = None):
    """The TransferProblem of one init pass (`matrix`) whose donor embeddings file holds `donor`."""
    target = five_token_tokenizer()
    path = tmp_path / f"donor_{'_'.join(sorted(donor))}.safetensors"
    io.save_tensors(donor, path, metadata={"vocab_sha256": vocab_sha256 or vocabulary_sha256(target.get_vocab())})
    return TransferProblem(
        source_embeddings=SOURCE_IN if matrix == "input" else SOURCE_OUT,
        source_tokenizer=None,
        target_tokenizer=target,
        overlap_target_ids=OVERLAP_T,
        overlap_source_ids=OVERLAP_S,
        resources={"donor": path},
        matrix=matrix,
    )


@pytest.mark.parametrize("donor_tied", [True, False], ids=["tied donor", "untied donor"])
def test_donor_space_omp_codes_each_source_matrix_in_the_donors_own_space(tmp_path, donor_tied):
    """The init stage runs omp_donor once per source matrix: the input embeddings are coded in the donor's input
    space; an untied source's output embeddings in the donor's output space where it has one, else in its one
    (tied) space."""
    donor = {"input": DONOR_IN} if donor_tied else {"input": DONOR_IN, "output": DONOR_OUT}
    opts = OmpDonorOptions(k=3)
    inp = omp_donor(donor_problem(tmp_path, donor, "input"), opts)
    assert torch.equal(inp.embeddings, hand_rows(SOURCE_IN, INPUT_CODES))
    assert inp.stats["donor_matrix"] == "input" and inp.stats["method"] == "omp_donor"
    out = omp_donor(donor_problem(tmp_path, donor, "output"), opts)
    codes = INPUT_CODES if donor_tied else OUTPUT_CODES
    assert torch.equal(out.embeddings, hand_rows(SOURCE_OUT, codes))
    assert out.stats["donor_matrix"] == ("input" if donor_tied else "output") and out.stats["matrix"] == "output"


def test_donor_space_omp_refuses_another_vocabulary_and_a_missing_donor(tmp_path):
    opts = OmpDonorOptions(k=3)
    other = donor_problem(tmp_path, {"input": DONOR_IN}, "input", vocab_sha256=vocabulary_sha256({"a": 0}))
    with pytest.raises(VocabTransferError, match="another vocabulary .* rerun stage donor"):
        omp_donor(other, opts)
    problem = donor_problem(tmp_path, {"input": DONOR_IN}, "input")
    with pytest.raises(VocabTransferError, match="no donor embeddings were given; set tokenizer.donor_model"):
        omp_donor(TransferProblem(**{**problem.__dict__, "resources": {}}), opts)
    short = donor_problem(tmp_path, {"input": DONOR_IN[:4]}, "input")
    with pytest.raises(VocabTransferError, match=r"\(4, 4\) are not one finite row per target token \(5\)"):
        omp_donor(short, opts)
