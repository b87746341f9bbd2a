"""distill's unbiased chunks (`train/chunk_bias.py`, tokenkit's definition): cover sets against a brute-force
transcription of tokenkit's `compute_cover_set` (every vocabulary token tried, no sorted index), the pair bias
as the summed unigram probability of the one-sided continuations, a whitespace token always biased, and the
chunks: unions of exact chunks, cut exactly where the pair ending there is unbiased (or a special token
follows); one tokenizer against itself cuts where exact chunks cut."""

from __future__ import annotations

import numpy as np
import pytest

from vocabtransfer.data.families import token_bytes
from vocabtransfer.train import distill
from vocabtransfer.train.chunk_bias import CoverSets, PairBias, count_tokens

from helpers import gpt2_seed, llama_seed, text_lines

TEXT = "Habari za asubuhi, habari gani? Watoto wanasoma shuleni."


@pytest.fixture(scope="module")
def spellers():
    from vocabtransfer.data.tokenizer import train_tokenizer

    lines = text_lines("sw", 2000)
    student = train_tokenizer(gpt2_seed(), [lines], vocab_size=500)
    teacher = train_tokenizer(llama_seed(), [lines], vocab_size=800)
    return distill.Speller(teacher, "teacher"), distill.Speller(student, "student"), lines[:300]


def brute_cover(speller, token_id: int) -> dict[bytes, int]:
    """tokenkit's compute_cover_set + compute_cover_dict, over the whole vocabulary."""
    tok = speller.tokenizer
    model = tok.backend_tokenizer.model
    x = tok.convert_ids_to_tokens(token_id)
    out = {}
    for i in range(len(x) - 1, -1, -1):
        current = [t.id for t in model.tokenize(x[:i])] if i else []
        for b, bid in tok.get_vocab().items():
            if bid in speller.special or not b.startswith(x[i:]) or b.startswith("<0x"):
                continue
            joined = x[:i] + b
            if len(joined) > len(x) and [t.id for t in model.tokenize(joined)] == current + [bid]:
                out[token_bytes(joined[len(x) :], speller.how)] = bid
    return out


def bias_of(spellers, threshold=1e-4) -> PairBias:
    teacher, student, lines = spellers
    t_ids = [teacher.encode(s)[0] for s in lines]
    s_ids = [student.encode(s)[0] for s in lines]
    return PairBias(
        teacher,
        student,
        count_tokens(t_ids, len(teacher.tokenizer)),
        count_tokens(s_ids, len(student.tokenizer)),
        threshold,
    )


def test_cover_sets_match_the_brute_force_transcription(spellers):
    teacher, student, _ = spellers
    for speller in (teacher, student):
        covers = CoverSets(speller)
        ids, _ = speller.encode(TEXT)
        found = 0
        for i in ids:
            c = covers.cover(i)
            if c is None:  # whitespace only
                assert not token_bytes(speller.tokenizer.convert_ids_to_tokens(i), speller.how).strip()
                continue
            assert c == brute_cover(speller, i)
            found += len(c)
        assert found > 0  # some token can be run on across its end


def test_pair_bias_is_the_probability_of_the_one_sided_continuations(spellers):
    teacher, student, _ = spellers
    pb = bias_of(spellers)
    t_ids, t_len = teacher.encode(TEXT)
    s_ids, s_len = student.encode(TEXT)
    t_ends, s_ends = np.cumsum(t_len), np.cumsum(s_len)
    biased = 0
    for end in np.intersect1d(t_ends, s_ends):
        t, s = int(t_ids[np.searchsorted(t_ends, end)]), int(s_ids[np.searchsorted(s_ends, end)])
        ct, cs = brute_cover(teacher, t), brute_cover(student, s)
        b_t, b_s = pb.bias(t, s)
        if not all(
            token_bytes(sp.tokenizer.convert_ids_to_tokens(i), sp.how).strip() for sp, i in ((teacher, t), (student, s))
        ):
            assert (b_t, b_s) == (1.0, 1.0) and not pb.unbiased(t, s)
            continue
        assert b_t == pytest.approx(sum(pb.t_probs[ct[k]] for k in ct.keys() - cs.keys()), abs=1e-15)
        assert b_s == pytest.approx(sum(pb.s_probs[cs[k]] for k in cs.keys() - ct.keys()), abs=1e-15)
        assert pb.unbiased(t, s) == (b_t <= 1e-4 and b_s <= 1e-4)
        biased += not pb.unbiased(t, s)
    assert biased > 0  # the text has boundaries only one tokenizer can run a token across


def test_unbiased_chunks_join_exact_chunks_where_the_pair_is_biased(spellers):
    teacher, student, _ = spellers
    pb = bias_of(spellers)
    s_ids, s_len = student.encode(TEXT)
    t_ids, t_len = teacher.encode(TEXT)
    exact = distill.chunk_ids(s_len, t_len)
    unbiased = distill.chunk_ids(s_len, t_len, lambda i, j: pb.unbiased(t_ids[j], s_ids[i]))
    assert 1 < unbiased[2] < exact[2]
    s_ends = np.cumsum(s_len)

    def cuts(chunks):  # the byte offsets where a chunk ends
        return {int(s_ends[np.nonzero(chunks == c)[0][-1]]) for c in range(chunks.max() + 1)}

    cut_exact, cut_unbiased = cuts(exact[0]), cuts(unbiased[0])
    assert cut_unbiased <= cut_exact and max(cut_unbiased) == max(cut_exact)  # the last end always cuts
    t_ends = np.cumsum(t_len)
    for end in sorted(cut_exact - {max(cut_exact)}):
        i, j = int(np.searchsorted(s_ends, end)), int(np.searchsorted(t_ends, end))
        assert (end in cut_unbiased) == pb.unbiased(t_ids[j], s_ids[i]), end


def test_one_tokenizer_against_itself_cuts_where_exact_chunks_cut(spellers):
    _, student, lines = spellers
    ids = [student.encode(s)[0] for s in lines]
    probs = count_tokens(ids, len(student.tokenizer))
    pb = PairBias(student, student, probs, probs, 0.0)
    s_ids, s_len = student.encode(TEXT)

    def keep(i, j):
        return s_len[i] == 0 or pb.unbiased(s_ids[j], s_ids[i])

    exact, same = distill.chunk_ids(s_len, s_len), distill.chunk_ids(s_len, s_len, keep)
    spaces = sum(not token_bytes(student.tokenizer.convert_ids_to_tokens(i), student.how).strip() for i in s_ids)
    assert same[2] == exact[2] - spaces  # only a whitespace-only token's end is dropped (tokenkit: always biased)


def test_a_line_end_before_the_end_of_sequence_token_always_cuts(spellers):
    teacher, student, lines = spellers
    ids = [student.encode(s)[0] for s in lines[:6]]
    exact = distill.pack_pairs(student.tokenizer, teacher.tokenizer, ids, 256)
    unbiased = distill.pack_pairs(student.tokenizer, teacher.tokenizer, ids, 256, unbiased=1e-4)
    for e, u in zip(exact, unbiased):
        assert e.input_ids == u.input_ids and 0 < u.n_chunks < e.n_chunks
        chunks = np.array(u.chunks)
        for k in range(len(u.input_ids) - 1):  # the token before each end-of-sequence token ends a chunk
            if u.input_ids[k + 1] == student.tokenizer.eos_token_id and chunks[k] >= 0:
                assert chunks[k + 1 :][chunks[k + 1 :] >= 0].min(initial=10**9) > chunks[k]
