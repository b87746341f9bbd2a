"""The `distill` objective's core (`train/distill.py`): chunks of two real tokenizations of one text (Gemma 3's
SentencePiece BPE with byte fallback, a GPT-2-style byte-level BPE and a Llama-style BPE with byte fallback
trained here on Swahili text), the loss against a NumPy transcription of its formula, gradcheck in float64,
and zero loss with zero gradient when the student is the teacher."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.train import distill
from vocabtransfer.model import heads
from vocabtransfer.model.lmdata import pack_ids

from helpers import gpt2_seed, llama_seed, text_lines


@pytest.fixture(scope="module")
def gemma(gemma_tokenizer):
    return gemma_tokenizer


@pytest.fixture(scope="module")
def byte_level():
    from vocabtransfer.data.tokenizer import train_tokenizer

    return train_tokenizer(gpt2_seed(), [text_lines("sw", 2000)], vocab_size=500)


@pytest.fixture(scope="module")
def llama_tok():
    from vocabtransfer.data.tokenizer import train_tokenizer

    return train_tokenizer(llama_seed(), [text_lines("sw", 2000)], vocab_size=500)


# ------------------------------------------------------------------ 1. bytes and chunks


def test_chunks_of_gemma_and_byte_level_bpe_by_hand(gemma, byte_level):
    g, b = distill.Speller(gemma, "teacher"), distill.Speller(byte_level, "student")
    assert g.how.byte_fallback and not g.prepends_space and not b.prepends_space
    # Gemma: whole characters; byte-level BPE: every byte of ŋ € 😀 its own token (it splits the characters)
    ids, lengths = b.encode("ŋ€😀 abc")
    assert lengths[:9] == [1] * 9
    assert distill.chunk_spans("ŋ€😀 abc", b, g) == ["ŋ".encode(), "€".encode(), "😀".encode(), b" abc"]
    # 𝔘 is not in Gemma's vocabulary: byte fallback <0xF0> <0x9D> <0x94> <0x98>, byte-level splits it too
    ids, lengths = g.encode("naïve café 𝔘")
    assert gemma.convert_ids_to_tokens(ids)[-4:] == ["<0xF0>", "<0x9D>", "<0x94>", "<0x98>"]
    assert lengths[-4:] == [1, 1, 1, 1]
    assert distill.chunk_spans("naïve café 𝔘", b, g) == [
        b"na",
        "ï".encode(),
        b"ve",
        " café".encode(),
        b" ",
        b"\xf0",
        b"\x9d",
        b"\x94",
        b"\x98",
    ]
    # Swahili: Gemma's "Hab|ari|▁za|▁as|ubu|hi" against byte-level's "Ha|ba|ri|Ġza|Ġa|su|bu|hi"
    assert distill.chunk_spans("Habari za asubuhi", b, g) == [b"Habari", b" za", b" asubu", b"hi"]


def test_chunks_of_llama_byte_fallback_and_byte_level(llama_tok, byte_level):
    """A Llama-style tokenizer writes a space before the text's first word (▁ prepended): its bytes are left
    out; its byte-fallback pieces and the byte-level tokens split the characters' bytes the same way."""
    s, b = distill.Speller(llama_tok), distill.Speller(byte_level)
    assert s.prepends_space
    ids, lengths = s.encode("ŋ€ abc")
    assert llama_tok.convert_ids_to_tokens(ids)[:6] == ["▁", "<0xC5>", "<0x8B>", "<0xE2>", "<0x82>", "<0xAC>"]
    assert lengths[:6] == [0, 1, 1, 1, 1, 1]  # the prepended space spells nothing of the text
    assert distill.chunk_spans("ŋ€ abc", s, b) == [b"\xc5", b"\x8b", b"\xe2", b"\x82", b"\xac", b" a", b"b", b"c"]
    spans = distill.chunk_spans("Habari za asubuhi, rafiki!", s, b)
    assert b"".join(spans) == "Habari za asubuhi, rafiki!".encode()


