"""The params section `source_head` (SourceHeadParams), read from the typed root (`params.source_head`); the init
methods' own sections `init.<name>` are their options classes (method_options)."""

from __future__ import annotations

from dataclasses import dataclass

from vocabtransfer.pipeline.typed import option


@dataclass(frozen=True)
class SourceHeadParams:
    """training of the source model's LM head when its checkpoint has none (MiniLM ships without); encoder and tied
    embeddings stay frozen"""

    text: str = option(
        "pretrain_text/en.txt",
        "source-language text (relative to $VOCABTRANSFER_DATA); its last eval_lines lines are held out",
    )
    steps: int = option(
        1000, "AdamW steps on the head (1000 reach a held-out English loss of 6.25 with MiniLM)", minimum=0
    )
    learning_rate: float = option(
        0.003, "peak learning rate (linear warm-up, then linear decay to 0)", exclusiveMinimum=0
    )
    batch_size: int = option(32, "packed blocks per step", minimum=1)
    seq_len: int = option(128, "tokens per packed block", minimum=8)
    train_blocks: int = option(10000, "cap on packed training blocks", minimum=1)
    eval_lines: int = option(1000, "held-out lines at the end of text", minimum=1)
    eval_every: int = option(250, "held-out loss logged every N steps", minimum=1)
