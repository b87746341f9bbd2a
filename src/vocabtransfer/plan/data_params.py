"""The data phase's params sections, typed: `corpus` (CorpusParams), `tokenizer` (TokenizerParams), `pretokenize`
(PretokenizeParams), `fasttext` (FasttextParams) and `overlap` (OverlapParams), each a frozen dataclass whose
fields carry their default, description and bounds (the schema's sections are generated from them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from vocabtransfer.pipeline.typed import option

Normalization = Literal["NFC", "NFKC", "NFD", "NFKD", "none"]  # corpus.normalization; `none` skips it


@dataclass(frozen=True)
class CorpusParams:
    """the target-language corpora: where each comes from, how it is cleaned and split"""

    sources: dict[str, dict] = option(
        {},
        "one source per language (keys are language codes)",
        per_language=True,
        propertyNames={"$ref": "#/$defs/lang"},
        additionalProperties={"$ref": "#/$defs/corpus_source"},
    )
    normalization: Normalization = option("NFC", "Unicode normal form applied to every line")
    max_bytes: int = option(0, "cap on UTF-8 bytes kept (train + valid) per language; 0 keeps everything", minimum=0)
    valid_fraction: float = option(
        0.05,
        "share of lines held out as the validation split (chosen by a seeded hash of the line)",
        exclusiveMinimum=0,
        exclusiveMaximum=0.5,
    )
    dev_fraction: float = option(
        0.0,
        "share of lines set aside as the dev (tuning) split, by the same hash (the band above valid_fraction, "
        "taken from what would be train); no stage trains on it and the report never scores it; 0 leaves it empty "
        "and train and valid unchanged",
        minimum=0,
        exclusiveMaximum=0.5,
    )
    min_chars: int = option(1, "lines shorter than this (after stripping) are dropped", minimum=1)


@dataclass(frozen=True)
class TokenizerParams:
    """the target-language tokenizer: trained, or an existing one (`from`) and the model that owns it (`donor_model`)"""

    from_: str | None = option(
        None,
        "an existing tokenizer to use as the target instead of training one (docs/methods.md#an-existing-tokenizer-"
        "as-the-target): a hub id, a tokenizer folder (with tokenizer.json) or file, a .gguf file, "
        "hf://owner/name/file.gguf or package:<module>, as source_model takes them; its size, family and special "
        "tokens are its own, and the training keys below are not used",
        key="from",
    )
    donor_model: str | None = option(
        None,
        "the model that owns the tokenizer `from` names, spelled as source_model (a hub id, a model directory, a "
        ".gguf file, hf://owner/name/file.gguf or package:<module>): stage donor reads its input embeddings and, "
        "untied, its output embeddings, so that init method omp_donor codes each new token in its space "
        "(tokensurgeon; docs/methods.md#omp-in-the-donors-space); its vocabulary must be the target tokenizer's, "
        "and it needs `from`; null: no donor",
    )
    family: Literal["auto", "wordpiece", "unigram", "bpe"] = option(
        "auto", "model family of the target tokenizer; auto takes the source tokenizer's"
    )
    vocab_size: int = option(16000, "target vocabulary size", minimum=100)
    min_frequency: int = option(2, "minimum count of a merge/word piece (WordPiece, BPE)", minimum=1)
    sample_bytes: int = option(
        0,
        "train the tokenizer on a seeded sample of about this many UTF-8 bytes of the train split (each line kept "
        "with probability sample_bytes / the split's bytes); 0 trains on every line",
        minimum=0,
    )


@dataclass(frozen=True)
class PretokenizeParams:
    """pre-tokenisation of the corpus splits with the target tokenizer"""

    batch_size: int = option(
        1000, "lines per batch handed to the Rust tokenizer (which encodes a batch on all cores)", minimum=1
    )


Mode = Literal["tokenlevel", "wordlevel"]


@dataclass(frozen=True)
class FasttextParams:
    """the fastText auxiliary embeddings of the target tokens (FOCUS, OFA, semi-NMF)"""

    mode: Mode = option(
        "tokenlevel",
        "tokenlevel trains fastText on the pre-tokenised target corpus (FOCUS); wordlevel embeds each token with a "
        "given pretrained word-level .bin (pretrained_path)",
    )
    pretrained_path: str | None = option(
        None, "word-level fastText .bin (wordlevel mode), relative to $VOCABTRANSFER_DATA"
    )
    model: Literal["cbow", "skipgram"] = option("cbow", "fastText's architecture (FOCUS uses cbow)")
    dim: int = option(100, "dimension of the auxiliary vectors", minimum=1)
    epochs: int = option(3, "training epochs", minimum=1)
    min_count: int = option(
        10, "fastText's minCount: a token seen fewer times gets no dictionary vector (see oov)", minimum=1
    )
    neg: int = option(10, "negative samples per positive", minimum=1)
    bucket: int = option(
        2000000,
        "hash buckets of the character n-grams (fastText's -bucket); the .bin holds (words + bucket) x dim floats "
        "(800 MB at dim 100), so a small corpus can use far fewer (the test config: 100000)",
        minimum=1,
    )
    reproducible: bool = option(
        True,
        "train on one thread so the vectors, and every artefact built from them, are byte-identical between runs; "
        "false uses all threads Snakemake gives (faster)",
    )
    oov: Literal["random", "subword"] = option(
        "random",
        "target tokens outside the fastText dictionary (tokenlevel mode): random leaves them without a vector "
        "(focus, ofa and snmf give them random rows, as FOCUS does); subword gives each one, special tokens "
        "excepted, fastText's character n-gram vector of its vocabulary string, which focus, ofa, snmf and their "
        "factorised variants then use like a dictionary vector (wordlevel mode: only random, its vectors already "
        "use subwords)",
    )
    sample_bytes: int = option(
        0,
        "train fastText (tokenlevel) on a seeded sample of about this many bytes of the token-joined train text "
        "(each line kept with probability sample_bytes / the file's bytes); 0 trains on every line",
        minimum=0,
    )


@dataclass(frozen=True)
class OverlapParams:
    """which target tokens count as in the source vocabulary (the overlap)"""

    exact_match_all: bool = option(True, "tokens whose canonical forms are equal overlap")
    fuzzy_match_all: bool = option(False, "also match ignoring case and the word-start marker")
    match_symbols: bool = option(False, "also match numbers, punctuation and whitespace tokens fuzzily")
    match_bytes: bool = option(
        True,
        "compare byte-level BPE (Ġ, Ã) and SentencePiece-style (▁, <0xC3> byte fallback) tokens by the bytes they "
        "spell, so a byte or string of bytes in both vocabularies matches whatever its spelling; false: "
        "deepfocus's forms (byte tokens match only the same spelling)",
    )
