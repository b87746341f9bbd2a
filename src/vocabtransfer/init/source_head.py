"""Stage `source_head`: complete the source model with a trained LM head.

It reads the source from the `source_model` stage's directory (results/source/base), never from
`source_model` itself, so a hub id, a directory and a GGUF file are all one Hugging Face directory here.

Some source checkpoints carry no LM head: sentence-transformers/all-MiniLM-L6-v2 is a bare
`BertModel`, so `BertForMaskedLM` gets `cls.predictions.*` initialised randomly (held-out
masked-LM loss ≈ 10.7 = ln 30522 + noise). Every later comparison (init_eval, continued
pretraining) needs a head that reads the encoder, so this stage trains ONLY the parameters the
checkpoint lacked on source-language text; the encoder and the (tied) input/output embeddings
stay frozen bit for bit. For BERT that is `cls.predictions.transform.*` and the output bias;
the decoder weight is the word-embedding matrix.

1. load the model with its LM head (transformers reports the missing keys); if nothing is
   missing, save it unchanged (stats say `skipped`);
2. held-out text = the LAST `eval_lines` lines of `source_head.text`, never trained on;
   training blocks = the rest, packed into blocks of `seq_len` tokens;
3. masked-LM masking (DataCollatorForLanguageModeling, 15 %), seeded; the encoder is frozen
   and in eval mode, so its hidden states at the predicted positions are computed once per
   block (one static masking per block, as in the original BERT data pipeline) and cached:
   at most `train_blocks` blocks, in a seeded order. This is the stage's main cost; a step on
   cached features costs only the head (the 30k-row vocabulary projection);
4. a missing output bias starts at the log unigram frequency of the training targets (the best
   context-free head: held-out loss ≈ 7.9 instead of ≈ 10.7 for MiniLM);
5. `steps` AdamW steps on the head, each on the predicted positions of `batch_size` cached
   blocks (reshuffled every epoch), linear warm-up then linear decay of `learning_rate`;
   held-out loss logged every `eval_every` steps;
6. save model + tokenizer (results/source/model) and head_stats.json (learning curve included).

Measured on MiniLM + pretrain_text/en.txt (2 CPU cores, seed 42, batch 32 x 128 tokens, lr 3e-3,
held-out = last 500 lines, 2011 masked tokens), held-out masked-LM loss by step:

    step                       0*     100    200    300    500    800    1000
    all 8871 blocks            7.91   6.80   6.71   6.64   6.55   6.45   6.40   (train loss ~5.9)
    4096 blocks                7.91   6.84   6.72   6.67   6.62   6.54   6.51   (train loss ~5.6)
    4096 blocks, 2000 steps    plateau at 6.60-6.63 from step 600 on          (train loss ~5.4)
    (*random head: 10.75; step 0 is after the unigram bias.)

More distinct blocks help more than more steps (the head overfits a small cache); lr 1e-2 and
3e-2 were worse than 3e-3 after 300-600 steps. Idle 2-core cost: ~21 ms per cached block
(~190 s for all of en.txt) plus ~0.3 s per step (~5 min for 1000).
"""

from __future__ import annotations

import logging
import math
import time

import torch
import torch.nn.functional as F


from vocabtransfer import io
from vocabtransfer.model import lm_loss, modeling
from vocabtransfer.model.hub import load_tokenizer
from vocabtransfer.model.lmdata import MLM_PROBABILITY, Kind, LMCollator, lm_batches, pack_lines, read_lines
from vocabtransfer.model.hub import materialised_source
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.log import progress
from vocabtransfer.pipeline.paths import data_path
from vocabtransfer.pipeline.stage_spec import Context
from vocabtransfer.plan.init_params import SourceHeadParams

log = logging.getLogger(__name__)

WARMUP_FRACTION = 0.05  # of the head's steps: its learning rate's linear warm-up


def _warmup_steps(steps: int) -> int:
    return max(1, int(WARMUP_FRACTION * steps))


