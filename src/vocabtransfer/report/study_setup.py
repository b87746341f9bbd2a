"""The report's `## Set-up` section: the source model (how its weights were read, its LM head), an existing target
tokenizer and its donor model (`tokenizer.from`, `tokenizer.donor_model`), the trained hypernetwork, continued
pretraining and the downstream evaluation as they ran, the job time, each language's corpus and tokenizers, and the
costs (report.costs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from vocabtransfer import io
from vocabtransfer.pipeline import paths
from vocabtransfer.plan.params_root import Params
from vocabtransfer.report.costs import cost_lines
from vocabtransfer.report.markdown import CORRECTION_NAME, fmt, md_table
from vocabtransfer.report.read import Language
from vocabtransfer.plan.report_plans import Plan
from vocabtransfer.report.tables import Settings, plural


def quantisation_lines(stats: dict | None) -> list[str]:
    """What the report must say when the source came from a GGUF file (`stats`: the source_model stage's
    base_stats.json): its weights are a quantisation of the released model, dequantised, not the
    released weights."""
    if not stats or not stats.get("gguf_sha256"):
        return []
    quantised = [t for t in stats.get("gguf_tensor_types") or [] if t.startswith(("Q", "IQ", "TQ"))]
    weights = {t: n for t, n in (stats.get("gguf_type_weights") or {}).items() if t in quantised}
    bits = sorted({int(m.group(1)) for t in quantised if (m := re.match(r"[A-Z]*Q(\d)", t))})
    if not bits:
        what = "the released model's weights, converted to GGUF"
    else:
        spread = (
            ", ".join(f"{t} for {n / 1e6:.1f} M" for t, n in weights.items())
            if weights
            else f"GGUF tensor types {', '.join(quantised)}"
        )
        what = f"a quantisation of the released model to {bits[0]}–{bits[-1]} bits per weight ({spread})"
    return [
        f"* Source weights: **{what}**, read from the GGUF file `{Path(str(stats.get('resolved'))).name}` "
        f"(sha256 {str(stats['gguf_sha256'])[:12]}…) and dequantised to float32; every number below is that "
        "model's, not the one released in bf16"
    ]


@dataclass(frozen=True)
class StageStats:
    """What the source-side stages recorded, read once for the whole report: the source_head stage's stats.json
    (`head`), the source_model stage's base_stats.json (`base`), stage hypernet's stats.json of every network
    seed, by seed (`networks`), and stage donor's stats.json (`donor`); None / [] where a stage did not run."""

    head: dict | None
    base: dict | None
    networks: list[dict]
    donor: dict | None = None

    @classmethod
    def read(cls, root: Path) -> StageStats:
        head, base, donor = (
            io.read_json(root / f) if (root / f).is_file() else None
            for f in (paths.SOURCE_HEAD_STATS, paths.SOURCE_BASE_STATS, paths.DONOR_STATS)
        )
        files = (root / paths.HYPERNETS).glob("pseed*/stats.json")
        networks = [io.read_json(f) for f in sorted(files, key=lambda f: int(f.parent.name.removeprefix("pseed")))]
        return cls(head, base, networks, donor)


def _trained_on(stats: dict, languages: list[str]) -> str:
    """Which train splits the network read, and the study's languages it never saw (applied zero-shot)."""
    seen = stats.get("languages")
    if not seen:
        return "the study's train splits"
    unseen = [lang for lang in languages if lang not in seen]
    return f"the train splits of {', '.join(seen)}" + (
        f" (never saw {', '.join(unseen)}: applied there zero-shot, init.hypernet.languages)" if unseen else ""
    )


