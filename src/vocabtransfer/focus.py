"""FOCUS (Dobler & de Melo, 2023): new-token embeddings as sparse convex combinations of the
embeddings of overlapping tokens, weighted by similarity in an auxiliary fastText space.

`FOCUS(...)` is a drop-in for `deepfocus.FOCUS` 1.0.1 (same keyword arguments, defaults and
errors; the same tensor for the same fastText model, random rows included). `focus_embeddings`
is the core that the pipeline calls with a precomputed overlap and auxiliary matrix.

The algorithm, as in deepfocus:
1. Overlapping target tokens (`vocabtransfer.overlap`) copy their source row.
2. Non-overlapping tokens without an auxiliary vector (not in the fastText dictionary, or an
   all-zero vector: deepfocus's "very rare token" rule) get a row drawn from N(mean, std) of the
   source embeddings, in target-id order, from one generator seeded with `seed`.
3. Every other non-overlapping token gets sparsemax(cosine similarities to the overlapping tokens
   that have an auxiliary vector) @ those tokens' source rows.

What is faster than deepfocus: no per-token Python loop (fastText membership is one set, the
random rows are one batched draw, step 3 runs on blocks of rows); sparsemax runs on each row's
top-k similarities, which gives exactly the full-row sparsemax whenever the support is smaller
than k (entmax's own partial-sort argument) and is recomputed with a larger k for rows where it
is not; and the convex combination is a sparse (CSR) product over each row's support.
"""

from __future__ import annotations

import gzip
import logging
import os
import shutil
import tempfile
import time
import urllib.request
import warnings
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.log import progress

log = logging.getLogger(__name__)

FASTTEXT_WORD_URL = "https://dl.fbaipublicfiles.com/fasttext/vectors-crawl/cc.{lang}.300.bin.gz"
DEFAULT_BLOCK_SIZE = 2048  # new tokens per similarity block (block x anchors float32 in memory)
DEFAULT_TOPK = 64  # sparsemax candidates per row; doubled for rows whose support fills it


def cache_dir() -> Path:
    """$VOCABTRANSFER_CACHE, else ~/.cache/vocabtransfer (trained and downloaded fastText models)."""
    return Path(os.environ.get("VOCABTRANSFER_CACHE") or "~/.cache/vocabtransfer").expanduser()


# ---------------------------------------------------------------------------------------------
# 1. auxiliary embeddings (fastText)


