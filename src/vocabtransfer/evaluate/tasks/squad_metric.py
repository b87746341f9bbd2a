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
    return (100.0 * max(exact_match(prediction, g) for g in golds),
            100.0 * max(f1(prediction, g) for g in golds))


def squad_scores(predictions: list[str], golds: list[list[str]]) -> dict[str, float]:
    """Mean exact match and F1 over questions, in percent."""
    if len(predictions) != len(golds):
        raise ValueError(f"{len(predictions)} predictions for {len(golds)} questions")
    if not predictions:
        raise ValueError("no questions to score")
    pairs = [score(p, g) for p, g in zip(predictions, golds)]
    return {"exact_match": sum(p[0] for p in pairs) / len(pairs), "f1": sum(p[1] for p in pairs) / len(pairs)}
