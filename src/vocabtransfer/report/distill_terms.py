"""What the distill runs were, under the report's `Distill − standard` table: τ, α, the chunks, the steps and
seeds (each run's stats.json), and how much each of distill's two terms moves the model: the mean over
logged steps and seeds of each term's gradient norm (metrics.parquet `grad_norm_distill`, `grad_norm_lm`,
`grad_norm_total`; docs/objectives.md), alone and weighted by α and 1 − α.
"""

from __future__ import annotations

import math

import numpy as np

COLUMNS = ("grad_norm_distill", "grad_norm_lm", "grad_norm_total")


def _settings(stats: dict) -> str:
    d = stats.get("distill") or {}
    chunks = d.get("chunks", "exact")
    if chunks == "unbiased":
        chunks = f"unbiased chunks (bias threshold {d.get('bias_threshold')})"
    else:
        chunks = "exact chunks"
    return f"τ = {d.get('temperature')}, α = {d.get('alpha')}, {chunks}, {stats.get('steps')} steps"


def _mean(frames, column: str) -> float:
    parts = [f[column].to_numpy(float) for f in frames if column in f.columns]
    values = np.concatenate(parts) if parts else np.zeros(0)
    values = values[np.isfinite(values)]
    return float(values.mean()) if values.size else math.nan


def method_line(method: str, runs: list[dict], curves: list) -> str:
    """One bullet: the settings of `method`'s distill runs and the two terms' gradient norms."""
    settings = sorted({_settings(r) for r in runs})
    alpha = (runs[0].get("distill") or {}).get("alpha", math.nan) if runs else math.nan
    line = f"* {method}: {'; '.join(settings)}; {len(runs)} pretraining seed{'s' if len(runs) != 1 else ''}"
    g_d, g_lm, g_all = (_mean(curves, c) for c in COLUMNS)
    if not (math.isfinite(g_d) and math.isfinite(g_lm)):
        return line + "; the terms' gradient norms were not logged (runs from before they were, or several processes)."
    a_d, a_lm = alpha * g_d, (1 - alpha) * g_lm
    line += (
        f". Gradient norm per logged step (mean over steps and seeds): chunk term {g_d:.3g}, "
        f"cross-entropy term {g_lm:.3g}, the step {g_all:.3g}; weighted by α and 1 − α: {a_d:.3g} against {a_lm:.3g}"
    )
    if a_lm > 0:
        return line + f" (the chunk term moves the model {a_d / a_lm:.3g}× as much as cross-entropy)."
    return line + (
        ". With α = 1 there is no cross-entropy term, so a token in no chunk (a special token, such as the "
        "begin- and end-of-sequence tokens around each line) gets no training signal: the valid loss scores "
        "those tokens, bits per byte (each line alone, its own tokens) does not."
    )


def note(lang, objective: str = "distill") -> list[str]:
    """Markdown lines for `lang`'s runs of a teacher objective (distill, alm: their stats.json has `distill`);
    [] without any."""
    methods = dict.fromkeys(m for (m, o, _), stats in lang.runs.items() if o == objective and stats.get("distill"))
    if not methods:
        return []
    lines = [f"The {objective} runs:", ""]
    for method in methods:
        keys = sorted(k for k in lang.runs if k[0] == method and k[1] == objective)
        lines.append(
            method_line(method, [lang.runs[k] for k in keys], [lang.curves[k] for k in keys if k in lang.curves])
        )
    return lines + [""]
