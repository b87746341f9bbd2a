"""Stage `finetune_eval`: fine-tune one model on one downstream task with one seed, and score it.

Wildcards: `lang`, `task` (a registered task: nli, qa, ner — see `vocabtransfer.evaluate.tasks`), `model`
and `seed` (the fine-tuning seed). A `model` is (vocabtransfer.pipeline.names)

  * `<method>-<objective>-pseed<k>`: continued pretraining with pretraining seed k,
    results/L/pretrain/<method>/<objective>/pseed<k>/model
  * `<method>-init-pseed<k>`: the initialised-only model that run starts from,
    results/L/init/<method>/pseed<k>/model
  * `source`: the source model with its own tokenizer, results/source/model (no transfer)

`eval.models` lists kinds (`pretrained`: every pretraining method × objective × seed; `init`: the
initialisation of every pretrained run; `source`), model names, and names without the pretraining
seed (`focus-standard`: every pretraining seed of it). The model's directory is loaded
with the task's transformers head (`AutoModelFor…`): the LM head is dropped and the task head is
initialised under the eval seed. Training uses the transformers `Trainer` (seeded data order); the
train/test split and the subsample depend on the params `seed` only, so every model and every eval
seed sees the same test examples in the same order, and the per-example arrays of the result JSON
can be paired across them.

`STAGES["finetune_eval"].jobs(params, lang)` (vocabtransfer.plan.stages) lists the jobs params and the data present
ask for; `skipped_tasks` says why a task has none for a language.

Decoders (GPT-2, Llama, Qwen) are fine-tuned with their architecture's heads (`LlamaForSequenceClassification`
…); a tokenizer without a pad token pads with its eos token (`set_padding`, recorded as `pad_token_set`).
Where transformers has no head of the task for the architecture (`missing_head`: Gemma 3 has only sequence
classification, GPT-J no token classification), a decoder gets the generic token-classification or span
head of `vocabtransfer.evaluate.generic_heads` (a linear layer over its last hidden states; `head_class`
names it, `GenericGemma3TextForTokenClassification`). Where no head applies (no generic sequence
classification, e.g. NLI for CodeGen; an encoder, encoder-decoder or multimodal model without the head), the
job writes `{"not_run": reason}` instead of scores, and the report lists the task under what was skipped: the
architecture is known for sure only once the model is downloaded.
"""

from __future__ import annotations

import logging
import re
import shutil
import sys
import time
from pathlib import Path

import transformers
import torch
from transformers import AutoConfig, AutoTokenizer, set_seed, Trainer, TrainingArguments
from transformers.models.auto import modeling_auto


from vocabtransfer import io
from vocabtransfer.pipeline import paths
from vocabtransfer.pipeline.stage_spec import Context
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.evaluate.tasks import get_task, load_splits, test_clusters
from vocabtransfer.evaluate import generic_heads
from vocabtransfer.model.precision import Precision, resolve as resolve_precision
from vocabtransfer.plan.finetune_plans import parse_model, skipped_tasks
from vocabtransfer.model import bf16_kernels
from vocabtransfer.train.progress import install as install_progress

log = logging.getLogger(__name__)


# --- one job ------------------------------------------------------------------------------------


def _model_dir(ctx: Context, info: dict) -> Path:
    path = ctx.input["model"] / info["subdir"] if info["subdir"] else ctx.input["model"]
    if not (path / "config.json").is_file():
        raise VocabTransferError(
            f"{path}: no model directory (config.json missing); run the stage that produces "
            f"model {ctx.wildcards['model']!r} first"
        )
    return path


def missing_head(head: str, model_dir: Path) -> str | None:
    """Why transformers has no `head` (an `AutoModelFor…` class name) for the architecture in
    `model_dir`/config.json, or None when it has one (GPT-2, Llama, Qwen2 have all three task heads;
    e.g. CodeGen has none, GPT-J no token classification, Gemma 3 only sequence classification)."""

    model_type = AutoConfig.from_pretrained(str(model_dir)).model_type
    # AutoModelForQuestionAnswering -> MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES
    names = getattr(
        modeling_auto, re.sub(r"(?<!^)(?=[A-Z])", "_", head.removeprefix("Auto")).upper() + "_MAPPING_NAMES"
    )
    if model_type in names:
        return None
    return (
        f"transformers has no {head.removeprefix('AutoModelFor')} head for model type {model_type!r} ({head} lacks it)"
    )


