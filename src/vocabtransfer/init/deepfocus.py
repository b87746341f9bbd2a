"""`FOCUS(...)`: a drop-in for `deepfocus.FOCUS` 1.0.1 (Dobler & de Melo, 2023).

Same keyword arguments, defaults and errors; the same tensor for the same fastText model, random
rows included. It builds what the pipeline's stages build (token-level fastText on the target
text, or pretrained word vectors; the overlap) and runs the FOCUS algorithm,
`vocabtransfer.init.methods.focus.focus_embeddings`:

1. Overlapping target tokens (`vocabtransfer.data.overlap`) copy their source row.
2. Non-overlapping tokens without an auxiliary vector (not in the fastText dictionary, or an
   all-zero vector: deepfocus's "very rare token" rule) get a row drawn from N(mean, std) of the
   source embeddings, in target-id order, from one generator seeded with `seed`.
3. Every other non-overlapping token gets sparsemax(cosine similarities to the overlapping tokens
   that have an auxiliary vector) @ those tokens' source rows.

fastText membership is one set lookup per token (`TokenVectors`); trained and downloaded
fastText models are cached under `vocabtransfer.data.download.cache_dir()`, as deepfocus caches them
under ~/.cache/deepfocus.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
import shutil
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
import fasttext

from vocabtransfer.data.fasttext_models import load_fasttext, zeroed_allocations
from vocabtransfer.data.download import cache_dir
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.log import progress
from vocabtransfer.init.methods.focus import FocusInputs, focus_embeddings
from vocabtransfer.data.overlap import compute_overlap, decode_each, gc_paused, overlap_pairs

log = logging.getLogger(__name__)

FASTTEXT_WORD_URL = "https://dl.fbaipublicfiles.com/fasttext/vectors-crawl/cc.{lang}.300.bin.gz"


# ---------------------------------------------------------------------------------------------
# 1. auxiliary embeddings (fastText)


class TokenVectors:
    """A token -> vector lookup: a fastText model (its dictionary) or a dict of vectors."""

    def __init__(self, model=None, vectors: dict[str, np.ndarray] | None = None):
        self.model = model
        self.vectors = vectors
        if model is not None:
            self.words = frozenset(model.get_words())
        elif vectors is not None:
            self.words = frozenset(vectors)
        else:
            raise ValueError("TokenVectors needs a fastText model or a dict of vectors")

    def matrix(self, tokens: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(len(tokens), d) float32 vectors and a mask: the token has a vector that is not all zeros."""
        present = [t in self.words for t in tokens]
        if self.model is not None:
            dim, get = self.model.get_dimension(), self.model.get_word_vector
        else:
            assert self.vectors is not None  # __init__: a model or vectors
            dim, get = len(next(iter(self.vectors.values()), ())), self.vectors.__getitem__
        out = np.zeros((len(tokens), dim), dtype=np.float32)
        for row, (token, ok) in enumerate(zip(tokens, present)):  # fastText's own API is per word
            if ok:
                out[row] = get(token)
        mask = np.asarray(present, dtype=bool) & (np.abs(out).sum(axis=1) != 0)
        return out, mask


def _read_lines(text_path: str) -> list[str]:
    """The lines deepfocus trains on: `datasets`' text loader for .txt, the `text` field for .json(l)."""
    if text_path.endswith(".txt"):
        with open(text_path, encoding="utf-8") as f:  # universal newlines, split on "\n", like datasets "text"
            return [line.rstrip("\n") for line in f]
    if text_path.endswith((".json", ".jsonl")):
        from datasets import load_dataset  # datasets: heavy: hub datasets only

        return load_dataset("json", data_files=text_path, split="train")["text"]
    raise VocabTransferError(f"{text_path}: training text must be a .txt, .json or .jsonl file")


