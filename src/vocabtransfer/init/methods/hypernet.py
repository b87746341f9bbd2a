"""`hypernet`: a learned initialisation, amortised over tokenizers (after ZeTT, Minixhofer et al., 2024).

Stage `hypernet` (`train/hypernet.py`) trains once per source model a small network (`model/hypernet.py`)
that maps a token's pieces under the source tokenizer to a residual over its FVT row, on tokenizers it samples
itself: it never sees the study's target tokenizers. This method applies it to the target vocabulary:

1. FVT's rows (`fvt.fvt`): overlapping and special tokens copied, every other token the mean of its source
   pieces' rows, a seeded random row where the source gives no piece;
2. every token with a text and at least one known source piece (specials excepted) gets FVT's row plus the
   network's residual, read from its first `max_pieces` pieces, in batches of `batch_rows` rows.

The untrained network (its head starts at zero) gives FVT's rows exactly.
"""

from __future__ import annotations

import numpy as np
import torch

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.init.methods.baselines import source_matrix, token_surfaces
from vocabtransfer.init.methods.fvt import fvt, split_with_source
from vocabtransfer.plan.method_options import HypernetOptions
from vocabtransfer.init.methods.registry import TransferProblem, TransferResult, register
from vocabtransfer.model import hypernet as network


def decompose(tokenizer, source_tokenizer, ids: np.ndarray, max_pieces: int) -> tuple[np.ndarray, torch.Tensor]:
    """(the tokens of `ids` with a text and a known source piece, their (n, max_pieces) source pieces), split as
    FVT splits them (`fvt.split_with_source`, unknown pieces dropped)."""
    texts, word_start = token_surfaces(tokenizer)
    ids = ids[np.fromiter((texts[i] is not None for i in ids), dtype=bool, count=ids.size)]
    pieces, rows = split_with_source(source_tokenizer, [texts[i] for i in ids], word_start[ids])
    unk = source_tokenizer.unk_token_id
    known = pieces != unk if unk is not None else np.ones(pieces.size, dtype=bool)
    pieces, rows = pieces[known], rows[known]
    done = np.bincount(rows, minlength=ids.size) > 0
    keep = np.cumsum(done) - 1  # a kept token's row among the kept
    matrix = network.piece_matrix(pieces, keep[rows], int(done.sum()), max_pieces)
    return ids[done], matrix


def predicted_rows(
    net: network.HyperNet,
    source: torch.Tensor,
    tokenizer,
    source_tokenizer,
    base: torch.Tensor,
    ids: np.ndarray,
    batch_rows: int,
) -> tuple[torch.Tensor, np.ndarray]:
    """Every row of `base` (FVT's), the tokens of `ids` with a known source piece replaced by the network's rows;
    and those tokens."""
    chosen, matrix = decompose(tokenizer, source_tokenizer, ids, net.config.max_pieces)
    out = base.clone()
    with torch.inference_mode():
        for a in range(0, chosen.size, batch_rows):
            part = torch.from_numpy(chosen[a : a + batch_rows])
            out[part] = net(matrix[a : a + batch_rows], base[part], source)
    return out, chosen


@register("hypernet")
def hypernet(problem: TransferProblem, options: HypernetOptions = HypernetOptions()) -> TransferResult:
    """FVT's rows, then the trained network's residual on every token with a known source piece."""
    directory = problem.resources.get("hypernet")
    if directory is None:
        raise VocabTransferError("init hypernet: no trained network among the job's inputs; run stage hypernet first")
    if problem.source_embeddings.shape[0] != len(problem.source_tokenizer):
        raise VocabTransferError("init hypernet: the source rows do not match the source tokenizer")
    net = network.load(directory)
    source = source_matrix(problem)
    if net.config.dim != source.shape[1]:
        raise VocabTransferError(
            f"{directory}: a network for rows of {net.config.dim} dimensions, and the source "
            f"rows have {source.shape[1]}; rerun stage hypernet for this source model"
        )
    base = fvt(problem)
    specials = set(problem.target_tokenizer.all_special_ids)
    ids = np.asarray([i for i in range(problem.target_size) if i not in specials], dtype=np.int64)
    rows, chosen = predicted_rows(
        net, source, problem.target_tokenizer, problem.source_tokenizer, base.embeddings, ids, options.batch_rows
    )
    stats = {**base.stats, "method": "hypernet", "hypernet_rows": int(chosen.size), "hypernet": str(directory)}
    return TransferResult(embeddings=rows, stats=stats)
