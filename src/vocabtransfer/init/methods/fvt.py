"""FVT, Fast Vocabulary Transfer (Gee et al., 2022, "Fast Vocabulary Transfer for Language Model
Compression").

1. Overlapping and special tokens are copied from the source rows.
2. Every other target token is turned back into its surface text (word markers removed) and
   split by the SOURCE tokenizer in batched calls; its row is the mean of the source rows
   of those pieces (a scatter-mean with `index_add_`).
3. Tokens with no text, or whose text the source splits into nothing or only unknown pieces,
   keep the seeded random row, with the reason in the stats.

Word position: a target token that starts a word ("habari", "▁habari", "Ġhabari") is split as
a word start ("hab" + "##ari"); a continuation ("##ari", or "ari" under the ▁/Ġ conventions) as
the source splits the inside of a word: for a WordPiece source with a vocabulary of its "##"
pieces only (so "##gens" -> "##gens", not "gen" + "##s"), for SentencePiece / byte-level sources
with the word-start marker switched off (see `word_internal_splitter`). SentencePiece's Unigram
segments a word jointly, so splitting its inside alone is the natural approximation there.
"""

from __future__ import annotations

import itertools
import json
import logging

import numpy as np
import torch
from tokenizers import Tokenizer

from vocabtransfer.init.methods.registry import TransferProblem, TransferResult, register
from vocabtransfer.plan.method_options import FvtOptions
from vocabtransfer.init.methods.baselines import (
    SPECIAL_NO_SOURCE,
    Ledger,
    copy_overlap,
    random_matrix,
    source_matrix,
    token_surfaces,
    tokenizer_markers,
)

log = logging.getLogger(__name__)

CHUNK = 1 << 16  # pieces gathered per index_add_ (bounds memory to CHUNK x D floats)


def _strip_prefix_space(node):
    """JSON surgery on a normalizer / pre-tokenizer spec: never add a word-start marker."""
    if isinstance(node, list):
        return [n for n in (_strip_prefix_space(x) for x in node) if n is not None]
    if not isinstance(node, dict):
        return node
    if node.get("type") == "Prepend":  # Llama-2 style: the normalizer prepends "▁"
        return None
    node = {k: _strip_prefix_space(v) for k, v in node.items()}
    if node.get("type") == "Metaspace":
        node["prepend_scheme"], node["add_prefix_space"] = "never", False
    elif node.get("type") == "ByteLevel" and "add_prefix_space" in node:
        node["add_prefix_space"] = False
    return node


def word_internal_splitter(tokenizer) -> tuple[Tokenizer, np.ndarray | None]:
    """A Rust tokenizer that splits a text the way `tokenizer` splits it INSIDE a word, and the map
    from its ids to `tokenizer`'s ids (None: the same ids).

    WordPiece: a model whose vocabulary holds only the continuation pieces, "##x" both as
    "x" (to start the text) and as "##x", so the greedy longest match runs on "##" pieces as
    it does after a word's first piece. SentencePiece / byte-level: the same tokenizer with
    the word-start marker switched off ("ari" -> "ari", not "▁ari" / "Ġari").
    """
    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    spec.update(post_processor=None, truncation=None, padding=None)
    id_map = None
    if spec["model"].get("type") == "WordPiece":
        prefix = spec["model"].get("continuing_subword_prefix") or "##"
        unk = spec["model"].get("unk_token")
        vocab: dict[str, int] = {}
        old_ids: list[int] = []
        for tok, i in sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1]):  # string work, once
            if tok.startswith(prefix) and len(tok) > len(prefix):
                for form in (tok[len(prefix) :], tok):
                    if form not in vocab:
                        vocab[form] = len(old_ids)
                        old_ids.append(i)
        if unk is not None and unk not in vocab:
            vocab[unk] = len(old_ids)
            old_ids.append(tokenizer.get_vocab()[unk])
        spec["model"]["vocab"] = vocab
        spec["added_tokens"] = []
        id_map = np.asarray(old_ids, dtype=np.int64)
    else:
        spec["normalizer"] = _strip_prefix_space(spec.get("normalizer"))
        spec["pre_tokenizer"] = _strip_prefix_space(spec.get("pre_tokenizer"))
    return Tokenizer.from_str(json.dumps(spec)), id_map


def _flat(ids: list[list[int]], rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64, count=int(lengths.sum()))
    return flat, np.repeat(rows, lengths)


