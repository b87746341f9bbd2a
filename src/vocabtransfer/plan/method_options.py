"""The options of the built-in initialisation methods and of the factorisations, typed: each section
`init.<name>` is a frozen dataclass (`OmpOptions` for `init.omp`, …) whose fields hold their default,
description and bounds (`vocabtransfer.pipeline.typed.option`). They are the one home of these facts:
the schema's `init.<name>` is generated from the class a method declares
(`MethodInfo("omp", options=OmpOptions)` in catalog.py), and a factorisation's from `FACTORIZATIONS` below.
A method declared elsewhere (a test's, a new module's) declares its options class beside it.

The init stage reads a method's options from the typed params root, built once (`ctx.params.init.omp`;
`ctx.params.init.options(name)` for the job's method), and hands them to it: `method(problem, options)`. From Python,
`OmpOptions(k=8)` is the same options with the other defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.pipeline.typed import NoOptions, option, subsection

NEIGHBORS = "overlapping tokens mixed per new token (fastText cosine top-k)"
TEMPERATURE = "softmax temperature over neighbour similarities"


@dataclass(frozen=True)
class RandomRowsOptions:
    """How the rows that `random` and `overlap` draw at random are scaled (docs/methods.md#random)."""

    scale: Literal["source", "calibrated"] = option(
        "source",
        "source: rows drawn from N(mean, std) of the source rows, as they are; calibrated: drawn from N(mean, "
        "(α·std)²), α the largest factor ≤ 1 (on a grid of 2^(-k/8)) whose initialised model scores at most "
        "calibration_margin nats above the same model with every drawn row at the mean, on the first "
        "calibration_lines training lines: a tied head (Gemma) then starts near the uniform guess ln V instead of "
        "~6 nats above it (copied rows keep their source rows; docs/methods.md#random)",
        type="string",
    )
    calibration_lines: int = option(
        64, "training lines (the corpus's train split, never the valid one) scored per candidate factor", minimum=1
    )
    calibration_margin: float = option(
        0.2,
        "nats the drawn rows' spread may add to the loss (a logit std of at most sqrt(2 × margin))",
        exclusiveMinimum=0,
    )


@dataclass(frozen=True)
class RandomOptions(RandomRowsOptions):
    """the random baseline: every row drawn at random (special tokens copied), scaled by `scale`"""


@dataclass(frozen=True)
class OverlapOptions(RandomRowsOptions):
    """the overlap baseline: overlapping tokens copied, every other row as in random (and scaled alike)"""


@dataclass(frozen=True)
class MeanOptions(NoOptions):
    """the mean baseline takes no options"""


@dataclass(frozen=True)
class FvtOptions(NoOptions):
    """FVT takes no options"""


@dataclass(frozen=True)
class FvtPriorOptions:
    """the frequency-prior control: FVT's rows and the output bias moved by beta times the train split's centred
    unigram log-probabilities, beta fitted on training lines (docs/methods.md#fvt_prior)"""

    grid: tuple[float, ...] = option(
        [0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0],
        "weights beta of the unigram log-probabilities tried (0, FVT's own bias, is always tried too)",
        items={"type": "number", "minimum": 0},
        uniqueItems=True,
    )
    lines: int = option(64, "training lines (the corpus's train split, never the valid one) scored per beta", minimum=1)


@dataclass(frozen=True)
class FocusOptions:
    block_size: int = option(2048, "new-token rows per sparsemax block", minimum=1)
    topk: int = option(
        64,
        "sparsemax candidates per row (speed only: rows whose support fills it are redone with twice as many)",
        minimum=1,
    )


@dataclass(frozen=True)
class HypernetOptions:
    """the learned initialisation: stage hypernet trains the network once per source model (every key but
    batch_rows), the init jobs apply it (docs/methods.md#hypernet)"""

    TRAINING: ClassVar[tuple[str, ...]] = (
        "steps",
        "batch_size",
        "seq_len",
        "learning_rate",
        "warmup_steps",
        "layers",
        "width",
        "max_pieces",
        "vocab_min",
        "vocab_max",
        "tokenizer_lines",
        "steps_per_tokenizer",
        "aux_weight",
        "save_every",
        "precision",
        "network",
        "languages",
    )

    batch_rows: int = option(4096, "target rows the network predicts per forward pass (memory only)", minimum=1)
    steps: int = option(600, "training steps of the network (the source model frozen)", minimum=1)
    batch_size: int = option(16, "blocks of text per step", minimum=1)
    seq_len: int = option(128, "tokens per block, under the step's sampled tokenizer", minimum=8)
    learning_rate: float = option(
        3e-4, "AdamW's peak learning rate (linear warm-up, then linear decay)", exclusiveMinimum=0
    )
    warmup_steps: int = option(30, "steps of linear warm-up", minimum=0)
    layers: int = option(2, "transformer encoder layers of the network", minimum=1)
    width: int | None = option(None, "the encoder's width (null: the source's embedding size)", minimum=8)
    max_pieces: int = option(8, "source pieces the network reads per token (FVT's base row uses them all)", minimum=1)
    vocab_min: int = option(2000, "the smallest sampled vocabulary (sizes are drawn log-uniformly)", minimum=100)
    vocab_max: int = option(16000, "the largest sampled vocabulary", minimum=100)
    tokenizer_lines: int = option(
        4000, "training lines each sampled tokenizer is trained on (drawn afresh)", minimum=100
    )
    steps_per_tokenizer: int = option(10, "steps under one sampled tokenizer before the next is drawn", minimum=1)
    aux_weight: float = option(
        0.5,
        "weight of the mean squared distance to the source rows of the pieces a "
        "sampled vocabulary shares with the source (ZeTT's auxiliary loss)",
        minimum=0,
    )
    save_every: int = option(
        100, "steps between checkpoints (a killed training resumes from the last)", minimum=1, rerun=False
    )
    precision: Literal["auto", "fp32", "bf16"] = option(
        "auto", "as pretrain.precision: bf16 mixed precision where the hardware multiplies bf16 natively"
    )
    network: str | None = option(
        None,
        "trained networks to apply instead of training them: the folder stage hypernet wrote in another study "
        "(its results/source/hypernet, one pseed<k> folder a network seed; this study's pretraining seed k applies "
        "network seed k; relative paths resolve against $VOCABTRANSFER_DATA); its source model must be this "
        "study's (checked by name before any job, by the weights' sha256 in the job); null: train here",
    )

    languages: tuple[str, ...] | None = option(
        None,
        "the languages whose train splits the network trains on (a subset of `languages`); the study's other "
        "languages get it zero-shot, as a language it never saw, e.g. [sw, de] with languages [sw, de, ar]; "
        "null: every language of the study",
        minItems=1,
    )

    def __post_init__(self) -> None:
        if self.vocab_min > self.vocab_max:
            raise VocabTransferError(
                f"init.hypernet.vocab_min ({self.vocab_min}) is above init.hypernet.vocab_max "
                f"({self.vocab_max}); make vocab_min ≤ vocab_max"
            )


@dataclass(frozen=True)
class OmpOptions:
    """tokensurgeon (arXiv 2506.06607): each new token a sparse signed combination of overlapping
    tokens, found by orthogonal matching pursuit in the fastText space of the target corpus (omp_donor: in the
    donor model's) and applied to their source rows; tokens without a fastText vector get FOCUS's rows
    (fasttext.oov)"""

    KEY: ClassVar[str] = "omp"  # its params section, init.<KEY>, named in error lines

    k: int = option(
        64,
        "most atoms (overlapping tokens) per new token; 64 is tokensurgeon's OMP default since "
        "mergekit's v2 and the setting its paper reports (k = 8 was the older nearest-neighbour surgeon's); "
        "config/gemma.yaml's k comes from the dev split; at most the overlapping tokens with a fastText "
        "vector, and a token stops at fasttext.dim atoms, the most that can be independent",
        minimum=1,
    )
    block_size: int = option(
        256,
        "new tokens per OMP batch (memory and speed only: 256 keeps a batch's float64 "
        "buffers in cache on CPU; a GPU wants more)",
        minimum=1,
    )
    norm: Literal["combination", "atoms"] = option(
        "combination",
        "combination: the new row is Σ γ_j E_src(j) as OMP gives it (tokensurgeon); atoms: that row "
        "rescaled to the |γ|-weighted mean norm of its atoms' source rows, for tied-head sources such as Gemma, where "
        "long combined rows swamp the softmax",
        type="string",
    )


@dataclass(frozen=True)
class OmpDonorOptions(OmpOptions):
    """tokensurgeon (arXiv 2506.06607) as it runs: every target token outside the overlap coded by OMP in the
    embeddings of tokenizer.donor_model, the model that owns the target tokenizer, over the overlapping tokens' donor
    rows as they are, and the code applied to their source rows; the input and output embeddings each in the donor's
    own space where the donor's are untied (docs/methods.md#omp-in-the-donors-space); needs tokenizer.donor_model"""

    KEY: ClassVar[str] = "omp_donor"

    k: int = option(
        64,
        "most atoms (overlapping tokens) per new token; 64 is tokensurgeon's OMP default since mergekit's v2 and the "
        "setting its paper reports; at most the overlapping tokens, and a token stops at the donor's hidden size, the "
        "most atoms that can be independent",
        minimum=1,
    )


@dataclass(frozen=True)
class OfaOptions:
    """OFA (Liu et al. 2024); new tokens mixed from overlapping tokens in a truncated-SVD space"""

    keep_dim: int = option(100, "SVD primitives; the hidden size means no factorisation", minimum=1)
    neighbors: int = option(10, NEIGHBORS, minimum=1)
    temperature: float = option(0.1, TEMPERATURE, exclusiveMinimum=0)


@dataclass(frozen=True)
class SnmfOptions:
    """semi-NMF (UNKs Everywhere); also the factorisation of every <method>+snmf, computed once by the
    source_snmf stage"""

    rank: int = option(100, "coefficients per token (the rank of W)", minimum=1)
    max_iter: int = option(500, "most update iterations", minimum=0)
    tol: float = option(0.0001, "stop below this relative improvement", minimum=0)
    init: Literal["kmeans", "svd"] = option(
        "svd",
        "svd: exact non-negative rewrite of the rank-(k-1) truncated SVD, then the updates (seconds, also at "
        "262k × 640); kmeans: Ding et al.'s k-means start (minutes at that size)",
    )
    clusters: int = option(
        1,
        "k-means clusters of the source embeddings, each factorised at `rank` with its own "
        "up-projection (UNKs Everywhere's C); 1: one factorisation",
        minimum=1,
    )
    neighbors: int = option(10, NEIGHBORS, minimum=1)
    temperature: float = option(0.1, TEMPERATURE, exclusiveMinimum=0)


@dataclass(frozen=True)
class SvdOptions:
    """the factorisation of every <method>+svd"""

    keep_dim: int = option(100, "rank of the truncated SVD", minimum=1)


@dataclass(frozen=True)
class WordFasttextOptions:
    model: Literal["cbow", "skipgram"] = option("skipgram", "fastText's architecture")
    dim: int = option(100, "dimension of the word vectors", minimum=1)
    epochs: int = option(5, "training epochs", minimum=1)
    min_count: int = option(5, "fastText's minCount: rarer words get no vector", minimum=1)
    bucket: int = option(2000000, "hash buckets of the character n-grams (fastText's -bucket)", minimum=1)


@dataclass(frozen=True)
class WechselOptions:
    """WECHSEL (Minixhofer et al. 2022); aligned word-level fastText spaces"""

    neighbors: int = option(10, "source tokens mixed per target token", minimum=1)
    temperature: float = option(0.1, "softmax temperature over cosine similarities", exclusiveMinimum=0)
    copy_overlap: bool = option(False, "copy all overlapping tokens (WECHSEL copies special tokens only)")
    dictionary_in_vocab_only: bool = option(
        False, "align only on pairs whose words are both in the fastText vocabularies"
    )
    dictionaries: dict[str, str] = option(  # read by the init stage (its data files)
        {"sw": "wechsel_dicts/swahili.txt", "de": "wechsel_dicts/german.txt", "ar": "wechsel_dicts/arabic.txt"},
        "per-language english<TAB>target dictionary, relative to $VOCABTRANSFER_DATA",
        propertyNames={"$ref": "#/$defs/lang"},
        additionalProperties={"type": "string"},
    )
    source_text: str = option(
        "pretrain_text/en.txt",  # read by the source_fasttext stage
        "source-language text the source-side word fastText trains on",
    )
    fasttext: WordFasttextOptions = subsection(  # read by the source_fasttext / word_fasttext stages
        WordFasttextOptions, "the word-level fastText models (source_fasttext and word_fasttext stages)"
    )


# the factorisations (`<method>+<kind>` names a variant, vocabtransfer.init.factorize runs them) and their
# typed params `init.<kind>`
FACTORIZATIONS = {"svd": SvdOptions, "snmf": SnmfOptions}


@dataclass(frozen=True)
class FactorizedOptions:
    """The options of `<base>+<factorization>`: params `init.<base>` and `init.<factorization>`, typed."""

    base: Any  # the base method's options class (e.g. FocusOptions)
    factorization: SvdOptions | SnmfOptions