def trainable_head_parameters(model, loading: modeling.LoadingInfo) -> dict:
    """name -> parameter for the weights the checkpoint lacked, minus any tied to the input embeddings."""
    embedding_ptr = model.get_input_embeddings().weight.data_ptr()
    missing = set(loading.missing_keys)
    out: dict = {}
    seen: set[int] = set()
    for name, param in model.named_parameters(remove_duplicate=False):
        if name in missing and param.data_ptr() != embedding_ptr and id(param) not in seen:
            seen.add(id(param))
            out[name] = param
    return out


def _features(model, blocks: list[list[int]], collate, kind: Kind, batch_size: int, desc: str):
    """Per block: (hidden states at its predicted positions, their target ids), from the frozen body."""

    feats = []
    for i in progress(range(0, len(blocks), batch_size), desc=desc, unit="batch"):
        chunk = blocks[i : i + batch_size]
        batch = collate(chunk)
        with torch.inference_mode():
            hidden, targets = lm_loss.head_inputs(model, batch, kind)
        # split back per block so that steps can draw any blocks
        labels = batch["labels"][:, 1:] if kind == "causal" else batch["labels"]
        counts = (labels != -100).sum(dim=1).tolist()
        feats += list(zip(hidden.clone().split(counts), targets.clone().split(counts)))
    return feats


def _cached_loss(head, feats) -> tuple[float, int]:

    total, n = 0.0, 0
    with torch.inference_mode():
        for i in range(0, len(feats), 256):
            x = torch.cat([f[0] for f in feats[i : i + 256]])
            y = torch.cat([f[1] for f in feats[i : i + 256]])
            total += float(F.cross_entropy(head(x).float(), y, reduction="sum"))
            n += int(y.numel())
    return (total / n if n else math.nan), n


def _unfreeze_head(model, kind: Kind, loading: modeling.LoadingInfo):
    """The LM head and its missing parameters, the only ones left trainable (the body frozen, in eval
    mode so that its features can be cached); an error where a missing weight is not the head's."""
    head = lm_loss.lm_head(model, kind)
    params = trainable_head_parameters(model, loading)
    if head is None or not params:
        raise VocabTransferError(
            f"{modeling._model_name(model)}: the checkpoint lacks {', '.join(loading.missing_keys)} but they are not a "
            f"trainable LM head vocabtransfer knows for {type(model).__name__}; use a checkpoint with its LM head"
        )
    head_ids = {id(p) for p in head.parameters()}
    outside = [n for n, p in params.items() if id(p) not in head_ids]
    if outside:
        raise VocabTransferError(
            f"{modeling._model_name(model)}: missing weights outside the LM head ({outside[0]}); "
            "the checkpoint is incomplete, re-download it"
        )
    for p in model.parameters():
        p.requires_grad_(False)
    for p in params.values():
        p.requires_grad_(True)
    model.eval()  # frozen body: no dropout, so its features can be cached
    log.info(
        "training %d head parameter tensor(s) (%d values): %s",
        len(params),
        sum(p.numel() for p in params.values()),
        ", ".join(params),
    )
    return head, params


def _block_features(
    model, tokenizer, kind: Kind, train_lines: list[str], eval_lines: list[str], gen, opts: SourceHeadParams, seed: int
):
    """Step 1 of `train_head`: the blocks (`opts.train_blocks` training blocks of `opts.seq_len` tokens drawn
    with `gen`) and their cached frozen-body features, the only encoder passes of this stage. Returns (training
    blocks, held-out blocks, training features, held-out features, seconds)."""
    seq_len, batch_size = opts.seq_len, opts.batch_size

    blocks = pack_lines(tokenizer, train_lines, seq_len, kind=kind)
    eval_blocks = pack_lines(tokenizer, eval_lines, seq_len, kind=kind)
    if not blocks or not eval_blocks:
        raise VocabTransferError(
            "source_head.text: too few lines to train and hold out "
            f"({len(train_lines)} train / {len(eval_lines)} held-out); use a longer text"
        )
    order = torch.randperm(len(blocks), generator=gen).tolist()[: opts.train_blocks]
    blocks = [blocks[i] for i in order]
    start = time.perf_counter()
    eval_feats = _features(
        model, eval_blocks, LMCollator(tokenizer, kind, seed + 1), kind, batch_size, "held-out features"
    )
    train_feats = _features(model, blocks, LMCollator(tokenizer, kind, seed), kind, batch_size, "train features")
    feature_seconds = time.perf_counter() - start
    log.info(
        "cached features of %d training blocks (%d predicted tokens) and %d held-out blocks in %.1f s",
        len(blocks),
        sum(int(f[1].numel()) for f in train_feats),
        len(eval_blocks),
        feature_seconds,
    )
    return blocks, eval_blocks, train_feats, eval_feats, feature_seconds


