"""The report's section *Bits per byte* in Markdown: the models, the source and the floors with their
intervals, bytes per token and shares (report.bpb computes them), then the − baseline and − best floor
tables. Nothing here computes a statistic."""

from __future__ import annotations

from vocabtransfer.evaluate.score_terms import FLOOR, LABELS
from vocabtransfer.pipeline import paths
from vocabtransfer.report.bpb import BpbTable
from vocabtransfer.report.markdown import CORRECTION_NAME, difference_text, family_section, fmt, md_table
from vocabtransfer.report.read import Language
from vocabtransfer.report.tables import Settings, finite, seeds_text


def _bpb_row(r) -> list[str]:
    """One row of the bits-per-byte table: the source, a floor or a model."""
    if r.method == "source":
        label, objective = "source (its own tokenizer)", "–"
    elif r.method == FLOOR:
        label, objective = LABELS.get(r.objective, r.objective), "floor"
    else:
        label, objective = r.method, r.objective
    score = "–" if r.score is None else f"{fmt(r.score.diff)} [{fmt(r.score.low)}, {fmt(r.score.high)}]"
    runs = r.runs or seeds_text(r.score)
    floor = difference_text(r.vs_floor.diff if r.vs_floor is not None else None, 3)
    return [label, objective, score, runs, fmt(r.bytes_per_token, 2), fmt(r.share_kept, 2), floor]


def bits_per_byte_section(lang: Language, table: BpbTable | None, settings: Settings) -> list[str]:
    """Bits per byte of every init-only and pretrained model, of the source with its own tokenizer and of the
    floors, bytes per token, the share kept from the best floor, and the − baseline and − best floor tables."""
    lines = ["### Bits per byte", ""]
    if lang.bits_per_byte is None:
        return lines + [f"_No bits-per-byte results ({paths.fill(paths.BITS_PER_BYTE, lang=lang.lang)} missing)._", ""]
    if table is None:
        return lines + ["_No bits per byte: token_frequency_loss.bits_per_byte was false for this run._", ""]
    saving = (
        f"Bytes per token on the {table.n_lines} valid lines: {fmt(table.target_bytes_per_token, 2)} with the "
        f"target tokenizer, {fmt(table.source_bytes_per_token, 2)} with the source's"
    )
    if finite(table.target_bytes_per_token) and finite(table.source_bytes_per_token):
        fewer = 1 - table.source_bytes_per_token / table.target_bytes_per_token  # share of tokens saved
        saving += (
            f" (the target tokenizer needs {100 * abs(fewer):.0f} % {'fewer' if fewer >= 0 else 'more'} "
            "tokens for the same text)"
        )
    if table.reason:
        return lines + [
            f"_No bits per byte: {table.reason}; compare these models on the loss per token above "
            "(they share the target tokenizer)._ " + saving + ".",
            "",
        ]
    rows = [_bpb_row(r) for r in [table.rows[0]] + table.floors + table.rows[1:]]
    lines.append(
        md_table(
            [
                "model",
                "objective",
                "bits per byte [interval]",
                "runs",
                "bytes per token",
                "share kept",
                "− best floor [interval]",
            ],
            rows,
            2,
        )
    )
    best = table.best
    keep = (
        "Share kept: (BPB_floor − BPB_method) / (BPB_floor − BPB_source) from the best floor"
        + (f" ({best.label}, {best.bits_per_byte:.3f})" if best else " (none was scored: no share)")
        + ", from the means over pretraining seeds."
    )
    if table.nothing_to_keep:
        assert table.source is not None and table.source.score is not None  # nothing_to_keep compares its score
        keep += (
            f" The source ({table.source.score.diff:.3f}) does not beat the best floor: it has nothing to keep "
            "on this language, so no share is given."
        )
    lines += [
        "",
        f"Bits per UTF-8 byte of the first {table.n_lines} valid lines, each line scored alone "
        "(docs/evaluation.md, *Bits per byte*): a measure that does not depend on the tokenizer, so the source "
        "model, reading the same text with its own tokenizer, is on the same scale. " + saving + ". Floors: "
        "predictors without a model, scored on the same tokens (a unigram of the target or the source "
        "tokenizer fitted on the train split with add-one smoothing; the uniform guess, log2 V bits per "
        "target token). " + keep + " Intervals are nested over valid lines (the clusters) and pretraining "
        f"seeds; each table below says the correction ({CORRECTION_NAME[settings.correction]}) its rows got. A method "
        "without random rows has one initialisation, whatever the seed: its own interval holds the test set's "
        "variance only.",
        "",
    ]
    for family in (table.family, table.floor_family):
        if family is not None and family.rows:
            lines += family_section(family, settings)
    return lines
