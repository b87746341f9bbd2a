"""SQuAD v1.1 EM/F1 and seqeval entity counts on hand-computed cases."""

from __future__ import annotations

import pytest

from vocabtransfer.evaluate.tasks.ner import seqeval_scores, sentence_counts
from vocabtransfer.evaluate.tasks.squad_metric import normalize_answer, score


def test_normalisation_drops_case_punctuation_articles_and_spaces():
    assert normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert normalize_answer("an apple, a pear") == "apple pear"
    assert normalize_answer("Theory") == "theory"  # "the" only as a word


def test_exact_match_and_f1_by_hand():
    # punctuation and article differences vanish
    assert score("the Nile.", ["Nile"]) == (100.0, 100.0)
    # pred tokens [big, red, house], gold [red, house, on, hill]: 2 common -> P 2/3, R 2/4, F1 4/7
    em, f1 = score("a big red house", ["the red house on the hill"])
    assert em == 0.0 and f1 == pytest.approx(100 * 4 / 7)
    # several gold answers: the best one counts
    em, f1 = score("Dar es Salaam", ["Dodoma", "Dar es Salaam, Tanzania", "dar es salaam"])
    assert em == 100.0 and f1 == 100.0
    # partial match against one of two golds: [1961] vs [december, 1961] -> P 1, R 1/2, F1 2/3
    em, f1 = score("1961", ["December 1961", "1962"])
    assert em == 0.0 and f1 == pytest.approx(100 * 2 / 3)
    # an empty prediction scores zero
    assert score("", ["Nile"]) == (0.0, 0.0)


def test_squad_scores_by_hand():
    """[a big red house] vs [the red house on the hill]: the articles dropped, 2 tokens shared of 3 predicted and
    4 gold -> P 2/3, R 1/2, F1 4/7; a question's score is its best gold's."""
    assert score("Nile", ["the Nile"]) == (100.0, 100.0)
    assert score("a big red house", ["the red house on the hill"])[1] == pytest.approx(100 * 4 / 7)
    assert score("", ["x"]) == (0.0, 0.0)


GOLD = [
    ["B-PER", "I-PER", "O", "B-LOC", "O"],
    ["O", "B-ORG", "I-ORG", "I-ORG", "O", "B-DATE"],
    ["O", "O", "O"],
    ["I-LOC", "I-LOC", "O", "B-PER"],  # starts with I-: an entity in conlleval mode, not in strict IOB2
]
PRED = [
    ["B-PER", "I-PER", "O", "B-ORG", "O"],  # PER right, LOC predicted as ORG
    ["O", "B-ORG", "I-ORG", "O", "O", "B-DATE"],  # ORG too short, DATE right
    ["O", "B-LOC", "O"],  # spurious LOC
    ["B-LOC", "I-LOC", "O", "B-PER"],
]


def test_sentence_counts_by_hand():
    counts = [sentence_counts(g, p) for g, p in zip(GOLD, PRED)]
    # default (conlleval) mode: I-LOC I-LOC is a LOC entity spanning 0..1, equal to B-LOC I-LOC
    assert counts == [(1, 2, 2), (1, 2, 2), (0, 1, 0), (2, 2, 2)]
    strict = [sentence_counts(g, p, strict=True) for g, p in zip(GOLD, PRED)]
    assert strict[3] == (1, 2, 1)  # strict IOB2: the gold I-LOC run is no entity


@pytest.mark.parametrize("strict", [False, True])
def test_sentence_counts_sum_to_seqeval_micro_f1(strict):
    counts = [sentence_counts(g, p, strict) for g, p in zip(GOLD, PRED)]
    tp, n_pred, n_gold = (sum(c[i] for c in counts) for i in range(3))
    scores = seqeval_scores(GOLD, PRED, strict)
    assert scores["f1"] == pytest.approx(200 * tp / (n_pred + n_gold))
    assert scores["precision"] == pytest.approx(100 * tp / n_pred)
    assert scores["recall"] == pytest.approx(100 * tp / n_gold)
    if not strict:  # hand count: tp 4 of 7 predicted and 6 gold
        assert (tp, n_pred, n_gold) == (4, 7, 6)
        assert scores["f1"] == pytest.approx(200 * 4 / 13)