def set_padding(tokenizer, model_dir: Path) -> str | None:
    """Right padding, and a pad token for tokenizers without one (GPT-2, Llama: their eos token, the usual
    choice for fine-tuning decoders; a classification head reads the last non-pad position). Returns the
    pad token it set, None when the tokenizer had one."""
    tokenizer.padding_side = "right"  # QA windows and token labels assume it
    if tokenizer.pad_token is not None:
        return None
    fallback = tokenizer.eos_token or tokenizer.unk_token or tokenizer.bos_token
    if fallback is None:
        raise VocabTransferError(
            f"{model_dir}: the tokenizer has no pad, eos, unk or bos token to pad batches with; "
            "give it a pad token (tokenizer_config.json) and rerun"
        )
    tokenizer.pad_token = fallback
    return str(fallback)


def _head_class(task, model_dir: Path):
    """(head class, None): the class that fine-tunes `model_dir` for the task, transformers' `task.head` where it
    has one for the architecture, else a decoder's generic head (evaluate/generic_heads.py); (None, why) where
    neither applies."""

    head_cls = getattr(transformers, task.head)
    why = missing_head(task.head, model_dir)
    if why is not None:  # a decoder without transformers' head: the generic one (evaluate/generic_heads.py)
        config = transformers.AutoConfig.from_pretrained(str(model_dir))
        why_not = generic_heads.unsupported(task.head, config)
        if why_not is not None:
            why = f"{why}, and {why_not}"
            log.warning("%s: %s; the job writes the reason instead of scores", model_dir, why)
            return None, why
        head_cls = generic_heads.head_class(task.head, config)
        log.info("%s: %s; fine-tuning with %s", model_dir, why, head_cls.__name__)
    return head_cls, None


def _training_args(opts, seed: int, output_dir: Path, device: str, bf16: bool):
    """The Trainer's arguments: the task's options, seeded, no saving or evaluation; the training loss and the
    tokens seen logged every 5 % of the steps (`train.progress`: one line each), the Trainer's bar on a terminal."""

    return TrainingArguments(
        output_dir=str(output_dir),
        seed=seed,
        data_seed=seed,
        num_train_epochs=opts.epochs,
        learning_rate=opts.learning_rate,
        per_device_train_batch_size=opts.batch_size,
        per_device_eval_batch_size=opts.eval_batch_size,
        warmup_steps=opts.warmup_ratio,  # a float below 1 is a share of the steps
        weight_decay=opts.weight_decay,
        save_strategy="no",
        eval_strategy="no",
        logging_strategy="steps",
        logging_steps=0.05,  # below 1: a share of the steps
        include_num_input_tokens_seen="non_padding",
        report_to=[],
        disable_tqdm=not sys.stderr.isatty(),
        use_cpu=device == "cpu",
        dataloader_num_workers=0,
        bf16=bf16,
        optim="adamw_torch_fused" if bf16 else "adamw_torch",
    )


def _result(task, splits, trainer, evaluation, train_features, pad_token, choice, scored_in: str) -> dict:
    """The result fields of one fine-tuning: the test scores and examples, sizes, skips and precision."""
    opts = task.options
    return {
        "metric": task.metric,
        "head_class": type(trainer.model).__name__,
        "metrics": {k: round(float(v), 4) for k, v in evaluation.metrics.items()},
        "n_train": len(splits.train),
        "n_test": len(splits.test),
        "n_train_features": len(train_features),
        "examples_seen": int(round(len(train_features) * opts.epochs)),
        "skipped": {**splits.skipped, **evaluation.skipped},
        "examples": evaluation.examples,
        "pad_token_set": pad_token,  # the tokenizer had none: batches padded with this token
        "precision": choice.name,
        "precision_reason": choice.reason,
        "scored_in": scored_in,
        **splits.notes,
    }


