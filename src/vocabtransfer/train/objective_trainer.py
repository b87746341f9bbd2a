"""The transformers `Trainer` of the pretrain stage and its callback (its params: `train.pretrain_params`; its
checkpoints: `train.checkpoints`).

* `ObjectiveTrainer`: the loss of the training objective on the hidden states of the predicted
  positions only (the fused head, `heads` / `losses.linear_objective_loss`), the same code path for a
  plain and a DDP-wrapped model; for `distill`, alpha x the mean chunk loss of `train.distill` over the
  step's chunks (all micro-batches and processes) + (1 - alpha) x the mean cross-entropy; a NaN or
  infinite loss stops the run naming the step and the last good checkpoint. Sharded (FSDP2,
  `train.sharding`), the model is not wrapped in DDP and its checkpoints are torch distributed
  checkpoints of the model's and optimiser's shards.
* `MetricsCallback`: the metrics rows (valid loss every `eval_every` steps or at token budgets, train loss,
  learning rate, tokens/s), one log line per evaluation (tokens seen, valid loss, tokens/s, time left:
  `vocabtransfer.log.Progress`), the progress bar on a terminal, the rows stored in each checkpoint, and the
  embedding-only warm-up.

This module imports torch and transformers at its top: the pretrain stage imports it when it trains.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import Trainer, TrainerCallback

from vocabtransfer import io
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.log import Progress, progress
from vocabtransfer.model import bf16_kernels, heads
from vocabtransfer.train import parallel, sharding
from vocabtransfer.train.distill import loss_terms
from vocabtransfer.model.lmdata import Kind
from vocabtransfer.train.checkpoints import ROWS_FILE, complete_checkpoints, every_rank_saved
from vocabtransfer.plan.pretrain_params import DISTILL_COLUMNS

log = logging.getLogger("vocabtransfer.train.pretrain")  # the stage's log, as before the classes moved here


@dataclass(frozen=True)
class Distillation:
    """What a teacher objective (distill, alm) trains with: the frozen source model (`teacher`; None when its
    chunk log-likelihoods were cached in the blocks), the chunk term's weight `alpha` and its `temperature`."""

    teacher: Any = None
    alpha: float = 0.5
    temperature: float = 1.0