def test_chunk_ids_by_hand():
    # bytes "abcdef": A = ab|c|def, B = a|bcd|ef, specials (0 bytes) on both sides
    a, b, n = distill.chunk_ids([0, 2, 1, 3], [0, 1, 3, 2, 0])
    assert n == 1 and a.tolist() == [-1, 0, 0, 0] and b.tolist() == [-1, 0, 0, 0, -1]
    a, b, n = distill.chunk_ids([2, 1, 3], [1, 1, 1, 3])  # ends {2,3,6} and {1,2,3,6}: chunks ab | c | def
    assert n == 3 and a.tolist() == [0, 1, 2] and b.tolist() == [0, 0, 1, 2]
    a, b, n = distill.chunk_ids([2, 2], [2, 1])  # B covers fewer bytes: the tokens past its end are in no chunk
    assert n == 1 and a.tolist() == [0, -1] and b.tolist() == [0, -1]


def test_lossy_teacher_is_refused_in_one_line(byte_level):
    from vocabtransfer.model.hub import load_tokenizer

    minilm = load_tokenizer("sentence-transformers/all-MiniLM-L6-v2")  # WordPiece: lower-cases, drops spaces
    with pytest.raises(VocabTransferError) as err:
        distill.Speller(minilm, "teacher tokenizer").encode("Habari za asubuhi")
    assert "\n" not in str(err.value) and "teacher tokenizer" in str(err.value)
    no_bytes = llama_seed()  # a byte-fallback tokenizer without its byte pieces: unknown characters become <unk>
    with pytest.raises(VocabTransferError, match="does not reproduce the text's bytes"):
        distill.Speller(no_bytes, "teacher tokenizer").encode("ŋ abc")


def test_pack_pairs_gives_the_student_blocks_of_pack_ids(gemma, llama_tok):
    lines = llama_tok(text_lines("sw", 60, start=1000) + ["ŋ€😀 𝔘 abc"], add_special_tokens=False)["input_ids"]
    blocks = distill.pack_pairs(llama_tok, gemma, lines, 48)
    s_sp, t_sp = distill.Speller(llama_tok), distill.Speller(gemma)
    assert [b.input_ids for b in blocks] == pack_ids(llama_tok, lines, 48, kind="causal")
    for b in blocks:
        assert b.teacher_ids[0] == gemma.bos_token_id and b.teacher_ids[-1] == gemma.eos_token_id
        assert len(b.chunks) == len(b.input_ids) and len(b.teacher_chunks) == len(b.teacher_ids)
        assert b.chunks[0] == -1 and b.teacher_chunks[0] == -1  # never predicted
        assert sorted(set(b.chunks) - {-1}) == list(range(b.n_chunks)) == sorted(set(b.teacher_chunks) - {-1})
        # both sides' chunks spell the same bytes
        s_bytes = s_sp.spell(b.input_ids, first=False)
        t_bytes = t_sp.spell(b.teacher_ids, first=False)
        for j in range(b.n_chunks):
            s = b"".join(x for x, c in zip(s_bytes, b.chunks) if c == j)
            t = b"".join(x for x, c in zip(t_bytes, b.teacher_chunks) if c == j)
            assert s and t and s.lstrip(b" ") == t.lstrip(b" ")  # the student's ▁ before a line's first word


def test_pair_blocks_of_a_mapped_split_equal_pack_pairs(tmp_path, gemma, llama_tok):
    """pretrain's distill blocks (`PairBlocks`: the split mapped, each block built when drawn) are
    `pack_pairs` of the split's lines, block for block, chunks included."""
    from vocabtransfer.data import token_ids

    lines = llama_tok(text_lines("sw", 120, start=3000), add_special_tokens=False)["input_ids"]
    token_ids.write_lines(tmp_path / "train", llama_tok, lines)
    lazy = distill.PairBlocks(token_ids.TokenIds(tmp_path / "train", llama_tok), llama_tok, gemma, 48)
    eager = distill.pack_pairs(llama_tok, gemma, lines, 48)
    assert len(lazy) == len(eager) > 10
    assert [lazy[b] for b in range(len(lazy))] == eager
    assert lazy.item(3) == {"input_ids": eager[3].input_ids, "pair": eager[3]}


