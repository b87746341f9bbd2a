"""The language-model loss that source_head (training the head), init_eval, token_frequency_loss and
pretrain share: the LM head and the final hidden states at the predicted positions (`model.heads`), each
predicted token's loss through the fused head (no logits), and the mean loss over fixed batches with each
block's summed loss and, on request, the temperature-calibrated loss.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from vocabtransfer.model.heads import head_loss, head_parts, predicted_hidden
from vocabtransfer.model.lmdata import Kind, target_labels


def lm_head(model, kind: Kind | None = None):
    """The model's LM head (`heads.head_parts`, by architecture family): callable on final hidden
    states (-> logits), with `.parameters()`."""
    return head_parts(model)


def head_inputs(model, batch: dict, kind: Kind):
    """(final hidden states at the predicted positions, their target ids) of one batch (`heads.predicted_hidden`).

    Masked: the masked positions. Causal: every position whose next token is a label.
    """
    return predicted_hidden(model, batch, kind)


def predicted_logits(model, batch: dict, kind: Kind):
    """(vocabulary logits at the predicted positions as float32, their target ids) of one batch; the
    head runs on the predicted positions only. Materialises their logits: for the calibrated loss."""
    head = head_parts(model)
    hidden, targets = predicted_hidden(model, batch, kind, head)
    return head.logits(hidden).float(), targets


def token_losses(model, batch: dict, kind: Kind, *, objective: str = "standard", margin: float = 2.0, head=None):
    """(the objective's loss of each predicted token, their target ids) of one batch, from the hidden
    states through the fused head (no logits are formed)."""
    head = head if head is not None else head_parts(model)
    hidden, targets = predicted_hidden(model, batch, kind, head)
    return head_loss(head, hidden, targets, objective=objective, margin=margin, reduction="none"), targets


def lm_loss_sum(model, batch: dict, kind: Kind):
    """(summed token loss, number of predicted tokens) of one batch: `model(**batch).loss` × count."""
    losses, targets = token_losses(model, batch, kind)
    return losses.sum(), int(targets.numel())


# logit scales tried for the temperature-calibrated loss: 1.1**i from 0.052 to 3.8, 1 included
# (so the calibrated loss is never above the raw loss)
CALIBRATION_SCALES = tuple(1.1**i for i in range(-31, 15))


def evaluate_lm(model, batches: list[dict], kind: Kind, *, calibrate: bool = False) -> dict:
    """Mean token loss, perplexity and token count over fixed batches (no gradients), with the summed loss
    and the predicted-token count of every block (`block_loss`, `block_tokens`: the clusters of a paired
    bootstrap over blocks).

    With `calibrate`, also the loss after the best single temperature (temperature scaling,
    Guo et al. 2017): all logits divided by T, T chosen from `CALIBRATION_SCALES` on these same
    tokens (one parameter, so the optimism is negligible). It separates how well a model ranks
    the right token from how over- or under-confident its logits are: `calibrated_loss` and
    `temperature` (> 1: the raw logits were over-confident).
    """

    was_training = model.training
    model.eval()
    scaled = [0.0] * len(CALIBRATION_SCALES)
    block_loss, block_tokens = [], []
    # no_grad, not inference_mode: an FSDP2-sharded model's gathered parameters must stay usable by training
    with torch.no_grad():
        for batch in batches:
            labels = target_labels(batch, kind)
            rows = (labels != -100).nonzero()[:, 0]  # the block of each predicted token, in prediction order
            if not calibrate:  # through the fused head
                losses, _ = token_losses(model, batch, kind)
            else:  # the temperatures need the logits
                logits, targets = predicted_logits(model, batch, kind)
                losses = F.cross_entropy(logits, targets, reduction="none")
                for i, scale in enumerate(CALIBRATION_SCALES):
                    scaled[i] += float(F.cross_entropy(logits * scale, targets, reduction="sum"))
            block_loss += torch.bincount(rows, weights=losses.double().cpu(), minlength=labels.shape[0]).tolist()
            block_tokens += torch.bincount(rows, minlength=labels.shape[0]).tolist()
    model.train(was_training)
    total, count = math.fsum(block_loss), sum(block_tokens)
    loss = total / count if count else math.nan
    out = {
        "loss": loss,
        "perplexity": math.exp(loss) if count and loss < 700 else math.inf if count else math.nan,
        "n_tokens": count,
        "block_loss": block_loss,
        "block_tokens": block_tokens,
    }
    if calibrate:
        best = min(range(len(scaled)), key=scaled.__getitem__)
        out["calibrated_loss"] = scaled[best] / count if count else math.nan
        out["temperature"] = 1.0 / CALIBRATION_SCALES[best]
    return out
