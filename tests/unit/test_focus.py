"""FOCUS: sparsemax convex combinations, deepfocus's random stream, equality with deepfocus.FOCUS
1.0.1 on MiniLM -> a Swahili tokenizer, determinism, errors, and the `focus` method."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from vocabtransfer.init.deepfocus import FASTTEXT_WORD_URL, FOCUS, TokenVectors, download_fasttext_word_model
from vocabtransfer.data.fasttext_models import load_fasttext
from vocabtransfer.init.methods import focus
from vocabtransfer.plan.method_options import FocusOptions
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.model.hub import load_tokenizer, resolve_model_path
from vocabtransfer.data.overlap import compute_overlap, overlap_pairs

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
N_LINES = 3000
TOL = 1e-5


def sparsemax_reference(z: np.ndarray) -> np.ndarray:
    """Martins & Astudillo (2016), written out in float64 (independent of entmax)."""
    s = np.sort(z)[::-1]
    k = np.arange(1, z.size + 1)
    support = 1 + k * s > np.cumsum(s)
    kz = k[support][-1]
    tau = (np.cumsum(s)[kz - 1] - 1) / kz
    return np.maximum(z - tau, 0)


def deepfocus_random_rows(source: torch.Tensor, n: int, seed: int) -> torch.Tensor:
    """deepfocus's loop: one torch.normal(mean, std) per random token from one seeded generator."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    mean, std = source.mean(dim=0), source.std(dim=0)
    return torch.stack([torch.normal(mean, std, generator=gen) for _ in range(n)])


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """deepfocus runs a per-token loop of tiny ops, which crawls when torch spins 2+ threads on a
    shared, busy machine; one thread keeps this file fast. Restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# --------------------------------------------------------------------------- the core on a tiny case


def tiny_problem(dim: int = 16):
    """6 overlapping tokens whose source rows are one-hot (so a FOCUS row shows its weights), and
    5 new tokens: 3 with fastText vectors, 1 with an all-zero vector, 1 outside the fastText dict."""
    source = torch.zeros(10, dim)
    source[torch.arange(6), torch.arange(6)] = 1.0
    source[6:] = torch.randn(4, dim, generator=torch.Generator().manual_seed(0))
    t_ov, s_ov = np.arange(6), np.array([5, 4, 3, 2, 1, 0])  # target i copies source 5 - i
    aux = torch.tensor(
        [
            [1.0, 0.0, 0.0],
            [0.9, 0.1, 0.0],
            [0.0, 1.0, 0.0],
            [0.0, 0.9, 0.3],
            [0.0, 0.0, 1.0],
            [-1.0, 0.0, 0.0],  # anchors (targets 0..5)
            [1.0, 0.05, 0.0],
            [0.2, 0.2, 0.2],
            [0.0, 0.0, 0.0],
            [0.5, 0.5, 0.0],
            [0.3, -0.2, 0.9],
        ]
    )
    mask = torch.ones(11, dtype=torch.bool)
    mask[9] = False  # not in the fastText dictionary
    return source, t_ov, s_ov, aux, mask


def test_focus_rows_are_sparsemax_convex_combinations_of_anchor_rows():
    source, t_ov, s_ov, aux, mask = tiny_problem()
    out, stats = focus.focus_embeddings(focus.FocusInputs(source, t_ov, s_ov, aux, mask, target_size=11), seed=3)
    assert stats["copied"] == 6 and stats["focus_combined"] == 3 and stats["random"] == 2
    assert stats["random_reason"] == "no fastText vector" and stats["anchors"] == 6
    assert torch.equal(out[:6], source[s_ov])
    unit = aux[:6] / aux[:6].norm(dim=1, keepdim=True)
    for tid in (6, 7, 10):
        # source row 5 - i is one-hot in dimension 5 - i, so weight of anchor i sits in column 5 - i
        weights = out[tid, :6].flip(0).double().numpy()
        assert (weights >= 0).all() and weights.sum() == pytest.approx(1.0, abs=1e-6)
        assert torch.count_nonzero(out[tid, 6:]) == 0
        sims = (unit @ (aux[tid] / aux[tid].norm())).double().numpy()
        np.testing.assert_allclose(weights, sparsemax_reference(sims), atol=1e-6)
    assert (out[6, :6] == 0).sum() >= 3  # sparse: a token close to anchors 0/1 ignores the far ones
    # rows 8 (zero vector) and 9 (not in the dict) are deepfocus's random draws, in target-id order
    assert torch.equal(out[[8, 9]], deepfocus_random_rows(source, 2, seed=3))


@pytest.mark.parametrize("dim", [16, 48, 20, 100, 8])
def test_random_rows_are_deepfocus_stream_for_any_dim(dim):
    source = torch.randn(50, dim, generator=torch.Generator().manual_seed(1)) * 0.1 + 0.3
    got = focus.normal_rows(source.mean(dim=0), source.std(dim=0), 37, seed=42)
    assert torch.equal(got, deepfocus_random_rows(source, 37, seed=42))


def test_topk_and_block_size_do_not_change_the_result():
    gen = torch.Generator().manual_seed(0)
    source = torch.randn(300, 32, generator=gen)
    aux = torch.randn(500, 12, generator=gen)
    mask = torch.rand(500, generator=gen) > 0.1
    t_ov = np.arange(0, 500, 3)
    s_ov = np.random.default_rng(0).permutation(300)[: t_ov.size]
    inputs = focus.FocusInputs(source, t_ov, s_ov, aux, mask, 500)
    ref, ref_stats = focus.focus_embeddings(inputs, opts=FocusOptions(topk=10_000, block_size=4096))
    assert ref_stats["support_max"] > 4  # rows with supports larger than the smallest k below
    for topk, block in ((1, 7), (4, 100), (16, 64)):
        out, _ = focus.focus_embeddings(inputs, opts=FocusOptions(topk=topk, block_size=block))
        torch.testing.assert_close(out, ref, rtol=0, atol=1e-6)


def test_bad_inputs_are_one_line_errors():
    source, t_ov, s_ov, aux, mask = tiny_problem()
    cases = [
        (dict(target_ids_overlap=t_ov[:3]), "6 source ids"),
        (dict(source_ids_overlap=s_ov + 10), "source_id 15 is outside the source model's vocabulary"),
        (dict(target_ids_overlap=np.array([0, 0, 1, 2, 3, 4])), "appears more than once"),
        (dict(auxiliary=aux[:5]), "expected (11, d) vectors"),
        (dict(source_embeddings=source[0]), "expected a 2-D tensor"),
    ]
    base = dict(
        source_embeddings=source,
        target_ids_overlap=t_ov,
        source_ids_overlap=s_ov,
        auxiliary=aux,
        auxiliary_mask=mask,
        target_size=11,
    )
    for change, message in cases:
        with pytest.raises(VocabTransferError, match=message.replace("(", r"\(").replace(")", r"\)")) as err:
            focus.focus_embeddings(focus.FocusInputs(**{**base, **change}))
        assert "\n" not in str(err.value)
    with pytest.raises(VocabTransferError, match="no overlapping token has an auxiliary"):
        focus.focus_embeddings(focus.FocusInputs(**{**base, "auxiliary_mask": torch.tensor([False] * 6 + [True] * 5)}))


# --------------------------------------------------------------------------- against deepfocus


@pytest.fixture(scope="module")
def minilm():
    from safetensors.torch import load_file

    tokenizer = load_tokenizer(MINILM)
    weights = load_file(str(resolve_model_path(MINILM) / "model.safetensors"))
    return tokenizer, weights["embeddings.word_embeddings.weight"]


@pytest.fixture(scope="module")
def sw_lines(shared_data):
    with (shared_data / "pretrain_text" / "sw.txt").open(encoding="utf-8") as f:
        return [next(f).rstrip("\n") for _ in range(N_LINES)]


@pytest.fixture(scope="module")
def sw_tokenizer(minilm, sw_lines):
    return minilm[0].train_new_from_iterator(sw_lines, vocab_size=2000)


def train_fasttext(text, out, **kwargs) -> str:
    """Train and save a fastText model; both implementations always load the same saved .bin.

    fastText 0.9.3 initialises only a tenth of its input matrix on one thread and leaves the
    rest as allocated: with the default bucket (2M rows) that memory is fresh, zeroed pages,
    with a small bucket it can be reused heap memory and training hits NaN. So the default
    bucket is kept, a NaN run is retried, and a model with non-finite vectors is refused."""
    import fasttext

    for attempt in range(10):
        try:
            model = fasttext.train_unsupervised(str(text), thread=1, verbose=0, **kwargs)
            break
        except RuntimeError as exc:
            if "NaN" not in str(exc) or attempt == 9:
                raise
    assert np.isfinite(model.get_input_matrix()).all(), "fastText produced non-finite vectors"
    model.save_model(str(out))
    return str(out)


@pytest.fixture(scope="module")
def token_fasttext(tmp_path_factory, sw_tokenizer, sw_lines):
    """Token-level fastText (deepfocus's CBOW, neg=10) on the lines tokenised by the target tokenizer."""
    d = tmp_path_factory.mktemp("fasttext")
    text = d / "tokens.txt"
    text.write_text("".join(" ".join(sw_tokenizer.tokenize(line)) + "\n" for line in sw_lines), encoding="utf-8")
    return train_fasttext(text, d / "model.bin", model="cbow", dim=32, epoch=3, minCount=5, neg=10)


def run_both(**kwargs):
    import deepfocus

    ref = deepfocus.FOCUS(verbosity="silent", **kwargs)
    ours = FOCUS(verbosity="silent", **kwargs)
    return ref, ours


@pytest.mark.parametrize("dim", [384, 100], ids=["D384", "D100-not-multiple-of-16"])
def test_equals_deepfocus_on_minilm_to_swahili(minilm, sw_tokenizer, token_fasttext, dim):
    source_tokenizer, embeddings = minilm
    embeddings = embeddings[:, :dim]
    ref, ours = run_both(
        target_tokenizer=sw_tokenizer,
        source_tokenizer=source_tokenizer,
        source_embeddings=embeddings,
        fasttext_model_path=token_fasttext,
    )
    assert ours.shape == ref.shape == (len(sw_tokenizer), dim) and ours.dtype == ref.dtype == torch.float32
    assert (ours - ref).abs().max().item() < TOL
    # all three kinds of rows are exercised: copied, random (no fastText vector), combined
    table = compute_overlap(sw_tokenizer, source_tokenizer)
    t_ov, s_ov = overlap_pairs(table)
    assert torch.equal(ours[t_ov], embeddings[s_ov])
    words = TokenVectors(model=load_fasttext(token_fasttext)).words
    rare = [i for t, i in sw_tokenizer.get_vocab().items() if t not in words and i not in set(t_ov.tolist())]
    assert len(rare) > 20 and torch.equal(ours[sorted(rare)], ref[sorted(rare)])
    assert len(sw_tokenizer) - len(t_ov) - len(rare) > 500


def test_same_seed_same_bytes_other_seed_other_random_rows(minilm, sw_tokenizer, token_fasttext):
    source_tokenizer, embeddings = minilm
    kwargs = dict(
        target_tokenizer=sw_tokenizer,
        source_tokenizer=source_tokenizer,
        source_embeddings=embeddings,
        fasttext_model_path=token_fasttext,
        verbosity="silent",
    )
    a, b, c = FOCUS(seed=7, **kwargs), FOCUS(seed=7, **kwargs), FOCUS(seed=8, **kwargs)
    assert a.numpy().tobytes() == b.numpy().tobytes()
    changed = (a != c).any(dim=1)
    words = TokenVectors(model=load_fasttext(token_fasttext)).words
    no_vector = torch.tensor([t not in words for t in sw_tokenizer.convert_ids_to_tokens(list(range(len(a))))])
    assert changed.any() and not (changed & ~no_vector).any()  # only rows without a vector depend on the seed


def test_wordlevel_with_local_model_equals_deepfocus(tmp_path, minilm, sw_tokenizer, sw_lines):
    text = tmp_path / "words.txt"
    text.write_text("\n".join(sw_lines) + "\n", encoding="utf-8")
    words = train_fasttext(text, tmp_path / "words.bin", model="skipgram", dim=16, epoch=1, minCount=3)
    source_tokenizer, embeddings = minilm
    ref, ours = run_both(
        target_tokenizer=sw_tokenizer,
        source_tokenizer=source_tokenizer,
        source_embeddings=embeddings,
        auxiliary_embedding_mode="fasttext-wordlevel",
        language_identifier=words,
    )
    assert (ours - ref).abs().max().item() < TOL


def test_wordlevel_language_code_downloads_once_into_the_cache(tmp_path, monkeypatch, token_fasttext):
    """A language code fetches cc.<lang>.300.bin.gz (here from a file:// stand-in for
    dl.fbaipublicfiles.com), unpacks it into the cache and reuses it on the next call."""
    import gzip
    import shutil

    assert FASTTEXT_WORD_URL == "https://dl.fbaipublicfiles.com/fasttext/vectors-crawl/cc.{lang}.300.bin.gz"
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    with open(token_fasttext, "rb") as src, gzip.open(mirror / "cc.xx.300.bin.gz", "wb", compresslevel=1) as dst:
        shutil.copyfileobj(src, dst)
    monkeypatch.setattr("vocabtransfer.init.deepfocus.FASTTEXT_WORD_URL", f"file://{mirror}/cc.{{lang}}.300.bin.gz")
    monkeypatch.setenv("VOCABTRANSFER_CACHE", str(tmp_path / "cache"))
    model = download_fasttext_word_model("xx")
    cached = tmp_path / "cache" / "pretrained_fasttext" / "cc.xx.300.bin"
    assert cached.read_bytes() == Path(token_fasttext).read_bytes()
    assert sorted(p.name for p in cached.parent.iterdir()) == ["cc.xx.300.bin"]  # no .gz / .part left
    (mirror / "cc.xx.300.bin.gz").unlink()
    assert download_fasttext_word_model("xx").get_words() == model.get_words()  # served from the cache
    with pytest.raises(VocabTransferError, match="download failed"):
        download_fasttext_word_model("yy")


def test_training_the_fasttext_model_like_deepfocus(
    tmp_path, monkeypatch, minilm, sw_tokenizer, sw_lines, token_fasttext
):
    """With only target_training_data_path, both tokenise the text the same way and call fastText
    with the same settings; the training call is replaced by loading one fixed model (fastText
    training is not reproducible here), so the outputs must then agree."""
    import datasets
    import deepfocus.fasttext_embs
    import fasttext

    calls = []

    def fake_train(input, **kwargs):
        calls.append((Path(input).read_text(encoding="utf-8"), kwargs))
        return fasttext.load_model(token_fasttext)

    monkeypatch.setattr(fasttext, "train_unsupervised", fake_train)
    monkeypatch.setattr(deepfocus.fasttext_embs, "CACHE_DIR", tmp_path / "deepfocus-cache")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "datasets-cache"))
    monkeypatch.setenv("VOCABTRANSFER_CACHE", str(tmp_path / "vocabtransfer-cache"))
    text = tmp_path / "sw.txt"
    text.write_text("\n".join(sw_lines[:1000]) + "\n", encoding="utf-8")
    source_tokenizer, embeddings = minilm
    ref, ours = run_both(
        target_tokenizer=sw_tokenizer,
        source_tokenizer=source_tokenizer,
        source_embeddings=embeddings,
        target_training_data_path=str(text),
        fasttext_model_dim=8,
        fasttext_model_epochs=2,
        fasttext_model_min_count=3,
        processes=1,
    )
    (theirs_text, theirs_args), (our_text, our_args) = calls
    assert our_text == theirs_text and our_text.count("\n") == 1000 and "##" in our_text
    assert our_args == theirs_args == dict(dim=8, neg=10, model="cbow", epoch=2, thread=1, minCount=3)
    assert (ours - ref).abs().max().item() < TOL
    cached = list((tmp_path / "vocabtransfer-cache" / "fasttext").glob("*.bin"))
    assert len(cached) == 1
    FOCUS(
        target_tokenizer=sw_tokenizer,
        source_tokenizer=source_tokenizer,
        source_embeddings=embeddings,
        target_training_data_path=str(text),
        fasttext_model_dim=8,
        fasttext_model_epochs=2,
        fasttext_model_min_count=3,
        processes=1,
        verbosity="silent",
    )
    assert len(calls) == 2  # the second call loaded the cached model instead of training


