"""init_eval's figure, results/L/init_eval.png: the loss of every initialised model right after
initialisation against the unigram floor's (the source model's, on its own language's text, stated apart), and,
for encoders, parallel-sentence retrieval both ways.
"""

from __future__ import annotations

from pathlib import Path

from vocabtransfer import io
from vocabtransfer.evaluate import bpb_floor


def loss_limits(methods: list[dict], unigram: dict | None) -> tuple[float, float]:
    """The loss axis: the methods' losses (and calibrated losses) and the unigram floor, padded by 5 %; never
    from 0, and never the source's loss (another language's text)."""
    values = [v for r in methods for v in (r["loss"], r["calibrated_loss"]) if v is not None]
    values += [unigram["loss"]] if unigram is not None else []
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    pad = max(0.05 * (high - low), 0.05)
    return low - pad, high + pad


def plot(rows: list[dict], path: str | Path, lang: str) -> None:
    """Loss per method (best at the top; dots, diamonds at the best temperature, on the methods' range, not from
    0; the unigram floor as a line; the source's loss on its own language's text stated under the axis, never among
    the target-language losses) and retrieval both ways; legends below the axes."""
    plt = io.pyplot()

    unigram = next((r for r in rows if r["method"] == bpb_floor.UNIGRAM_ROW and r["loss"] is not None), None)
    rows = [r for r in rows if r["kind"] != bpb_floor.FLOOR]  # the floors: a line, not a bar
    ref = next((r for r in rows if r["method"] == "source"), None)
    methods = sorted((r for r in rows if r["method"] != "source"), key=lambda r: r["loss"], reverse=True)
    has_retrieval = any(r["retrieval_en2xx"] is not None for r in methods)
    height = 2.4 + 0.32 * len(methods)
    fig, axes = plt.subplots(
        1, 2 if has_retrieval else 1, figsize=(11 if has_retrieval else 6, height), sharey=True, squeeze=False
    )
    y = list(range(len(methods)))
    names = [r["method"] for r in methods]
    ax = axes[0][0]
    ax.scatter([r["loss"] for r in methods], y, color="tab:blue", zorder=3, s=28, label="loss")
    ax.scatter(
        [r["calibrated_loss"] for r in methods],
        y,
        marker="D",
        color="white",
        edgecolors="black",
        zorder=3,
        s=20,
        label="at the best temperature",
    )
    for yi, r in zip(y, methods):
        ax.text(r["loss"], yi + 0.18, f"{r['loss']:.2f} ({r['calibrated_loss']:.2f})", ha="center", fontsize=7)
    if unigram is not None:
        ax.axvline(
            unigram["loss"],
            color="tab:red",
            linestyle=":",
            linewidth=1.5,
            label=f"unigram floor ({unigram['loss']:.2f})",
        )
    ax.set_xlim(*loss_limits(methods, unigram))  # the methods' range, not from 0: a tenth of a nat shows
    ax.set_yticks(y, names)
    ax.set_ylim(-0.6, len(methods) - 0.4)
    # the source reads its own language's text: another text, so its loss is stated, never drawn on this axis
    other = f"\nsource model on {ref['lang']} text (not comparable, not drawn): {ref['loss']:.2f}" if ref else ""
    ax.set_xlabel(
        f"{'masked' if methods and methods[0]['kind'] == 'masked' else 'causal'}-LM loss on held-out "
        f"{lang} text (lower is better; axis not from 0){other}",
        fontsize=8,
    )
    if has_retrieval:
        ax = axes[0][1]
        width = 0.4
        for offset, key, label in (
            (-width / 2, "retrieval_en2xx", f"{ref['lang'] if ref else 'source'}→{lang}"),
            (width / 2, "retrieval_xx2en", f"{lang}→{ref['lang'] if ref else 'source'}"),
        ):
            ax.barh([yi + offset for yi in y], [r[key] or 0.0 for r in methods], height=width, label=label)
        if ref is not None and ref["retrieval_en2xx"] is not None:
            ax.axvline(
                ref["retrieval_en2xx"], color="black", linestyle="--", linewidth=1, label="source model, own tokenizer"
            )
        ax.set_xlabel(f"top-1 retrieval accuracy, {methods[0]['n_sentences'] or 0} XNLI premises")
    for ax in axes[0]:
        if ax.get_legend_handles_labels()[0]:  # below the axes: never over a mark
            ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), fontsize=7, ncols=3, frameon=False)
    fig.suptitle(f"{lang}: right after initialisation, no training")
    fig.tight_layout()
    io.save_png(fig, path, dpi=120)