def _unigram_bias(model, trainable: dict, train_feats) -> bool:
    """Step 2 of `train_head`: a missing output bias starts at the add-one-smoothed log unigram frequency
    of the training targets: the best context-free head, so training starts at the unigram loss
    instead of ln V. Returns whether it did."""

    bias = modeling.output_bias(model)
    bias_init = bias is not None and any(p is bias for p in trainable.values())
    if bias_init:
        counts = torch.bincount(torch.cat([f[1] for f in train_feats]), minlength=bias.numel()).double()
        with torch.no_grad():
            bias.copy_(torch.log((counts + 1) / (counts.sum() + bias.numel())).to(bias.dtype))
    return bias_init


def _train_cached(head, trainable: dict, train_feats, eval_feats, gen, opts: SourceHeadParams) -> list[dict]:
    """Step 3 of `train_head`: AdamW on the head's `trainable` tensors only, `opts.steps` steps over batches
    of cached features drawn with `gen`; linear warm-up over WARMUP_FRACTION of the steps, then linear decay
    to 0. Returns the learning curve after step 0 (the held-out loss every `opts.eval_every` steps and at
    the end)."""
    steps, batch_size, eval_every = opts.steps, opts.batch_size, opts.eval_every
    warmup = _warmup_steps(steps)

    optimizer = torch.optim.AdamW(list(trainable.values()), lr=opts.learning_rate, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: (s + 1) / warmup if s < warmup else max(0.0, (steps - s) / max(1, steps - warmup))
    )
    curve = []
    queue: list[int] = []
    bar = progress(range(1, steps + 1), desc="source head", unit="step")
    for step in bar:
        if len(queue) < batch_size:
            queue += torch.randperm(len(train_feats), generator=gen).tolist()
        chosen, queue = queue[:batch_size], queue[batch_size:]
        x = torch.cat([train_feats[i][0] for i in chosen])
        y = torch.cat([train_feats[i][1] for i in chosen])
        loss = torch.nn.functional.cross_entropy(head(x).float(), y)
        loss.backward()
        loss = loss.item()
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        if step % eval_every == 0 or step == steps:
            heldout, _ = _cached_loss(head, eval_feats)
            curve.append({"step": step, "heldout_loss": heldout, "train_loss": loss})
            log.info("step %d/%d: train loss %.4f, held-out loss %.4f", step, steps, loss, heldout)
            if hasattr(bar, "set_postfix"):
                bar.set_postfix(heldout=f"{heldout:.3f}")
    return curve