class ObjectiveTrainer(Trainer):
    """Loss from the predicted positions' hidden states through the fused head; NaN/inf stops the run.
    `distill`: a Distillation for a teacher objective, None for the others."""

    def __init__(
        self,
        *args,
        kind: Kind,
        objective: str,
        margin: float,
        checkpoints: Path,
        distill: Distillation | None = None,
        sharded: bool = False,
        bf16: bool = False,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        self.sharded = sharded
        # bf16 (model.precision): the training loss under autocast, here rather than through the Trainer's
        # bf16 flag (which wraps the model's forward), so that the valid loss the callback computes with the
        # same model stays fp32 (a sharded bf16 model computes in bf16 throughout: its FSDP policy)
        self.bf16 = bf16
        if bf16:  # bf16 attention and Gemma's norms in fewer passes (model.bf16_kernels; fp32 keeps its bits)
            bf16_kernels.install(self.model)
        if sharded:  # FSDP2 (train.sharding) already placed the model and reduces its gradients: no DDP wrap
            self.accelerator.prepare_model = lambda model, *a, **k: model
        self.kind, self.objective, self.margin, self.checkpoints = kind, objective, margin, checkpoints
        self.head = heads.head_parts(self.model)
        self.model_accepts_loss_kwargs = True  # the loss is a mean over the whole step: not divided again
        # distill: the frozen source model (never a submodule of the student: not trained, not saved), or
        # None when its chunk log-likelihoods were cached in the blocks
        self.distill = distill is not None
        self.step_chunks: int | None = None  # distill: the step's chunks over all processes (get_batch_samples)
        self.alpha, self.temperature = (distill.alpha, distill.temperature) if distill is not None else (0.5, 1.0)
        # distill: (step, gradient norm of the chunk term, of the LM term)
        self.term_norms: tuple[float, ...] | None = None
        self.teacher = self.teacher_head = None
        if distill is not None and distill.teacher is not None:
            self.teacher = distill.teacher.to(self.args.device).eval().requires_grad_(False)
            self.teacher_head = heads.head_parts(self.teacher)

    def _get_train_sampler(self, train_dataset=None):
        return torch.utils.data.SequentialSampler(train_dataset or self.train_dataset)  # order is in StepBlocks

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        """The step's micro-batches and its predicted tokens over all processes (P x b == 1 x Pb)."""
        batches = []
        for _ in range(num_batches):
            try:
                batches.append(next(epoch_iterator))
            except StopIteration:
                break
        if self.distill:  # distill: the step's chunks over all processes, for their mean
            chunks = torch.tensor(sum(int(b["n_chunks"]) for b in batches), device=device)
            self.step_chunks = int(
                self.accelerator.gather(chunks).sum() if self.accelerator.num_processes > 1 else chunks
            )
        return batches, parallel.step_token_count(batches, self.kind, self.accelerator, device)

    def _term_norms(self, model, terms) -> None:
        """distill, on a logged step: the L2 norm of the gradient of each term (the mean chunk loss, the
        mean cross-entropy; unweighted, so alpha x / (1 - alpha) x it is what each moves the model by) over
        the trained parameters, from the step's first micro-batch; NaN on several processes or sharded."""
        if self.term_norms is not None and self.term_norms[0] == self.state.global_step:
            return  # a later micro-batch of the same step
        norms = [math.nan, math.nan]
        if self.accelerator.num_processes == 1 and not self.sharded:
            params = [p for p in model.parameters() if p.requires_grad]
            for k, term in enumerate(terms):  # a term with no graph (no chunk in the batch) moves nothing
                grads = (
                    torch.autograd.grad(term, params, retain_graph=True, allow_unused=True)
                    if term.requires_grad
                    else []
                )
                norms[k] = math.sqrt(sum(float((g.detach().float() ** 2).sum()) for g in grads if g is not None))
        self.term_norms = (self.state.global_step, *norms)

    def log(self, logs, *args, **kwargs):
        if self.distill and "loss" in logs and self.term_norms is not None:
            logs = {
                **logs,
                "grad_norm_distill": self.term_norms[1],
                "grad_norm_lm": self.term_norms[2],
                "grad_norm_total": float(logs.get("grad_norm", math.nan)),
            }
        return super().log(logs, *args, **kwargs)

    # sharded: the model's and the optimiser's shards in one torch distributed checkpoint (train.sharding)
    def save_model(self, output_dir=None, _internal_call=False):
        if not (self.sharded and _internal_call):  # sharded: the weights are saved with the optimiser
            super().save_model(output_dir, _internal_call)

    def _save_optimizer_and_scheduler(self, output_dir):
        if not self.sharded:
            return super()._save_optimizer_and_scheduler(output_dir)
        sharding.save_checkpoint(self.model, getattr(self.optimizer, "optimizer", self.optimizer), output_dir)
        if self.args.should_save:
            torch.save(self.lr_scheduler.state_dict(), Path(output_dir) / "scheduler.pt")

    def _load_from_checkpoint(self, resume_from_checkpoint, model=None):
        if not self.sharded:  # sharded: read with the optimiser's state, once both exist
            super()._load_from_checkpoint(resume_from_checkpoint, model)

    def _load_optimizer_and_scheduler(self, checkpoint):
        if not self.sharded or checkpoint is None:
            return super()._load_optimizer_and_scheduler(checkpoint)
        sharding.load_checkpoint(self.model, getattr(self.optimizer, "optimizer", self.optimizer), checkpoint)
        self.lr_scheduler.load_state_dict(torch.load(Path(checkpoint) / "scheduler.pt", weights_only=True))

    def _autocast(self):
        """bf16 autocast on the training device for a bf16 run, else the Trainer's own (a no-op but sharded)."""
        if not self.bf16:
            return self.accelerator.autocast()
        return torch.autocast(self.args.device.type, dtype=torch.bfloat16)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        # `model` may be DDP-wrapped: its forward runs (gradients synchronised), the head bypassed
        if self.distill:  # distill: alpha x mean chunk loss + (1 - alpha) x mean cross-entropy
            with self._autocast():
                lm_sum, chunk_sum = loss_terms(
                    model,
                    self.teacher,
                    inputs,
                    head=self.head,
                    teacher_head=self.teacher_head,
                    temperature=self.temperature,
                )
            count = (
                int(num_items_in_batch)
                if num_items_in_batch is not None
                else int((inputs["labels"][:, 1:] != -100).sum())
            )
            chunks = self.step_chunks if self.step_chunks is not None else int(inputs["n_chunks"])
            terms = (chunk_sum / max(1, chunks), lm_sum / max(1, count))
            if model.training and (self.state.global_step + 1) % max(1, self.args.logging_steps) == 0:
                self._term_norms(model, terms)
            loss = self.accelerator.num_processes * (self.alpha * terms[0] + (1 - self.alpha) * terms[1])
        else:
            with self._autocast():  # bf16: the body's and the fused head's products in bf16
                hidden, targets = heads.predicted_hidden(model, inputs, self.kind, self.head)
                loss = heads.head_loss(
                    self.head, hidden, targets, objective=self.objective, margin=self.margin, reduction="sum"
                )
            # mean over the step's predicted tokens; DDP averages the processes' gradients, hence x P
            count = targets.numel() if num_items_in_batch is None else int(num_items_in_batch)
            loss = loss * self.accelerator.num_processes / max(1, count)
        if not torch.isfinite(loss):
            last = complete_checkpoints(self.checkpoints)
            kept = f"the last good checkpoint is {last[-1][1]}" if last else "no checkpoint was written yet"
            raise VocabTransferError(
                f"step {self.state.global_step + 1}: the {self.objective} training loss is "
                f"{float(loss.detach())}; training stopped, {kept} (lower "
                "pretrain.learning_rate, delete the checkpoints and rerun)"
            )
        return (loss, None) if return_outputs else loss


class MetricsCallback(TrainerCallback):
    """Metrics rows (valid loss every `eval_every` steps, train loss when logged, tokens/s), a progress
    bar, the rows stored in each checkpoint, and the embedding-only warm-up."""

    def __init__(
        self,
        evaluate,
        eval_every: int,
        rows: dict,
        warmup_steps: int,
        embedding_params: set,
        budgets: list[int] | None = None,
        bits=None,
        *,
        branch: str | None = None,
    ):
        self.evaluate, self.eval_every, self.rows = evaluate, eval_every, rows
        self.bits = bits  # model -> valid bits per byte (pretrain.bits_per_byte, causal models), or None
        self.budgets = sorted(budgets) if budgets is not None else None  # log_tokens: the tokens still to reach
        self.warmup_steps, self.embedding_params = warmup_steps, embedding_params
        self.bar = None
        self.mark = (time.perf_counter(), 0)
        self.progress: Progress | None = None  # the evaluations' log line: rate and time left since the start
        # a cool-down branch (its label; train.cooldown) is scored at its end only, not before its first update
        self.initial, self.desc = branch is None, branch or "pretrain"

    def _row(self, state, lr_scheduler=None) -> dict:
        row = self.rows.setdefault(
            state.global_step,
            {
                "step": state.global_step,
                "tokens_seen": int(state.num_input_tokens_seen),
                "train_loss": math.nan,
                "valid_loss": math.nan,
                "learning_rate": math.nan,
                "tokens_per_second": math.nan,
                "valid_bits_per_byte": math.nan,
            },
        )
        if lr_scheduler is not None and math.isnan(row["learning_rate"]):
            row["learning_rate"] = float(lr_scheduler.get_last_lr()[0])
        return row

    def _freeze_body(self, model, frozen: bool) -> None:
        for p in model.parameters():
            if id(p) not in self.embedding_params:
                p.requires_grad_(not frozen)

    def on_train_begin(self, args, state, control, model=None, lr_scheduler=None, **kw):
        if state.global_step < self.warmup_steps:
            self._freeze_body(model, True)
            log.info("embedding warm-up: body frozen until step %d", self.warmup_steps)
        if self.budgets is not None:  # resumed: the budgets reached before the checkpoint are in its rows
            self.budgets = [b for b in self.budgets if b > int(state.num_input_tokens_seen)]
        self.progress = Progress(self.desc, state.max_steps, state.global_step, int(state.num_input_tokens_seen))
        if self.initial and state.global_step == 0 and 0 not in self.rows:
            self._score(model, self._row(state, lr_scheduler))
        self.mark = (time.perf_counter(), int(state.num_input_tokens_seen))
        if state.is_world_process_zero:
            self.bar = progress(total=state.max_steps, initial=state.global_step, desc=self.desc, unit="step")

    def on_step_end(self, args, state, control, model=None, lr_scheduler=None, **kw):
        if self.bar is not None:
            self.bar.update(1)
        if self.warmup_steps and state.global_step == self.warmup_steps:
            self._freeze_body(model, False)
            log.info("step %d: embedding warm-up over, the whole model trains", state.global_step)
        if self._due(state):
            self._score(model, self._row(state, lr_scheduler))

    def _score(self, model, row: dict) -> None:
        """The valid loss (and, for a causal model, bits per byte) of this step's row."""
        scored = self.evaluate(model)  # the valid loss, or (the valid loss, each valid block's summed loss)
        row["valid_loss"], blocks = scored if isinstance(scored, tuple) else (scored, None)
        if blocks is not None:
            row["valid_block_loss"] = blocks  # kept in the checkpoints' rows: the curve's clusters
        if self.bits is not None:
            row["valid_bits_per_byte"] = self.bits(model)
        bits = "" if self.bits is None else f", {row['valid_bits_per_byte']:.4f} bits per byte"
        if self.progress is not None:
            log.info(self.progress.line(row["step"], row["tokens_seen"], row["valid_loss"], "valid loss", bits))

    def _due(self, state) -> bool:
        """Whether this step evaluates: every `eval_every` steps, or (token budgets) the first step whose
        tokens seen reach the next budgets; and the last step."""
        if self.budgets is None:
            due = state.global_step % self.eval_every == 0
        else:
            seen = int(state.num_input_tokens_seen)
            due = bool(self.budgets) and seen >= self.budgets[0]
            self.budgets = [b for b in self.budgets if b > seen]
        return due or state.global_step == state.max_steps

    def on_log(self, args, state, control, logs=None, lr_scheduler=None, **kw):
        if not logs or "loss" not in logs:
            return
        now, tokens = time.perf_counter(), int(state.num_input_tokens_seen)
        speed = (tokens - self.mark[1]) / max(now - self.mark[0], 1e-9)
        self.mark = (now, tokens)
        row = self._row(state)
        row.update(
            train_loss=float(logs["loss"]),
            learning_rate=float(logs.get("learning_rate", math.nan)),
            tokens_per_second=speed,
            tokens_seen=tokens,
        )
        row.update({k: float(logs[k]) for k in DISTILL_COLUMNS if k in logs})  # distill only
        if self.bar is not None:
            self.bar.set_postfix(loss=f"{logs['loss']:.3f}", tok_s=f"{speed:.0f}")
        log.debug(  # the evaluations' lines are the run's progress (`_score`)
            "step %d: train loss %.4f, lr %.3g, %.0f tokens/s",
            state.global_step,
            logs["loss"],
            row["learning_rate"],
            speed,
        )

    def on_save(self, args, state, control, **kw):
        every_rank_saved()  # the rows mark the checkpoint complete: only once every rank's files are whole
        if state.is_world_process_zero:
            path = Path(args.output_dir) / f"checkpoint-{state.global_step}" / ROWS_FILE
            with io.atomic_output(path) as tmp:
                tmp.write_text(json.dumps(sorted(self.rows.values(), key=lambda r: r["step"])), encoding="utf-8")

    def on_train_end(self, args, state, control, **kw):
        if self.bar is not None:
            self.bar.close()
