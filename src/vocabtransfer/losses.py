"""Training objectives on vocabulary logits at the predicted positions.

`selfish_cross_entropy`: cross-entropy in which every logit more than `margin` below the
target's logit is left out of the softmax normaliser (set to −inf), so those tokens get no
gradient from this position.
"""

from __future__ import annotations

from vocabtransfer.errors import VocabTransferError


def selfish_cross_entropy(logits, labels, margin: float = 2.0, ignore_index: int = -100, reduction: str = "mean"):
    """Cross-entropy over logits (N, V) and labels (N,) that ignores every logit below
    logit[target] − margin."""
    import torch
    import torch.nn.functional as F

    if not margin > 0:
        raise VocabTransferError(f"selfish_cross_entropy: margin must be > 0, got {margin!r}")
    valid = labels != ignore_index
    safe = labels.masked_fill(~valid, 0)
    target_logit = logits.gather(1, safe.unsqueeze(1))
    masked = logits.masked_fill(logits < target_logit - margin, float("-inf"))
    return F.cross_entropy(masked, labels, ignore_index=ignore_index, reduction=reduction)