def train_head(
    model,
    tokenizer,
    kind: Kind,
    loading: modeling.LoadingInfo,
    train_lines: list[str],
    eval_lines: list[str],
    opts: SourceHeadParams,
    seed: int,
) -> dict:
    """Train the missing head on cached frozen-body features (`opts`: params source_head, typed); returns the
    stats (learning curve included)."""

    steps, batch_size = opts.steps, opts.batch_size
    head, trainable = _unfreeze_head(model, kind, loading)
    # 1. blocks and cached features (one generator draws the training blocks, then the batches)
    gen = torch.Generator().manual_seed(seed)
    blocks, eval_blocks, train_feats, eval_feats, feature_seconds = _block_features(
        model, tokenizer, kind, train_lines, eval_lines, gen, opts, seed
    )
    n_train_tokens = sum(int(f[1].numel()) for f in train_feats)
    # 2. the unigram output bias
    loss_random, n_eval = _cached_loss(head, eval_feats)
    bias_init = _unigram_bias(model, trainable, train_feats)
    # 3. train the head on the cached features
    loss_start, _ = _cached_loss(head, eval_feats)
    log.info(
        "held-out loss of the checkpoint's random head: %.4f (%d tokens)%s",
        loss_random,
        n_eval,
        f"; with the unigram output bias: {loss_start:.4f}" if bias_init else "",
    )
    train_start = time.perf_counter()
    curve = [{"step": 0, "heldout_loss": loss_start}] + _train_cached(
        head, trainable, train_feats, eval_feats, gen, opts
    )
    train_seconds = time.perf_counter() - train_start
    for p in model.parameters():
        p.requires_grad_(False)

    # 4. the saved model's own loss on the held-out blocks (same masks as the cached features)
    final = lm_loss.evaluate_lm(model, lm_batches(tokenizer, eval_blocks, kind, batch_size, seed + 1), kind)
    log.info(
        "held-out masked-LM loss after %d steps: %.4f (perplexity %.1f)", steps, final["loss"], final["perplexity"]
    )
    return {
        "skipped": False,
        "trained_parameters": list(trainable),
        "loss_before": loss_random,
        "loss_unigram_bias": loss_start if bias_init else None,
        "loss_after": final["loss"],
        "perplexity_after": final["perplexity"],
        "learning_curve": curve,
        "train_blocks": len(blocks),
        "train_tokens_predicted": n_train_tokens,
        "heldout_tokens_predicted": final["n_tokens"],
        "heldout_blocks": len(eval_blocks),
        "feature_seconds": feature_seconds,
        "train_seconds": train_seconds,
        "warmup_steps": _warmup_steps(steps),
    }


def run(ctx: Context) -> None:

    opts = ctx.params.source_head
    source = ctx.params.source_model
    directory = materialised_source(ctx.input["source"])  # the source_model stage's directory
    start = time.perf_counter()
    torch.manual_seed(ctx.seed)  # the randomly initialised head, if any
    model, kind, loading = modeling.load_source_model(directory, dtype=torch.float32, output_loading_info=True)
    tokenizer = load_tokenizer(directory)
    model.to(ctx.device)

    text = data_path(opts.text)
    lines = read_lines(text)
    n_eval = opts.eval_lines
    if len(lines) <= n_eval:
        raise VocabTransferError(
            f"{text}: {len(lines)} non-empty lines, but source_head.eval_lines holds out "
            f"{n_eval}; lower source_head.eval_lines or use a longer text"
        )
    train_lines, eval_lines = lines[:-n_eval], lines[-n_eval:]
    stats = {
        "source_model": source,
        "model_dir": str(directory),
        "kind": kind,
        "model_class": type(model).__name__,
        "text": str(text),
        "heldout_lines": n_eval,
        "train_lines": len(train_lines),
        "missing_keys": list(loading.missing_keys),
        "steps": opts.steps,
        "learning_rate": opts.learning_rate,
        "batch_size": opts.batch_size,
        "seq_len": opts.seq_len,
        "mlm_probability": MLM_PROBABILITY if kind == "masked" else None,
        "seed": ctx.seed,
        "versions": io.versions(),
    }
    if loading.head_missing:
        stats.update(train_head(model, tokenizer, kind, loading, train_lines, eval_lines, opts, ctx.seed))
    else:
        log.info("%s has its LM head; nothing to train, saving it as the source model", directory)
        blocks = pack_lines(tokenizer, eval_lines, opts.seq_len, kind=kind)
        ref = lm_loss.evaluate_lm(model, lm_batches(tokenizer, blocks, kind, opts.batch_size, ctx.seed + 1), kind)
        stats.update(
            skipped=True,
            trained_parameters=[],
            loss_before=ref["loss"],
            loss_after=ref["loss"],
            perplexity_after=ref["perplexity"],
            heldout_tokens_predicted=ref["n_tokens"],
            heldout_blocks=len(blocks),
        )
    stats["reference_perplexity"] = stats["perplexity_after"]
    stats["seconds"] = time.perf_counter() - start
    model.to("cpu")
    modeling.save_model_dir(model, tokenizer, ctx.output["model"])
    io.write_json(stats, ctx.output["stats"])
    log.info(
        "source model with %s LM head: %s (held-out loss %.4f -> %.4f)",
        "its own" if stats["skipped"] else "a trained",
        ctx.output["model"],
        stats["loss_before"],
        stats["loss_after"],
    )
