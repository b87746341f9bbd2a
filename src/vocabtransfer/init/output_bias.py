"""The LM head's output bias of a target model (BERT, MiniLM: `cls.predictions.bias`, indexed by token id): moved
like the embeddings for every method (`transfer_bias`: the source bias copied for overlapping ids, its mean
elsewhere), and fvt_prior's unigram prior on top (`fit`).

The frequency-prior control (`fvt_prior`): FVT's rows, and the LM head's output bias moved toward what a
unigram of the target language knows. It is the control for a learned initialisation: a method whose rows were
trained with the LM loss can lower the initial loss by learning token frequencies alone (through a tied head,
moving output rows toward the frequent tokens), without aligning any meaning; `fvt_prior` gets exactly that
knowledge, and nothing else, on top of FVT.

The bias: b = b_fvt + β (ℓ − mean(ℓ)), with b_fvt the bias the init stage transfers for every method (the source
bias copied for overlapping ids, its mean elsewhere), ℓ_t = ln((c_t + 1) / (N + V)) the add-one-smoothed unigram
log-probability of target token t over the pre-tokenised train split (c_t its count, N the tokens, V the
vocabulary) and β one scalar: the value of `init.fvt_prior.grid` (and 0) whose model scores the lowest mean token
loss on the first `init.fvt_prior.lines` lines of the train split (masked positions seeded as init_eval's; the smaller β
on a tie). β = 0 is always tried, so the control's loss on those lines is never above FVT's; the centring keeps the
bias's mean, so β moves only how the tokens are ranked against each other. The rows are FVT's, bit for bit.

The bias needs a head that has one (BERT and MiniLM: `cls.predictions.bias`); a source without one (Gemma, GPT-2,
Llama) is refused with the reason.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.model import lm_loss, modeling
from vocabtransfer.model.line_bits import valid_lines
from vocabtransfer.model.lmdata import Kind, lm_batches, pack_lines

log = logging.getLogger(__name__)

SEQ_LEN = 128  # ids per scored block (init_eval's seq_len, as the random rows' calibration)
BATCH_SIZE = 8


def transfer_bias(source_bias, n_target: int, target_ids: np.ndarray, source_ids: np.ndarray):
    """Target output bias: source bias copied for overlapping ids, the mean source bias elsewhere."""
    src = source_bias.detach().float().cpu()
    bias = torch.full((n_target,), float(src.mean()))
    if len(target_ids):
        bias[torch.from_numpy(target_ids)] = src[torch.from_numpy(source_ids)]
    return bias


def log_unigram(counts: np.ndarray) -> np.ndarray:
    """ℓ_t = ln((c_t + 1) / (N + V)) for every id (float64): the add-one-smoothed unigram of the train split, the
    floor's unigram (train/pretrain_outputs.unigram_block_sums)."""
    counts = np.asarray(counts, dtype=np.float64)
    return np.log((counts + 1.0) / (counts.sum() + len(counts)))


def shifted_bias(bias, log_prior: np.ndarray, beta: float):
    """b + β (ℓ − mean(ℓ)) as a float32 tensor of b's shape (b itself at β = 0, bit for bit)."""
    if beta == 0:
        return bias.clone()
    centred = torch.from_numpy(log_prior - log_prior.mean())
    return (bias.double() + beta * centred).to(bias.dtype)


def fit(model, tokenizer, kind: Kind, text, log_prior: np.ndarray, options, *, seed: int) -> dict:
    """Set the output bias of `model` (its bias as the init stage transferred it) to the best β of `options.grid`
    and 0 on the first `options.lines` lines of the train split `text` (module doc; `options`: FvtPriorOptions)
    and return the record: `beta`, `loss` (at β), `fvt_loss` (at β = 0), `tokens` scored, `lines`, `tried` ([β,
    loss] for every value, in increasing β)."""

    bias = modeling.output_bias(model)
    if bias is None:
        raise VocabTransferError(
            f"init method fvt_prior: the source's LM head ({type(model).__name__}) has no output bias, and the "
            "frequency-prior control sets that bias; use it with a source whose head has one (BERT, MiniLM), "
            "or remove fvt_prior from init.methods"
        )
    if len(log_prior) != bias.shape[0]:
        raise VocabTransferError(
            f"init method fvt_prior: {len(log_prior)} unigram counts for an output bias of {bias.shape[0]} "
            "tokens; the pre-tokenised train split is not this tokenizer's: rerun pretokenize"
        )
    lines = valid_lines(text, options.lines)
    blocks = pack_lines(tokenizer, lines, SEQ_LEN, kind=kind)
    if not blocks:
        raise VocabTransferError(
            "init.fvt_prior.lines: the train split gave no text to fit the prior's weight on; check corpus.sources"
        )
    batches = lm_batches(tokenizer, blocks, kind, BATCH_SIZE, seed)
    start = bias.detach().clone()
    tried: list[list[float]] = []
    tokens = 0
    for beta in sorted({0.0, *(float(b) for b in options.grid)}):
        with torch.no_grad():
            bias.copy_(shifted_bias(start, log_prior, beta))
        res = lm_loss.evaluate_lm(model, batches, kind)
        tried.append([beta, float(res["loss"])])
        tokens = int(res["n_tokens"])
        log.info("init.fvt_prior: beta %.3g -> loss %.4f", beta, tried[-1][1])
    best_beta, best_loss = min(tried, key=lambda t: (t[1], t[0]))
    with torch.no_grad():
        bias.copy_(shifted_bias(start, log_prior, best_beta))
    fvt_loss = dict((b, loss) for b, loss in tried)[0.0]
    return {
        "beta": best_beta,
        "loss": best_loss,
        "fvt_loss": fvt_loss,
        "tokens": tokens,
        "lines": len(lines),
        "tried": tried,
    }
