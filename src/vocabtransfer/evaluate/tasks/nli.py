"""Natural language inference, XNLI format: premise, hypothesis, label (entailment / neutral /
contradiction, or 0 / 1 / 2 as in the hub's `facebook/xnli`). Metric: accuracy.

Local files are tab-separated with three columns and no header (XNLI dev); a `datasets` spec needs
the columns `premise`, `hypothesis`, `label`. A label outside the three is one error naming the file
and line. Examples are grouped by premise, so a deterministic split never puts one premise's
hypotheses on both sides.
"""

from __future__ import annotations

import csv
from collections import Counter

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.evaluate.tasks import Evaluation, Source, Task, register, require_columns
from vocabtransfer.plan.task_options import NliOptions

LABELS = ["entailment", "neutral", "contradiction"]  # the order of facebook/xnli's ClassLabel
LABEL_IDS = {**{name: i for i, name in enumerate(LABELS)}, **{str(i): i for i in range(3)}}


def label_id(value, where: str) -> int:
    key = str(value).strip().lower()
    if key not in LABEL_IDS:
        raise VocabTransferError(
            f"{where}: label {value!r} is not one of {', '.join(LABELS)} (or 0/1/2); "
            "fix the file or point the spec at an XNLI-format file"
        )
    return LABEL_IDS[key]


@register("nli")
class NLI(Task):
    metric = "accuracy"
    head = "AutoModelForSequenceClassification"
    floor_text = "always the most frequent training label"
    PARTS = ("score", None, 100.0)  # accuracy: 100 · Σ correct / Σ examples
    options: NliOptions

    def read(self, source: Source) -> tuple[list[dict], dict[str, int]]:
        examples = []
        if source.rows is not None:
            for i, row in enumerate(source.rows):
                require_columns(source, row, ("premise", "hypothesis", "label"))
                examples.append(
                    self._example(
                        i, row["premise"], row["hypothesis"], label_id(row["label"], f"{source.name}: row {i}")
                    )
                )
            return examples, {}
        assert source.path is not None  # open_source gives a source rows or a path
        with open(source.path, encoding="utf-8", newline="") as fh:
            for n, cols in enumerate(csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE), start=1):
                if not cols or cols == [""]:
                    continue
                if len(cols) != 3:
                    raise VocabTransferError(
                        f"{source.path}: line {n} has {len(cols)} tab-separated column(s), expected 3 "
                        "(premise, hypothesis, label); an unlabelled file cannot be used for training or testing"
                    )
                examples.append(self._example(n, cols[0], cols[1], label_id(cols[2], f"{source.path}: line {n}")))
        return examples, {}

    @staticmethod
    def _example(index: int, premise: str, hypothesis: str, label: int) -> dict:
        # the premise is the split unit and the bootstrap's cluster: XNLI pairs it with three hypotheses
        return {
            "id": str(index),
            "group": premise,
            "cluster": premise,
            "premise": premise,
            "hypothesis": hypothesis,
            "label": label,
        }

    def labels(self, train: list[dict]) -> list[str]:
        return list(LABELS)

    def features(self, examples: list[dict], tokenizer, labels=None) -> list[dict]:
        enc = tokenizer(
            [e["premise"] for e in examples],
            [e["hypothesis"] for e in examples],
            truncation=True,
            max_length=self.options.max_length,
        )
        return [{**{k: enc[k][i] for k in enc.keys()}, "labels": e["label"]} for i, e in enumerate(examples)]

    def floor(self, splits) -> dict:
        """The majority class: always the most frequent training label (ties: the lowest label id)."""
        counts = Counter(e["label"] for e in splits.train)
        majority = min(counts, key=lambda label: (-counts[label], label))
        hits = [int(e["label"] == majority) for e in splits.test]
        return {
            "name": "majority class",
            "value": 100.0 * sum(hits) / len(hits),
            "examples": {"ids": [e["id"] for e in splits.test], "score": hits},
        }

    def evaluate(self, trainer, examples: list[dict], tokenizer, labels=None) -> Evaluation:
        logits = trainer.predict(self.features(examples, tokenizer)).predictions
        predicted = logits.argmax(-1).tolist()
        correct = [int(p == e["label"]) for p, e in zip(predicted, examples)]
        return Evaluation(
            metrics={"accuracy": 100.0 * sum(correct) / len(correct)},
            examples={"ids": [e["id"] for e in examples], "score": correct},
        )