class TokenVectors:
    """A token -> vector lookup: a fastText model (its dictionary) or a dict of vectors."""

    def __init__(self, model=None, vectors: dict[str, np.ndarray] | None = None):
        self.model = model
        self.vectors = vectors
        self.words = frozenset(model.get_words()) if model is not None else frozenset(vectors)

    def matrix(self, tokens: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(len(tokens), d) float32 vectors and a mask: the token has a vector that is not all zeros."""
        present = [t in self.words for t in tokens]
        dim = self.model.get_dimension() if self.model is not None else len(next(iter(self.vectors.values()), ()))
        out = np.zeros((len(tokens), dim), dtype=np.float32)
        get = self.model.get_word_vector if self.model is not None else self.vectors.__getitem__
        for row, (token, ok) in enumerate(zip(tokens, present)):  # fastText's own API is per word
            if ok:
                out[row] = get(token)
        mask = np.asarray(present, dtype=bool) & (np.abs(out).sum(axis=1) != 0)
        return out, mask


def _load_fasttext(path: str | os.PathLike):
    import fasttext

    path = Path(path)
    if not path.is_file():
        raise VocabTransferError(f"{path}: fastText model not found; pass the path of a fastText .bin")
    try:
        return fasttext.load_model(str(path))
    except ValueError as exc:
        raise VocabTransferError(f"{path}: not a fastText .bin ({exc}); retrain or re-download it") from exc


def _read_lines(text_path: str) -> list[str]:
    """The lines deepfocus trains on: `datasets`' text loader for .txt, the `text` field for .json(l)."""
    if text_path.endswith(".txt"):
        with open(text_path, encoding="utf-8") as f:  # universal newlines, split on "\n", like datasets "text"
            return [line.rstrip("\n") for line in f]
    if text_path.endswith((".json", ".jsonl")):
        from datasets import load_dataset

        return load_dataset("json", data_files=text_path, split="train")["text"]
    raise VocabTransferError(f"{text_path}: training text must be a .txt, .json or .jsonl file")


def _tokenizer_hash(tokenizer) -> str:
    import hashlib

    backend = getattr(tokenizer, "backend_tokenizer", None)
    blob = backend.to_str() if backend is not None else repr(sorted(tokenizer.get_vocab().items()))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def train_token_fasttext(text_path: str, tokenizer, *, epochs: int = 3, dim: int = 100, min_count: int = 10,
                         processes: int | None = None, cache: bool = True):
    """deepfocus's token-level fastText: tokenise each line with `tokenizer`, join the tokens with
    spaces and train CBOW (neg=10) on the result. Cached under `cache_dir()/fasttext` by text
    path, tokenizer and settings, as deepfocus caches it under ~/.cache/deepfocus."""
    import fasttext

    text_path = str(text_path)
    if not Path(text_path).is_file():
        raise VocabTransferError(f"{text_path}: target training data not found; pass a text file in the target language")
    processes = processes or os.cpu_count() or 1
    name = Path(text_path).as_posix().replace("/", "_")
    cached = cache_dir() / "fasttext" / (
        f"data_{name}_tokenizer_{_tokenizer_hash(tokenizer)}_epochs_{epochs}_dim_{dim}_mincount_{min_count}.bin")
    if cache and cached.is_file():
        log.info("loading the cached fastText model %s", cached)
        return fasttext.load_model(str(cached))
    lines = _read_lines(text_path)
    log.info("tokenising %d lines of %s for fastText", len(lines), text_path)
    with tempfile.TemporaryDirectory(prefix="vocabtransfer-fasttext-") as tmp:
        tokenized = Path(tmp) / "tokens.txt"
        with tokenized.open("w", encoding="utf-8") as f:
            for start in progress(range(0, len(lines), 10_000), desc="tokenising", unit="batch"):
                enc = tokenizer(lines[start:start + 10_000], add_special_tokens=False)
                f.writelines(" ".join(e.tokens) + "\n" for e in enc.encodings)
        log.info("training fastText cbow epochs=%d dim=%d min_count=%d on %d thread(s)", epochs, dim, min_count, processes)
        model = fasttext.train_unsupervised(str(tokenized), dim=dim, neg=10, model="cbow", epoch=epochs,
                                            thread=processes, minCount=min_count)
    if cache:
        cached.parent.mkdir(parents=True, exist_ok=True)
        part = cached.with_name(cached.name + f".part-{os.getpid()}")
        model.save_model(str(part))
        os.replace(part, cached)
    return model


def download_fasttext_word_model(identifier: str):
    """deepfocus's word-level vectors: a local .bin path is used as is; a language code fetches
    cc.<lang>.300.bin.gz from dl.fbaipublicfiles.com once into `cache_dir()/pretrained_fasttext`."""
    import fasttext

    if os.path.exists(identifier):
        return _load_fasttext(identifier)
    target = cache_dir() / "pretrained_fasttext" / f"cc.{identifier}.300.bin"
    if not target.is_file():
        url = FASTTEXT_WORD_URL.format(lang=identifier)
        target.parent.mkdir(parents=True, exist_ok=True)
        gz = target.with_name(target.name + ".gz")
        log.info("downloading fastText word vectors for %r from %s", identifier, url)
        try:
            with urllib.request.urlopen(url, timeout=60) as resp, open(gz.with_suffix(".gz.part"), "wb") as out:
                total = int(resp.headers.get("Content-Length") or 0) or None
                with progress(total=total, unit="B", unit_scale=True, desc=gz.name) as bar:
                    while chunk := resp.read(1 << 20):
                        out.write(chunk)
                        bar.update(len(chunk))
        except OSError as exc:
            raise VocabTransferError(f"{url}: download failed ({exc}); check the language code {identifier!r} "
                                     "and the connection, or pass a local .bin path as language_identifier") from exc
        os.replace(gz.with_suffix(".gz.part"), gz)
        with gzip.open(gz, "rb") as src, open(target.with_suffix(".bin.part"), "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(target.with_suffix(".bin.part"), target)
        gz.unlink()
    return fasttext.load_model(str(target))


def word_level_vectors(model, tokenizer) -> TokenVectors:
    """Every vocabulary token embedded with a word-level fastText model: the vector of its
    decoded, stripped text (deepfocus/WECHSEL); a dict keyed by the token's native form."""
    from vocabtransfer.overlap import decode_each

    vocab = list(tokenizer.get_vocab().items())
    texts = decode_each(tokenizer, [i for _, i in vocab])
    return TokenVectors(vectors={tok: model.get_word_vector(text.strip()) for (tok, _), text in zip(vocab, texts)})


# ---------------------------------------------------------------------------------------------
# 2. random rows


def _normal_rows(mean: torch.Tensor, std: torch.Tensor, n: int, seed: int) -> torch.Tensor:
    """`n` rows, bit for bit what `n` successive `torch.normal(mean, std, generator=gen)` calls give
    with `gen = torch.Generator("cpu").manual_seed(seed)` (deepfocus's per-token loop on CPU)."""
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    mean, std = mean.cpu(), std.cpu()
    dim = mean.numel()
    if n == 0:
        return torch.empty((0, dim), dtype=mean.dtype)
    if mean.dtype == torch.float32 and dim % 16 == 0:
        # CPU normal_ fills float32 tensors of >= 16 elements 16 at a time (Box-Muller on 16 uniforms);
        # with D % 16 == 0 each row of one (n, D) draw consumes the stream exactly as one D-draw does.
        return torch.normal(mean.expand(n, dim), std.expand(n, dim), generator=gen)
    # D % 16 != 0 (or not float32): the kernel recomputes the last 16 values of every draw from 16
    # fresh uniforms, so a batched draw would consume the stream differently. We fall back to the
    # per-row draw for these rows only (exact; n small calls, n = rows without a fastText vector).
    return torch.stack([torch.normal(mean, std, generator=gen) for _ in range(n)])


# ---------------------------------------------------------------------------------------------
# 3. sparsemax weights and convex combinations


def _support_size(vals: torch.Tensor) -> torch.Tensor:
    """entmax's sparsemax support size for rows of descending values (same float operations)."""
    x = vals - vals[:, :1]
    cumsum = x.cumsum(dim=1) - 1
    rho = torch.arange(1, x.shape[1] + 1, device=x.device, dtype=x.dtype)
    return (rho * x > cumsum).sum(dim=1)


def _sparse_weights(sims: torch.Tensor, k: int) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """sparsemax(sims, dim=-1) as (rows, weights, anchor indices) groups with weights sorted descending.

    With the top-k values of a row, entmax's threshold is the full-row threshold whenever the
    support is smaller than k; rows whose support reaches k are redone with 2k (full sort at the end).
    """
    import entmax

    n_anchor = sims.shape[1]
    rows = torch.arange(sims.shape[0], device=sims.device)
    out = []
    while rows.numel():
        k = min(k, n_anchor)
        part = sims if rows.numel() == sims.shape[0] else sims[rows]
        vals, idx = part.topk(k, dim=1) if k < n_anchor else part.sort(dim=1, descending=True)
        solved = _support_size(vals) < k if k < n_anchor else torch.ones_like(rows, dtype=torch.bool)
        if solved.any():
            w = entmax.sparsemax(vals[solved], dim=-1)
            support = int((w > 0).sum(dim=1).max())
            out.append((rows[solved], w[:, :support], idx[solved][:, :support]))
        rows, k = rows[~solved], 2 * k
    return out


def _combine(weights: torch.Tensor, idx: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    """Row i: sum_j weights[i, j] * anchors[idx[i, j]] (weights padded with zeros past each support).

    A sparse (CSR) product with the support entries only; a dense one when the supports cover a
    large share of the anchors (then a plain matrix product is the faster of the two).
    """
    n, support = weights.shape
    n_anchor = anchors.shape[0]
    weights = weights.to(anchors.dtype)
    if support * 4 >= n_anchor:
        dense = torch.zeros((n, n_anchor), dtype=anchors.dtype, device=anchors.device)
        return dense.scatter_(1, idx, weights) @ anchors
    # columns in ascending anchor order within each row (deepfocus's summation order); padding last
    cols, order = idx.masked_fill(weights <= 0, n_anchor).sort(dim=1)
    keep = cols < n_anchor
    crow = torch.zeros(n + 1, dtype=torch.int64, device=anchors.device)
    crow[1:] = keep.sum(dim=1).cumsum(dim=0)
    with warnings.catch_warnings():  # "sparse CSR support is in beta"
        warnings.simplefilter("ignore", UserWarning)
        csr = torch.sparse_csr_tensor(crow, cols[keep], weights.gather(1, order)[keep], size=(n, n_anchor),
                                      check_invariants=False)
        return csr @ anchors


def focus_embeddings(
    source_embeddings: torch.Tensor,
    target_ids_overlap,
    source_ids_overlap,
    auxiliary,
    auxiliary_mask,
    target_size: int,
    seed: int = 42,
    device: str | torch.device = "cpu",
    block_size: int = DEFAULT_BLOCK_SIZE,
    *,
    new_ids=None,
    anchor_mask=None,
    topk: int = DEFAULT_TOPK,
) -> tuple[torch.Tensor, dict]:
    """FOCUS from a precomputed overlap and auxiliary matrix.

    Args:
        source_embeddings: (V_s, D) source rows, indexed by source id.
        target_ids_overlap, source_ids_overlap: (n,) aligned ids of the overlapping tokens.
        auxiliary: (V_t, d) auxiliary (fastText) vectors by target id; auxiliary_mask: (V_t,) bool,
            the token has a vector. Rows that are all zeros count as having none (deepfocus's rule).
        target_size: rows of the result (len(target_tokenizer)).
        seed: seeds the CPU generator of the random rows (CPU always, so CPU and GPU runs draw the
            same random rows).
        device: where similarities, sparsemax and the combination run ("cuda" when available).
        block_size: new tokens per similarity block (block_size x anchors floats at a time).
        new_ids: target ids to initialise besides the overlap (default: all other ids).
        anchor_mask: (n,) bool, which overlapping tokens may serve as FOCUS anchors (default: all).
        topk: sparsemax candidates per row (a speed knob; the result does not depend on it).

    Returns:
        ((target_size, D) float32 tensor on `device`, stats): stats counts copied, focus_combined
        and random rows (random_reason: "no fastText vector"), anchors, support sizes, seconds.
    """
    start = time.perf_counter()
    device = torch.device(device)
    fix = "recompute the overlap and auxiliary embeddings for this target tokenizer"
    if not isinstance(source_embeddings, torch.Tensor) or source_embeddings.dim() != 2:
        raise VocabTransferError(f"source embeddings: expected a 2-D tensor (vocab x dim), got "
                                 f"{getattr(source_embeddings, 'shape', type(source_embeddings).__name__)}")
    n_source, dim = source_embeddings.shape
    t_ov = np.asarray(target_ids_overlap, dtype=np.int64).reshape(-1)
    s_ov = np.asarray(source_ids_overlap, dtype=np.int64).reshape(-1)
    aux = torch.as_tensor(auxiliary)
    aux_mask = torch.as_tensor(auxiliary_mask).to("cpu", torch.bool).numpy().reshape(-1)
    if t_ov.shape != s_ov.shape:
        raise VocabTransferError(f"overlap: {t_ov.size} target ids but {s_ov.size} source ids; {fix}")
    if t_ov.size and (t_ov.min() < 0 or t_ov.max() >= target_size):
        raise VocabTransferError(f"overlap: target id outside 0..{target_size - 1}; {fix}")
    if s_ov.size and (s_ov.min() < 0 or s_ov.max() >= n_source):
        raise VocabTransferError(f"overlap: source id outside the {n_source} source rows; {fix}")
    if np.unique(t_ov).size != t_ov.size:
        raise VocabTransferError(f"overlap: a target id occurs more than once; {fix}")
    if aux.dim() != 2 or aux.shape[0] != target_size or aux_mask.shape != (target_size,):
        raise VocabTransferError(f"auxiliary embeddings: expected ({target_size}, d) vectors and a ({target_size},) "
                                 f"mask, got {tuple(aux.shape)} and {aux_mask.shape}; {fix}")
    aux = aux.to("cpu", torch.float32)
    has_vec = aux_mask & (aux.abs().sum(dim=1) != 0).numpy()

    # 1. copy the overlapping tokens
    src = source_embeddings.detach()
    out = torch.zeros((target_size, dim), dtype=torch.float32, device=device)
    out[torch.from_numpy(t_ov).to(device)] = src[torch.from_numpy(s_ov).to(src.device)].to(device, torch.float32)

    # 2. random rows for new tokens without an auxiliary vector, in target-id order
    if new_ids is None:
        is_new = np.ones(target_size, dtype=bool)
        is_new[t_ov] = False
        new = np.flatnonzero(is_new)
    else:
        new = np.unique(np.asarray(new_ids, dtype=np.int64))
        if np.isin(new, t_ov).any() or (new.size and (new[0] < 0 or new[-1] >= target_size)):
            raise VocabTransferError(f"new_ids: must be target ids (< {target_size}) outside the overlap; {fix}")
    random_ids = new[~has_vec[new]]
    focus_ids = new[has_vec[new]]
    rand = _normal_rows(src.mean(dim=0), src.std(dim=0), random_ids.size, seed)
    out[torch.from_numpy(random_ids).to(device)] = rand.to(device, torch.float32)

    # 3. anchors: overlapping tokens with an auxiliary vector
    use = has_vec[t_ov] if anchor_mask is None else has_vec[t_ov] & np.asarray(anchor_mask, dtype=bool).reshape(-1)
    anchor_t, anchor_s = t_ov[use], s_ov[use]
    supports = []
    if focus_ids.size:
        if anchor_t.size == 0:
            raise VocabTransferError("FOCUS: no overlapping token has an auxiliary (fastText) vector, so new tokens "
                                     "have nothing to be combined from; check the overlap and the fastText model")
        anchor_src = src[torch.from_numpy(anchor_s).to(src.device)].to(device, torch.float32)
        anchor_aux = torch.nn.functional.normalize(aux[torch.from_numpy(anchor_t)].to(device), dim=1)
        blocks = range(0, focus_ids.size, max(1, int(block_size)))
        for s in progress(blocks, desc="FOCUS", unit="block"):
            ids = torch.from_numpy(focus_ids[s:s + block_size])
            sims = torch.nn.functional.normalize(aux[ids].to(device), dim=1) @ anchor_aux.T
            for rows, w, idx in _sparse_weights(sims, topk):
                out[ids.to(device)[rows]] = _combine(w, idx, anchor_src)
                supports.append((w > 0).sum(dim=1).cpu())
            del sims
    support = torch.cat(supports).float() if supports else torch.zeros(0)
    stats = {
        "copied": int(t_ov.size),
        "focus_combined": int(focus_ids.size),
        "random": int(random_ids.size),
        "random_reason": "no fastText vector",
        "untouched": int(target_size - t_ov.size - new.size),
        "anchors": int(anchor_t.size),
        "support_mean": round(float(support.mean()), 3) if support.numel() else 0.0,
        "support_max": int(support.max()) if support.numel() else 0,
        "seed": int(seed),
        "device": str(device),
        "seconds": round(time.perf_counter() - start, 3),
    }
    return out, stats


# ---------------------------------------------------------------------------------------------
# 4. the deepfocus-compatible entry point


@torch.no_grad()
def FOCUS(
    target_tokenizer,
    source_tokenizer,
    source_embeddings: torch.Tensor,
    # Auxiliary embedding args
    auxiliary_embedding_mode: Literal["fasttext-tokenlevel", "fasttext-wordlevel"] = "fasttext-tokenlevel",
    target_training_data_path: str | None = None,
    fasttext_model_path: str | None = None,
    language_identifier: str | None = None,
    fasttext_model_epochs: int = 3,
    fasttext_model_dim: int = 100,
    fasttext_model_min_count: int = 10,
    # match options
    exact_match_all: bool = True,
    match_symbols: bool = False,
    fuzzy_match_all: bool = False,
    extend_tokenizer=None,
    processes: int | None = None,
    seed: int = 42,
    device="cpu",
    verbosity: Literal["debug", "info", "silent"] = "info",
) -> torch.Tensor:
    """FOCUS initialisation of `target_tokenizer`'s embeddings: a drop-in for `deepfocus.FOCUS` 1.0.1.

    Same arguments, defaults and result: (len(target_tokenizer), D) float32 on `device`, equal to
    deepfocus's output for the same fastText model (random rows included, on CPU). Random rows are
    always drawn from a CPU generator, so the result is the same on CPU and GPU (deepfocus draws
    them on `device`, so its GPU random rows differ from its CPU ones).

    Args:
        target_tokenizer / source_tokenizer: fast tokenizers; source_embeddings: (V_s, D) tensor.
        auxiliary_embedding_mode: "fasttext-tokenlevel" (fastText trained on the tokenised target
            text, or given by `fasttext_model_path`) or "fasttext-wordlevel" (pretrained word vectors
            for `language_identifier`, a language code or a local .bin path).
        fasttext_model_epochs / _dim / _min_count: settings when training the fastText model.
        exact_match_all / match_symbols / fuzzy_match_all: which tokens overlap (see overlap.py).
        extend_tokenizer: for vocabulary extension, the language-specific tokenizer that extended
            the source one (then `target_tokenizer` is the extended tokenizer).
        processes: fastText training threads (default: all cores). seed: seeds the random rows.
        device: where the similarity blocks run. verbosity: "debug", "info" or "silent".
    """
    if verbosity not in ("debug", "info", "silent"):
        raise ValueError(f"verbosity must be 'debug', 'info' or 'silent', got {verbosity!r}")
    say = log.info if verbosity != "silent" else (lambda *args: None)

    start = time.perf_counter()
    say("FOCUS: initialising %d target tokens", len(target_tokenizer))
    vocab_tokenizer = extend_tokenizer or target_tokenizer
    # 1. auxiliary embeddings
    if auxiliary_embedding_mode == "fasttext-tokenlevel":
        if not target_training_data_path and not fasttext_model_path:
            raise ValueError(
                "You need to provide a path to training data or pretrained fasttext model for fasttext-tokenlevel auxiliary embeddings."
            )
        if fasttext_model_path:
            vectors = TokenVectors(model=_load_fasttext(fasttext_model_path))
        else:
            vectors = TokenVectors(model=train_token_fasttext(
                target_training_data_path, vocab_tokenizer, epochs=fasttext_model_epochs, dim=fasttext_model_dim,
                min_count=fasttext_model_min_count, processes=processes))
    elif auxiliary_embedding_mode == "fasttext-wordlevel":
        if not language_identifier:
            raise ValueError(
                "You need to provide a language identifier (e.g. de for German) for fasttext-wordlevel auxiliary embeddings."
            )
        vectors = word_level_vectors(download_fasttext_word_model(language_identifier), vocab_tokenizer)
    else:
        raise ValueError(f"auxiliary_embedding_mode must be 'fasttext-tokenlevel' or 'fasttext-wordlevel', "
                         f"got {auxiliary_embedding_mode!r}")

    # 2. overlap
    from vocabtransfer.overlap import compute_overlap, gc_paused, overlap_pairs

    table = compute_overlap(target_tokenizer, source_tokenizer, exact_match_all=exact_match_all,
                            fuzzy_match_all=fuzzy_match_all, match_symbols=match_symbols)
    t_ov, s_ov = overlap_pairs(table)
    vocab_ids = table.column("target_id").to_numpy().astype(np.int64)
    with gc_paused():
        tokens = table.column("target_token").to_pylist()
        vecs, mask = vectors.matrix(tokens)

    # 3. auxiliary matrix by target id (looked up by native form, as deepfocus does)
    target_size = len(target_tokenizer)
    aux = np.zeros((target_size, vecs.shape[1]), dtype=np.float32)
    aux_mask = np.zeros(target_size, dtype=bool)
    aux[vocab_ids], aux_mask[vocab_ids] = vecs, mask
    anchor_mask = None
    if extend_tokenizer is not None:
        # deepfocus: `extend_tokenizer_vocab.get(token)` must be truthy, so id 0 counts as absent too
        ext_vocab = extend_tokenizer.get_vocab()
        by_id = dict(zip(vocab_ids.tolist(), tokens))
        anchor_mask = np.fromiter((bool(ext_vocab.get(by_id[t])) for t in t_ov.tolist()), dtype=bool, count=t_ov.size)
    is_new = ~np.isin(vocab_ids, t_ov)

    # 4. copy, random rows, FOCUS combinations
    out, stats = focus_embeddings(source_embeddings, t_ov, s_ov, torch.from_numpy(aux), torch.from_numpy(aux_mask),
                                  target_size, seed=seed, device=device, new_ids=vocab_ids[is_new],
                                  anchor_mask=anchor_mask)
    say("FOCUS: copied %d overlapping tokens, %d new tokens from N(source mean, source std) (no fastText vector), "
        "%d new tokens as sparse combinations of %d anchors, in %.1f s", stats["copied"], stats["random"],
        stats["focus_combined"], stats["anchors"], time.perf_counter() - start)
    if verbosity == "debug":
        log.debug("FOCUS stats: %s", stats)
    return out.detach()
