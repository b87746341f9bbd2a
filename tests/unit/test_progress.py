"""The one progress line of a long job (tokens seen, loss, tokens/s, time left), its arithmetic on a fake clock, and
the callbacks of pretraining, hypernet training and fine-tuning that write it, driven by fake Trainer states."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from vocabtransfer import log as vlog
from vocabtransfer.log import Progress, duration_text


class Clock:
    def __init__(self, now: float = 100.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def state(step: int, tokens: int, max_steps: int = 10) -> SimpleNamespace:
    return SimpleNamespace(
        global_step=step, num_input_tokens_seen=tokens, max_steps=max_steps, is_world_process_zero=True
    )


@pytest.mark.parametrize(
    "seconds, text",
    [(None, "unknown"), (0.4, "0 s"), (45, "45 s"), (125, "2 min 05 s"), (3599.6, "1 h 00 min"), (7380, "2 h 03 min")],
)
def test_durations_read_in_seconds_minutes_and_hours(seconds, text):
    assert duration_text(seconds) == text


def test_the_time_left_is_the_steps_left_at_the_rate_so_far():
    clock = Clock()
    p = Progress("pretrain", total=100, start_step=10, start_tokens=40_960, clock=clock)
    assert p.seconds_left(10) is None  # no step measured yet
    assert p.line(10, 40_960, 9.5, "valid loss") == (
        "pretrain: step 10/100 (10 %), 40,960 tokens seen, valid loss 9.5000, – tokens/s, unknown left"
    )
    clock.now += 60  # 30 steps of 4,096 tokens in a minute: 2 s a step, 2,048 tokens/s, 60 steps left
    tokens = 40_960 + 30 * 4096
    assert p.tokens_per_second(tokens) == pytest.approx(2048)
    assert p.seconds_left(40) == pytest.approx(120)
    assert p.line(40, tokens, 5.12345, "valid loss", ", 1.2345 bits per byte") == (
        "pretrain: step 40/100 (40 %), 163,840 tokens seen, valid loss 5.1235, 1.2345 bits per byte, "
        "2,048 tokens/s, 2 min 00 s left"
    )
    clock.now += 120  # the rest at the same rate: nothing left
    assert p.seconds_left(100) == 0 and p.line(100, 0, 1.0).endswith(", 0 s left")


def test_pretraining_writes_one_line_per_evaluation(monkeypatch, caplog):
    from vocabtransfer.train.objective_trainer import MetricsCallback

    clock = Clock()
    monkeypatch.setattr(vlog, "time", SimpleNamespace(monotonic=clock))
    rows: dict = {}
    callback = MetricsCallback(lambda model: 5.0, 2, rows, 0, set(), bits=lambda model: 1.25)
    with caplog.at_level(logging.INFO, logger="vocabtransfer.train.pretrain"):
        callback.on_train_begin(None, state(0, 0), None)  # scores the initialisation: no rate yet
        for step in (1, 2, 3, 4):
            clock.now += 5  # 1,000 tokens in 5 s a step
            callback.on_step_end(None, state(step, 1000 * step), None)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("pretrain: ")]
    assert lines == [
        "pretrain: step 0/10 (0 %), 0 tokens seen, valid loss 5.0000, 1.2500 bits per byte, – tokens/s, unknown left",
        "pretrain: step 2/10 (20 %), 2,000 tokens seen, valid loss 5.0000, 1.2500 bits per byte, 200 tokens/s, "
        "40 s left",
        "pretrain: step 4/10 (40 %), 4,000 tokens seen, valid loss 5.0000, 1.2500 bits per byte, 200 tokens/s, "
        "30 s left",
    ]
    assert sorted(rows) == [0, 2, 4]

    # resumed at step 4: the rate is this process's own, from the checkpoint on
    caplog.clear()
    resumed = MetricsCallback(lambda model: 4.0, 2, dict(rows), 0, set())
    with caplog.at_level(logging.INFO, logger="vocabtransfer.train.pretrain"):
        resumed.on_train_begin(None, state(4, 4000), None)
        clock.now += 20  # 2 steps, 4,000 tokens in 20 s: 10 s a step, 4 steps left
        resumed.on_step_end(None, state(6, 8000), None)
    assert [r.getMessage() for r in caplog.records if r.getMessage().startswith("pretrain: ")] == [
        "pretrain: step 6/10 (60 %), 8,000 tokens seen, valid loss 4.0000, 200 tokens/s, 40 s left"
    ]


def test_hypernet_and_fine_tuning_log_each_logged_loss_and_replace_the_printer(monkeypatch, caplog):
    from transformers import PrinterCallback

    from vocabtransfer.train.progress import ProgressLog, install

    clock = Clock()
    monkeypatch.setattr(vlog, "time", SimpleNamespace(monotonic=clock))
    logger = logging.getLogger("vocabtransfer.test_progress")
    seen = {"tokens": 500}
    callback = ProgressLog("hypernet", logger, tokens=lambda s: seen["tokens"])
    with caplog.at_level(logging.INFO, logger=logger.name):
        callback.on_train_begin(None, state(0, 0, max_steps=20), None)
        clock.now += 8
        seen["tokens"] = 4500
        callback.on_log(None, state(4, 0, max_steps=20), None, logs={"learning_rate": 1e-3})  # no loss: no line
        callback.on_log(None, state(4, 0, max_steps=20), None, logs={"loss": 3.25})
    assert [r.getMessage() for r in caplog.records] == [
        "hypernet: step 4/20 (20 %), 4,500 tokens seen, train loss 3.2500, 500 tokens/s, 32 s left"
    ]

    class Trainer:  # the two calls `install` makes
        def __init__(self):
            self.callbacks = [PrinterCallback]

        def remove_callback(self, cb):
            self.callbacks.remove(cb)

        def add_callback(self, cb):
            self.callbacks.append(cb)

    trainer = Trainer()
    install(trainer, "fine-tuning qa (seed 1)", logger)
    assert len(trainer.callbacks) == 1 and isinstance(trainer.callbacks[0], ProgressLog)
    assert trainer.callbacks[0].tokens(state(3, 1234)) == 1234  # the Trainer's own count by default


def test_a_long_loop_off_a_terminal_logs_one_line_a_minute_with_the_time_left(caplog, monkeypatch):
    """What an OMP job's log shows (no bar off a terminal): a line when a minute has passed since the last one."""
    monkeypatch.setattr(vlog.sys.stderr, "isatty", lambda: False)
    clock, logger = Clock(), logging.getLogger("test.blocks")
    with caplog.at_level(logging.INFO, logger="test.blocks"):
        for _block in vlog.progress_logged(range(10), "OMP (donor)", logger, every=60.0, clock=clock):
            clock.now += 25.0  # 25 s a block: lines after blocks 3, 6 and 9 (75, 150, 225 s)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "OMP (donor): block 3/10 (30 %), 2 min 55 s left",
        "OMP (donor): block 6/10 (60 %), 1 min 40 s left",
        "OMP (donor): block 9/10 (90 %), 25 s left",
    ], lines
