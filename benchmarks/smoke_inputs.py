"""Stand-ins for a model package's inputs in the benchmarks' `--smoke` runs (seconds, nothing converted from a
GGUF file): a byte-level BPE tokenizer trained on a few hundred lines of the data's text, in place of a source
model's tokenizer, and the data root the pipeline reads (`VOCABTRANSFER_DATA`, else the checkout's data/)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("VOCABTRANSFER_DATA") or REPO / "data")


def text_lines(lang: str, n: int | None = None) -> list[str]:
    """The first `n` non-empty lines (all for None) of data/pretrain_text/<lang>.txt."""
    with open(DATA / "pretrain_text" / f"{lang}.txt", encoding="utf-8") as fh:
        lines = [s for s in (line.strip() for line in fh) if s]
    return lines[:n] if n is not None else lines


def byte_bpe(lang: str, vocab_size: int = 400, n_lines: int = 500):
    """A byte-level BPE tokenizer (<s> prepended, </s> its end of sequence, <pad>) trained on `n_lines` lines
    of `lang`: a source tokenizer's conventions at a smoke run's size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        text_lines(lang, n_lines),
        trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=["<s>", "</s>", "<pad>"],
            show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