# ------------------------------------------------------------------ 2. the loss


def numpy_loss(ll_t, ll_s, tau):
    """The issue's formula, transcribed: y = exp(ll / tau), L = -[y_T log y_S + (1 - y_T) log(1 - y_S)],
    and its debiased form L(y_T, y_S) - L(y_T, y_T)."""
    y_t, y_s = np.exp(ll_t / tau), np.exp(ll_s / tau)
    bce = -(y_t * np.log(y_s) + (1 - y_t) * np.log(1 - y_s))
    entropy = -(y_t * np.log(y_t) + (1 - y_t) * np.log(1 - y_t))
    return bce, bce - entropy


@pytest.mark.parametrize("tau", [1.0, 0.5, 3.0])
def test_loss_equals_numpy_transcription(tau):
    rng = np.random.default_rng(0)
    ll_t, ll_s = -rng.exponential(2.0, 64), -rng.exponential(2.0, 64)
    bce, kl = numpy_loss(ll_t, ll_s, tau)
    t, s = torch.tensor(ll_t), torch.tensor(ll_s)
    np.testing.assert_allclose(distill.binary_ce(t, s, tau).numpy(), bce, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(distill.chunk_loss(t, s, tau).numpy(), kl, rtol=1e-10, atol=1e-12)
    assert (distill.chunk_loss(t, s, tau) >= 0).all()
    # the same gradient with respect to the student as binary_ce (they differ by a constant of the teacher)
    s1, s2 = s.clone().requires_grad_(), s.clone().requires_grad_()
    distill.binary_ce(t, s1, tau).sum().backward()
    distill.chunk_loss(t, s2, tau).sum().backward()
    torch.testing.assert_close(s1.grad, s2.grad, rtol=1e-12, atol=1e-12)
    # chunk sums of token log-probabilities, then the summed loss
    token_lp = torch.tensor(-rng.exponential(1.0, 10))
    chunks = torch.tensor([-1, 0, 0, 1, 2, 2, 2, -1, 3, 3])
    ll = distill.chunk_log_likelihoods(token_lp, chunks, 4).numpy()
    lp = token_lp.numpy()
    np.testing.assert_allclose(ll, [lp[1] + lp[2], lp[3], lp[4] + lp[5] + lp[6], lp[8] + lp[9]])


def test_gradcheck_float64():
    rng = np.random.default_rng(1)
    token_lp = torch.tensor(-rng.exponential(0.7, 12), dtype=torch.float64, requires_grad=True)
    teacher_lp = torch.tensor(-rng.exponential(0.7, 9), dtype=torch.float64)
    s_chunks = torch.tensor([-1, 0, 0, 1, 1, 1, 2, 3, 3, 4, -1, 4])
    t_chunks = torch.tensor([-1, 0, 1, 1, 2, 3, 4, 4, -1])
    teacher_ll = distill.chunk_log_likelihoods(teacher_lp, t_chunks, 5)

    def f(lp):  # the distillation term as loss_terms sums it
        return distill.chunk_loss(teacher_ll, distill.chunk_log_likelihoods(lp, s_chunks, 5), 0.8).sum()

    assert torch.autograd.gradcheck(f, (token_lp,))
    # through the fused head: hidden states and head weight of a tiny case
    hidden = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(7, 4, dtype=torch.float64, requires_grad=True)
    targets = torch.tensor([1, 3, 0, 6, 2, 2])
    chunks = torch.tensor([0, 0, 1, -1, 2, 2])
    t_ll = torch.tensor([-1.5, -0.4, -2.0], dtype=torch.float64)

    def through_head(h, w):
        from vocabtransfer.model.fused_head import linear_objective_loss

        lp = -linear_objective_loss(h, w, targets, objective="standard", reduction="none")
        return distill.chunk_loss(t_ll, distill.chunk_log_likelihoods(lp, chunks, 3), 1.3).sum()

    assert torch.autograd.gradcheck(through_head, (hidden, weight))


def test_zero_loss_and_zero_gradient_when_the_student_is_the_teacher(llama_tok):
    """The same tiny Llama as student and teacher, the same tokenizer, tau = 1: every chunk is one token,
    the chunk likelihoods are equal, the loss is 0 and so is its gradient."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = (
        LlamaForCausalLM(
            LlamaConfig(
                vocab_size=len(llama_tok),
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=2,
                num_key_value_heads=2,
                intermediate_size=64,
                max_position_embeddings=256,
                tie_word_embeddings=False,
                bos_token_id=llama_tok.bos_token_id,
                eos_token_id=llama_tok.eos_token_id,
            )
        )
        .double()
        .eval()
    )
    lines = llama_tok(text_lines("sw", 20, start=300), add_special_tokens=False)["input_ids"]
    blocks = distill.pack_pairs(llama_tok, llama_tok, lines, 64)
    assert all(b.input_ids == b.teacher_ids and b.chunks == b.teacher_chunks for b in blocks)
    batch = _batch(llama_tok, blocks[:4])
    head = heads.head_parts(model)
    lm_sum, distill_sum = distill.loss_terms(model, model, batch, head=head, teacher_head=head, temperature=1.0)
    assert int(batch["n_chunks"]) > 50 and lm_sum > 0
    assert abs(distill_sum.item()) < 1e-12
    distill_sum.backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    assert grads.abs().max() < 1e-10
    # another student: a positive loss and a nonzero gradient
    model.zero_grad()
    other = LlamaForCausalLM(model.config).double().eval()
    _, d = distill.loss_terms(other, model, batch, head=heads.head_parts(other), teacher_head=head, temperature=1.0)
    assert float(d.detach()) > 1e-3  # random tiny models: every chunk probability is small, so is their KL
    d.backward()
    assert any(p.grad is not None and p.grad.abs().max() > 1e-6 for p in other.parameters())


def _batch(tokenizer, blocks):
    from vocabtransfer.model.lmdata import LMCollator

    batch = LMCollator(tokenizer, "causal", 0)([b.input_ids for b in blocks])
    batch.update(distill.collate_teacher(blocks, tokenizer.pad_token_id or tokenizer.eos_token_id))
    return batch


def test_bad_parameters_name_the_key():
    for bad in (0, -1.0, math.inf, math.nan, True):
        with pytest.raises(VocabTransferError, match=r"^pretrain\.distill\.temperature="):
            distill.check_temperature(bad)


def test_the_chunk_gradient_is_tiny_at_tau_one_and_not_at_tokenkits_tau_100():
    """d loss / d log p_S = (y_S − y_T) / ((1 − y_S) τ), y = exp(log p / τ): at τ = 1 a 20-nat chunk gives a
    gradient of order e^-20 (nothing against cross-entropy's order 1 per token); at τ = 100 of order 1e-3
    per chunk and per nat. By hand against autograd."""
    ll_t = torch.tensor([-20.0, -3.0], dtype=torch.float64)
    grads = {}
    for tau in (1.0, 100.0):
        ll_s = torch.tensor([-25.0, -2.0], dtype=torch.float64, requires_grad=True)
        distill.chunk_loss(ll_t, ll_s, tau).sum().backward()
        y_s, y_t = torch.exp(ll_s.detach() / tau), torch.exp(ll_t / tau)
        torch.testing.assert_close(ll_s.grad, (y_s - y_t) / ((1 - y_s) * tau))
        grads[tau] = ll_s.grad
    assert abs(grads[1.0][0]) < 1e-8 and abs(grads[100.0][0]) > 1e-3  # the long chunk
    assert abs(grads[100.0][0]) > 1e5 * abs(grads[1.0][0])