def hypernet_lines(seeds: list[dict], languages: list[str]) -> list[str]:
    """The set-up's line on the trained hypernetworks (`seeds`: stage hypernet's stats.json of each network seed;
    `languages`: the study's): network seed 1's training, and the other seeds' count and time; none without one."""
    if not seeds:
        return []
    stats = seeds[0]
    curve = stats.get("curve") or []
    first, last = curve[: min(20, len(curve))], curve[-min(20, len(curve)) :]
    loss = (
        f"; its LM loss under the sampled tokenizers {sum(r['lm_loss'] for r in first) / len(first):.2f} → "
        f"{sum(r['lm_loss'] for r in last) / len(last):.2f} (mean of the first and the last {len(last)} steps)"
        if curve
        else ""
    )
    vocab = stats.get("vocab_sizes") or []
    minutes = [s.get("train_seconds", 0) / 60 for s in seeds]
    others = (
        f". {len(seeds)} network seeds, each trained so (the init of pretraining seed k applies network seed k, so "
        f"the pretrained runs' spread holds the network's seed variance): {min(minutes):.1f}–{max(minutes):.1f} min a "
        "seed; the numbers above are network seed 1's"
        if len(seeds) > 1
        else ""
    )
    return [
        f"* Hypernetwork (init method hypernet): trained once on {_trained_on(stats, languages)}, {stats.get('steps')} "
        f"steps, {stats.get('tokens', 0):,} tokens in {stats.get('train_seconds', 0) / 60:.1f} min "
        f"({stats.get('tokens_per_second', 0):.0f} tokens/s, peak memory "
        f"{stats.get('peak_memory_bytes', 0) / 2**30:.2f} GiB, {stats.get('parameters', 0):,} parameters) on "
        f"{len(vocab)} sampled tokenizers of {min(vocab, default=0):,}–{max(vocab, default=0):,} tokens" + loss + others
    ]


def setup_section(
    params: Params,
    stats: StageStats,
    langs: list[Language],
    p: Plan,
    settings: Settings,
    seconds: float | None = None,
    root: Path | None = None,
) -> list[str]:
    """The section, in the order of the module docstring."""
    lines = ["## Set-up", ""]
    lines += _model_lines(params, stats)
    lines += _run_lines(params, langs, p, settings, seconds)
    lines.append("")
    lines += _language_table(langs)
    if root is not None:
        lines += cost_lines(root, md_table)
    return lines


def _model_lines(params: Params, stats: StageStats) -> list[str]:
    """The source model, how its weights were read (a GGUF file's quantisation), its LM head and the trained
    hypernetwork."""
    head = stats.head
    lines = [
        f"* Source model: `{params.source_model}`"
        + (f" ({head.get('model_class')}, {head.get('kind')} LM)" if head else "")
    ]
    lines += quantisation_lines(stats.base)
    if head is None:
        lines.append(f"* LM head: {paths.SOURCE_HEAD_STATS} missing")
    elif head.get("skipped"):
        lines.append("* LM head: the checkpoint's own")
    else:
        lines.append(
            f"* LM head: the checkpoint has none; trained for {head.get('steps')} steps on "
            f"`{Path(str(head.get('text'))).name}` (held-out loss {fmt(head.get('loss_before'))} → "
            f"{fmt(head.get('loss_after'))})"
        )
    return lines + target_tokenizer_lines(params, stats.donor) + hypernet_lines(stats.networks, list(params.languages))


def target_tokenizer_lines(params: Params, donor: dict | None) -> list[str]:
    """An existing target tokenizer (`tokenizer.from`: copied, not trained) and the donor model whose embeddings
    omp_donor codes in (`donor`: stage donor's stats.json); nothing for a trained tokenizer."""
    tokenizer = params.tokenizer
    if tokenizer.from_ is None:
        return []
    lines = [
        f"* Target tokenizer: an existing one, `{tokenizer.from_}` (tokenizer.from), copied for every language, not "
        "trained (tokenizer.vocab_size unused); its size and family per language below"
    ]
    if tokenizer.donor_model is not None:
        matrices = (
            "input embeddings (tied to its head)" if donor and donor.get("tied") else "input and output embeddings"
        )
        spaces = (
            f"its {donor.get('dim')}-wide {matrices}, {donor.get('rows')} rows"
            if donor
            else f"{paths.DONOR_STATS} missing"
        )
        lines.append(
            f"* Donor model: `{tokenizer.donor_model}` (tokenizer.donor_model), the model that owns that tokenizer: "
            f"omp_donor codes the new tokens in {spaces}"
        )
    return lines


