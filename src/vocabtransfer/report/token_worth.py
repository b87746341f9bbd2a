"""The report's words on what an initialisation is worth in tokens (`token_equivalent`'s estimates): the
token-equivalent table, the floors table and the verdict's sentences."""

from __future__ import annotations

import math

from vocabtransfer.report.markdown import md_table
from vocabtransfer.report.token_equivalent import Equivalent, Estimate, FloorCrossing, Replicates


def tokens_text(value: float) -> str:
    """0, 950, 31.6k, 1.20M; inf: "> run"."""
    if math.isinf(value):
        return "> run"
    if value < 1000:
        return f"{value:.0f}"
    return f"{value / 1000:.1f}k" if value < 1e6 else f"{value / 1e6:.2f}M"


def ratio_text(e: Estimate) -> str:
    def one(v: float) -> str:
        return "> run" if math.isinf(v) else f"{v:.1f}×" if v < 10 else f"{v:.0f}×"

    return f"{'≤ ' if e.upto else ''}{one(e.value)} [{one(e.low)}, {one(e.high)}]"


def interval_text(e: Estimate) -> str:
    """The estimate and its interval; "≤ b1" where the crossing lies before the first budget b1."""
    return f"{'≤ ' if e.upto else ''}{tokens_text(e.value)} [{tokens_text(e.low)}, {tokens_text(e.high)}]"


def worth_sentence(rows: list[Equivalent], baseline: str, reps: Replicates) -> str:
    """One method's verdict: what it is worth in the baseline's tokens at the end of the run, then at each
    10^k budget (does the lead last?)."""
    end, name = rows[-1], f"{rows[0].method}-{rows[0].objective}"
    base = f"{baseline}'s"
    seeds = f"{reps.seeds[(end.method, end.objective)]} pretraining seeds each, {reps.blocks} valid blocks"
    if end.ratio.low > 1:
        least = "more than the run's" if math.isinf(end.ratio.low) else f"at least {end.ratio.low:.1f}×"
        head = f"**{name} is worth {least} {base} tokens at {tokens_text(end.budget)} tokens**"
    elif end.ratio.high < 1:
        head = f"**{name} is worth fewer tokens than {baseline} at {tokens_text(end.budget)} tokens**"
    else:
        head = f"**{name}: no detectable token advantage over {baseline} at {tokens_text(end.budget)} tokens**"
    trail = "; ".join(f"at {tokens_text(r.budget)}: {ratio_text(r.ratio)}" for r in rows[:-1])
    run = f"its valid loss {end.loss:.3f} within the run ({tokens_text(reps.grid[-1])} tokens)"
    reach = f"{baseline} needs {interval_text(end.tokens)} tokens to reach its valid loss {end.loss:.3f}, ratio "
    reach += ratio_text(end.ratio)
    if math.isinf(end.tokens.value):  # the mean curve never gets there; its interval may
        reach = f"{baseline} does not reach {run}" if end.ratio.low > 1 else f"{base} mean curve does not reach "
        reach += "" if end.ratio.low > 1 else f"{run}, but its interval does: ratio {ratio_text(end.ratio)}"
    return f"{head} ({reach}; {seeds})" + (f"; earlier, in {base} tokens per token: {trail}." if trail else ".")


def floor_sentence(crossings: list[FloorCrossing], reps: Replicates) -> str | None:
    """Which methods never get below the target unigram floor within the run, and when the others do."""
    rows = [(c, c.unigram) for c in crossings if c.unigram is not None]
    if not rows or reps.unigram is None:
        return None
    never = [f"{c.method}-{c.objective}" for c, u in rows if math.isinf(u.value)]
    reach = [f"{c.method}-{c.objective} after {interval_text(u)} tokens" for c, u in rows if not math.isinf(u.value)]
    seeds = f"{max(reps.seeds.values())} pretraining seeds each, {reps.blocks} valid blocks"
    floor = f"the target unigram floor ({reps.unigram[0]:.3f} nats a valid token; {seeds})"
    parts = []
    if reach:
        parts.append(f"below {floor}: " + ", ".join(reach))
    if never:
        parts.append(f"never below it within the run ({tokens_text(reps.grid[-1])} tokens): " + ", ".join(never))
    return "; ".join(parts)[0].upper() + "; ".join(parts)[1:] + "."


