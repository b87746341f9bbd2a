"""Named-entity recognition, CoNLL BIO files (MasakhaNER 2.0, GermEval 2014). Metric: entity-level
F1 with seqeval (precision and recall beside it); `eval.tasks.ner.strict` switches seqeval to its
strict IOB2 mode.

A file holds one token per line and a blank line between sentences; columns are split on tabs when
the line has one, else on white space. The spec's `token_column` / `tag_column` pick the columns
(MasakhaNER: 0 and 1; GermEval: 1 and 2, the outer tags) and `comment` a prefix of lines to ignore
(GermEval: `#`). A `datasets` spec needs `tokens` and `ner_tags` (ints with ClassLabel names, or
strings). A tag that is neither `O` nor `B-…`/`I-…` is one error naming the file and line.

The label set is read from the training split. Test tags missing from it stay in the gold
sequences — the model cannot predict them, so they count as missed entities (an honest score) —
and are counted in the result's `unseen_test_labels` and logged. Each word is labelled on its first
sub-token (the others get -100); words cut off by `max_length` are predicted `O`. A byte-level BPE
tokenizer (GPT-2, Llama-3) gets each word after the first with its leading space, as it would see it in
running text (`Ġword`), which `is_split_into_words` alone does not give it.
"""

from __future__ import annotations

import logging
import re
from collections import Counter

from seqeval.scheme import Entities, IOB2

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.evaluate.tasks import Evaluation, Source, Splits, Task, register, require_columns
from vocabtransfer.plan.task_options import NerOptions
from vocabtransfer.data.families import spelling

log = logging.getLogger(__name__)
TAG = re.compile(r"^(O|[BI]-\S+)$")


def entity_set(tags: list[str], strict: bool) -> set[tuple]:
    """The entities of one sentence as seqeval finds them (default conlleval mode, or strict IOB2)."""
    if strict:
        return {e.to_tuple()[1:] for e in Entities([tags], IOB2).entities[0]}
    from seqeval.metrics.sequence_labeling import get_entities  # seqeval: NER scoring only

    return set(get_entities(tags))


def sentence_counts(gold: list[str], pred: list[str], strict: bool = False) -> tuple[int, int, int]:
    """(true positives, predicted entities, gold entities) of one sentence."""
    g, p = entity_set(gold, strict), entity_set(pred, strict)
    return len(g & p), len(p), len(g)


def seqeval_scores(gold: list[list[str]], pred: list[list[str]], strict: bool = False) -> dict[str, float]:
    """seqeval's micro precision, recall and F1, in percent."""
    from seqeval.metrics import f1_score, precision_score, recall_score  # seqeval: NER scoring only

    kw = {"mode": "strict", "scheme": IOB2} if strict else {}
    return {
        "f1": 100.0 * f1_score(gold, pred, zero_division=0, **kw),
        "precision": 100.0 * precision_score(gold, pred, zero_division=0, **kw),
        "recall": 100.0 * recall_score(gold, pred, zero_division=0, **kw),
    }


def lexicon_tags(train: list[dict]) -> dict[str, str]:
    """Word -> its most frequent tag in the training sentences (ties: `O` first, then by name)."""
    counts: dict[str, Counter] = {}
    for ex in train:
        for word, tag in zip(ex["tokens"], ex["tags"]):
            counts.setdefault(word, Counter())[tag] += 1
    return {w: min(c, key=lambda t: (-c[t], t != "O", t)) for w, c in counts.items()}


