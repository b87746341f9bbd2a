"""The report's figures (PNG, byte-identical for identical inputs) and the valid-loss curves as CSV.

* curves: the valid loss against the step, one panel per objective, one line per method: the mean
  over pretraining seeds, with a band from the lowest to the highest seed; where the runs wrote their
  curves by valid block, against the tokens seen on a log axis with the floors (`plot_token_curves`);
* downstream: each model's score per task with its nested interval as an error bar and
  the task's floor as a dashed line; a task no model learns is drawn in grey.
"""

from __future__ import annotations

import csv
import io as _io
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from vocabtransfer import io
from vocabtransfer.report.read import OBJECTIVE_ORDER, Language

DPI = 100


def _save(fig, path: Path) -> None:
    fig.savefig(path, format="png", dpi=DPI, metadata={"Software": None})
    io.pyplot().close(fig)


def seed_curves(lang: Language) -> dict[tuple[str, str], Any]:
    """(method, objective) -> DataFrame indexed by step (ascending) with the columns mean, low, high, n (seeds).

    Seeds need not evaluate at the same steps (token budgets fall on different steps where padding varies):
    the union of their steps is sorted, so the last row is the last step, whichever seed evaluated it."""

    per: dict[tuple[str, str], list] = {}
    for (m, o, s), curve in sorted(lang.curves.items()):
        c = curve.dropna(subset=["valid_loss"]).set_index("step")["valid_loss"].rename(s)
        per.setdefault((m, o), []).append(c)
    out = {}
    for key, series in per.items():
        table = pd.concat(series, axis=1).sort_index()
        out[key] = pd.DataFrame(
            {
                "mean": table.mean(axis=1),
                "low": table.min(axis=1),
                "high": table.max(axis=1),
                "n": table.notna().sum(axis=1),
            }
        )
    return out


def plot_curves(lang: Language, path: Path) -> None:
    plt = io.pyplot()
    curves = seed_curves(lang)
    objectives = [o for o in OBJECTIVE_ORDER if any(ob == o for _, ob in curves)]
    fig, axes = plt.subplots(1, len(objectives), figsize=(5.5 * len(objectives), 4), sharey=True, squeeze=False)
    methods = list(dict.fromkeys(m for m, _ in curves))
    colors = {m: plt.cm.tab10(i % 10) for i, m in enumerate(methods)}
    n_seeds = max(int(c["n"].max()) for c in curves.values())
    for ax, objective in zip(axes[0], objectives):
        for (method, ob), c in curves.items():
            if ob != objective:
                continue
            ax.plot(c.index, c["mean"], marker="o", markersize=3, label=method, color=colors[method])
            if n_seeds > 1:
                ax.fill_between(c.index, c["low"], c["high"], color=colors[method], alpha=0.18, linewidth=0)
        ax.set_title(objective)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("valid loss (standard cross-entropy)")
    band = f"; mean of {n_seeds} pretraining seeds, band from lowest to highest" if n_seeds > 1 else ""
    fig.suptitle(f"{lang.lang}: continued pretraining{band}")
    fig.tight_layout()
    _save(fig, path)