def source_sentence(reach: dict, source: float, reps: Replicates) -> str | None:
    """Which methods reach the source's bits per byte within the run, and after how many tokens."""
    if not reach:
        return None
    got = [f"{m}-{o} after {interval_text(e)} tokens" for (m, o), e in reach.items() if not math.isinf(e.value)]
    never = [f"{m}-{o}" for (m, o), e in reach.items() if math.isinf(e.value)]
    parts = ([f"reached by {', '.join(got)}"] if got else []) + (
        [f"not within the run ({tokens_text(reps.grid[-1])} tokens) by {', '.join(never)}"] if never else []
    )
    seeds = max(reps.seeds.values())
    return (
        f"The source's bits per byte with its own tokenizer ({source:.3f}): "
        + "; ".join(parts)
        + f" (intervals over {seeds} pretraining seeds)."
    )


def section(
    reps: Replicates,
    eqs: list[Equivalent],
    crossings: list[FloorCrossing],
    baseline: str,
    confidence: float,
    figure: str | None,
    reach: dict | None = None,
    source: str = "",
) -> list[str]:
    lines = ["### What an initialisation is worth in tokens", ""]
    if figure:
        lines += [f"![valid loss against tokens seen]({figure})", ""]
    if eqs:
        lines += _equivalents_table(reps, eqs, baseline, confidence)
    elif not any(m == baseline for m, _ in reps.mean):
        lines += [
            f"_No token-equivalent: the baseline {baseline} (report.baseline) has no pretraining runs here; set "
            "it to one of pretrain.methods._",
            "",
        ]
    if crossings:
        lines += _crossings_table(reps, crossings, reach or {}, source)
    return lines


def _equivalents_table(reps: Replicates, eqs: list[Equivalent], baseline: str, confidence: float) -> list[str]:
    """The baseline's tokens to reach each method's valid loss at each budget, with the ratio, and its note."""
    table = md_table(
        [
            "method",
            "budget (tokens)",
            "its valid loss",
            f"{baseline}'s at the budget",
            f"{baseline}'s tokens to reach it",
            "ratio",
        ],
        [
            [
                f"{e.method}-{e.objective}",
                tokens_text(e.budget),
                f"{e.loss:.3f}",
                f"{e.baseline_loss:.3f}",
                interval_text(e.tokens),
                ratio_text(e.ratio),
            ]
            for e in eqs
        ],
    )
    return [
        table,
        "",
        f"The tokens {baseline} (same objective) needs to reach each method's mean valid loss at each "
        "measured budget, read off its mean curve at the measured points (linear in log tokens between two); "
        'the ratio to the budget is what the initialisation is worth in its tokens. "> run": it does not get '
        'there within the run; "≤ b": before the first budget b. Intervals '
        f"{100 * confidence:g} % over the rows (Bonferroni): the pretraining seeds paired (Student t) and "
        f"the {reps.blocks} valid blocks bootstrapped, each variance with its own t quantile, the ends rounded "
        "out to the measured points around them (the curve between two evaluations is not measured).",
        "",
    ]


def _crossings_table(reps: Replicates, crossings: list[FloorCrossing], reach: dict, source: str) -> list[str]:
    """The tokens each run needs to go below the unigram and the uniform floor (and to reach the source's bits
    per byte, `reach`), and their note."""
    table = md_table(
        ["method", "tokens to the unigram floor", "tokens to the uniform floor"]
        + (["tokens to the source's bits per byte"] if reach else []),
        [
            [
                f"{c.method}-{c.objective}",
                interval_text(c.unigram) if c.unigram else "–",
                interval_text(c.uniform) if c.uniform else "–",
            ]
            + (
                [interval_text(reach[(c.method, c.objective)]) if (c.method, c.objective) in reach else "–"]
                if reach
                else []
            )
            for c in crossings
        ],
    )
    floors = [
        f"unigram {reps.unigram[0]:.3f}" if reps.unigram is not None else "",
        f"uniform {reps.uniform:.3f}" if reps.uniform is not None else "",
    ]
    return [
        table,
        "",
        f"Floors in nats a valid token ({', '.join(f for f in floors if f)}): the add-one unigram of "
        "the training split and the uniform guess over the vocabulary, on the tokens the models are scored "
        "on. 0: the model starts below it. Intervals as above, the ends at measured points."
        + (f" {source}" if source else ""),
        "",
    ]


def verdict(reps: Replicates, eqs: list[Equivalent], crossings: list[FloorCrossing], baseline: str) -> list[str]:
    by_method: dict = {}
    for e in eqs:
        by_method.setdefault((e.method, e.objective), []).append(e)
    out = [worth_sentence(rows, baseline, reps) for rows in by_method.values()]
    floor = floor_sentence(crossings, reps)
    return out + ([floor] if floor else [])
