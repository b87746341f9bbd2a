"""Stage `hypernet`: train, once per source model and network seed, the network of init method `hypernet`
(`model/hypernet.py`). Network seed k (the `pseed` wildcard) is what the initialisation of pretraining seed k
applies, drawn from that seed (`names.seed_value`: seed k's tokenizers, masks and starting weights), so the spread
of a pretrained hypernet's runs holds the network's own seed variance; a study that does not pretrain hypernet
trains network seed 1 alone.

The recipe is ZeTT's (Minixhofer et al., 2024), sized for a CPU:

1. **Sampled tokenizers.** Every `steps_per_tokenizer` steps a tokenizer is drawn: the project's own trainer
   (`data/tokenizer.py`, the source's family and conventions, as the target tokenizers are made) on
   `tokenizer_lines` lines drawn from the train splits of the study's languages, with a vocabulary size drawn
   log-uniformly from [`vocab_min`, `vocab_max`]. The draw is a function of the seed and the tokenizer's index,
   so a resumed run draws the same ones. The study's target tokenizers are never seen.
2. **Rows.** The sampled vocabulary's FVT rows (`fvt.fvt` with its exact-string overlap) plus the network's
   residual on every token with a known source piece: the whole vocabulary's rows, computed per step (memory
   grows with the sampled vocabulary, never with V × V).
3. **Loss.** The frozen source model reads `batch_size` blocks of `seq_len` tokens of training text, tokenised
   by the sampled tokenizer, with the predicted rows as its input embeddings and (tied) as its output
   projection, the output bias moved as the init stage moves it: the model's own LM loss (masked, 15 %, or
   causal) plus `aux_weight` × the mean squared distance of the shared pieces' rows to their source rows.
4. **Training** by the `transformers` Trainer on the network's parameters only (AdamW, linear warm-up and
   decay, gradient clipping at 1, bf16 autocast where `precision` picks it): checkpoints every `save_every`
   steps under checkpoints/source/hypernet/pseed<k>, and a killed run resumes from the last with the same command; one
   log line every 5 % of the steps (tokens seen, loss, tokens/s, time left: `train.progress`), a bar on a terminal.

Outputs (results/source/hypernet/pseed<k>/): config.json and hypernet.safetensors (the network), stats.json (the
options, the network seed and its seed, the loss curve, tokens/s, seconds, peak memory, the sampled vocabulary sizes).
"""

from __future__ import annotations

import logging
import math
import random
import resource
import shutil
import time
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch
import sys
from transformers import Trainer, TrainerCallback, TrainingArguments

from vocabtransfer import io
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.init.output_bias import transfer_bias
from vocabtransfer.init.methods.fvt import fvt
from vocabtransfer.init.methods.hypernet import decompose
from vocabtransfer.plan.method_options import HypernetOptions
from vocabtransfer.init.methods.registry import TransferProblem
from vocabtransfer.model import hypernet as network
from vocabtransfer.model import modeling
from vocabtransfer.model.heads import head_parts, predicted_hidden
from vocabtransfer.model.hub import load_tokenizer
from vocabtransfer.model.lmdata import LMCollator, pack_lines
from vocabtransfer.pipeline import names, paths
from vocabtransfer.pipeline.stage_spec import Context
from vocabtransfer.plan.method_catalog import network_folder
from vocabtransfer.train.progress import install as install_progress
from vocabtransfer.train.checkpoints import (
    PARAMS_FILE,
    ROWS_FILE,
    check_checkpoint,
    check_resume_params,
    complete_checkpoints,
    model_fingerprint,
)
from vocabtransfer.model.precision import resolve
from vocabtransfer.data.tokenizer import train_tokenizer

log = logging.getLogger(__name__)


@dataclass
class Episode:
    """One sampled tokenizer and what a step under it needs."""

    tokenizer: Any  # transformers fast tokenizer
    base: torch.Tensor  # (V, d) FVT rows
    ids: torch.Tensor  # (n,) the rows the network predicts
    pieces: torch.Tensor  # (n, max_pieces) their source pieces
    shared: tuple[torch.Tensor, torch.Tensor]  # (sampled ids, source ids) of the exact overlap
    bias: torch.Tensor | None  # (V,) output bias, or None