def _tokenizer_hash(tokenizer) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    blob = backend.to_str() if backend is not None else repr(sorted(tokenizer.get_vocab().items()))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def train_token_fasttext(
    text_path: str,
    tokenizer,
    *,
    epochs: int = 3,
    dim: int = 100,
    min_count: int = 10,
    processes: int | None = None,
    cache: bool = True,
):
    """deepfocus's token-level fastText: tokenise each line with `tokenizer`, join the tokens with
    spaces and train CBOW (neg=10) on the result. Cached under `cache_dir()/fasttext` by text
    path, tokenizer and settings, as deepfocus caches it under ~/.cache/deepfocus."""

    text_path = str(text_path)
    if not Path(text_path).is_file():
        raise VocabTransferError(
            f"{text_path}: target training data not found; pass a text file in the target language"
        )
    processes = processes or os.cpu_count() or 1
    name = Path(text_path).as_posix().replace("/", "_")
    cached = (
        cache_dir()
        / "fasttext"
        / (f"data_{name}_tokenizer_{_tokenizer_hash(tokenizer)}_epochs_{epochs}_dim_{dim}_mincount_{min_count}.bin")
    )
    if cache and cached.is_file():
        log.info("loading the cached fastText model %s", cached)
        return fasttext.load_model(str(cached))
    lines = _read_lines(text_path)
    log.info("tokenising %d lines of %s for fastText", len(lines), text_path)
    with tempfile.TemporaryDirectory(prefix="vocabtransfer-fasttext-") as tmp:
        tokenized = Path(tmp) / "tokens.txt"
        with tokenized.open("w", encoding="utf-8") as f:
            for start in progress(range(0, len(lines), 10_000), desc="tokenising", unit="batch"):
                enc = tokenizer(lines[start : start + 10_000], add_special_tokens=False)
                f.writelines(" ".join(e.tokens) + "\n" for e in enc.encodings)
        log.info(
            "training fastText cbow epochs=%d dim=%d min_count=%d on %d thread(s)", epochs, dim, min_count, processes
        )
        with zeroed_allocations():  # as train_fasttext: no start from old heap bytes in a long-lived process
            model = fasttext.train_unsupervised(
                str(tokenized), dim=dim, neg=10, model="cbow", epoch=epochs, thread=processes, minCount=min_count
            )
    if cache:
        cached.parent.mkdir(parents=True, exist_ok=True)
        part = cached.with_name(cached.name + f".part-{os.getpid()}")
        model.save_model(str(part))
        os.replace(part, cached)
    return model


