"""`ProgressLog`: a transformers `TrainerCallback` that writes one line per logged step of a long training
(hypernet training, fine-tuning): tokens seen, the training loss, tokens/s and the time left
(`vocabtransfer.log.Progress`). The bar on a terminal is the Trainer's own (`disable_tqdm` false only where
stderr is a terminal). Pretraining's `MetricsCallback` writes the same line at each of its evaluations.

This module imports transformers at its top: a training stage imports it when it trains.
"""

from __future__ import annotations

import logging
import math
from typing import Callable

from transformers import PrinterCallback, TrainerCallback

from vocabtransfer.log import Progress


class ProgressLog(TrainerCallback):
    """One `Progress.line` per `on_log` that carries a loss (the Trainer logs every `logging_steps`), on the
    main process. `tokens(state)`: the tokens seen so far (default: the Trainer's `num_input_tokens_seen`)."""

    def __init__(self, what: str, logger: logging.Logger, tokens: Callable[[object], int] | None = None):
        self.what, self.logger = what, logger
        self.tokens = tokens or (lambda state: int(getattr(state, "num_input_tokens_seen", 0) or 0))
        self.progress: Progress | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.progress = Progress(self.what, state.max_steps, state.global_step, self.tokens(state))

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.progress is None or not state.is_world_process_zero or not logs or "loss" not in logs:
            return
        loss = float(logs["loss"])
        if math.isfinite(loss):
            self.logger.info(self.progress.line(state.global_step, self.tokens(state), loss, "train loss"))


def install(trainer, what: str, logger: logging.Logger, tokens: Callable[[object], int] | None = None) -> None:
    """`ProgressLog` on `trainer`, in place of the `PrinterCallback` that prints each log's dict to stdout where
    the Trainer shows no bar (stderr not a terminal)."""
    trainer.remove_callback(PrinterCallback)
    trainer.add_callback(ProgressLog(what, logger, tokens))