def test_missing_arguments_raise_deepfocus_errors(minilm, sw_tokenizer):
    import deepfocus

    source_tokenizer, embeddings = minilm
    for mode in ("fasttext-tokenlevel", "fasttext-wordlevel"):
        kwargs = dict(
            target_tokenizer=sw_tokenizer,
            source_tokenizer=source_tokenizer,
            source_embeddings=embeddings,
            auxiliary_embedding_mode=mode,
            verbosity="silent",
        )
        with pytest.raises(ValueError) as theirs:
            deepfocus.FOCUS(**kwargs)
        with pytest.raises(ValueError) as ours:
            FOCUS(**kwargs)
        assert str(ours.value) == str(theirs.value)


def test_signature_is_deepfocus_signature():
    import inspect

    import deepfocus

    theirs = inspect.signature(deepfocus.FOCUS).parameters
    ours = inspect.signature(FOCUS).parameters
    assert list(ours) == list(theirs)
    assert [p.default for p in ours.values()] == [p.default for p in theirs.values()]


# --------------------------------------------------------------------------- the pipeline method


def test_focus_method_from_a_transfer_problem(minilm, sw_tokenizer, token_fasttext):
    from vocabtransfer.init.methods.registry import TransferProblem

    from helpers import run_method

    source_tokenizer, embeddings = minilm
    table = compute_overlap(sw_tokenizer, source_tokenizer)
    t_ov, s_ov = overlap_pairs(table)
    vecs, mask = TokenVectors(model=load_fasttext(token_fasttext)).matrix(table.column("target_token").to_pylist())
    problem = TransferProblem(
        source_embeddings=embeddings,
        source_tokenizer=source_tokenizer,
        target_tokenizer=sw_tokenizer,
        overlap_target_ids=t_ov,
        overlap_source_ids=s_ov,
        auxiliary=torch.from_numpy(vecs),
        auxiliary_mask=torch.from_numpy(mask),
        seed=5,
    )
    result = run_method("focus", problem, {"block_size": 256})
    expected = FOCUS(
        target_tokenizer=sw_tokenizer,
        source_tokenizer=source_tokenizer,
        source_embeddings=embeddings,
        fasttext_model_path=token_fasttext,
        seed=5,
        verbosity="silent",
    )
    assert torch.equal(result.embeddings, expected)
    stats = result.stats
    assert stats["copied"] + stats["focus_combined"] + stats["random"] == len(sw_tokenizer)
    assert stats["random_reason"] == "no fastText vector"
    assert stats["special_copied"] == len(set(sw_tokenizer.all_special_ids)) == 5  # [PAD] [UNK] [CLS] [SEP] [MASK]
    with pytest.raises(VocabTransferError, match="init.focus.block_size"):
        run_method("focus", problem, {"block_size": 0})
    with pytest.raises(VocabTransferError, match="no auxiliary fastText embeddings"):
        run_method("focus", TransferProblem(**{**problem.__dict__, "auxiliary": None}))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_equals_cpu(minilm, sw_tokenizer, token_fasttext):
    source_tokenizer, embeddings = minilm
    kwargs = dict(
        target_tokenizer=sw_tokenizer,
        source_tokenizer=source_tokenizer,
        source_embeddings=embeddings,
        fasttext_model_path=token_fasttext,
        verbosity="silent",
    )
    cpu, gpu = FOCUS(device="cpu", **kwargs), FOCUS(device="cuda", **kwargs)
    assert gpu.is_cuda and (gpu.cpu() - cpu).abs().max().item() < TOL