def _run_lines(params: Params, langs: list[Language], p: Plan, settings: Settings, seconds: float | None) -> list[str]:
    """Continued pretraining as it ran (or as configured), the downstream evaluation and its intervals, and
    the job time behind the report."""
    lines: list[str] = []
    pre = params.pretrain
    configured = (
        f", {pre.steps} steps"
        if pre.passes is None
        else f", {pre.passes:g} {'pass' if pre.passes == 1 else 'passes'} over the training blocks"
    )
    steps = sorted({r.get("steps") for lang in langs for r in lang.runs.values() if r.get("steps") is not None})
    pairs = list(dict.fromkeys(f"{m}-{o}" for m, o, _ in p.pretrain))
    pseeds = sorted({s for _, _, s in p.pretrain})
    if pairs:
        lines.append(
            f"* Continued pretraining: {', '.join(pairs)}, each with {plural(len(pseeds), 'pretraining seed')}"
            + (f", {', '.join(map(str, steps))} steps" if steps else configured)
        )
    else:
        lines.append("* Continued pretraining: none configured (pretrain.pairs)")
    fseeds = sorted(
        {f for lang in langs for models in lang.evals.values() for runs in models.values() for _, f in runs}
    )
    evaluated = f"{_fseeds(fseeds)} per model and pretraining seed" if fseeds else "no fine-tuning configured"
    lines.append(
        f"* Downstream evaluation: {evaluated}; {100 * settings.confidence:g} % nested intervals (test-set variance "
        f"from a cluster bootstrap of {settings.resamples} resamples, seed variance from the seeds, t "
        f"quantiles per level), {CORRECTION_NAME[settings.correction]} correction over the headline family (every "
        "claim, all languages together; exploratory tables and each task's floor check apart); no difference "
        f"is worded on fewer than {settings.min_clusters} clusters or a single run"
    )
    if seconds:
        lines.append(
            f"* Job time behind this report: {seconds / 60:.1f} min, the sum of the `s` column (each job's "
            "wall-clock seconds) of Snakemake's per-job benchmark tables under logs/benchmarks; with N cores "
            "the run takes about this divided by the parallelism it reached"
        )
    return lines


def _language_table(langs: list[Language]) -> list[str]:
    """Per language: its corpus splits, its tokenizer and the fertility of both tokenizers, with the note."""
    rows = []
    for lang in langs:
        c, t, k = lang.corpus or {}, lang.tokenizer or {}, lang.pretok or {}
        valid = (k.get("stats") or {}).get("valid") or {}
        rows.append(
            [
                lang.lang,
                str(c.get("train_lines", "–")),
                str(c.get("train_bytes", "–")),
                str(c.get("valid_lines", "–")),
                f"{t.get('family', '–')} {t.get('style', '') or ''}".strip(),
                str(t.get("vocab_size_reached", "–")),
                fmt((valid.get("target") or {}).get("fertility"), 2),
                fmt((valid.get("source") or {}).get("fertility"), 2),
            ]
        )
    return [
        md_table(
            [
                "lang",
                "train lines",
                "train bytes",
                "valid lines",
                "tokenizer",
                "vocabulary",
                "fertility (target)",
                "fertility (source)",
            ],
            rows,
        ),
        "",
        "Fertility: tokens per word on the valid split, target tokenizer vs the source tokenizer.",
        "",
    ]


def _fseeds(fseeds: list[int]) -> str:
    """`fine-tuning seed 1`, `fine-tuning seeds 1, 2`, or `no fine-tuning`."""
    if not fseeds:
        return "no fine-tuning"
    return f"fine-tuning seed{'s' if len(fseeds) > 1 else ''} {', '.join(map(str, fseeds))}"
