"""WECHSEL (Minixhofer et al., NAACL 2022; reference code CPJKU/wechsel).

Inputs besides the problem: two word-level fastText models with character n-grams, one for
the source language (English) and one for the target language, and a bilingual dictionary
(lines `english<TAB>target`), passed as paths in `problem.resources`:
`source_fasttext`, `target_fasttext`, `dictionary` (the dictionary may instead come from the
option `dictionaries: {lang: path}`, resolved against the data root).

1. Align: embed both sides of every single-word dictionary pair with `get_word_vector`
   (subword-aware, so words outside a model's vocabulary still get vectors; pairs where either
   side has no vector are dropped). Per side, rows are normalised to unit length and centred on
   the side's dictionary mean. Orthogonal Procrustes maps the TARGET space onto the SOURCE
   space: W = U Vᵀ from the SVD U S Vᵀ of X_tᵀ X_s, so that X_t W ≈ X_s. (The reference code
   rotates the source space onto the target space instead and does not normalise or centre;
   for cosine similarities the direction makes no difference.)
2. Token vectors: every token's surface text (markers ##/▁/Ġ removed) embedded with its
   language's fastText model; source and target rows get their side's normalisation and centring,
   target rows are mapped by W.
3. For every target token, cosine similarity to every source token, in blocks of rows: the
   top `neighbors` source tokens, weights softmax(similarity / `temperature`), row = weights @
   source rows. Source tokens without a fastText vector and source special tokens are never
   neighbours.
4. Special tokens (and, with `copy_overlap: true`, all overlapping tokens) are copied from the
   source; target tokens whose fastText vector is all zeros keep the seeded random row.

Differences from the reference: dictionary words are used as given (no lower/title-case
variants); multi-word dictionary entries are skipped; `dictionary_in_vocab_only: true` keeps only
pairs whose two words are in their fastText vocabularies, as the reference does.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.init.methods.registry import TransferProblem, TransferResult, register
from vocabtransfer.pipeline import paths
from vocabtransfer.plan.method_options import WechselOptions
from vocabtransfer.init.methods.baselines import (
    SPECIAL_NO_SOURCE,
    Ledger,
    copy_overlap,
    random_matrix,
    source_matrix,
    token_surfaces,
)
from vocabtransfer.data.fasttext_models import load_fasttext

log = logging.getLogger(__name__)

BLOCK_ELEMENTS = 1 << 24  # similarity entries per block of target rows (64 MB of float32)
QUERY_BLOCK = 1024  # target tokens per block of `nearest_sources`
KEY_CHUNK = 2048  # source keys per chunk: QUERY_BLOCK × KEY_CHUNK similarities (8 MB of float32) stay in cache
EPS = 1e-8


# --------------------------------------------------------------------------- inputs


def read_dictionary(path: str | Path) -> tuple[list[tuple[str, str]], dict]:
    """Single-word (english, target) pairs from a `english<TAB>target` file, deduplicated."""
    path = Path(path)
    if not path.is_file():
        raise VocabTransferError(
            f"{path}: bilingual dictionary not found; fix init.wechsel.dictionaries or the data root"
        )
    pairs, seen = [], set()
    malformed = multiword = 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        line = line.strip()
        if not line:
            continue
        parts = line.split("\t") if "\t" in line else line.split()  # the reference also reads space-separated
        if len(parts) != 2:
            malformed += 1
            continue
        src, tgt = parts[0].strip(), parts[1].strip()
        if not src or not tgt or len(src.split()) > 1 or len(tgt.split()) > 1:
            multiword += 1
            continue
        if (src, tgt) not in seen:
            seen.add((src, tgt))
            pairs.append((src, tgt))
    if not pairs:
        raise VocabTransferError(
            f"{path}: no `english<TAB>target` single-word pairs found; "
            "check the file's format (one pair per line, tab-separated)"
        )
    return pairs, {
        "dictionary_pairs": len(pairs),
        "dictionary_multiword_skipped": multiword,
        "dictionary_malformed_lines": malformed,
    }


def _load(path, what: str):
    if path is None:
        raise VocabTransferError(
            f"init wechsel: no {what} given (problem.resources[{what!r}]); the init stage must "
            "pass the word-level fastText .bin paths (results/source/fasttext/words.bin, "
            "results/{lang}/fasttext/words.bin)"
        )
    return load_fasttext(path)


def word_vectors(ft, words: list[str]) -> np.ndarray:
    """(len(words), d) float32 fastText vectors; a C++ call per word (no batched API exists)."""
    out = np.zeros((len(words), ft.get_dimension()), dtype=np.float32)
    for i, w in enumerate(words):
        if w:
            out[i] = ft.get_word_vector(w)
    return out


def surface_vectors(ft, tokenizer) -> tuple[np.ndarray, np.ndarray]:
    """fastText vectors of every token's surface text (`token_surfaces`: markers such as ## / ▁ / Ġ
    stripped) and a has-vector mask. Unlike `fasttext_vectors.token_vectors` (the fasttext stage's
    vocabulary-string or decoded-text lookups), "##ari" is looked up as "ari"."""
    texts, _ = token_surfaces(tokenizer)
    vecs = word_vectors(ft, [t.strip() if t else "" for t in texts])
    return vecs, np.any(vecs != 0, axis=1)


# --------------------------------------------------------------------------- alignment


def procrustes(x_from: np.ndarray, x_to: np.ndarray) -> np.ndarray:
    """Orthogonal W minimising ||x_from W - x_to||_F: W = U Vᵀ from SVD(x_fromᵀ x_to) (float64)."""
    u, _, vt = np.linalg.svd(x_from.astype(np.float64).T @ x_to.astype(np.float64))
    return u @ vt


def _unit(x: np.ndarray) -> np.ndarray:
    return x / (np.linalg.norm(x, axis=1, keepdims=True) + EPS)


@dataclass
class Alignment:
    """Maps target-language fastText vectors into the source-language space."""

    matrix: np.ndarray  # (d, d) orthogonal, target -> source
    source_mean: np.ndarray  # (d,) mean of the unit-normalised source dictionary vectors
    target_mean: np.ndarray
    stats: dict = field(default_factory=dict)

    def source(self, x: np.ndarray) -> np.ndarray:
        return _unit(_unit(x) - self.source_mean)

    def target(self, x: np.ndarray) -> np.ndarray:
        return _unit((_unit(x) - self.target_mean) @ self.matrix)


def align(source_ft, target_ft, pairs: list[tuple[str, str]], *, in_vocab_only: bool = False) -> Alignment:
    """Procrustes alignment of the target fastText space onto the source one from dictionary pairs."""
    if source_ft.get_dimension() != target_ft.get_dimension():
        raise VocabTransferError(
            f"init wechsel: the source fastText has dim {source_ft.get_dimension()} but the target one "
            f"{target_ft.get_dimension()}; train both word-level models with the same dim"
        )
    if in_vocab_only:
        pairs = [(s, t) for s, t in pairs if source_ft.get_word_id(s) >= 0 and target_ft.get_word_id(t) >= 0]
    src_words = sorted({s for s, _ in pairs})
    tgt_words = sorted({t for _, t in pairs})
    src_idx = {w: i for i, w in enumerate(src_words)}
    tgt_idx = {w: i for i, w in enumerate(tgt_words)}
    xs = word_vectors(source_ft, src_words)[[src_idx[s] for s, _ in pairs]] if pairs else np.zeros((0, 1))
    xt = word_vectors(target_ft, tgt_words)[[tgt_idx[t] for _, t in pairs]] if pairs else np.zeros((0, 1))
    ok = np.any(xs != 0, axis=1) & np.any(xt != 0, axis=1) if pairs else np.zeros(0, dtype=bool)
    n = int(ok.sum())
    if n < 2:
        raise VocabTransferError(
            f"init wechsel: only {n} dictionary pair(s) have vectors in both fastText models "
            f"(in_vocab_only={in_vocab_only}); use a larger dictionary or corpus, or set "
            "init.wechsel.dictionary_in_vocab_only: false"
        )
    xs, xt = _unit(xs[ok].astype(np.float64)), _unit(xt[ok].astype(np.float64))
    mu_s, mu_t = xs.mean(0), xt.mean(0)
    xs, xt = xs - mu_s, xt - mu_t
    w = procrustes(xt, xs)
    if n < xs.shape[1]:
        log.warning(
            "init wechsel: %d dictionary pairs for %d dimensions; the rotation is underdetermined", n, xs.shape[1]
        )
    cos = np.sum(_unit(xt @ w) * _unit(xs), axis=1)
    stats = {
        "pairs_used": n,
        "pairs_without_vector": int((~ok).sum()),
        "pairs_in_both_vocabularies": int(
            sum(source_ft.get_word_id(s) >= 0 and target_ft.get_word_id(t) >= 0 for (s, t), k in zip(pairs, ok) if k)
        ),
        "aligned_pair_cosine_mean": round(float(cos.mean()), 4),
    }
    log.info("WECHSEL alignment: %d dictionary pairs, mean cosine after rotation %.3f", n, cos.mean())
    return Alignment(w, mu_s.astype(np.float32), mu_t.astype(np.float32), stats)


# --------------------------------------------------------------------------- neighbours


def nearest_sources(
    queries: torch.Tensor, keys: torch.Tensor, allowed: torch.Tensor, k: int, temperature: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Top-k cosine neighbours of unit rows `queries` among unit rows `keys[allowed]`, exactly.

    The allowed keys are gathered once. Queries go in blocks of `QUERY_BLOCK`, keys in chunks of
    `KEY_CHUNK`: each chunk's similarities (QUERY_BLOCK × KEY_CHUNK, 8 MB) stay in cache, give their
    own top k, and the block's final top k is taken over those candidates. On Gemma's 262,144 keys
    and ~27k queries (d = 100) this halves the time against one QUERY_BLOCK × 262,144 product per
    block written to memory and read back by `topk` (benchmarks/README.md).

    Returns (ids (n, k) int64, softmax(sim / temperature) weights (n, k), similarities (n, k)).
    """
    n = queries.shape[0]
    where = allowed.nonzero().squeeze(1)
    candidates = keys[where]
    ids = torch.empty((n, k), dtype=torch.int64, device=keys.device)
    sims = torch.empty((n, k), dtype=keys.dtype, device=keys.device)
    for a in range(0, n, QUERY_BLOCK):
        block = queries[a : a + QUERY_BLOCK]
        best, best_ids = [], []
        for c in range(0, candidates.shape[0], KEY_CHUNK):
            chunk = candidates[c : c + KEY_CHUNK]
            s, i = (block @ chunk.T).topk(min(k, chunk.shape[0]), dim=1)
            best.append(s)
            best_ids.append(i + c)
        sims[a : a + QUERY_BLOCK], pick = torch.cat(best, 1).topk(k, dim=1)
        ids[a : a + QUERY_BLOCK] = where[torch.cat(best_ids, 1).gather(1, pick)]
    return ids, torch.softmax(sims / temperature, dim=1), sims


