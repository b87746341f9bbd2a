"""Cool-down branches of a warm-up–stable–decay run (`pretrain.schedule: wsd`, `pretrain.cooldown`).

Under a linear decay to 0 the loss at 100k tokens of a 660k-token run is not what a 100k-token run reaches: every
point of the curve is tied to the run's length. Under wsd the learning rate rises over the warm-up, stays at its
peak, and decays over the last `fraction` of the run; the stable phase is the same whatever the run's length, so a
run of length b is the stable run up to (1 − fraction) b followed by a decay over the rest (Hägele et al. 2024,
"Scaling laws and compute-optimal training beyond fixed training durations"). The curve a method is judged on is
therefore the ends of such branches, one per log-spaced budget, and the run's own end:

1. `plan`: the budgets (two a decade by default: 1 and 3 × 10^k target positions) as optimiser steps
   end_b = round(b / positions a step), each forking at end_b − ceil(fraction × end_b); a budget whose fork falls
   inside the warm-up, or whose end falls inside the run's own decay, gets no branch (no point of the curve is read
   inside the warm-up);
2. `ForkCallback`: the stable run saves a checkpoint at every fork step and keeps a hard-linked copy of it under
   `forks/` (the Trainer's rotation removes the ordinary ones);
3. `run_branches`: after the stable run, each branch is a Trainer run resumed from the latest fork checkpoint at or
   before its fork (else from the initialisation: the stable phase before the fork is the same run), with the
   branch's own wsd schedule (stable until its fork, then the decay), scored once at its end; each end is written to
   `branches/end-<step>.json` as it finishes, so a killed job redoes only the branches it had not finished.

A branch's data are the stable run's (sample i of the run is a function of the seed and i: `batches.StepBlocks`),
so its fork state and its decay steps are exactly those a run of length end_b would see.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from transformers import TrainerCallback


from vocabtransfer import io
from vocabtransfer.train.checkpoints import complete_checkpoints
from vocabtransfer.plan.pretrain_params import CooldownOptions

log = logging.getLogger("vocabtransfer.train.pretrain")  # the stage's log

FORKS = "forks"  # under a run's checkpoints: the hard-linked fork checkpoints
BRANCHES = "branches"  # under a run's checkpoints: each finished branch's end, and the branch being trained


@dataclass(frozen=True)
class Branch:
    """A cool-down branch: the run of `end` optimiser steps standing for `budget` target positions, which forks
    from the stable run at step `fork` and decays over the remaining end − fork steps."""

    budget: int
    end: int
    fork: int

    @property
    def decay(self) -> int:
        return self.end - self.fork


def decay_steps(steps: int, fraction: float) -> int:
    """The steps of a run of `steps` that decay its learning rate: ceil(fraction × steps), at least 1."""
    return max(1, math.ceil(fraction * steps - 1e-9))


def budget_grid(tokens: int, per_decade: int, first: int = 1000) -> list[int]:
    """Log-spaced budgets from `first` to below `tokens`: 1 and 3 × 10^k for two a decade (the log_tokens grid),
    else 10^(j / per_decade) × first rounded to two significant digits."""
    if per_decade <= 0:
        return []
    budgets: list[int] = []
    j = 0
    while True:
        if per_decade == 2:
            b = first * 10 ** (j // 2) * (3 if j % 2 else 1)
        else:
            raw = first * 10 ** (j / per_decade)
            b = int(round(raw, -int(math.floor(math.log10(raw))) + 1))
        if b >= tokens:
            return budgets
        if not budgets or b > budgets[-1]:
            budgets.append(b)
        j += 1


def plan(steps: int, positions_per_step: int, warmup_steps: int, opts: CooldownOptions) -> list[Branch]:
    """The branches of a wsd run of `steps` optimiser steps of `positions_per_step` target positions: one per
    budget whose fork is after the warm-up (≥ warmup_steps, ≥ 1) and whose end comes no later than the run's own
    decay start (a later one would stand for nearly the run itself)."""
    main_fork = steps - decay_steps(steps, opts.fraction)
    out: list[Branch] = []
    for budget in budget_grid(steps * positions_per_step, opts.per_decade):
        end = max(1, round(budget / positions_per_step))
        fork = end - decay_steps(end, opts.fraction)
        if fork < max(1, warmup_steps) or end > main_fork or (out and out[-1].end >= end):
            continue
        out.append(Branch(budget, end, fork))
    return out


def scheduler_kwargs(decay: int, shape: str) -> dict:
    """transformers' warmup_stable_decay schedule decaying to 0 over the last `decay` steps."""
    return {"num_decay_steps": decay, "decay_type": shape, "min_lr_ratio": 0.0}


def fork_checkpoint(checkpoints: Path, fork: int) -> Path | None:
    """The latest complete fork checkpoint at or before step `fork` (None: start from the initialisation)."""
    done = [(s, p) for s, p in complete_checkpoints(checkpoints / FORKS) if s <= fork]
    return done[-1][1] if done else None


def link_checkpoint(source: Path, target: Path) -> None:
    """`source` (a complete checkpoint) as `target`, its files hard-linked (the Trainer never rewrites a file in
    place), written under a temporary name and renamed when whole."""
    if target.exists():
        return
    with io.atomic_output(target, directory=True) as tmp:
        tmp.rmdir()
        shutil.copytree(source, tmp, copy_function=os.link)


def _forks_callback():

    class ForkCallback(TrainerCallback):
        """A checkpoint at every fork step, kept as a hard-linked copy under forks/ (after the metrics callback
        has written its rows into it: this callback is registered after it)."""

        def __init__(self, forks: set[int], directory: Path):
            self.forks, self.directory = forks, directory

        def on_step_end(self, args, state, control, **kw):
            if state.global_step in self.forks:
                control.should_save = True

        def on_save(self, args, state, control, **kw):
            if state.global_step in self.forks and state.is_world_process_zero:
                source = Path(args.output_dir) / f"checkpoint-{state.global_step}"
                link_checkpoint(source, self.directory / source.name)
                log.info("fork checkpoint at step %d kept for its cool-down branch", state.global_step)

    return ForkCallback


def fork_callback(branches: list[Branch], checkpoints: Path):
    """The stable run's callback saving and keeping the forks' checkpoints (None without branches)."""
    if not branches:
        return None
    return _forks_callback()({b.fork for b in branches}, checkpoints / FORKS)


def end_file(checkpoints: Path, branch: Branch) -> Path:
    return checkpoints / BRANCHES / f"end-{branch.end}.json"


def finished(checkpoints: Path, branch: Branch) -> dict | None:
    """A branch's end row, if it was written by an earlier attempt of the job."""
    path = end_file(checkpoints, branch)
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def record(checkpoints: Path, branch: Branch, row: dict) -> dict:
    """A branch's end row (its step's metrics row, the valid loss per block) with its fork, written atomically."""
    out = {**row, "fork_step": branch.fork, "budget": branch.budget, "decayed": True}
    with io.atomic_output(end_file(checkpoints, branch)) as tmp:
        tmp.write_text(json.dumps(out), encoding="utf-8")
    return out
