"""Extractive question answering, SQuAD format (TyDiQA-GoldP, XQuAD). Metrics: exact match and F1
with the SQuAD v1.1 normalisation (`squad_metric`), per question the best over its gold answers.

A local file is SQuAD JSON (`data` → articles → `paragraphs` → `context`, `qas` → `id`,
`question`, `answers` [`text`, `answer_start`]); a `datasets` spec needs the columns `id`,
`context`, `question`, `answers` ({`text`: [...], `answer_start`: [...]}) and `title` (the article;
not needed with `cluster: context`). Examples are grouped by article title, so a deterministic split
(XQuAD has one split only) keeps an article's questions together; the report's bootstrap resamples
articles (`cluster: article`, the default) or contexts (`cluster: context`) as clusters.

An answer must occur in its context: one whose `answer_start` is off but whose text occurs in the
context is moved to the nearest occurrence; a question none of whose answers occurs is counted
(`answer_not_in_context`) and skipped. Long contexts are cut into windows of `max_length` tokens
that overlap by `doc_stride` tokens (the standard Hugging Face preprocessing, with offset
mappings); a training window without the answer points at [CLS]. Prediction takes, over all
windows of a question, the `n_best` best start and end logits each and the best-scoring span
(start ≤ end, at most `max_answer_length` tokens, inside the context).
"""

from __future__ import annotations

import json
import logging
import re

import numpy as np

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.evaluate.tasks import Evaluation, Source, Task, register, require_columns
from vocabtransfer.plan.task_options import QaOptions
from vocabtransfer.evaluate.tasks.squad_metric import normalize_answer, score

log = logging.getLogger(__name__)


def align_answers(context: str, answers: list[dict]) -> list[dict]:
    """The answers that occur in the context, each with a start that points at its text."""
    out = []
    for ans in answers:
        text, start = ans["text"], int(ans["answer_start"])
        if not text.strip():
            continue
        if context[start : start + len(text)] != text:
            found = [i for i in range(len(context)) if context.startswith(text, i)]
            if not found:
                continue
            start = min(found, key=lambda i: abs(i - start))
        out.append({"text": text, "answer_start": start})
    return out


WINDOW = 10  # words on each side of a candidate span that are matched against the question