def split_with_source(tokenizer, texts: list[str], word_start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Split `texts` with the source tokenizer: word starts in one batched call, continuations in
    one batched call of `word_internal_splitter`. Returns (piece ids, row of each piece), int64."""
    word_start = np.asarray(word_start, dtype=bool)
    starts, conts = np.flatnonzero(word_start), np.flatnonzero(~word_start)
    parts = [(np.zeros(0, np.int64), np.zeros(0, np.int64))]
    if starts.size:
        lead = " " if tokenizer_markers(tokenizer).kind == "bytelevel" else ""  # "Ġhabari" needs the space
        ids = tokenizer(
            [lead + texts[i] for i in starts],
            add_special_tokens=False,
            return_attention_mask=False,
            return_token_type_ids=False,
        )["input_ids"]
        parts.append(_flat(ids, starts))
    if conts.size:
        splitter, id_map = word_internal_splitter(tokenizer)
        encodings = splitter.encode_batch([texts[i] for i in conts], add_special_tokens=False)
        flat, rows = _flat([e.ids for e in encodings], conts)
        parts.append((id_map[flat] if id_map is not None else flat, rows))
    flat = np.concatenate([p[0] for p in parts])
    rows = np.concatenate([p[1] for p in parts])
    order = np.argsort(rows, kind="stable")  # pieces grouped by row, in text order
    return flat[order], rows[order]


def scatter_mean(
    source: torch.Tensor, pieces: np.ndarray, rows: np.ndarray, n_rows: int
) -> tuple[torch.Tensor, np.ndarray]:
    """Mean of `source[pieces]` grouped by `rows`: (n_rows, D) sums / counts, and the counts."""
    sums = torch.zeros((n_rows, source.shape[1]), dtype=torch.float32)
    p, r = torch.from_numpy(pieces), torch.from_numpy(rows)
    for a in range(0, len(pieces), CHUNK):
        sums.index_add_(0, r[a : a + CHUNK], source[p[a : a + CHUNK]])
    counts = np.bincount(rows, minlength=n_rows)
    return sums / torch.from_numpy(np.maximum(counts, 1)).to(torch.float32)[:, None], counts


@register("fvt")
def fvt(problem: TransferProblem, options: FvtOptions = FvtOptions()) -> TransferResult:
    """Overlap copied; every other token = mean of the source rows of its source-tokenizer pieces."""
    source = source_matrix(problem)
    src_tok = problem.source_tokenizer
    ledger = Ledger(problem.target_tokenizer)
    target = random_matrix(problem, source)
    unmatched = copy_overlap(problem, target, ledger, source=source)
    ledger.fill(unmatched, "random", SPECIAL_NO_SOURCE, fallback=True)

    # 1. surface text of the remaining target tokens
    todo = ledger.free()
    texts, word_start = token_surfaces(problem.target_tokenizer)
    has_text = np.fromiter((texts[i] is not None for i in todo), dtype=bool, count=todo.size)
    ledger.fill(todo[~has_text], "random", "no surface text (partial UTF-8 bytes)", fallback=True)
    todo = todo[has_text]

    # 2. batched splits by the source tokenizer, unknown pieces dropped
    pieces, rows = split_with_source(src_tok, [texts[i] for i in todo], word_start[todo])
    n_raw = np.bincount(rows, minlength=todo.size)
    unk = src_tok.unk_token_id
    known = pieces != unk if unk is not None else np.ones(pieces.size, dtype=bool)
    # 3. scatter-mean of the source rows
    means, counts = scatter_mean(source, pieces[known], rows[known], todo.size)
    ok = counts > 0
    partial_unk = int(np.count_nonzero(ok & (np.bincount(rows[~known], minlength=todo.size) > 0)))
    target[torch.from_numpy(todo[ok])] = means[torch.from_numpy(ok)]
    ledger.fill(todo[ok], "combined", "mean of source pieces")
    ledger.fill(todo[n_raw == 0], "random", "source tokenizer gives no pieces", fallback=True)
    ledger.fill(todo[(n_raw > 0) & ~ok], "random", "source tokenizer gives only the unknown token", fallback=True)

    extra_stats = {
        "method": "fvt",
        "seed": int(problem.seed),
        "mean_pieces": round(float(counts[ok].mean()), 4) if ok.any() else 0.0,
        "unknown_pieces_dropped": partial_unk,  # combined tokens that lost some [UNK] pieces
    }
    return TransferResult(embeddings=target, stats=ledger.stats(**extra_stats))