def plot_token_curves(
    lang: str, reps, path: Path, bits: dict | None = None, bits_lines: dict | None = None, baseline: str | None = None
) -> None:
    """The valid loss against the tokens seen on a log axis (symmetric-log: 0 is the initialisation), one panel
    per objective: each method's mean over pretraining seeds on the grid (`token_equivalent.Replicates`), a band
    from the lowest to the highest seed, the unigram and uniform floors as lines. With `baseline`, its standard
    curve is drawn (grey, dashed) in a panel whose objective it did not run, and a second row of panels shows each
    method's difference from it (`_difference_panel`: lines that overlap above are told apart there). With `bits`
    ((method, objective) -> DataFrame of tokens_seen and valid_bits_per_byte per seed, causal models), a last row
    of panels: bits per byte with `bits_lines` (label -> value: the source, the floors) as lines."""
    plt = io.pyplot()
    objectives = [o for o in OBJECTIVE_ORDER if any(ob == o for _, ob in reps.mean)]
    base = [(baseline, o) for o in ("standard",) if baseline and (baseline, o) in reps.mean]
    rows = 1 + bool(base) + bool(bits)
    fig, axes = plt.subplots(
        rows, len(objectives), figsize=(5.5 * len(objectives), 3.6 * rows), squeeze=False, sharey="row"
    )
    methods = list(dict.fromkeys(m for m, _ in reps.mean))
    colors = {m: plt.cm.tab10(i % 10) for i, m in enumerate(methods)}
    floors = {"unigram floor": None if reps.unigram is None else float(reps.unigram[0]), "uniform floor": reps.uniform}
    for col, objective in enumerate(objectives):
        ax = axes[0][col]
        for (method, ob), curve in reps.mean.items():
            if ob == objective:
                label = f"{method} ({reps.seeds[(method, ob)]})"
                ax.plot(reps.grid, curve[0], marker="o", markersize=3, label=label, color=colors[method])
                band = reps.per_seed[(method, ob)]
                ax.fill_between(
                    reps.grid, band.min(axis=0), band.max(axis=0), color=colors[method], alpha=0.18, linewidth=0
                )
        if base and (baseline, objective) not in reps.mean:  # the baseline ran with the standard objective only
            ax.plot(reps.grid, reps.mean[base[0]][0], "--", color="0.5", label=f"{baseline} (standard)")
        _lines(ax, floors)
        ax.set_title(objective)
        ax.set_ylabel("valid loss (nats a token)")
        if base:
            _difference_panel(axes[1][col], reps, objective, str(baseline), colors)
        if bits:
            _bits_panel(axes[rows - 1][col], bits, objective, colors, bits_lines or {})
    for ax in axes.flat:
        ax.set_xscale("symlog", linthresh=1000, linscale=0.3)
        ax.set_xlim(0, float(reps.grid[-1]) * 1.15)
        ax.set_xticks([0] + [10.0**k for k in range(3, int(np.log10(max(reps.grid[-1], 1000))) + 1)])
        ax.set_xlabel("target tokens seen (0, then log scale)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(
        f"{lang}: continued pretraining by tokens; mean over pretraining seeds (in brackets), band from "
        "lowest to highest"
    )
    fig.tight_layout()
    _save(fig, path)


def _difference_panel(ax, reps, objective: str, baseline: str, colors: dict) -> None:
    """Each method's mean valid loss minus the baseline's (its own objective's runs, else the standard ones) on the
    grid, with a band from the lowest to the highest difference of the seeds both ran (paired by seed)."""
    base = (baseline, objective) if (baseline, objective) in reps.mean else (baseline, "standard")
    for (method, ob), curve in reps.mean.items():
        if ob != objective or (method, ob) == base:
            continue
        ax.plot(reps.grid, curve[0] - reps.mean[base][0], marker="o", markersize=3, color=colors[method], label=method)
        own, theirs = reps.pseeds.get((method, ob), []), reps.pseeds.get(base, [])
        shared = [s for s in own if s in theirs]
        if len(shared) > 1:
            diff = np.array(
                [reps.per_seed[(method, ob)][own.index(s)] - reps.per_seed[base][theirs.index(s)] for s in shared]
            )
            ax.fill_between(
                reps.grid, diff.min(axis=0), diff.max(axis=0), color=colors[method], alpha=0.18, linewidth=0
            )
    ax.axhline(0, color="0.3", linewidth=1, label=f"{base[0]} ({base[1]})")
    ax.set_ylabel(f"valid loss − {base[0]} ({base[1]})")


def _bits_panel(ax, bits: dict, objective: str, colors: dict, lines: dict) -> None:
    """Every run's bits per byte against the tokens seen, `lines` (the source, the floors) as lines."""
    for (method, ob), table in bits.items():
        if ob == objective:
            for i, (_, run) in enumerate(table.groupby("pseed")):
                ax.plot(
                    run["tokens_seen"],
                    run["valid_bits_per_byte"],
                    color=colors.get(method, "0.3"),
                    alpha=0.8,
                    linewidth=1,
                    label=method if i == 0 else None,
                )
    _lines(ax, lines)
    ax.set_ylabel("valid bits per byte")


def _lines(ax, values: dict) -> None:
    styles = ("--", ":", "-.")
    for i, (label, value) in enumerate((k, v) for k, v in values.items() if v is not None):
        ax.axhline(value, color="0.35", linestyle=styles[i % 3], linewidth=1, label=f"{label} ({value:.3f})")


