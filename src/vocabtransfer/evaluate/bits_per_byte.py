"""Bits per UTF-8 byte: a language-model measure that does not depend on the tokenizer.

A per-token loss compares models that share a tokenizer; across tokenizers it does not (a tokenizer
that cuts the text into fewer, longer tokens has a higher loss per token for the same model quality).
The code length of the text itself does: Σ −log2 p(text) over the bytes it spans. `init_eval` and
`token_frequency_loss` score every causal model this way, and the source model with its own tokenizer
on the same valid lines.

Definition (per valid line, the line alone, as `score_lines` computes it):

1. the line's own tokens t_1..t_n are `tokenizer(line, add_special_tokens=False)`; the context
   before them is what the causal LM sees in front of a line in this project's packed blocks
   (`lmdata.pack_lines`): the prefix the tokenizer adds (Llama, Gemma: BOS); without one, the
   end-of-sequence token, which closes every line of a packed block and so precedes the next line
   (GPT-2 style); without either, no context, and t_1 is not scored (its bytes still count, so such a
   tokenizer's bits per byte is a slight underestimate; `n_scored` says so);
2. bits of the line = Σ_i −log2 p(t_i | context, t_1..t_{i−1}) over its scored tokens; the
   end-of-sequence token after the line is not scored (it carries none of the line's bytes);
3. a line longer than `seq_len` tokens (context included) is scored in windows of `seq_len`: the
   first window scores tokens up to `seq_len`, each next one starts `seq_len − stride` tokens before
   the end of the last (the last window: `seq_len` tokens before the line's end) and scores the
   `stride = seq_len // 2` tokens (or fewer) after it, so every token is scored exactly once, with at
   least `seq_len − stride` tokens of context (the lines are never cut: the bytes counted are the
   bytes scored);
4. bytes of the line = len(line.encode("utf-8")).

Bits per byte of a model = Σ_lines bits / Σ_lines bytes; bytes per token of a tokenizer = Σ bytes /
Σ n (the line's own tokens, special tokens left out). A masked LM gets neither bits nor bits per byte
(`MASKED_REASON`): it keeps its per-token loss. The share of the source's advantage a method keeps is
measured from the best floor, a predictor without a model (`evaluate.bpb_floor`): (BPB_floor − BPB_method)
/ (BPB_floor − BPB_source) (`share_kept`); where the source does not beat the floor it has nothing to keep.
"""

from __future__ import annotations

from pathlib import Path

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.model import modeling
from vocabtransfer.evaluate.score_terms import (  # noqa: F401 (what the report reads without torch; read from here too)
    MASKED_REASON,
    nothing_to_keep,
    share_kept,
)
from vocabtransfer.model.line_bits import (  # noqa: F401 (the scoring, below the phases; read from here too)
    LN2,
    context_ids,
    line_counts,
    score_lines,
    valid_lines,
    windows,
)
from vocabtransfer.model.line_scores import LineScores, bytes_per_token  # noqa: F401 (read from here too)


def require_lm_head(directory: str | Path, loading: modeling.LoadingInfo, key: str) -> None:
    """A causal source scored in bits per byte must bring its LM head: a head that `load_source_model`
    had to initialise randomly gives a random model's bits. One line naming the file and what to do."""
    if loading.head_missing:
        weights = modeling.weights_file(Path(directory))
        raise VocabTransferError(
            f"{weights}: no LM head ({', '.join(loading.missing_keys)} not in the checkpoint), so its bits per byte "
            f"would be a random head's; give the source its head (the source_head stage trains one, "
            f"source_head.steps > 0) or set {key}: false"
        )