class Setup:
    """The frozen source, the text and the options of one training (shared by the Trainer's loss)."""

    def __init__(self, source_dir: Path, lines: list[str], options: HypernetOptions, seed: int, device: str = "cpu"):
        self.model, self.kind = modeling.load_source_model(source_dir)
        if not modeling.is_tied(self.model):
            raise VocabTransferError(
                f"{source_dir}: untied output embeddings; init method hypernet predicts one row "
                "per token for tied sources (MiniLM, Gemma 3, XLM-R); use another method"
            )
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.tokenizer = load_tokenizer(source_dir)
        self.device = torch.device(device)
        self.model.to(self.device)
        # the source rows: on the CPU for the tokenizers' FVT rows, on the device for the network
        self.source_cpu = self.model.get_input_embeddings().weight.detach()[: len(self.tokenizer)].float().cpu()
        self.source = self.source_cpu.to(self.device)
        bias = modeling.output_bias(self.model)
        self.bias = None if bias is None else bias.detach()[: len(self.tokenizer)].float().cpu()
        self.head = head_parts(self.model)
        self.lines, self.options, self.seed = lines, options, seed
        self.episode = lru_cache(maxsize=2)(self._episode)  # the last two episodes, cached per instance

    def _episode(self, index: int) -> Episode:
        """Tokenizer `index`: drawn from the seed and the index alone (module docstring, step 1)."""

        rng = random.Random(self.seed * 1_000_003 + index)
        o = self.options
        size = int(round(math.exp(rng.uniform(math.log(o.vocab_min), math.log(o.vocab_max)))))
        sample = rng.sample(self.lines, min(o.tokenizer_lines, len(self.lines)))
        tokenizer = train_tokenizer(self.tokenizer, [sample], vocab_size=size, min_frequency=2)
        vocab, source_vocab = tokenizer.get_vocab(), self.tokenizer.get_vocab()
        pairs = sorted((i, source_vocab[t]) for t, i in vocab.items() if t in source_vocab)
        target_ids = np.asarray([a for a, _ in pairs], dtype=np.int64)
        source_ids = np.asarray([b for _, b in pairs], dtype=np.int64)
        problem = TransferProblem(
            source_embeddings=self.source_cpu,
            source_tokenizer=self.tokenizer,
            target_tokenizer=tokenizer,
            overlap_target_ids=target_ids,
            overlap_source_ids=source_ids,
            seed=rng.randrange(2**31),
        )
        base = fvt(problem).embeddings
        specials = set(tokenizer.all_special_ids)
        ids, pieces = decompose(
            tokenizer,
            self.tokenizer,
            np.asarray([i for i in range(len(tokenizer)) if i not in specials], dtype=np.int64),
            o.max_pieces,
        )
        bias = transfer_bias(self.bias, len(tokenizer), target_ids, source_ids) if self.bias is not None else None
        log.info(
            "hypernet: tokenizer %d: %d tokens (asked %d), %d shared with the source, %d predicted",
            index,
            len(tokenizer),
            size,
            len(pairs),
            len(ids),
        )
        on = self.device
        return Episode(
            tokenizer,
            base.to(on),
            torch.from_numpy(ids).to(on),
            pieces.to(on),
            (torch.from_numpy(target_ids).to(on), torch.from_numpy(source_ids).to(on)),
            None if bias is None else bias.to(on),
        )

    def batch(self, step: int, episode: Episode) -> dict:
        """Step `step`'s blocks under the episode's tokenizer, masked (masked LM) with a seed of the step."""
        rng = random.Random(self.seed * 7_919 + step)
        o = self.options
        lines = rng.sample(self.lines, min(len(self.lines), 4 * o.batch_size))
        blocks = pack_lines(episode.tokenizer, lines, o.seq_len, kind=self.kind)[: o.batch_size]
        return LMCollator(episode.tokenizer, self.kind, seed=self.seed + step)(blocks)

    def loss(self, net: network.HyperNet, step: int) -> tuple[torch.Tensor, dict]:
        """The step's loss (module docstring, step 3) and its parts."""
        episode = self.episode(step // self.options.steps_per_tokenizer)
        rows = episode.base.clone()
        rows[episode.ids] = net(episode.pieces, episode.base[episode.ids], self.source)
        batch = self.batch(step, episode)
        embedding = self.model.get_input_embeddings()
        weight = embedding.weight
        del embedding.weight
        embedding.weight = rows  # the sampled vocabulary's rows, in the graph, for this forward only
        try:
            hidden, labels = predicted_hidden(self.model, batch, self.kind, self.head)
        finally:
            del embedding.weight
            embedding.weight = weight
        states = hidden if self.head.transform is None else self.head.transform(hidden)
        logits = self.head.scale * (states.float() @ rows.T + (0 if episode.bias is None else episode.bias))
        if self.head.softcap:
            logits = self.head.softcap * torch.tanh(logits / self.head.softcap)
        lm = torch.nn.functional.cross_entropy(logits, labels)
        shared, source_ids = episode.shared
        aux = ((rows[shared] - self.source[source_ids]) ** 2).mean() if shared.numel() else rows.sum() * 0
        return lm + self.options.aux_weight * aux, {
            "lm_loss": float(lm.detach()),
            "aux_loss": float(aux.detach()),
            "tokens": int(batch["attention_mask"].sum()),
            "vocab": len(episode.tokenizer),
        }


class _Steps(torch.utils.data.Dataset):
    """Step i's item is i: a step's tokenizer and text follow from its index alone (a resumed run skips to it)."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        return {"step": i}


class _Trained(torch.nn.Module):
    """The network as the Trainer's model (its only parameters); the frozen source stays outside the module tree."""

    def __init__(self, net: network.HyperNet, setup: Setup):
        super().__init__()
        self.net = net
        object.__setattr__(self, "setup", setup)

    def forward(self, step):
        return self.setup.loss(self.net, int(step[0]))


def _trainer_class():

    class Rows(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):  # the curve so far beside each checkpoint
            io.write_json(
                kwargs["model"].rows if hasattr(kwargs["model"], "rows") else [],
                Path(args.output_dir) / f"checkpoint-{state.global_step}" / ROWS_FILE,
            )

    class HypernetTrainer(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            loss, parts = model(inputs["step"])
            model.rows.append(
                {
                    "step": int(inputs["step"][0]) + 1,
                    "loss": round(float(loss.detach()), 6),
                    **{k: round(v, 6) if isinstance(v, float) else v for k, v in parts.items()},
                }
            )
            return (loss, None) if return_outputs else loss

        def _get_train_sampler(self, *args, **kwargs):
            return torch.utils.data.SequentialSampler(self.train_dataset)

    return HypernetTrainer, Rows


def fit(
    setup: Setup, net: network.HyperNet, options: HypernetOptions, checkpoints: Path, *, seed: int, device: str = "cpu"
) -> tuple[list[dict], float, str]:
    """Train with the Trainer (module docstring, step 4), resuming from the last complete checkpoint: (the loss
    curve, one row per step, the training seconds, the precision's log line)."""

    use_cpu = device == "cpu"
    choice = resolve(options.precision, use_cpu=use_cpu)
    log.info("hypernet: precision %s", choice.reason)
    expected = {"options": asdict(options), "seed": seed, "network": asdict(net.config)}
    done = complete_checkpoints(checkpoints)
    if done:
        check_resume_params(checkpoints, expected)
        check_checkpoint(done[-1][1])
    checkpoints.mkdir(parents=True, exist_ok=True)
    io.write_json(expected, checkpoints / PARAMS_FILE)
    model = _Trained(net, setup)
    model.rows = io.read_json(done[-1][1] / ROWS_FILE) if done else []
    args = TrainingArguments(
        output_dir=str(checkpoints),
        max_steps=options.steps,
        per_device_train_batch_size=1,
        learning_rate=options.learning_rate,
        lr_scheduler_type="linear",
        warmup_steps=options.warmup_steps,
        max_grad_norm=1.0,
        weight_decay=0.0,
        logging_steps=max(1, options.steps // 20),
        save_strategy="steps",
        save_steps=options.save_every,
        save_total_limit=2,
        report_to=[],
        seed=seed,
        data_seed=seed,
        bf16=choice.bf16,
        use_cpu=use_cpu,
        remove_unused_columns=False,
        dataloader_num_workers=0,
        disable_tqdm=not sys.stderr.isatty(),
    )
    trainer_class, rows = _trainer_class()
    trainer = trainer_class(
        model=model,
        args=args,
        train_dataset=_Steps(options.steps),
        callbacks=[rows()],
        data_collator=lambda items: {"step": torch.tensor([it["step"] for it in items])},
    )

    install_progress(trainer, "hypernet", log, tokens=lambda state: sum(r.get("tokens", 0) for r in model.rows))
    start = time.perf_counter()
    if done:
        log.info("hypernet: resuming from %s", done[-1][1])
    trainer.train(resume_from_checkpoint=str(done[-1][1]) if done else None)
    return model.rows, time.perf_counter() - start, choice.reason


def new_network(config: network.HyperNetConfig, seed: int) -> network.HyperNet:
    """The untrained network drawn from `seed` alone: whatever loading the source and sampling the first tokenizer
    drew from torch's global generator before does not reach its weights (they did, and two uninterrupted runs
    then trained different networks: docs/reproducibility.md)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return network.HyperNet(config)


def config_for(setup: Setup, options: HypernetOptions) -> network.HyperNetConfig:
    dim = setup.source.shape[1]
    width = options.width or dim
    return network.HyperNetConfig(
        dim=dim, width=width, layers=options.layers, heads=network.default_heads(width), max_pieces=options.max_pieces
    )


def train_lines(paths_: list[Path]) -> list[str]:
    """The non-empty lines of the languages' train splits (corpus stage Parquet, column `text`)."""
    lines: list[str] = []
    for path in paths_:
        table = io.read_parquet(path, columns=["text"])
        lines += [t for t in table.column("text").to_pylist() if t and t.strip()]
    if not lines:
        raise VocabTransferError(f"{', '.join(map(str, paths_))}: no training text; rerun stage corpus")
    return lines


def run(ctx: Context) -> None:
    """The stage: train (or resume) the network, then write its outputs."""
    start = time.perf_counter()
    options = ctx.params.init.hypernet
    if options.network is not None:
        import_network(ctx, network_folder(paths.data_path(options.network), ctx.wildcards["pseed"]))
        return
    # network seed k draws from pretraining seed k's seed (network seed 1: params `seed`)
    seed = names.seed_value(ctx.params, ctx.wildcards["pseed"])
    lines = train_lines([ctx.input[k] for k in sorted(ctx.input) if k.startswith("train_")])
    setup = Setup(ctx.input["source"], lines, options, seed, device=ctx.device)
    net = new_network(config_for(setup, options), seed)
    checkpoints = Path(paths.fill(paths.HYPERNET_CHECKPOINTS, pseed=ctx.wildcards["pseed"]))
    curve, seconds, precision = fit(setup, net, options, checkpoints, seed=seed, device=ctx.device)
    tokens = sum(row["tokens"] for row in curve)
    stats = {
        "options": asdict(options),
        "network_seed": int(ctx.wildcards["pseed"]),
        "seed": seed,
        # the source model it was trained on: checked where another study applies it (init.hypernet.network)
        "source_model": ctx.params.source_model,
        "source_sha256": model_fingerprint(Path(ctx.input["source"])),
        "network": asdict(net.config),
        "kind": setup.kind,
        "parameters": sum(p.numel() for p in net.parameters()),
        # the languages whose train splits it trained on: the study's others get it zero-shot
        "languages": sorted(k.removeprefix("train_") for k in ctx.input if k.startswith("train_")),
        "train_lines": len(lines),
        "steps": options.steps,
        "precision": precision,
        "curve": curve,
        "tokens": tokens,
        "train_seconds": round(seconds, 3),
        "tokens_per_second": round(tokens / max(seconds, 1e-9), 1),
        "seconds": round(time.perf_counter() - start, 3),
        "peak_memory_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "device": ctx.device,
        "peak_gpu_memory_bytes": torch.cuda.max_memory_allocated() if ctx.device.startswith("cuda") else None,
        "vocab_sizes": sorted({row["vocab"] for row in curve}),
    }
    with io.atomic_output(ctx.output["hypernet"], directory=True) as tmp:
        net.save(tmp)
        io.write_json(stats, tmp / "stats.json")
    log.info(
        "hypernet: %d steps, %d tokens in %.0f s (%.0f tokens/s); loss %.3f -> %.3f",
        options.steps,
        tokens,
        seconds,
        tokens / max(seconds, 1e-9),
        curve[0]["lm_loss"],
        curve[-1]["lm_loss"],
    )


def import_network(ctx: Context, directory: Path) -> None:
    """`init.hypernet.network`: the network another study's stage hypernet trained, checked (its source model's
    weights are this study's, by sha256; its files whole) and copied to this study's output with its stats, the
    folder it came from added (`imported_from`): every init job then applies it as a network trained here."""
    stats_file = directory / "stats.json"
    if not stats_file.is_file():
        raise VocabTransferError(
            f"init.hypernet.network: {stats_file} not found; point it at the results/source/hypernet folder of a "
            "study whose stage hypernet trained this network seed, or unset it to train the networks here"
        )
    stats = io.read_json(stats_file)
    here = model_fingerprint(Path(ctx.input["source"]))
    if stats.get("source_sha256") != here:
        trained_on = stats.get("source_model", "(not recorded)")
        raise VocabTransferError(
            f"init.hypernet.network: {directory} was trained on source model {trained_on}"
            f" (weights sha256 {str(stats.get('source_sha256'))[:12]}), and this study's source model "
            f"{ctx.params.source_model} has {here[:12]}; point it at a network trained on this source model, or "
            "unset it to train one here"
        )
    network.load(directory)  # whole, and its weights fit its config
    with io.atomic_output(ctx.output["hypernet"], directory=True) as tmp:
        for name in (network.WEIGHTS, network.CONFIG):
            shutil.copyfile(directory / name, tmp / name)
        io.write_json({**stats, "imported_from": str(directory)}, tmp / "stats.json")
    log.info("hypernet: the network trained in %s (%s steps), checked and copied", directory, stats.get("steps"))
