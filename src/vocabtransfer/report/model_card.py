"""The model card (README.md) of an exported run: the Hub's metadata block (base model, language, licence,
library, pipeline tag, tags) and a body with what a user needs to trust and rebuild it: the initialisation, the
objective, the tokens trained, the valid loss and bits per byte beside the source's, the downstream scores with
their intervals beside the source's, the files, and the command that rebuilds it.

The licence and the base model come from the source (`source_facts`): a source directory's own model card
(its `license:` and, where it names one, its hub id) or a GGUF file's `general.license`; `export.base_model`
names the hub id where the source is a file with none (a GGUF file assembled by a package)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from huggingface_hub import ModelCard, ModelCardData

from vocabtransfer.evaluate.stats import Difference
from vocabtransfer.report.tables import seeds_text

HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


@dataclass
class Score:
    """One downstream task's score of the exported model and of the source, each with its interval."""

    task: str
    metric: str
    model: Difference | None
    source: Difference | None
    note: str = ""  # e.g. "the method × objective's other pretraining seeds" when the run itself has none


@dataclass
class CardFacts:
    """What the card says: everything read from the results, the source and params."""

    lang: str
    model_name: str  # `<method>-<objective>-pseed<k>`
    method: str
    objective: str
    pseed: int
    source_model: str  # params source_model as written
    kind: str  # causal or masked
    why: str  # the recommendation sentence, or that export.model names the run
    run_stats: dict  # the pretrain job's stats.json
    tokenizer_size: int
    license: str | None = None
    base_model: str | None = None
    bits_per_byte: float | None = None
    source_bits_per_byte: float | None = None
    scores: list[Score] = field(default_factory=list)
    confidence: float = 0.95
    gguf: dict | None = None  # the GGUF file's stats, None without one
    gguf_note: str = ""  # why there is none
    rebuild: list[str] = field(default_factory=list)
    version: str = ""


def _front_matter_license(readme: Path) -> tuple[str | None, str | None]:
    """(license, base_model) from a model card's YAML block, when it has them."""

    try:
        data = ModelCard.load(readme).data
    except Exception:  # a README without a metadata block, or one the parser refuses: no facts from it
        return None, None
    base = data.get("base_model")
    return data.get("license"), base[0] if isinstance(base, list) and base else base


def source_facts(source_model: str, resolved: str | None, base_model: str | None) -> tuple[str | None, str | None]:
    """(license, base model hub id) of the source: from its directory's README.md or its GGUF metadata (`resolved`,
    base_stats.json's), the hub id from `base_model` (export.base_model), else `source_model` when it is one (a
    hub id, or hf://owner/name/file.gguf), else the card's own base_model."""
    license_, card_base = None, None
    path = Path(resolved) if resolved else None
    if path is not None and path.is_dir() and (path / "README.md").is_file():
        license_, card_base = _front_matter_license(path / "README.md")
    elif path is not None and path.is_file() and path.suffix.lower() == ".gguf":
        from transformers.integrations.gguf.reader import read_gguf_metadata  # GGUF sources only (optional gguf)

        try:
            metadata, _ = read_gguf_metadata(str(path))
            license_ = metadata.get("general.license")
        except Exception:  # a file moved since the source stage: the card says the licence is unknown
            license_ = None
    if base_model:
        return license_, base_model
    value = source_model.removeprefix("hf://")
    if source_model.startswith("hf://"):
        value = "/".join(value.split("/")[:2])
    if HUB_ID.fullmatch(value) and not Path(source_model).expanduser().exists():
        return license_, value
    return license_, card_base if isinstance(card_base, str) and HUB_ID.fullmatch(card_base) else None


def metadata(f: CardFacts) -> str:
    """The Hub's YAML metadata block (huggingface_hub.ModelCardData)."""

    tags = ["vocabtransfer", "vocabulary-transfer", f"init-{f.method}", f"objective-{f.objective}"]
    data = ModelCardData(
        base_model=f.base_model,
        language=[f.lang],
        license=f.license,
        library_name="transformers",
        pipeline_tag="text-generation" if f.kind == "causal" else "fill-mask",
        tags=tags + (["gguf"] if f.gguf else []),
    )
    return data.to_yaml()


def _interval(d: Difference | None, confidence: float) -> str:
    if d is None:
        return "–"

    return f"{d.diff:.1f} [{d.low:.1f}, {d.high:.1f}] ({seeds_text(d)}, {d.n_clusters} clusters)"


