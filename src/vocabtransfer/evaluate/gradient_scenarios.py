"""Stage `gradient_scenarios`: where the gradient on each token's embedding comes from.

The selfish-tokens study splits the gradient that reaches a token's embedding row into three
scenarios and plots each against the token's frequency:

  (1)   input          — the token occurs in the input: the gradient of the looked-up vectors;
  (2.1) output, target — the token is the target of a predicted position: (p_t - 1) · h;
  (2.2) output, other  — the token is not the target: p_v · h, summed over every predicted
                         position (frequent targets push every other token's row: "jostling").

Here p is the objective's softmax (standard, or the selfish one that leaves out tokens more than
the margin below the target, so their (2.2) part is exactly zero) and h the hidden state fed to the
output projection (for a BERT-style head: the head's transformed state fed to the decoder). With
tied embeddings (BERT, GPT-2) the three parts sum to the gradient of the one embedding matrix; with
untied ones (Llama) part (1) is the input matrix's gradient and (2.1) + (2.2) the output
matrix's. Part (1) comes from autograd on a separate leaf for the looked-up vectors, scattered by
token id; parts (2.x) from dL/dlogits (autograd) times h, split by target / non-target entries.

"Summed gradient norm" of token v: in each batch, the gradient of the batch's mean loss is
summed over the batch's positions into one vector per token and part (its update direction
from that batch), and its Euclidean norm taken; these norms are summed over the batches.

Batches: `batches` × `batch_size` blocks of `seq_len` tokens from a seeded sample of train lines
(masked LMs: seeded masks), identical at the start (the initialised model,
results/L/init/M/model) and at the end (the pretrained model, results/L/pretrain/M/O/model).
Models run in eval mode (no dropout) so the decomposition is deterministic.
Output: results/L/gradients/M/O.parquet (one row per phase × token) and a PNG beside it.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from vocabtransfer import io
from vocabtransfer.model import modeling
from vocabtransfer.model.hub import load_tokenizer
from vocabtransfer.data.token_ids import TokenIds
from vocabtransfer.model.lmdata import Kind, lm_batches, pack_ids
from vocabtransfer.evaluate.frequencies import frequency_ranks, read_ids, token_counts
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.log import progress
from vocabtransfer.pipeline.stage_spec import Context
from vocabtransfer.plan.params_root import Params
from vocabtransfer.model.losses import get_objective, objective_loss

log = logging.getLogger(__name__)


SCHEMA = pa.schema(
    [
        ("lang", pa.string()),
        ("method", pa.string()),
        ("objective", pa.string()),
        ("phase", pa.string()),
        ("token_id", pa.int64()),
        ("rank", pa.int64()),
        ("count", pa.int64()),
        ("input_norm", pa.float64()),
        ("output_target_norm", pa.float64()),
        ("output_nontarget_norm", pa.float64()),
    ]
)
PARTS = ("input", "output_target", "output_nontarget")


def margin(params: Params, objective: str) -> float:
    """The margin of an objective that uses one (selfish: `pretrain.selfish.margin`); no margin (inf) for the others."""
    return params.pretrain.selfish.margin if get_objective(objective).uses_margin else float("inf")


def decompose(model, batch: dict, kind: Kind, objective: str, margin: float = 2.0) -> dict:
    """The three parts of one batch's embedding gradient, each (V, d) float32, and the loss.

    The loss is the objective's mean over the batch's predicted positions (what training uses)."""

    emb, out_proj = model.get_input_embeddings(), model.get_output_embeddings()
    if out_proj is None:
        raise VocabTransferError(f"{type(model).__name__}: no output embeddings to decompose the gradient of")
    device = emb.weight.device
    ids = batch["input_ids"].to(device)
    labels = batch["labels"].to(device)
    captured: dict = {}

    def hook(module, args, output):
        output.retain_grad()
        captured["h"], captured["logits"] = args[0], output

    handle = out_proj.register_forward_hook(hook)
    try:
        looked_up = emb(ids).detach().requires_grad_(True)  # part (1) gathers on this leaf
        logits = model(inputs_embeds=looked_up, attention_mask=batch["attention_mask"].to(device)).logits
    finally:
        handle.remove()
    if kind == "causal":
        logits, labels = logits[:, :-1], labels[:, 1:]
    selected = labels != -100
    loss = objective_loss(objective, logits[selected].float(), labels[selected], margin=margin)
    loss.backward()

    vocab, dim = out_proj.weight.shape
    # rows of (dL/dlogits, h) at the predicted positions
    grad_logits, h = captured["logits"].grad, captured["h"]
    position = torch.zeros(grad_logits.shape[:2], dtype=torch.bool, device=device)
    if kind == "causal":
        position[:, :-1] = selected
    else:
        position = selected
    g = grad_logits[position].float()
    hs = h[position].detach().float()
    targets = labels[selected]
    rows = torch.arange(len(targets), device=device)
    target_coef = g[rows, targets].clone()
    g[rows, targets] = 0.0
    parts = {
        "input": torch.zeros(emb.weight.shape, device=device).index_add_(
            0, ids.reshape(-1), looked_up.grad.reshape(-1, looked_up.shape[-1]).float()
        ),
        "output_target": torch.zeros(vocab, dim, device=device).index_add_(0, targets, target_coef[:, None] * hs),
        "output_nontarget": g.T @ hs,
    }
    model.zero_grad(set_to_none=True)
    return {**parts, "loss": float(loss.detach())}


def sample_batches(
    tokenizer, ids: TokenIds, kind: Kind, *, batches: int, batch_size: int, seq_len: int, seed: int
) -> list[dict]:
    """`batches` batches of packed blocks from train lines in a seeded random order, seeded masks."""
    order = np.random.default_rng(seed).permutation(len(ids))
    wanted = batches * batch_size
    blocks: list[list[int]] = []
    step = max(wanted * 4, 64)
    for start in range(0, len(order), step):  # pack lines in the sampled order until there are enough blocks
        blocks = pack_ids(tokenizer, (ids.line(int(i)) for i in order[: start + step]), seq_len, kind=kind)
        if len(blocks) > wanted:
            break
    return lm_batches(tokenizer, blocks[:wanted], kind, batch_size, seed)


def norms(model, batches: list[dict], kind: Kind, objective: str, margin: float) -> dict[str, np.ndarray]:
    """Per token and part: the norm of the token's summed gradient in each batch, summed over batches."""
    model.eval()
    vocab = model.get_input_embeddings().weight.shape[0]
    total = {p: np.zeros(vocab) for p in PARTS}
    for batch in progress_batches(batches):
        parts = decompose(model, batch, kind, objective, margin)
        for p in PARTS:
            total[p] += parts[p].norm(dim=1).double().cpu().numpy()
    return total