@register("ner")
class NER(Task):
    metric = "f1"
    head = "AutoModelForTokenClassification"
    floor_text = "each test word tagged with its most frequent tag in the training sentences, O when unseen"
    PARTS = ("tp", ("n_pred", "n_gold"), 200.0)  # micro F1: 200 · Σ tp / (Σ predicted + Σ gold)
    options: NerOptions

    def read(self, source: Source) -> tuple[list[dict], dict[str, int]]:
        if source.rows is not None:
            return self._read_rows(source), {}
        tok_col = int(source.options.get("token_column", 0))
        tag_col = int(source.options.get("tag_column", 1))
        comment = source.options.get("comment")
        sentences: list[dict] = []
        tokens: list[str] = []
        tags: list[str] = []

        def flush():
            if tokens:
                sentences.append(
                    {
                        "id": str(len(sentences)),
                        "group": str(len(sentences)),
                        "cluster": str(len(sentences)),
                        "tokens": list(tokens),
                        "tags": list(tags),
                    }
                )
                tokens.clear()
                tags.clear()

        assert source.path is not None  # open_source gives a source rows or a path
        with open(source.path, encoding="utf-8") as fh:
            for n, line in enumerate(fh, start=1):
                line = line.rstrip("\n").rstrip("\r")
                if comment and line.startswith(comment):
                    continue
                if not line.strip():
                    flush()
                    continue
                cols = line.split("\t") if "\t" in line else line.split()
                if max(tok_col, tag_col) >= len(cols):
                    raise VocabTransferError(
                        f"{source.path}: line {n} has {len(cols)} column(s), but token_column={tok_col} and "
                        f"tag_column={tag_col} ({source.key}); set the columns of this CoNLL file"
                    )
                tag = cols[tag_col].strip()
                if not TAG.match(tag):
                    raise VocabTransferError(
                        f"{source.path}: line {n}: tag {tag!r} is not O, B-<type> or I-<type> "
                        f"({source.key}); check tag_column"
                    )
                tokens.append(cols[tok_col].strip())
                tags.append(tag)
        flush()
        return sentences, {}

    def _read_rows(self, source: Source) -> list[dict]:
        names = None
        feature = getattr(source.rows, "features", {}).get("ner_tags") if hasattr(source.rows, "features") else None
        if feature is not None and hasattr(getattr(feature, "feature", None), "names"):
            names = feature.feature.names
        out = []
        for i, row in enumerate(source.rows):
            require_columns(source, row, ("tokens", "ner_tags"))
            tags = [names[t] if names and isinstance(t, int) else str(t) for t in row["ner_tags"]]
            bad = [t for t in tags if not TAG.match(t)]
            if bad:
                raise VocabTransferError(f"{source.name}: row {i}: tag {bad[0]!r} is not O, B-<type> or I-<type>")
            out.append(
                {
                    "id": str(row.get("id", i)),
                    "group": str(i),
                    "cluster": str(i),
                    "tokens": list(row["tokens"]),
                    "tags": tags,
                }
            )
        return out

    def labels(self, train: list[dict]) -> list[str]:
        found = {t for ex in train for t in ex["tags"]}
        return ["O"] + sorted(found - {"O"})

    def prepare(self, splits: Splits, labels: list[str] | None) -> None:
        assert labels is not None  # NER.labels gives a list
        unseen = Counter(t for ex in splits.test for t in ex["tags"] if t not in labels)
        if unseen:
            log.warning("test tags not in the training split (counted as missed entities): %s", dict(unseen))
        splits.notes["unseen_test_labels"] = dict(sorted(unseen.items()))

    def _encode(self, examples: list[dict], tokenizer):
        words = [ex["tokens"] for ex in examples]
        if spelling(tokenizer).kind == "byte_level":
            # byte-level BPE (GPT-2, Llama-3, Qwen) spells the space before a word (`Ġword`), and split words
            # reach it without one: give every word but the first its space, as in the running text
            words = [[w if i == 0 else f" {w}" for i, w in enumerate(ws)] for ws in words]
        return tokenizer(words, is_split_into_words=True, truncation=True, max_length=self.options.max_length)

    def features(self, examples: list[dict], tokenizer, labels: list[str] | None) -> list[dict]:
        assert labels is not None  # NER.labels gives a list
        index = {t: i for i, t in enumerate(labels)}
        enc = self._encode(examples, tokenizer)
        out = []
        for i, ex in enumerate(examples):
            word_ids, seen, label_ids = enc.word_ids(i), set(), []
            for w in word_ids:
                if w is None or w in seen:
                    label_ids.append(-100)
                else:
                    seen.add(w)
                    # a test tag unseen in training has no class: it is not trained on (and never predicted)
                    label_ids.append(index.get(ex["tags"][w], -100))
            out.append({**{k: enc[k][i] for k in enc.keys()}, "labels": label_ids})
        return out

    def collator(self, tokenizer):
        from transformers import (
            DataCollatorForTokenClassification,
        )  # transformers: the floor and report jobs load the tasks without it

        return DataCollatorForTokenClassification(tokenizer)

    def floor(self, splits) -> dict:
        """The training split's lexicon: each test word gets the tag it has most often in the training
        sentences (ties: `O` first, then the tag's name), `O` when it never occurs there."""
        strict = self.options.strict
        lexicon = lexicon_tags(splits.train)
        gold = [ex["tags"] for ex in splits.test]
        pred = [[lexicon.get(w, "O") for w in ex["tokens"]] for ex in splits.test]
        counts = [sentence_counts(g, p, strict) for g, p in zip(gold, pred)]
        return {
            "name": "training lexicon",
            "value": seqeval_scores(gold, pred, strict)["f1"],
            "examples": {
                "ids": [ex["id"] for ex in splits.test],
                "tp": [c[0] for c in counts],
                "n_pred": [c[1] for c in counts],
                "n_gold": [c[2] for c in counts],
            },
        }

    def evaluate(self, trainer, examples: list[dict], tokenizer, labels: list[str] | None) -> Evaluation:
        assert labels is not None  # NER.labels gives a list
        strict = self.options.strict
        enc = self._encode(examples, tokenizer)
        feats = [{k: enc[k][i] for k in enc.keys()} for i in range(len(examples))]
        logits = trainer.predict(feats).predictions  # (N, L, C), padded across batches
        gold, pred = [], []
        for i, ex in enumerate(examples):
            tags = ["O"] * len(ex["tokens"])
            seen = set()
            for pos, w in enumerate(enc.word_ids(i)):
                if w is not None and w not in seen:
                    seen.add(w)
                    tags[w] = labels[int(logits[i, pos].argmax())]
            gold.append(ex["tags"])
            pred.append(tags)
        counts = [sentence_counts(g, p, strict) for g, p in zip(gold, pred)]
        return Evaluation(
            metrics=seqeval_scores(gold, pred, strict),
            examples={
                "ids": [ex["id"] for ex in examples],
                "tp": [c[0] for c in counts],
                "n_pred": [c[1] for c in counts],
                "n_gold": [c[2] for c in counts],
            },
        )
