"""Loaders and scorers of vocabtransfer's offline lm-evaluation-harness tasks (the YAML files beside
this one, loaded with `TaskManager(include_path=<this folder>)`; vocabtransfer.evaluate.harness).

Every file is read from the data folder ($VOCABTRANSFER_DATA, default ./data), never from a hub. Each
document carries `cluster`: the unit that items share (an XNLI premise, a QA passage), which the
report's paired bootstrap resamples (vocabtransfer.report.harness_table).
"""

from __future__ import annotations

import csv

import datasets
from lm_eval.tasks.tydiqa.utils import process_results_lang

from vocabtransfer import io
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.pipeline import paths

XNLI_LABELS = {"entailment": 0, "neutral": 1, "contradiction": 2}  # the harness's xnli order: Yes, Also, No


def _file(name: str):
    path = paths.data_path(name)
    if not path.is_file():
        raise VocabTransferError(
            f"{path}: not found (an lm_eval.tasks task reads it from the data folder, $VOCABTRANSFER_DATA)"
        )
    return path


def read_xnli(name: str) -> datasets.Dataset:
    """premise, hypothesis, label (0–2) and cluster (the premise) of a labelled XNLI TSV (3 columns, no header)."""
    path = _file(name)
    rows = []
    with path.open(encoding="utf-8", newline="") as f:
        for i, row in enumerate(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE), start=1):
            if len(row) != 3 or row[2] not in XNLI_LABELS:
                raise VocabTransferError(
                    f"{path}:{i}: expected premise<TAB>hypothesis<TAB>label with a label in {sorted(XNLI_LABELS)}"
                )
            rows.append({"premise": row[0], "hypothesis": row[1], "label": XNLI_LABELS[row[2]], "cluster": row[0]})
    return datasets.Dataset.from_list(rows)


def read_squad(name: str) -> datasets.Dataset:
    """id, title, context, question, answers (texts) and cluster (the passage) of a SQuAD-format JSON file."""
    path = _file(name)
    try:
        articles = io.read_json(path)["data"]
    except (KeyError, TypeError) as e:
        raise VocabTransferError(f"{path}: not SQuAD-format JSON (no `data` list of articles)") from e
    rows = []
    for a, article in enumerate(articles):
        for p, paragraph in enumerate(article["paragraphs"]):
            for qa in paragraph["qas"]:
                rows.append(
                    {
                        "id": qa["id"],
                        "title": article.get("title", ""),
                        "context": paragraph["context"],
                        "question": qa["question"],
                        "answers": [x["text"] for x in qa["answers"]],
                        "cluster": f"{a}/{p}",
                    }
                )
    return datasets.Dataset.from_list(rows)


def load_xnli(file: str, **_) -> datasets.DatasetDict:
    return datasets.DatasetDict({"validation": read_xnli(file)})


def load_squad(file: str, train_file: str | None = None, **_) -> datasets.DatasetDict:
    splits = {"validation": read_squad(file)}
    if train_file:
        splits["train"] = read_squad(train_file)
    return datasets.DatasetDict(splits)


def results_sw(doc: dict, results: list[str]) -> dict:
    """The harness's TyDiQA-GoldP exact match and F1 (Swahili normalisation)."""
    return process_results_lang(doc, results, "sw")


def results_de(doc: dict, results: list[str]) -> dict:
    """The same for German (no article stripping: the harness strips articles for English only)."""
    return process_results_lang(doc, results, "de")