def test_floors_by_hand():
    from vocabtransfer.evaluate.tasks import Splits, get_task

    nli = get_task("nli", {})

    def ex(label, i=0):
        return {"label": label, "id": str(i)}

    # the majority class. train: 3 × neutral (1), 2 × entailment (0) -> always neutral; test: 2 of 5 are neutral
    splits = Splits(train=[ex(1)] * 3 + [ex(0)] * 2, test=[ex(1, 0), ex(0, 1), ex(2, 2), ex(1, 3), ex(2, 4)])
    assert nli.floor(splits) == {
        "name": "majority class",
        "value": 40.0,
        "examples": {"ids": ["0", "1", "2", "3", "4"], "score": [1, 0, 0, 1, 0]},
    }
    # a tie in training goes to the lowest label id (entailment): 1 of 5
    splits.train = [ex(2), ex(0)]
    assert nli.floor(splits)["value"] == 20.0
    # the sliding window: answers of the training split's median length (1, 1, 3 words -> 1)
    qa = get_task("qa", {})
    context = "alpha beta gamma delta epsilon zeta eta"
    train = [{"answers": [{"text": t}]} for t in ("Nile", "the Nile river", "Egypt")]
    test = [
        {"id": "a", "context": context, "question": "Alpha?", "answers": [{"text": "beta"}]},
        {"id": "b", "context": context, "question": "eta?", "answers": [{"text": "zeta"}]},
    ]
    # within 10 words every span but the question word itself has it around: a: "alpha" is left out and
    # "beta" is the first of the rest (F1 100); b: the first span, "alpha", wins the tie (F1 0)
    assert qa.floor(Splits(train=train, test=test)) == {
        "name": "sliding window (1-word span)",
        "value": 50.0,
        "examples": {"ids": ["a", "b"], "score": [100.0, 0.0], "prediction": ["beta", "alpha"]},
    }
    ner = get_task("ner", {})

    def sent(i, *pairs):
        return {"id": i, "tokens": [w for w, _ in pairs], "tags": [t for _, t in pairs]}

    train = [
        sent("0", ("Anna", "B-PER"), ("lives", "O"), ("in", "O"), ("Berlin", "B-LOC")),
        sent("1", ("Berlin", "B-ORG"), ("won", "O")),
        sent("2", ("Berlin", "B-LOC"), ("is", "O")),
        sent("3", ("Paris", "B-LOC")),
        sent("4", ("Paris", "O")),
    ]
    # the lexicon: Berlin is B-LOC 2 to 1, Paris ties B-LOC and O (O wins), unseen words are O
    test = [sent("s0", ("Anna", "B-PER"), ("visits", "O"), ("Berlin", "B-ORG")), sent("s1", ("Paris", "B-LOC"))]
    # s0: PER found, LOC predicted for the gold ORG (1 tp of 2 predicted, 2 gold); s1: nothing predicted
    assert ner.floor(Splits(train=train, test=test)) == {
        "name": "training lexicon",
        "value": 40.0,
        "examples": {"ids": ["s0", "s1"], "tp": [1, 0], "n_pred": [2, 0], "n_gold": [2, 1]},
    }
    # the parts of each task's metric: 200 · Σ tp / (Σ pred + Σ gold) = 200 · 1 / 4 for NER
    num, den, scale = type(ner).metric_parts({"tp": [1, 0], "n_pred": [1, 1], "n_gold": [1, 1]})
    assert scale * num.sum() / den.sum() == 50.0


def test_sliding_window_by_hand():
    from vocabtransfer.evaluate.tasks.qa import sliding_window

    context = "alpha beta gamma delta epsilon zeta eta"
    # two words on each side: gamma has both question words around it
    assert sliding_window(context, "beta delta ?", 1, window=2) == "gamma"
    # two-word spans: none has both question words around it; of those with one, "epsilon zeta" is the first
    # that repeats no question word itself
    assert sliding_window(context, "beta delta ?", 2, window=2) == "epsilon zeta"
    assert sliding_window("", "anything", 3) == "" and sliding_window("one", "one", 4) == "one"
