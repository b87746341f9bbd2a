"""SQuAD v1.1 exact match and F1 (the official evaluation script's normalisation), per question.

`normalize_answer` lower-cases, removes punctuation, the English articles a/an/the and extra
white space; a prediction's score is the maximum over the gold answers. Scores are in percent.
"""

from __future__ import annotations

import re
import string
from collections import Counter

PUNCTUATION = frozenset(string.punctuation)
ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    text = text.lower()
    text = "".join(ch for ch in text if ch not in PUNCTUATION)
    text = ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1(prediction: str, gold: str) -> float:
    pred_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    common = Counter(pred_tokens) & Counter(gold_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(pred_tokens)
    recall = same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def score(prediction: str, golds: list[str]) -> tuple[float, float]:
    """(exact match, F1) of one prediction against its gold answers, in percent (max over golds)."""
    if not golds:
        raise ValueError("a question needs at least one gold answer")
    return (100.0 * max(exact_match(prediction, g) for g in golds), 100.0 * max(f1(prediction, g) for g in golds))