def _fmt(x: float | None, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def training_table(f: CardFacts) -> list[str]:
    s = f.run_stats
    rows = [
        (
            "source model",
            f"`{f.source_model}`" + (f" ({f.base_model})" if f.base_model not in (None, f.source_model) else ""),
        ),
        ("target tokenizer", f"{f.tokenizer_size} tokens, trained on the {f.lang} corpus"),
        ("initialisation", f"`{f.method}`"),
        ("continued pretraining", f"`{f.objective}` objective, pretraining seed {f.pseed}"),
        (
            "tokens trained",
            f"{int(s.get('tokens_seen', 0)):,} target tokens ({s.get('steps')} steps, peak learning "
            f"rate {s.get('learning_rate')}, schedule {s.get('schedule')})",
        ),
        (
            "valid loss",
            f"{_fmt(s.get('initial_valid_loss'))} → {_fmt(s.get('final_valid_loss'))} nats per target token "
            f"(at initialisation → after pretraining) on {int(s.get('valid_tokens', 0)):,} held-out tokens",
        ),
    ]
    if f.bits_per_byte is not None:
        rows.append(
            (
                "bits per byte",
                f"{f.bits_per_byte:.3f} on the valid lines (the source model: "
                f"{_fmt(f.source_bits_per_byte)}); per byte, comparable across tokenizers",
            )
        )
    return ["| | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows]


def downstream_section(f: CardFacts) -> list[str]:
    out = ["## Downstream", ""]
    if not f.scores:
        return out + [
            f"No downstream scores for {f.model_name}: params `eval.models` did not list it (or its group "
            "`pretrained`), so it was not fine-tuned; the study's report has the scores of the models it lists.",
            "",
        ]
    pct = round(100 * f.confidence)
    out += [
        f"Mean test score over fine-tuning runs with its {pct} % interval (test-set clusters and seeds, "
        "docs/evaluation.md), beside the untouched source model's.",
        "",
        f"| task | metric | {f.model_name} | source |",
        "|---|---|---|---|",
    ]
    for s in f.scores:
        note = f" ({s.note})" if s.note else ""
        model, source = _interval(s.model, f.confidence), _interval(s.source, f.confidence)
        out.append(f"| {s.task} | {s.metric} | {model}{note} | {source} |")
    return out + [""]


def files_section(f: CardFacts) -> list[str]:
    load = "AutoModelForCausalLM" if f.kind == "causal" else "AutoModelForMaskedLM"
    out = [
        "## Files",
        "",
        f"- `config.json`, `model.safetensors`, the tokenizer files: `{load}.from_pretrained(<this folder>)` and "
        "`AutoTokenizer.from_pretrained(<this folder>)`, nothing from vocabtransfer needed.",
    ]
    if f.gguf:
        g, rt = f.gguf, f.gguf.get("round_trip") or {}
        out.append(
            f"- `{g['file']}`: the model and its tokenizer in one GGUF file ({g['architecture']}, {g['dtype']}, "
            f"tokenizer `{g['tokenizer_model']}` / pre-tokenizer `{g['tokenizer_pre']}`) for llama.cpp, Ollama or "
            f'LM Studio, or `from_pretrained(<this folder>, gguf_file="{g["file"]}")`. Read back by transformers '
            f"at export: {rt.get('identical_token_ids', 0)} of {rt.get('lines', 0)} valid lines tokenised "
            f"identically, per-line log-likelihoods within {_fmt(rt.get('max_abs_loglik_per_token'), 5)} nats per "
            f"token of this folder's model (allowed: {rt.get('tolerance')})."
        )
    elif f.gguf_note:
        out.append(f"- No GGUF file: {f.gguf_note}.")
    return out + [""]


def render(f: CardFacts) -> str:
    """The README.md of the exported folder."""
    title = f"{f.base_model or f.source_model} for {f.lang}: {f.method} initialisation, {f.objective} pretraining"
    body = [
        f"# {title}",
        "",
        f"The source model `{f.source_model}` with a new {f.lang} tokenizer whose embeddings were initialised with "
        f"`{f.method}` and then pretrained further with the `{f.objective}` objective, by vocabtransfer "
        f"{f.version}. Run `{f.model_name}` of the study.",
        "",
        f.why,
        "",
        "## Training",
        "",
        *training_table(f),
        "",
        *downstream_section(f),
        *files_section(f),
        "## Rebuild",
        "",
        "In a vocabtransfer checkout with the study's params (`vocabtransfer validate` checks them first):",
        "",
        "```sh",
        *f.rebuild,
        "```",
        "",
        "## Licence",
        "",
        (
            f"`{f.license}`, the source model's licence (its model card or GGUF metadata); the weights derive from it."
            if f.license
            else "Unknown: the source model states none that vocabtransfer could read; check the source's terms "
            "before sharing."
        ),
    ]
    return "---\n" + metadata(f).rstrip() + "\n---\n\n" + "\n".join(body).rstrip() + "\n"