def plot_downstream(lang: str, status: dict, path: Path) -> None:
    """`status`: task -> tables.TaskStatus (every group's score, the floor, whether the task is learned)."""
    plt = io.pyplot()
    tasks = list(status)
    n = max(len(s.scores) for s in status.values())
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.6 * len(tasks), 1.6 + 0.32 * n), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        learned, rows, floor = status[task].learned, status[task].scores[::-1], status[task].floor
        y = np.arange(len(rows))
        mean = [r.score.diff for r in rows]
        err = np.array([[r.score.diff - r.score.low for r in rows], [r.score.high - r.score.diff for r in rows]])
        color = "tab:blue" if learned else "0.7"
        ax.barh(y, mean, xerr=err, color=color, capsize=2, ecolor="0.25")
        ax.axvline(floor["value"], color="tab:red", linestyle="--", linewidth=1)  # named under the axis, not over a bar
        ax.set_yticks(y, [r.group for r in rows], fontsize=8)
        ax.set_title(task if learned else f"{task}: {status[task].state}", color="black" if learned else "0.45")
        ax.set_xlabel(
            f"score (percent) with its interval\nred dashes: floor, {floor['name']} ({floor['value']:.1f})", fontsize=8
        )
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(f"{lang}: downstream tasks")
    fig.tight_layout()
    _save(fig, path)


def write_curves_csv(lang: Language, path: Path) -> None:
    """step, then one column per `<method>-<objective>`: the valid loss averaged over pretraining seeds."""
    curves = seed_curves(lang)
    names = {k: f"{k[0]}-{k[1]}" for k in curves}
    steps = sorted({int(s) for c in curves.values() for s in c.index})
    buf = _io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["step"] + list(names.values()))
    for step in steps:
        writer.writerow(
            [step, *(f"{float(curves[k].loc[step, 'mean']):.6g}" if step in curves[k].index else "" for k in names)]
        )
    path.write_text(buf.getvalue(), encoding="utf-8")


def plot_worth(lang: str, eqs: list, crossings: list, baseline: str, path: Path) -> bool:
    """What each initialisation is worth in the baseline's tokens (`token_equivalent.equivalents`) against the
    budget, both on log axes: per method and objective the baseline's tokens to reach its mean valid loss at each
    measured budget with the interval as a band (an end past the run drawn at the top, `> run`), the diagonal
    (worth its own tokens) and the tokens the baseline needs to reach each floor (`floor_crossings`) as lines. No
    file where no method has a token-equivalent (the baseline alone was pretrained, or no budget was measured).
    Returns whether it drew the figure."""
    if not eqs:
        return False
    plt = io.pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    budgets = sorted({e.budget for e in eqs})
    finite = [v for e in eqs for v in (e.tokens.value, e.tokens.low, e.tokens.high) if np.isfinite(v) and v > 0]
    top = max(finite + budgets) * 3
    keys = list(dict.fromkeys((e.method, e.objective) for e in eqs))
    for i, (method, objective) in enumerate(keys):
        rows = sorted((e for e in eqs if (e.method, e.objective) == (method, objective)), key=lambda e: e.budget)
        x = [e.budget for e in rows]
        value, low, high = ([min(max(getattr(e.tokens, k), 1.0), top) for e in rows] for k in ("value", "low", "high"))
        color = plt.cm.tab10(i % 10)
        style = "-" if objective == "standard" else "--"
        ax.plot(x, value, style, marker="o", markersize=3, color=color, label=f"{method} ({objective})")
        ax.fill_between(x, low, high, color=color, alpha=0.15, linewidth=0)
        capped = [(b, v) for b, v, e in zip(x, value, rows) if np.isinf(e.tokens.value)]
        if capped:
            ax.scatter(*zip(*capped), marker="^", color=color, zorder=3)
    ax.plot(
        [budgets[0], budgets[-1]], [budgets[0], budgets[-1]], color="0.4", linewidth=1, label="worth its own tokens"
    )
    styles = {"unigram": ":", "uniform": "-."}
    for c in (c for c in crossings if c.method == baseline and c.objective == "standard"):
        for name in ("unigram", "uniform"):
            est = getattr(c, name)
            if est is not None and np.isfinite(est.value) and est.value > 0:
                ax.axhline(
                    est.value,
                    color="tab:red",
                    linestyle=styles[name],
                    linewidth=1,
                    label=f"{baseline} reaches the {name} floor ({est.value:,.0f} tokens)",
                )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(top=top * 1.2)
    ax.set_xlabel("budget: target tokens the method was pretrained on")
    ax.set_ylabel(f"{baseline}'s tokens to reach the same valid loss")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title(
        f"{lang}: each initialisation's worth in {baseline}'s tokens\n(band: interval; ▲ at the top: > run)",
        fontsize=10,
    )
    fig.tight_layout()
    _save(fig, path)
    return True