def finetune(
    *,
    task,
    splits,
    model_dir: Path,
    seed: int,
    output_dir: Path,
    device: str = "cpu",
    precision: Precision = "fp32",
    test_precision: str = "fp32",
) -> tuple[dict, object]:
    """Fine-tune `model_dir` with the task head on splits.train, score it on splits.test.
    The head is transformers' (`task.head`) where it has one for the architecture, else the generic head of
    `evaluate.generic_heads` (a linear layer over a decoder's last hidden states). Returns (result fields,
    the Trainer); ({"not_run": why}, None) when neither applies (e.g. NLI for CodeGen, an encoder-decoder).
    `precision` (`eval.precision`, `model.precision.resolve`): bf16 fine-tunes under the Trainer's autocast with
    fp32 master weights and AdamW's fused kernel; the test split is then scored in `test_precision`
    (`eval.test_precision`) with the autocast wrapper taken off the model: fp32, or bf16 under `torch.autocast`
    over the fp32 weights, so scores of bf16- and fp32-trained models are computed alike."""
    opts = task.options
    head_cls, why = _head_class(task, model_dir)
    if head_cls is None:
        return {"not_run": why}, None
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    if not getattr(tokenizer, "is_fast", False):
        raise VocabTransferError(f"{model_dir}: the tokenizer is not a fast tokenizer (offsets and word ids need one)")
    pad_token = set_padding(tokenizer, model_dir)
    labels = task.labels(splits.train)
    task.prepare(splits, labels)
    kwargs = (
        {
            "num_labels": len(labels),
            "id2label": dict(enumerate(labels)),
            "label2id": {label: i for i, label in enumerate(labels)},
        }
        if labels
        else {}
    )
    set_seed(seed)  # the task head is initialised under the eval seed
    model = head_cls.from_pretrained(str(model_dir), pad_token_id=tokenizer.pad_token_id, **kwargs)
    train_features = task.features(splits.train, tokenizer, labels)
    choice = resolve_precision(precision, use_cpu=device == "cpu")
    log.info("fine-tuning precision: %s", choice.reason)
    args = _training_args(opts, seed, output_dir, device, choice.bf16)
    if choice.bf16:  # bf16 attention and Gemma's norms in fewer passes (model.bf16_kernels)
        bf16_kernels.install(model)
    trainer = Trainer(model=model, args=args, train_dataset=train_features, data_collator=task.collator(tokenizer))
    install_progress(trainer, f"fine-tuning {task.name} (seed {seed})", log)
    trainer.train()
    if choice.bf16:  # scored in test_precision: the accelerator's autocast wrapper taken off the model's forward
        trainer.model = trainer.accelerator.unwrap_model(trainer.model, keep_fp32_wrapper=False)
    log.info("test split scored in %s", test_precision)
    with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=test_precision == "bf16"):
        evaluation = task.evaluate(trainer, splits.test, tokenizer, labels)
    evaluation.examples["clusters"] = test_clusters(splits.test, task.name)
    return _result(task, splits, trainer, evaluation, train_features, pad_token, choice, test_precision), trainer


def run(ctx: Context) -> None:
    start = time.perf_counter()
    eval_params = ctx.params.eval
    lang, task_name, model_name = ctx.lang, ctx.wildcards["task"], ctx.wildcards["model"]
    seed = int(ctx.wildcards["seed"])
    info = parse_model(ctx.params, model_name)
    if {"task": task_name, "model": model_name, "seed": str(seed), "lang": lang} not in ctx.stages[
        "finetune_eval"
    ].jobs(ctx.params, lang):
        reason = skipped_tasks(ctx.params, lang).get(task_name)
        raise VocabTransferError(
            f"eval: no job {task_name}/{model_name}/seed{seed} for {lang!r}: "
            + (reason if reason else f"check eval.models and eval.seeds ({eval_params.seeds})")
        )
    options = getattr(eval_params.tasks, task_name)
    task = get_task(task_name, options)
    model_dir = _model_dir(ctx, info)
    key = f"eval.tasks.{task_name}.data.{lang}"
    splits = load_splits(task, options.data[lang], key, seed=ctx.seed)
    log.info(
        "%s %s %s seed %d: %d train / %d test examples, skipped %s",
        lang,
        task_name,
        model_name,
        seed,
        len(splits.train),
        len(splits.test),
        splits.skipped or "none",
    )
    checkpoints = Path(paths.fill(paths.EVAL_CHECKPOINTS, lang=lang, task=task_name, model=model_name, seed=str(seed)))
    result, _ = finetune(
        task=task,
        splits=splits,
        model_dir=model_dir,
        seed=seed,
        output_dir=checkpoints,
        device=ctx.device,
        precision=eval_params.precision,
        test_precision=eval_params.test_precision,
    )
    shutil.rmtree(checkpoints, ignore_errors=True)  # nothing is saved (save_strategy no): a job is short
    out = {
        "lang": lang,
        "task": task_name,
        "model": model_name,
        "method": info["method"],
        "objective": info["objective"],
        "pseed": info["pseed"],
        "seed": seed,
        **result,
        "seconds": round(time.perf_counter() - start, 3),
        "model_dir": str(model_dir),
        "versions": io.versions(),
    }
    io.write_json(out, ctx.output["result"])
    log.info(
        "%s %s %s seed %d: %s",
        lang,
        task_name,
        model_name,
        seed,
        out.get("not_run") or ", ".join(f"{k} {v:.2f}" for k, v in out["metrics"].items()),
    )