def download_fasttext_word_model(identifier: str):
    """deepfocus's word-level vectors: a local .bin path is used as is; a language code fetches
    cc.<lang>.300.bin.gz from dl.fbaipublicfiles.com once into `cache_dir()/pretrained_fasttext`."""

    if os.path.exists(identifier):
        return load_fasttext(identifier)
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
            raise VocabTransferError(
                f"{url}: download failed ({exc}); check the language code {identifier!r} "
                "and the connection, or pass a local .bin path as language_identifier"
            ) from exc
        os.replace(gz.with_suffix(".gz.part"), gz)
        with gzip.open(gz, "rb") as src, open(target.with_suffix(".bin.part"), "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(target.with_suffix(".bin.part"), target)
        gz.unlink()
    return fasttext.load_model(str(target))


def word_level_vectors(model, tokenizer) -> TokenVectors:
    """Every vocabulary token embedded with a word-level fastText model: the vector of its
    decoded, stripped text (deepfocus/WECHSEL); a dict keyed by the token's native form."""
    vocab = list(tokenizer.get_vocab().items())
    texts = decode_each(tokenizer, [i for _, i in vocab])
    return TokenVectors(vectors={tok: model.get_word_vector(text.strip()) for (tok, _), text in zip(vocab, texts)})


@dataclass(frozen=True)
class _Training:
    """How `FOCUS` trains token-level fastText when it is given text (`train_token_fasttext`'s settings): its
    fasttext_model_epochs, _dim and _min_count, and its `processes` (None: all cores)."""

    epochs: int
    dim: int
    min_count: int
    processes: int | None


def _auxiliary_vectors(
    mode: str,
    vocab_tokenizer,
    target_training_data_path: str | None,
    fasttext_model_path: str | None,
    language_identifier: str | None,
    training: _Training,
) -> TokenVectors:
    """Step 1 of `FOCUS`: the auxiliary vectors of `auxiliary_embedding_mode` (deepfocus's errors)."""
    if mode == "fasttext-tokenlevel":
        if fasttext_model_path:
            return TokenVectors(model=load_fasttext(fasttext_model_path))
        if not target_training_data_path:
            raise ValueError(
                "You need to provide a path to training data or pretrained fasttext model for fasttext-tokenlevel "
                "auxiliary embeddings."
            )
        return TokenVectors(
            model=train_token_fasttext(
                target_training_data_path,
                vocab_tokenizer,
                epochs=training.epochs,
                dim=training.dim,
                min_count=training.min_count,
                processes=training.processes,
            )
        )
    if mode == "fasttext-wordlevel":
        if not language_identifier:
            raise ValueError(
                "You need to provide a language identifier (e.g. de for German) for fasttext-wordlevel auxiliary "
                "embeddings."
            )
        return word_level_vectors(download_fasttext_word_model(language_identifier), vocab_tokenizer)
    raise ValueError(f"auxiliary_embedding_mode must be 'fasttext-tokenlevel' or 'fasttext-wordlevel', got {mode!r}")


def _overlap_and_auxiliary(
    target_tokenizer,
    source_tokenizer,
    vectors: TokenVectors,
    extend_tokenizer,
    *,
    exact_match_all: bool,
    fuzzy_match_all: bool,
    match_symbols: bool,
):
    """Steps 2 and 3 of `FOCUS`: the overlap and the auxiliary matrix by target id (looked up by native
    form, as deepfocus does). Returns (overlap target ids, overlap source ids, auxiliary V_t×d, its mask,
    the anchor mask of vocabulary extension or None, the new target ids)."""
    table = compute_overlap(
        target_tokenizer,
        source_tokenizer,
        exact_match_all=exact_match_all,
        fuzzy_match_all=fuzzy_match_all,
        match_symbols=match_symbols,
    )
    t_ov, s_ov = overlap_pairs(table)
    vocab_ids = table.column("target_id").to_numpy().astype(np.int64)
    with gc_paused():
        tokens = table.column("target_token").to_pylist()
        vecs, mask = vectors.matrix(tokens)

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
    return t_ov, s_ov, aux, aux_mask, anchor_mask, vocab_ids[is_new]


# ---------------------------------------------------------------------------------------------
# the deepfocus-compatible entry point


@torch.no_grad()
def _focus_rows(source_embeddings: torch.Tensor, found: tuple, target_size: int, seed: int, device, say, start: float):
    """Step 4 of `FOCUS`: the overlapping tokens' rows copied, random rows, FOCUS combinations, from the overlap
    and the auxiliary matrix of `_overlap_and_auxiliary` (`found`), logged with the time since `start`.
    Returns (the embeddings, the method's stats)."""
    t_ov, s_ov, aux, aux_mask, anchor_mask, new_ids = found
    inputs = FocusInputs(source_embeddings, t_ov, s_ov, torch.from_numpy(aux), torch.from_numpy(aux_mask), target_size)
    out, stats = focus_embeddings(inputs, seed=seed, device=device, new_ids=new_ids, anchor_mask=anchor_mask)
    say(
        "FOCUS: copied %d overlapping tokens, %d new tokens from N(source mean, source std) (no fastText vector), "
        "%d new tokens as sparse combinations of %d anchors, in %.1f s",
        stats["copied"],
        stats["random"],
        stats["focus_combined"],
        stats["anchors"],
        time.perf_counter() - start,
    )
    return out, stats


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
    training = _Training(fasttext_model_epochs, fasttext_model_dim, fasttext_model_min_count, processes)
    vectors = _auxiliary_vectors(
        auxiliary_embedding_mode,
        vocab_tokenizer,
        target_training_data_path,
        fasttext_model_path,
        language_identifier,
        training,
    )
    # 2. overlap; 3. auxiliary matrix by target id
    found = _overlap_and_auxiliary(
        target_tokenizer,
        source_tokenizer,
        vectors,
        extend_tokenizer,
        exact_match_all=exact_match_all,
        fuzzy_match_all=fuzzy_match_all,
        match_symbols=match_symbols,
    )
    # 4. copy, random rows, FOCUS combinations
    out, stats = _focus_rows(source_embeddings, found, len(target_tokenizer), seed, device, say, start)
    if verbosity == "debug":
        log.debug("FOCUS stats: %s", stats)
    return out.detach()