def _dictionary_path(problem: TransferProblem, opts: WechselOptions) -> Path:
    if problem.resources.get("dictionary"):
        return Path(problem.resources["dictionary"])
    dicts = opts.dictionaries
    if problem.lang in dicts:
        return paths.data_path(dicts[problem.lang])
    raise VocabTransferError(
        f"init.wechsel.dictionaries: no bilingual dictionary for language {problem.lang!r}; "
        f"add `{problem.lang or '<lang>'}: <path to english<TAB>target file>`"
    )


# --------------------------------------------------------------------------- the pipeline's view


@register("wechsel")
def wechsel(problem: TransferProblem, opts: WechselOptions = WechselOptions()) -> TransferResult:
    """Rows = softmax-weighted means of the source rows of the target token's nearest source tokens
    in an aligned fastText space."""
    source = source_matrix(problem)
    src_tok, tgt_tok = problem.source_tokenizer, problem.target_tokenizer

    # 1. align the two fastText spaces with the dictionary (cheap checks first)
    pairs, dict_stats = read_dictionary(_dictionary_path(problem, opts))
    src_ft = _load(problem.resources.get("source_fasttext"), "source_fasttext")
    tgt_ft = _load(problem.resources.get("target_fasttext"), "target_fasttext")
    alignment = align(src_ft, tgt_ft, pairs, in_vocab_only=opts.dictionary_in_vocab_only)

    # 2. token vectors in the shared (source) space
    s_vec, s_mask = surface_vectors(src_ft, src_tok)
    t_vec, t_mask = surface_vectors(tgt_ft, tgt_tok)
    n_src = len(src_tok)
    allowed = s_mask[:n_src].copy()
    allowed[[i for i in src_tok.all_special_ids if i < n_src]] = False
    n_allowed = int(allowed.sum())
    if n_allowed == 0:
        raise VocabTransferError(
            "init wechsel: no source token has a source fastText vector; "
            "is problem.resources['source_fasttext'] a word-level model with character n-grams?"
        )
    k = min(opts.neighbors, n_allowed)
    if k < opts.neighbors:
        log.warning("init wechsel: only %d source tokens can be neighbours; using %d neighbours", n_allowed, k)

    # 3. copy what is shared, then combine neighbours for the remaining tokens with a vector
    ledger = Ledger(tgt_tok)
    target = random_matrix(problem, source)
    unmatched = copy_overlap(problem, target, ledger, source=source, overlap=opts.copy_overlap)
    ledger.fill(unmatched, "random", SPECIAL_NO_SOURCE, fallback=True)
    todo = ledger.free()
    todo_vec = todo[t_mask[todo]]
    ledger.fill(
        np.setdiff1d(todo, todo_vec), "random", "target fastText gives no vector (no known n-grams)", fallback=True
    )

    device = torch.device(problem.device or "cpu")
    keys = torch.from_numpy(alignment.source(s_vec[:n_src])).float().to(device)
    queries = torch.from_numpy(alignment.target(t_vec[todo_vec])).float().to(device)
    ids, weights, sims = nearest_sources(queries, keys, torch.from_numpy(allowed).to(device), k, opts.temperature)
    emb = source[:n_src].to(device)
    block = max(1, BLOCK_ELEMENTS // max(1, k * source.shape[1]))
    rows = torch.empty((len(todo_vec), source.shape[1]), dtype=torch.float32, device=device)
    for a in range(0, len(todo_vec), block):  # weights @ source rows, blockwise
        rows[a : a + block] = torch.einsum("bk,bkd->bd", weights[a : a + block], emb[ids[a : a + block]])
    target[torch.from_numpy(todo_vec)] = rows.cpu()
    ledger.fill(todo_vec, "combined", "softmax-weighted nearest source tokens")

    neighbor_ids = torch.full((problem.target_size, k), -1, dtype=torch.int64)
    neighbor_weights = torch.zeros((problem.target_size, k), dtype=torch.float32)
    neighbor_ids[torch.from_numpy(todo_vec)] = ids.cpu()
    neighbor_weights[torch.from_numpy(todo_vec)] = weights.cpu().float()
    stats = ledger.stats(
        method="wechsel",
        seed=int(problem.seed),
        neighbors=k,
        temperature=opts.temperature,
        **dict_stats,
        **alignment.stats,
        source_tokens_with_vector=int(s_mask[:n_src].sum()),
        target_tokens_with_vector=int(t_mask.sum()),
        top1_similarity_mean=round(float(sims[:, 0].mean()), 4) if len(todo_vec) else None,
    )
    extra = {
        "align_matrix": torch.from_numpy(alignment.matrix.astype(np.float32)),
        "neighbor_ids": neighbor_ids,
        "neighbor_weights": neighbor_weights,
    }
    return TransferResult(embeddings=target, stats=stats, extra=extra)
