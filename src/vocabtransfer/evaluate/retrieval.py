"""Parallel-sentence retrieval, init_eval's test of an encoder's sentence representations: the XNLI
premise pairs it reads (the first N distinct source-language premises of `init_eval.xnli` and the same rows
of the target-language file), sentence embeddings (the mean of the last hidden state over the attention
mask) and the top-1 accuracy of their cosine similarity both ways.
"""

from __future__ import annotations

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.log import progress
from vocabtransfer.pipeline import paths

import torch
import torch.nn.functional as F


def read_xnli_premises(template: str, source_lang: str, lang: str, n: int) -> tuple[list[str], list[str]]:
    """The first `n` distinct source-language premises and the same rows of the target-language file
    (none for `n` <= 0)."""
    if n <= 0:
        return [], []
    files = [paths.data_path(template.format(lang=code)) for code in (source_lang, lang)]
    columns = []
    for path in files:
        if not path.is_file():
            raise VocabTransferError(
                f"{path}: XNLI file not found; check init_eval.xnli (relative paths resolve "
                "against $VOCABTRANSFER_DATA)"
            )
        with path.open(encoding="utf-8") as fh:
            columns.append([line.rstrip("\n").split("\t")[0].strip() for line in fh if line.strip()])
    if len(columns[0]) != len(columns[1]):
        raise VocabTransferError(
            f"{files[1]}: {len(columns[1])} rows but {files[0]} has {len(columns[0])}; "
            "the files must be row-aligned translations"
        )
    seen: set[str] = set()
    src, tgt = [], []
    for a, b in zip(*columns):
        if a and b and a not in seen:
            seen.add(a)
            src.append(a)
            tgt.append(b)
            if len(src) == n:
                break
    return src, tgt


def sentence_embeddings(model, tokenizer, texts: list[str], *, batch_size: int, max_length: int, desc: str = ""):
    """Mean of the last hidden state over the attention mask, one row per text (float32, CPU)."""

    device = next(model.parameters()).device
    rows = []
    with torch.inference_mode():
        for i in progress(range(0, len(texts), batch_size), desc=desc or "embed", unit="batch"):
            enc = tokenizer(
                texts[i : i + batch_size], padding=True, truncation=True, max_length=max_length, return_tensors="pt"
            )
            mask = enc["attention_mask"].to(device)
            hidden = model.base_model(input_ids=enc["input_ids"].to(device), attention_mask=mask).last_hidden_state
            m = mask.unsqueeze(-1).to(hidden.dtype)
            rows.append(((hidden * m).sum(1) / m.sum(1).clamp(min=1)).float().cpu())
    return torch.cat(rows)


def retrieval_accuracy(src, tgt) -> tuple[float, float]:
    """Top-1 accuracy of cosine similarity: row i of `src` should find row i of `tgt`, and back."""

    sim = F.normalize(src, dim=-1) @ F.normalize(tgt, dim=-1).T
    gold = torch.arange(sim.shape[0])
    n = sim.shape[0]
    return int((sim.argmax(1) == gold).sum()) / n, int((sim.argmax(0) == gold).sum()) / n