def progress_batches(batches):
    return progress(batches, desc="gradient batches", unit="batch")


def smooth(ranks: np.ndarray, values: np.ndarray, n_bins: int):
    """Mean of `values` in log-spaced bins of rank + 1 (bins without tokens, or all-zero ones, dropped)."""
    edges = np.unique(np.floor(np.geomspace(1, ranks.max() + 2, n_bins + 1)))
    idx = np.searchsorted(edges, ranks + 1, side="right") - 1
    x, y = [], []
    for b in range(len(edges) - 1):
        sel = idx == b
        if sel.any() and values[sel].mean() > 0:
            x.append(float(np.exp(np.log(ranks[sel] + 1).mean())))
            y.append(float(values[sel].mean()))
    return x, y


def plot(rows: dict, path: str | Path, title: str, n_bins: int) -> None:
    plt = io.pyplot()

    phases = list(rows)
    fig, axes = plt.subplots(1, len(phases), figsize=(5.5 * len(phases), 4), sharey=True, squeeze=False)
    colors = {"input": "tab:green", "output_target": "tab:blue", "output_nontarget": "tab:red"}
    labels = {
        "input": "(1) input",
        "output_target": "(2.1) output, target",
        "output_nontarget": "(2.2) output, non-target",
    }
    for ax, phase in zip(axes[0], phases):
        data = rows[phase]
        seen = data["count"] > 0
        for p in PARTS:
            x, y = smooth(data["rank"][seen], data[p][seen], n_bins)
            ax.plot(x, y, color=colors[p], marker=".", label=labels[p])
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("frequency rank in train + 1 (tokens seen in train)")
        ax.set_title({"start": "start (initialised model)", "end": "end (pretrained model)"}.get(phase, phase))
        ax.grid(alpha=0.3, which="both")
    axes[0][0].set_ylabel("summed gradient norm per token (mean over rank bin)")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    io.save_png(fig, path, dpi=110)


def run(ctx: Context[Params]) -> None:
    opts = ctx.params.gradient_scenarios
    objective = ctx.wildcards["objective"]
    m = margin(ctx.params, objective)
    dirs = {"start": Path(ctx.input["init"]) / "model", "end": Path(ctx.input["pretrain"]) / "model"}
    tokenizer = load_tokenizer(dirs["start"])
    out: dict[str, dict] = {}
    batches = counts = ranks = None
    for phase, directory in dirs.items():
        model, kind = modeling.load_source_model(directory)
        if batches is None:
            ids = read_ids(ctx.input["train_ids"], tokenizer)
            counts = token_counts(ids, tokenizer, kind)
            ranks = frequency_ranks(counts)
            batches = sample_batches(
                tokenizer,
                ids,
                kind,
                batches=opts.batches,
                batch_size=opts.batch_size,
                seq_len=opts.seq_len,
                seed=ctx.seed,
            )
        if load_tokenizer(directory).get_vocab() != tokenizer.get_vocab():
            raise VocabTransferError(
                f"{directory}: its tokenizer differs from {dirs['start']}'s; the pretrained "
                "model must keep the initialised model's tokenizer"
            )
        model.to(ctx.device)
        totals = norms(model, batches, kind, objective, m)
        out[phase] = {"rank": ranks, "count": counts, **totals}
        log.info(
            "%s/%s/%s %s: summed gradient norms over %d batches: input %.3g, output target %.3g, output "
            "non-target %.3g",
            ctx.lang,
            ctx.method,
            objective,
            phase,
            len(batches),
            totals["input"].sum(),
            totals["output_target"].sum(),
            totals["output_nontarget"].sum(),
        )
        del model
    assert counts is not None  # set by the first phase (dirs has two)
    vocab = len(counts)
    table = pa.concat_tables(
        [
            pa.table(
                {
                    "lang": [ctx.lang] * vocab,
                    "method": [ctx.method] * vocab,
                    "objective": [objective] * vocab,
                    "phase": [phase] * vocab,
                    "token_id": np.arange(vocab, dtype=np.int64),
                    "rank": data["rank"],
                    "count": data["count"],
                    **{f"{p}_norm": data[p] for p in PARTS},
                },
                schema=SCHEMA,
            )
            for phase, data in out.items()
        ]
    )
    io.write_parquet(table, ctx.output["table"])
    plot(
        out,
        ctx.output["plot"],
        f"{ctx.lang}, {ctx.method}, {objective}: gradient reaching each token's embedding",
        opts.plot_bins,
    )