def typical_answer_words(train: list[dict]) -> int:
    """The median length in words of the training questions' first answers (at least 1)."""
    lengths = sorted(len(ex["answers"][0]["text"].split()) for ex in train if ex["answers"])
    return max(1, lengths[len(lengths) // 2]) if lengths else 1


def sliding_window(context: str, question: str, length: int, window: int = WINDOW) -> str:
    """The floor of extractive QA, after the sliding-window baseline of the SQuAD paper: among the
    spans of `length` words of the context, the one whose surroundings (`window` words on each side,
    the span itself left out) share the most distinct words with the question; ties go to the span
    that repeats fewer question words (an answer rarely restates its question), then to the first.
    Words are white-space separated and compared after the SQuAD normalisation."""
    words = [(m.start(), m.end(), normalize_answer(m.group())) for m in re.finditer(r"\S+", context)]
    if not words:
        return ""
    asked = set(normalize_answer(question).split())
    length = min(length, len(words))
    best, best_key = 0, None
    for i in range(len(words) - length + 1):
        around = {w for _, _, w in words[max(0, i - window) : i] + words[i + length : i + length + window]} & asked
        inside = {w for _, _, w in words[i : i + length]} & asked
        key = (-len(around), len(inside), i)
        if best_key is None or key < best_key:
            best, best_key = i, key
    return context[words[best][0] : words[best + length - 1][1]]


@register("qa")
class QA(Task):
    metric = "f1"
    head = "AutoModelForQuestionAnswering"
    floor_text = (
        "the span of the training answers' median length whose surrounding words share the most words with the question"
    )
    PARTS = ("score", None, 1.0)  # F1: Σ per-question F1 (percent) / Σ questions
    options: QaOptions

    def read(self, source: Source) -> tuple[list[dict], dict[str, int]]:
        rows = self._rows(source)
        examples, missing = [], 0
        for title, context, qa in rows:
            answers = align_answers(context, qa["answers"])
            if not answers:
                missing += 1
                continue
            cluster = context if self.options.cluster == "context" else title
            examples.append(
                {
                    "id": str(qa["id"]),
                    "group": title,
                    "cluster": cluster,
                    "context": context,
                    "question": qa["question"],
                    "answers": answers,
                }
            )
        if missing:
            log.warning("%s: %d question(s) skipped: no answer occurs in its context", source.name, missing)
        return examples, ({"answer_not_in_context": missing} if missing else {})

    def _rows(self, source: Source):
        if source.rows is not None:
            out = []
            for i, row in enumerate(source.rows):
                require_columns(source, row, ("id", "context", "question", "answers"))
                if self.options.cluster == "article" and not row.get("title"):
                    raise VocabTransferError(
                        f"{source.name}: row {i} has no `title` ({source.key}): the article is the cluster of the "
                        "bootstrap and the split unit; add the column or set eval.tasks.qa.cluster: context"
                    )
                ans = row["answers"]
                answers = [{"text": t, "answer_start": s} for t, s in zip(ans["text"], ans["answer_start"])]
                out.append((row.get("title") or row["context"], row["context"], {**row, "answers": answers}))
            return out
        assert source.path is not None  # open_source gives a source rows or a path
        try:
            data = json.loads(source.path.read_text(encoding="utf-8"))["data"]
            rows = []
            for a, article in enumerate(data):
                title = article.get("title") or f"article-{a}"
                for para in article["paragraphs"]:
                    for qa in para["qas"]:
                        qa = {
                            "id": qa["id"],
                            "question": qa["question"],
                            "answers": [{"text": x["text"], "answer_start": x["answer_start"]} for x in qa["answers"]],
                        }
                        rows.append((title, para["context"], qa))
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise VocabTransferError(
                f"{source.path}: not a SQuAD-format JSON file ({type(exc).__name__}: {exc}) "
                f"({source.key}); expected data → paragraphs → context, qas"
            ) from exc
        return rows

    # --- features -------------------------------------------------------------------------------

    def _windows(self, examples: list[dict], tokenizer):
        if tokenizer.padding_side != "right":
            raise VocabTransferError(f"{tokenizer.name_or_path}: QA preprocessing needs right padding")
        return tokenizer(
            [e["question"].lstrip() for e in examples],
            [e["context"] for e in examples],
            truncation="only_second",
            max_length=self.options.max_length,
            stride=self.options.doc_stride,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
        )

    @staticmethod
    def _model_inputs(enc, i: int) -> dict:
        return {k: enc[k][i] for k in enc.keys() if k not in ("offset_mapping", "overflow_to_sample_mapping")}

    def features(self, examples: list[dict], tokenizer, labels=None) -> list[dict]:
        enc = self._windows(examples, tokenizer)
        out = []
        for i, offsets in enumerate(enc["offset_mapping"]):
            ex = examples[enc["overflow_to_sample_mapping"][i]]
            ans = ex["answers"][0]
            start_char, end_char = ans["answer_start"], ans["answer_start"] + len(ans["text"])
            seq = enc.sequence_ids(i)
            ctx_start = seq.index(1)
            ctx_end = len(seq) - 1 - seq[::-1].index(1)
            start = end = 0  # [CLS]: the answer is not in this window
            if offsets[ctx_start][0] <= start_char and offsets[ctx_end][1] >= end_char:
                start = ctx_start
                while start <= ctx_end and offsets[start][0] <= start_char:
                    start += 1
                start -= 1
                end = ctx_end
                while end >= ctx_start and offsets[end][1] >= end_char:
                    end -= 1
                end += 1
            out.append({**self._model_inputs(enc, i), "start_positions": start, "end_positions": end})
        return out

    def floor(self, splits) -> dict:
        """The sliding-window span (`sliding_window`), its length the training answers' median."""
        length = typical_answer_words(splits.train)
        predictions = [sliding_window(ex["context"], ex["question"], length) for ex in splits.test]
        f1 = [score(p, [a["text"] for a in ex["answers"]])[1] for p, ex in zip(predictions, splits.test)]
        return {
            "name": f"sliding window ({length}-word span)",
            "value": sum(f1) / len(f1),
            "examples": {"ids": [ex["id"] for ex in splits.test], "score": f1, "prediction": predictions},
        }

    def evaluate(self, trainer, examples: list[dict], tokenizer, labels=None) -> Evaluation:
        enc = self._windows(examples, tokenizer)
        feats = [self._model_inputs(enc, i) for i in range(len(enc["input_ids"]))]
        start_logits, end_logits = trainer.predict(feats).predictions[:2]
        n_best, max_len = self.options.n_best, self.options.max_answer_length
        best: dict[int, tuple[float, str]] = {}
        for i in range(len(feats)):
            e = enc["overflow_to_sample_mapping"][i]
            seq, offsets = enc.sequence_ids(i), enc["offset_mapping"][i]
            n = len(seq)
            s_log, e_log = start_logits[i][:n], end_logits[i][:n]
            for s in np.argsort(s_log)[::-1][:n_best]:
                for t in np.argsort(e_log)[::-1][:n_best]:
                    if seq[s] != 1 or seq[t] != 1 or t < s or t - s + 1 > max_len:
                        continue
                    value = float(s_log[s] + e_log[t])
                    if e not in best or value > best[e][0]:
                        best[e] = (value, examples[e]["context"][offsets[s][0] : offsets[t][1]])
        predictions = [best.get(i, (0.0, ""))[1] for i in range(len(examples))]
        scores = [score(p, [a["text"] for a in ex["answers"]]) for p, ex in zip(predictions, examples)]
        n = len(scores)
        return Evaluation(
            metrics={"exact_match": sum(s[0] for s in scores) / n, "f1": sum(s[1] for s in scores) / n},
            examples={
                "ids": [ex["id"] for ex in examples],
                "score": [s[1] for s in scores],
                "exact_match": [s[0] for s in scores],
                "prediction": predictions,
            },
        )
