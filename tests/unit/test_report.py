"""The report renders from small hand-made result files that follow the stage contracts: the verdict
first, comparisons with nested intervals recomputed here from the same files, tasks no model
learns (against their floor) greyed, too few clusters or seeds said as such, figures byte-identical
on a second render."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from vocabtransfer import io
from vocabtransfer.evaluate import bpb_floor, stats
from vocabtransfer.evaluate.init_eval import SCHEMA as INIT_EVAL_SCHEMA
from vocabtransfer.evaluate.token_frequency_loss import BLOCKS_SCHEMA, BPB_SCHEMA, SCHEMA as TFL_SCHEMA
from vocabtransfer.pipeline import names
from vocabtransfer.pipeline import paths
from vocabtransfer.pipeline.config import typed_section
from vocabtransfer.report import read
from vocabtransfer.report import build
from vocabtransfer.plan.report_params import ReportParams
from vocabtransfer.plan import report_plans

from helpers import wide_table_rows, wording_faults, filled_params

LANGS = ("sw", "de")
METHODS = ("random", "focus")
OBJECTIVES = ("standard", "selfish")
PSEEDS = (1, 2, 3)
FSEEDS = (1, 2)
N = 60  # test examples per task
BLOCKS = 20  # held-out blocks of the valid loss
PARAMS = {
    "languages": list(LANGS),
    "seed": 42,
    "source_model": "sentence-transformers/all-MiniLM-L6-v2",
    "init": {"methods": list(METHODS)},
    "pretrain": {"steps": 20},
    "report": {"bootstrap_resamples": 2000, "confidence": 0.95, "correction": "holm", "min_clusters": 10},
}
TASKS_OF = {"sw": ("nli", "qa", "ner"), "de": ("nli", "qa")}  # de has no NER data
# examples right per run: focus well above random on qa and ner; nli: every model is the majority class
RIGHT = {"random": 20, "focus": 40, "source": 45}
FLOOR_RIGHT = {"nli": 20, "qa": 10, "ner": 0}  # the floor: the majority class on nli, below every model elsewhere


def _report(params: dict) -> ReportParams:
    """params `report` typed, over the schema's defaults, as the report stage gets it."""
    return typed_section(ReportParams, "report", params["report"])


def write(root: Path, template: str, obj, **wc) -> Path:
    path = root / paths.fill(template, **wc)
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(obj, pa.Table):
        io.write_parquet(obj, path)
    elif isinstance(obj, bytes):
        path.write_bytes(obj)
    else:
        path.write_text(json.dumps(obj))
    return path


def eval_result(task: str, method: str, objective: str | None, pseed: int | None, seed: int) -> dict:
    c = RIGHT[method] + (pseed or 0) - (1 if objective == "selfish" else 0)
    examples, metric = task_examples(task, c), "accuracy" if task == "nli" else "f1"
    model = names.SOURCE if method == names.SOURCE else names.model_name(method, objective, pseed)
    return {
        "task": task,
        "model": model,
        "method": method,
        "objective": objective,
        "pseed": pseed,
        "seed": seed,
        "metric": metric,
        "metrics": {metric: 100 * c / N},
        "n_train": 100,
        "n_test": N,
        "examples": examples,
        "skipped": {},
    }


def task_examples(task: str, c: int) -> dict:
    """Per-example results right on the first c of N test examples, three examples per cluster."""
    ids = [f"{task}-{i}" for i in range(N)]
    if task == "ner":  # one gold entity per sentence, found in the first c
        examples = {"ids": ids, "tp": [1] * c + [0] * (N - c), "n_pred": [1] * c + [0] * (N - c), "n_gold": [1] * N}
    elif task == "qa":
        examples = {"ids": ids, "score": [100.0] * c + [0.0] * (N - c)}
    else:  # nli: everyone predicts the majority class, right on the first 20
        examples = {"ids": ids, "score": [1] * 20 + [0] * (N - 20)}
    return {**examples, "clusters": [f"{task}-c{i // 3}" for i in range(N)]}


def floor_result(task: str) -> dict:
    c = FLOOR_RIGHT[task]
    name = {"nli": "majority class", "qa": "sliding window (2-word span)", "ner": "training lexicon"}[task]
    return {
        "task": task,
        "metric": "accuracy" if task == "nli" else "f1",
        "name": name,
        "value": 100 * c / N,
        "n_train": 100,
        "n_test": N,
        "examples": task_examples(task, c),
    }


def block_losses(method: str, objective: str, pseed: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-block loss sums with 10 tokens a block: focus 1.0 below random, selfish 0.1 above standard."""
    rng = np.random.default_rng(100 * pseed + METHODS.index(method) + 10 * OBJECTIVES.index(objective))
    per_token = 6.0 - (1.0 if method == "focus" else 0.0) + (0.1 if objective == "selfish" else 0.0)
    per_token = per_token + 0.02 * rng.standard_normal(BLOCKS) + 0.01 * pseed
    return 10 * per_token, np.full(BLOCKS, 10)


INIT_LEVEL = {"random": 9.0, "focus": 7.0, "floor": 8.0}  # nats per token right after initialisation


def init_blocks(level: float, salt: int) -> dict:
    """init_eval's per-block columns: BLOCKS blocks of 10 tokens at `level` nats a token, with noise."""
    rng = np.random.default_rng(salt)
    noise = rng.standard_normal(BLOCKS)
    sums = 10 * (level + 0.05 * (noise - noise.mean()))  # exactly `level` over all blocks
    return {
        "loss": float(sums.sum()) / (10 * BLOCKS),
        "block_loss": sums.tolist(),
        "block_tokens": [10] * BLOCKS,
        "n_eval_tokens": 10 * BLOCKS,
    }


def bucket_loss(objective: str, bucket: int) -> float:
    """Selfish: costs the frequent bucket 0 (+0.3), helps the rare bucket 2 (−0.5), bucket 1 level."""
    base = {"init": 9.0, "standard": 3.0 + bucket, "selfish": 3.0 + bucket + {0: 0.3, 1: 0.0, 2: -0.5}[bucket]}
    return base[objective]


LINES = 20  # valid lines scored in bits per byte
# bits per byte of each model before noise: focus below random, pretraining below init, the source lowest
BPB = {
    ("random", "init"): 3.0,
    ("focus", "init"): 2.6,
    ("random", "standard"): 2.2,
    ("focus", "standard"): 1.9,
    ("random", "selfish"): 2.25,
    ("focus", "selfish"): 1.95,
    ("source", "source"): 1.5,
    # the floors (predictors without a model): in sw the target unigram is the best, above the source
    ("floor", "unigram-target"): 2.8,
    ("floor", "unigram-source"): 3.2,
    ("floor", "uniform"): 3.6,
}
# in de the best floor beats the source: the source has nothing to keep there
FLOOR_LEVEL = {"sw": {}, "de": {"unigram-target": 1.3}}


def bpb_lines(method: str, objective: str, pseed: int, level: float | None = None) -> dict[str, list]:
    """Columns of BPB_SCHEMA for one model: per line its bytes, tokens (the source's tokenizer cuts the text
    into more of them) and bits, BPB[model] (or `level`) per byte with noise per line and pretraining seed."""
    rng = np.random.default_rng(1000 * pseed + 10 * list(BPB).index((method, objective)))
    n_bytes = 50 + np.arange(LINES) % 7
    n_tokens = (20 + np.arange(LINES) % 5) if method == "source" else (12 + np.arange(LINES) % 3)
    level = BPB[(method, objective)] if level is None else level
    bits = (level + 0.01 * pseed + 0.05 * rng.standard_normal(LINES)) * n_bytes
    return {
        "method": [method] * LINES,
        "objective": [objective] * LINES,
        "pseed": [pseed] * LINES,
        "line": list(range(LINES)),
        "bits": bits.tolist(),
        "n_bytes": n_bytes.tolist(),
        "n_tokens": n_tokens.tolist(),
        "n_scored": n_tokens.tolist(),
    }


def make_results(root: Path, langs=LANGS, with_evals: bool = True) -> report_plans.Plan:
    write(
        root,
        paths.SOURCE_HEAD_STATS,
        {
            "kind": "masked",
            "model_class": "BertForMaskedLM",
            "skipped": False,
            "steps": 100,
            "text": "pretrain_text/en.txt",
            "loss_before": 10.4,
            "loss_after": 4.2,
        },
    )
    runs = [(m, o, s) for m in METHODS for o in OBJECTIVES for s in PSEEDS]
    plan = report_plans.Plan(
        languages=list(langs),
        pretrain=runs,
        gradients=[(m, o, 1) for m in METHODS for o in OBJECTIVES],
        token_frequency=True,
    )
    for k, lang in enumerate(langs):
        write(root, paths.CORPUS_STATS, {"train_lines": 1000 + k, "train_bytes": 90000, "valid_lines": 50}, lang=lang)
        write(
            root,
            paths.TOKENIZER_STATS,
            {"family": "wordpiece", "style": "bert", "vocab_size_reached": 1999 - k},
            lang=lang,
        )
        write(
            root,
            paths.PRETOK_STATS,
            {"stats": {"valid": {"source": {"fertility": 2.5}, "target": {"fertility": 1.4}}}},
            lang=lang,
        )
        base = {
            "lang": "en",
            "method": "source",
            "kind": "masked",
            "loss": 4.2,
            "perplexity": 66.7,
            "calibrated_loss": 4.1,
            "temperature": 1.1,
            "n_eval_tokens": 100,
            "n_eval_lines": 10,
            "retrieval_en2xx": 0.2,
            "retrieval_xx2en": 0.25,
            "n_sentences": 20,
            "model": "m",
            "seconds": 1.0,
        }
        rows = [base] + [
            {
                **base,
                "lang": lang,
                "method": m,
                "loss": 9.0 - 2 * i,
                "calibrated_loss": 8.0 - i,
                "retrieval_en2xx": 0.05 * (i + 1),
                "retrieval_xx2en": 0.04 * (i + 1),
                **init_blocks(INIT_LEVEL[m], i),
            }
            for i, m in enumerate(METHODS)
        ]
        rows.append(
            {
                **dict.fromkeys(INIT_EVAL_SCHEMA.names),
                "lang": lang,
                "method": "floor:unigram-target",
                "kind": "floor",
                **init_blocks(INIT_LEVEL["floor"], 9),
            }
        )
        write(root, paths.INIT_EVAL, pa.Table.from_pylist(rows, schema=INIT_EVAL_SCHEMA), lang=lang)
        tfl, cells = [], {name: [] for name in BLOCKS_SCHEMA.names}
        for m, o, s in runs:
            run = dict(lang=lang, method=m, objective=o, pseed=s)
            sums, counts = block_losses(m, o, s)
            final = float(sums.sum() / counts.sum())
            start = 9.0 - 2 * METHODS.index(m)
            table = pa.table(
                {
                    "step": pa.array([0, 10, 20], pa.int64()),
                    "tokens_seen": pa.array([0, 1280, 2560], pa.int64()),
                    "train_loss": pa.array([math.nan, 8.0, 7.0], pa.float64()),
                    "valid_loss": pa.array([start, (start + final) / 2, final], pa.float64()),
                    "learning_rate": pa.array([0.0, 1e-4, 5e-5], pa.float64()),
                    "tokens_per_second": pa.array([math.nan, 100.0, 100.0], pa.float64()),
                }
            )
            write(root, paths.PRETRAIN_DIR + "/metrics.parquet", table, **run)
            write(
                root,
                paths.PRETRAIN_DIR + "/valid_blocks.parquet",
                pa.table(
                    {"block": pa.array(range(BLOCKS), pa.int32()), "loss_sum": sums, "n_tokens": counts.astype("int64")}
                ),
                **run,
            )
            write(root, paths.PRETRAIN_DIR + "/stats.json", {"steps": 20, "final_valid_loss": final}, **run)
            if s == 1:
                write(root, paths.GRADIENT_PLOT, b"\x89PNG\r\n\x1a\n", **run)
            for objective in (["init"] if o == "standard" else []) + [o]:
                for b in range(3):
                    loss = bucket_loss(objective, b) + 0.02 * s
                    tfl.append(
                        {
                            "lang": lang,
                            "method": m,
                            "objective": objective,
                            "pseed": s,
                            "bucket": b,
                            "rank_lo": 10 * b,
                            "rank_hi": 10 * b + 9,
                            "n_types": 10,
                            "n_tokens": 5 * BLOCKS,
                            "loss": loss,
                        }
                    )
                    jitter = 0.01 * np.random.default_rng(b + 10 * s).standard_normal(BLOCKS)
                    for block in range(BLOCKS):
                        for name, value in zip(
                            BLOCKS_SCHEMA.names, (m, objective, s, b, block, 5 * (loss + jitter[block]), 5)
                        ):
                            cells[name].append(value)
        write(root, paths.TOKEN_FREQUENCY_LOSS, pa.Table.from_pylist(tfl, schema=TFL_SCHEMA), lang=lang)
        write(root, paths.TOKEN_FREQUENCY_BLOCKS, pa.table(cells, schema=BLOCKS_SCHEMA), lang=lang)
        lines = {name: [] for name in BPB_SCHEMA.names}
        floors = [("floor", name, 0) for name in bpb_floor.NAMES]
        for m, o, s in [("source", "source", 0)] + floors + [(m, "init", s) for m in METHODS for s in PSEEDS] + runs:
            level = FLOOR_LEVEL[lang].get(o) if m == "floor" else None
            for name, values in bpb_lines(m, o, s, level).items():
                lines[name] += values
        write(root, paths.BITS_PER_BYTE, pa.table(lines, schema=BPB_SCHEMA), lang=lang)
        plan.evals[lang] = []
        plan.skipped[lang] = {} if len(TASKS_OF[lang]) == 3 else {"ner": "no NER data for de in params"}
        if not with_evals:
            continue
        evaluated = [(names.SOURCE, None, None)] + [
            (m, o, s) for m in METHODS for o in ("init",) + OBJECTIVES for s in PSEEDS
        ]
        for task in TASKS_OF[lang]:
            write(root, paths.EVAL_FLOOR, floor_result(task), lang=lang, task=task)
            for m, o, s in evaluated:
                for seed in FSEEDS:
                    result = eval_result(task, m, o, s, seed)
                    write(root, paths.EVAL_RESULT, result, lang=lang, task=task, model=result["model"], seed=str(seed))
                    plan.evals[lang].append({"task": task, "model": result["model"], "seed": seed})
    return plan


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    root = tmp_path_factory.mktemp("study")
    plan = make_results(root)
    build.write_report(filled_params(PARAMS), _report(PARAMS), plan, root)
    return root, plan, (root / paths.REPORT).read_text()


def section(text: str, heading: str) -> str:
    """The text from a heading to the next heading of the same or a higher level."""
    level = heading.split(" ")[0]
    start = ("\n" + text).index("\n" + heading + "\n")
    rest = text[start + len(heading) + 1 :]
    ends = [i for i in (rest.find("\n" + "#" * n + " ") for n in range(1, len(level) + 1)) if i >= 0]
    return rest[: min(ends)] if ends else rest


def cells(text: str, *first: str) -> list[str]:
    """The cells of the first table row whose leading cells are `first`."""
    for line in text.splitlines():
        row = [c.strip() for c in line.split("|")[1:-1]]
        if line.startswith("|") and row[: len(first)] == list(first):
            return row
    raise AssertionError(f"no row {first} in\n{text}")


def comparison_tables(text: str) -> list[tuple[str, str, str, dict[tuple[str, str], dict[str, str]]]]:
    """Every comparison table of the report: (language, title, caption, (comparison, measure) -> column ->
    cell), the parts of a table split for width joined."""
    out = []
    for lang in LANGS:
        body = section(text, f"## {lang}")
        for title in re.findall(r"^#### (.+)$", body, re.M):
            part = section(body, f"#### {title}")
            if "| comparison" not in part:
                continue
            rows: dict[tuple[str, str], dict[str, str]] = {}
            header: list[str] = []
            for line in part.splitlines():
                if not line.startswith("|") or line.startswith("|--"):
                    continue
                row = [c.strip() for c in line.split("|")[1:-1]]
                if row[0] == "comparison":
                    header = row
                    continue
                rows.setdefault((row[0], row[1]), {}).update(zip(header, row))
            caption = next(p for p in part.split("\n\n") if "Adjusted p:" in p)
            out.append((lang, title, caption, rows))
    return out


def headline_rows(text: str) -> tuple[int, list[dict[str, str]]]:
    """The headline family's size as the tables state it, and the cells of every row of its tables (both
    languages)."""
    sizes, rows = set(), []
    for _, _, caption, table in comparison_tables(text):
        said = re.search(r"Holm over the (\d+) comparisons of the headline family", caption)
        if said:
            sizes.add(int(said.group(1)))
            rows += [r for r in table.values() if r["p"] != "–"]
    assert len(sizes) == 1, sizes  # one headline family per report
    return sizes.pop(), rows


def joint_holm(text: str) -> dict[tuple[str, str, str], float]:
    """(language, comparison, measure) -> Holm over every headline row of the report, from the p column."""
    out, raw = {}, []
    for lang, _, caption, table in comparison_tables(text):
        if "of the headline family" in caption:
            for (label, measure), r in table.items():
                if r["p"] != "–":
                    raw.append(((lang, label, measure), float(r["p"].split()[0])))
    for (key, _), adjusted in zip(raw, stats.correct([p for _, p in raw], "holm")):
        out[key] = adjusted
    return out


def recomputed(root: Path, lang: str, task: str, a: str, b: str) -> stats.Difference:
    """The nested interval of b − a straight from the eval JSONs (what the report must show)."""

    def runs(group):
        results = {}
        for path in (root / f"results/{lang}/eval/{task}").glob(f"{group}-pseed*/seed*.json"):
            model = names.parse_model_name(path.parent.name)
            results[(model.pseed, int(path.stem.removeprefix("seed")))] = json.loads(path.read_text())
        return stats.Runs.from_results(task, results)

    return stats.nested_interval(runs(a), runs(b), resamples=2000, seed=42, confidence=0.95)


def test_the_report_opens_with_in_brief_then_the_verdict(rendered):
    root, _, text = rendered
    assert text.startswith("# vocabtransfer: report\n")
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert (
        headings[:2] == ["## In brief", "## Verdict"]
        and "## Set-up" in headings
        and headings[-2:] == ["## What was skipped and why", "## How the intervals are computed"]
    )
    for lang in LANGS:
        body = section(text, f"## {lang}")
        for heading in (
            "### Right after initialisation",
            "### Continued pretraining",
            "### Comparisons",
            "### Loss by token frequency",
            "### Gradient scenarios",
            "### Downstream tasks",
        ):
            assert heading in body, (lang, heading)


def test_verdict_states_wins_costs_and_what_is_not_learned(rendered):
    root, _, text = rendered
    verdict = section(section(text, "## Verdict"), "### sw")
    # every number carries its interval and the seeds behind it
    for number in re.findall(r"[+−-]\d+\.\d+(?! \[)(?![\d,\]])", verdict):
        raise AssertionError(f"a number without its interval: {number}\n{verdict}")
    assert "3 pretraining seeds" in verdict and "3 pretraining × 2 fine-tuning seeds" in verdict
    # valid loss: focus 1.0 below random with both objectives
    valid = next(line for line in verdict.splitlines() if line.startswith("- **Valid loss"))
    assert re.search(r"better: focus − random \(standard\) -1\.0\d\d \[-1\.\d+, -0\.9\d+\]", valid), valid
    assert "worse" not in valid and "no detectable" not in valid
    # nli: nobody is above the majority class
    assert "**nli: not learned at these sizes**" in verdict
    nli = next(line for line in verdict.splitlines() if line.startswith("- **nli: not learned"))
    assert re.search(
        r"points over it, adjusted p [\d.e-]+, 2 fine-tuning seeds, 20 clusters; smallest difference "
        r"this design detects: ±\d+\.\d points over the floor\)",
        nli,
    ), nli
    assert not re.search(r"\*\*nli, method − random", verdict)
    # qa is learned: the bullet names the models above the floor after the correction, each with the margin the
    # downstream table gives it, and counts the others
    learned = next(line for line in verdict.splitlines() if line.startswith("- **qa: learned**"))
    listed = re.findall(r"([\w+-]+) ([+-]\d+\.\d \[[^]]+\]) \((\d[^;)]*seeds?)", learned)
    table = section(section(section(text, "## sw"), "### Downstream tasks"), "#### qa (f1)")
    rows = {r.split("|")[1].strip(): r.split("|")[3].strip() for r in table.splitlines() if r.startswith("| ")}
    assert listed and all(rows[model] == margin for model, margin, _ in listed), (listed, rows)
    assert f"; {len(rows) - 2 - len(listed)} of {len(rows) - 2} models are not." in learned  # less header and floor
    qa = next(line for line in verdict.splitlines() if line.startswith("- **qa, method − random"))
    d = recomputed(root, "sw", "qa", "random-standard", "focus-standard")
    # 20 clusters: better by the qa table's own Holm, not after the headline family's (both languages' claims)
    said = f"focus − random (standard) {d.diff:+.1f} [{d.low:+.1f}, {d.high:+.1f}] (adjusted p "
    assert said in qa and "interval excludes zero, but not after the correction:" in qa, qa
    assert "better" not in qa.split("**")[2]
    adjusted = joint_holm(text)[("sw", "focus − random (standard)", "qa")]
    assert f"{said}{adjusted:.2g})" in qa and adjusted > 0.05
    # selfish: costs 0.1 on the valid loss, costs bucket 0, helps bucket 2, nothing detectable in bucket 1
    focus = next(line for line in verdict.splitlines() if line.startswith("- **selfish − standard, focus**"))
    # a label that rests on the Holm correction carries its adjusted p
    assert re.search(
        r"valid loss \+0\.1\d\d \[\+0\.\d+, \+0\.\d+\] \(costs; adjusted p 0\.0\d+; 3 pretraining seeds\)", focus
    ), focus
    assert re.search(r"lower loss \(helps\) in b2 -0\.500 \[-0\.500, -0\.500\] \(adjusted p [\d.e-]+\)", focus)
    assert re.search(r"\(costs\) in b0 \+0\.300 \[", focus)
    assert re.search(r"better: focus − random \(standard\) -1\.0\d\d \[[^]]+\] \(adjusted p [\d.e-]+\)", valid), valid
    assert "no detectable difference in 1 of 3 frequency buckets" in focus


def test_right_after_initialisation_every_pair_and_the_floor_are_compared_block_by_block(rendered):
    """The init family pairs the methods (later − earlier in init.methods) and each method with the unigram
    floor over the same valid blocks; the verdict words them; one initialisation each: test-set variance only."""
    root, plan, text = rendered
    body = text.split("\n## sw\n", 1)[1]
    family = body.split("#### Right after initialisation: valid loss\n", 1)[1].split("\n#### ", 1)[0]
    rows: dict[str, str] = {}  # label -> its cells, over the parts of a table split for width
    for line in family.splitlines():
        if line.startswith("| ") and " − " in line:
            label = line.strip("|").split("|")[0].strip()
            rows[label] = rows.get(label, "") + line
    assert list(rows) == ["focus − random", "random − unigram floor", "focus − unigram floor"]
    init = read.read_language("sw", plan, root).init_eval
    runs = {
        r["method"]: stats.Runs(
            {(0, 0): (np.asarray(r["block_loss"]), np.asarray(r["block_tokens"], float))}, tuple(range(BLOCKS))
        )
        for r in init
        if r["method"] != "source"
    }
    want = stats.nested_interval(runs["random"], runs["focus"], resamples=2000, seed=42)
    assert f"{want.diff:+.3f} [{want.low:+.3f}, {want.high:+.3f}]" in rows["focus − random"]
    assert "✱ better" in rows["focus − random"] and "✱ worse" in rows["random − unigram floor"]
    assert (
        "✱ better" in rows["focus − unigram floor"]
        and "1 initialisation each (pretraining seed 1's), test-set variance only, 20 clusters"
        in rows["focus − random"]
    )
    assert "†: no seed variance behind the row" in family
    verdict = text.split("\n## sw\n", 1)[0]
    assert (
        "**Right after initialisation, valid loss, later − earlier method of init.methods (negative is better)** "
        "(1 initialisation each (pretraining seed 1's), test-set variance only): better: focus − random -2.0"
        in " ".join(verdict.split())
    )
    assert "**Right after initialisation against the unigram floor (negative: the model uses the context)**" in verdict


def test_comparison_tables_show_the_recomputed_intervals(rendered):
    root, _, text = rendered
    comparisons = section(section(text, "## sw"), "### Comparisons")
    qa = section(comparisons, "#### qa: method − random")
    objectives = ("init", "standard", "selfish")
    diffs = [recomputed(root, "sw", "qa", f"random-{o}", f"focus-{o}") for o in objectives]
    joint = joint_holm(text)
    merged = next(
        rows for lang, title, _, rows in comparison_tables(text) if (lang, title) == ("sw", "qa: method − random")
    )
    for objective, d, own in zip(objectives, diffs, stats.correct([d.p_value for d in diffs], "holm")):
        row = cells(qa, f"focus − random ({objective})", "qa")
        assert row[2] == f"{d.diff:+.1f} [{d.low:+.1f}, {d.high:+.1f}]"
        whole = merged[(f"focus − random ({objective})", "qa")]  # the table is split for width
        assert [whole["verdict"], whole["runs, clusters"]] == [
            "interval excludes zero, but not after the correction",
            "3 pretraining × 2 fine-tuning seeds, 20 clusters",
        ]
        assert float(row[3]) == pytest.approx(d.p_value, rel=0.01)
        # Holm over the headline family (every claim of both languages), not over the table's 3 rows
        assert float(row[4]) == pytest.approx(joint[("sw", f"focus − random ({objective})", "qa")], rel=0.02)
        assert own < 0.05 < float(row[4])
    assert "#### nli: method − random" not in comparisons  # not learned: never compared
    valid = section(comparisons, "#### Valid loss after pretraining: method − random")
    assert cells(valid, "focus − random (selfish)", "valid loss")[5:7] == [
        "✱ better",
        "3 pretraining seeds, 20 clusters",
    ]
    selfish = section(comparisons, "#### Selfish − standard, per method")
    buckets = section(comparisons, "#### Selfish − standard by token frequency (exploratory)")
    assert "b1 (ranks 10–19)" not in selfish  # the buckets: exploratory, a table of their own
    assert cells(buckets, "focus", "b1 (ranks 10–19)")[5].startswith("no detectable difference")
    assert cells(buckets, "random", "b2 (ranks 20–29)")[5].startswith("✱ better")
    # causal models: the objectives compared in bits per byte of the text too
    d = stats.nested_interval(
        bpb_runs(root, "sw", "focus", "standard"),
        bpb_runs(root, "sw", "focus", "selfish"),
        resamples=2000,
        seed=42,
        confidence=0.95,
    )
    assert cells(selfish, "focus", "bits per byte")[2] == f"{d.diff:+.3f} [{d.low:+.3f}, {d.high:+.3f}]"


def test_downstream_tables_grey_what_is_not_learned(rendered):
    _, _, text = rendered
    down = section(section(text, "## sw"), "### Downstream tasks")
    nli = section(down, "#### nli (accuracy) — not learned at these sizes")
    assert "**" not in nli and cells(nli, "focus-standard")[1].startswith("_33.3")
    assert "<span" not in text  # GitHub strips inline styles: de-emphasis in italics
    assert "Floor (majority class, no model: always the most frequent training label): 33.3" in nli
    assert cells(nli, "floor: majority class")[1] == "33.3"
    qa = section(down, "#### qa (f1)")
    assert cells(qa, "source")[1].startswith("**75.0 [")  # the best score in bold
    assert cells(qa, "floor: sliding window (2-word span)")[1] == "16.7"
    assert cells(qa, "random-init")[2].startswith("+20.0 [")  # 21–23 of 60 right (mean 22) against the floor's 10
    assert cells(qa, "focus-standard")[3] == "3 pretraining × 2 fine-tuning seeds"
    de = section(text, "## de")
    assert "#### ner" not in de and "#### qa (f1)" in de


def test_pretrain_and_frequency_tables(rendered):
    _, _, text = rendered
    sw = section(text, "## sw")
    init = section(sw, "### Right after initialisation")
    # beside each loss, how far above the uniform guess ln V it starts (sw's tokenizer reached 1999 tokens)
    assert cells(init, "focus")[1:4] == ["**7.000**", f"{7 - math.log(1999):.3f}", "**7.000**"]
    assert cells(init, "uniform guess (ln V, V = 1,999)")[1:3] == [f"{math.log(1999):.3f}", "0.000"]
    pre = section(sw, "### Continued pretraining")
    assert cells(pre, "method") == ["method", "step 0 (pretraining seed 1)", "standard (end)", "selfish (end)"]
    assert cells(pre, "focus")[1] == "7.000" and cells(pre, "focus")[2].endswith(", 3 seeds)")
    freq = section(sw, "### Loss by token frequency")
    assert cells(freq, "focus", "init")[2:] == ["9.04", "9.04", "9.04"]  # mean over pseeds 1..3 of 9 + 0.02 s
    assert "![focus selfish](sw/gradients/focus/selfish/pseed1.png)" in section(sw, "### Gradient scenarios")


def bpb_runs(root: Path, lang: str, method: str, objective: str) -> stats.Runs:
    """Bits and bytes per valid line of every pretraining seed, straight from bits_per_byte.parquet."""
    df = io.read_parquet(root / paths.fill(paths.BITS_PER_BYTE, lang=lang)).to_pandas()
    sub = df[(df["method"] == method) & (df["objective"] == objective)].sort_values(["pseed", "line"])
    return stats.Runs(
        {(int(p), 0): (g["bits"].to_numpy(float), g["n_bytes"].to_numpy(float)) for p, g in sub.groupby("pseed")},
        tuple(range(LINES)),
    )


def floor_runs(root: Path, lang: str, name: str, keys) -> stats.Runs:
    """A floor's bits per line, as runs with the keys of the model it is compared with."""
    one = bpb_runs(root, lang, "floor", name).parts[(0, 0)]
    return stats.Runs({k: one for k in keys}, tuple(range(LINES)))


def test_bits_per_byte_table_with_intervals_bytes_per_token_and_the_share_kept(rendered):
    root, _, text = rendered
    table = section(section(text, "## sw"), "### Bits per byte")
    assert cells(table, "model") == [
        "model",
        "objective",
        "bits per byte [interval]",
        "runs",
        "bytes per token",
        "share kept",
        "− best floor [interval]",
    ]

    def interval(runs):  # the model's own bits per byte with its interval: B = the model, A = zero
        zero = stats.Runs({k: (np.zeros(LINES), np.ones(LINES)) for k in runs.parts}, runs.clusters)
        return stats.nested_interval(zero, runs, resamples=2000, seed=42, confidence=0.95)

    def mean(runs):
        return np.mean([runs.metric(k) for k in runs.parts])

    source = bpb_runs(root, "sw", "source", "source")
    src = cells(table, "source (its own tokenizer)")
    d = interval(source)
    assert src[2] == f"{d.diff:.3f} [{d.low:.3f}, {d.high:.3f}]" and src[3] == "one model" and src[5:7] == ["–", "–"]
    n_bytes = 50 + np.arange(LINES) % 7
    assert src[4] == f"{n_bytes.sum() / (20 + np.arange(LINES) % 5).sum():.2f}"  # the source's own tokenizer
    # the floors beside the models; the best (lowest) is the target tokenizer's unigram
    floor = bpb_runs(root, "sw", "floor", "unigram-target")
    assert (
        cells(table, "unigram, target tokenizer", "floor")[2] == f"{mean(floor):.3f} [{interval(floor).low:.3f}, "
        f"{interval(floor).high:.3f}]"
    )
    assert float(cells(table, "uniform, target vocabulary", "floor")[2].split()[0]) > mean(floor)
    diffs = []
    for objective in ("init", "standard", "selfish"):
        base, focus = bpb_runs(root, "sw", "random", objective), bpb_runs(root, "sw", "focus", objective)
        row, own = cells(table, "focus", objective), interval(focus)
        assert row[2] == f"{own.diff:.3f} [{own.low:.3f}, {own.high:.3f}]" and row[3] == "3 pretraining seeds"
        assert row[4] == f"{n_bytes.sum() / (12 + np.arange(LINES) % 3).sum():.2f}"
        share = (mean(floor) - mean(focus)) / (mean(floor) - mean(source))  # from the best floor
        assert row[5] == f"{share:.2f}" and 0 < share < 1
        vs_floor = stats.nested_interval(
            floor_runs(root, "sw", "unigram-target", focus.parts), focus, resamples=2000, seed=42, confidence=0.95
        )
        assert row[6] == f"{vs_floor.diff:+.3f} [{vs_floor.low:+.3f}, {vs_floor.high:+.3f}]" and vs_floor.high < 0
        d = stats.nested_interval(base, focus, resamples=2000, seed=42, confidence=0.95)
        vs = cells(section(table, "#### Bits per byte: method − random"), f"focus − random ({objective})")
        assert vs[2] == f"{d.diff:+.3f} [{d.low:+.3f}, {d.high:+.3f}]" and d.high < 0
        assert vs[5:7] == ["✱ better", "3 pretraining seeds, 20 clusters"]
        diffs.append((vs, d))
        random_share = (mean(floor) - mean(base)) / (mean(floor) - mean(source))
        assert cells(table, "random", objective)[5] == f"{random_share:.2f}"
    joint = joint_holm(text)
    for (row, _), objective in zip(diffs, ("init", "standard", "selfish")):
        # Holm over the headline family, not the table's 3 rows
        assert float(row[4]) == pytest.approx(joint[("sw", f"focus − random ({objective})", "bits per byte")], rel=0.02)
    assert "the target tokenizer needs 41 % fewer tokens for the same text" in table
    floor_table = section(table, "#### Bits per byte: model − best floor")
    assert cells(floor_table, "focus (standard) − best floor")[5] == "✱ better"
    # 0.005 against the floor: not after the headline family's correction
    assert cells(floor_table, "focus (init) − best floor")[5] == "interval excludes zero, but not after the correction"
    verdict = section(section(text, "## Verdict"), "### sw")
    line = next(x for x in verdict.splitlines() if x.startswith("- **Bits per byte of the valid text"))
    assert "(3 pretraining seeds): better: focus − random (init) -0.39" in line
    share = next(x for x in verdict.splitlines() if x.startswith("- **Share of the source's advantage kept**"))
    assert "from the best floor (unigram, target tokenizer, 2.8" in share
    assert re.search(
        r"focus \(standard\) 0\.\d\d \(-0\.\d+ \[-0\.\d+, -0\.\d+\] bits per byte against the floor, 3 "
        r"pretraining seeds, adjusted p [\d.e-]+\)",
        share,
    ), share
    assert "focus (init)" not in share  # not detectably better than the floor after the headline correction
    assert "random (standard)" in share and "random (init)" not in share  # random's init is above the floor
    metrics = json.loads((root / paths.REPORT_METRICS).read_text())["sw"]
    assert metrics["bits_per_byte"]["source"] == pytest.approx(mean(source), abs=1e-4) and set(
        metrics["bits_per_byte"]
    ) == {"source", *(f"{m}-{o}" for m in METHODS for o in ("init",) + OBJECTIVES)}
    assert metrics["bits_per_byte_floor"]["unigram-target"] == pytest.approx(mean(floor), abs=1e-4)


def test_a_source_that_does_not_beat_the_best_floor_has_nothing_to_keep(rendered):
    """de: the target unigram (1.3) needs fewer bits per byte than the source (1.5): no share anywhere, and
    the report says why."""
    _, _, text = rendered
    table = section(section(text, "## de"), "### Bits per byte")
    assert all(cells(table, m, o)[5] == "–" for m in METHODS for o in ("init",) + OBJECTIVES)
    assert "does not beat the best floor: it has nothing to keep on this language, so no share is given" in table
    verdict = section(section(text, "## Verdict"), "### de")
    share = next(x for x in verdict.splitlines() if x.startswith("- **Share of the source's advantage kept**"))
    assert "none to keep: the source does not beat the floor on this language, so no share is given" in share
    assert not re.search(r"\d\.\d\d \(", share.split("):", 1)[1])  # no model's share is listed
    # and how the models stand against that floor, counted from the model − best floor table
    floor_rows = [
        line
        for line in section(table, "#### Bits per byte: model − best floor").splitlines()
        if line.startswith("| ") and " − best floor " in line
    ]
    worse = sum("worse" in line.split(" | ")[5] for line in floor_rows)
    assert floor_rows and (
        f"every model ({worse}) is detectably worse than the floor" in share
        if worse == len(floor_rows)
        else f"{worse} of {len(floor_rows)} models are detectably worse than the floor" in share
    ), share


def test_init_table_shows_bits_per_byte_of_causal_models_beside_the_floors(tmp_path):
    """The floors stand beside the models; the share kept is printed once: in the bits-per-byte table when the
    report has one (the init table then has none), else from init_eval (from its best floor)."""
    plan = make_results(tmp_path, langs=("sw",), with_evals=False)
    path = tmp_path / paths.fill(paths.INIT_EVAL, lang="sw")
    rows = io.read_parquet(path).to_pylist()
    for r, (bits, share) in zip(rows, ((1.5, None), (3.0, -1 / 3), (2.5, 1 / 3))):  # source, random, focus
        r.update(
            kind="causal",
            bits_per_byte=bits,
            share_kept=share,
            bytes_per_token=2.4 if bits == 1.5 else 4.08,
            retrieval_en2xx=None,
            retrieval_xx2en=None,
        )  # retrieval: encoders only, so no columns for it
    floor = dict.fromkeys(INIT_EVAL_SCHEMA.names)
    rows += [
        {
            **floor,
            "lang": "sw",
            "method": "floor:unigram-target",
            "kind": "floor",
            "bits_per_byte": 2.75,
            "bytes_per_token": 4.08,
        },
        {
            **floor,
            "lang": "sw",
            "method": "floor:uniform",
            "kind": "floor",
            "bits_per_byte": 2.9,
            "bytes_per_token": 4.08,
        },
    ]
    io.write_parquet(pa.Table.from_pylist(rows, schema=INIT_EVAL_SCHEMA), path)
    build.write_report(filled_params({**PARAMS, "languages": ["sw"]}), _report(PARAMS), plan, tmp_path)
    report = (tmp_path / paths.REPORT).read_text()
    init = section(section(report, "## sw"), "### Right after initialisation")
    # bits per byte and the share: in *Bits per byte* alone, so the report states one source bits per byte
    assert cells(init, "method")[5:] == ["bytes per token"] and cells(init, "focus")[5:] == ["4.08"]
    assert cells(init, "source (own tokenizer)")[5:] == ["2.40"] and "floor: unigram-target" not in init
    assert "Bits per byte and the share kept: in the table *Bits per byte* below" in init
    assert "1.500" not in init
    (tmp_path / paths.fill(paths.BITS_PER_BYTE, lang="sw")).unlink()  # no bits-per-byte table: init_eval's share
    build.write_report(filled_params({**PARAMS, "languages": ["sw"]}), _report(PARAMS), plan, tmp_path)
    init = section(section((tmp_path / paths.REPORT).read_text(), "## sw"), "### Right after initialisation")
    assert cells(init, "method")[5:] == ["bits per byte", "share kept", "bytes per token"]
    assert cells(init, "focus")[5:] == ["**2.500**", "**0.33**", "4.08"] and cells(init, "random")[6] == "-0.33"
    assert "(BPB_floor − BPB_method) / (BPB_floor − BPB_source), from the best floor" in init


def test_masked_models_get_no_bits_per_byte_and_the_report_says_why(tmp_path):
    plan = make_results(tmp_path, langs=("sw",), with_evals=False)
    path = tmp_path / paths.fill(paths.BITS_PER_BYTE, lang="sw")
    df = io.read_parquet(path).to_pandas()
    df["bits"] = None
    io.write_parquet(pa.Table.from_pandas(df, schema=BPB_SCHEMA, preserve_index=False), path)
    build.write_report(filled_params({**PARAMS, "languages": ["sw"]}), _report(PARAMS), plan, tmp_path)
    text = (tmp_path / paths.REPORT).read_text()
    table = section(section(text, "## sw"), "### Bits per byte")
    assert "_No bits per byte: bits per byte needs a causal LM" in table and "keeps its per-token loss" in table
    assert "Bytes per token on the 20 valid lines: 4.08 with the target tokenizer, 2.40 with the source's" in table
    assert "Bits per byte" not in section(text, "## Verdict")
    path.unlink()
    build.write_report(filled_params({**PARAMS, "languages": ["sw"]}), _report(PARAMS), plan, tmp_path)
    text = (tmp_path / paths.REPORT).read_text()
    assert "_No bits-per-byte results (results/sw/bits_per_byte.parquet missing)._" in text


def test_figures_curves_and_metrics_are_reproducible(rendered, tmp_path):
    root, _, text = rendered
    figures = sorted(p.name for p in (root / paths.REPORT_FIGURES).iterdir())
    assert figures == ["de_downstream.png", "de_valid_loss.png", "sw_downstream.png", "sw_valid_loss.png"]
    plan = make_results(tmp_path)
    build.write_report(filled_params(PARAMS), _report(PARAMS), plan, tmp_path)
    for name in figures:
        copied = (tmp_path / paths.REPORT_FIGURES / name).read_bytes()
        assert copied == (root / paths.REPORT_FIGURES / name).read_bytes()
    assert (tmp_path / paths.REPORT).read_text() == text
    lines = (root / report_plans.curves_csv("sw")).read_text().splitlines()
    assert lines[0] == "step,focus-selfish,focus-standard,random-selfish,random-standard"
    metrics = json.loads((root / paths.REPORT_METRICS).read_text())
    assert metrics["sw"]["learned"] == {"nli": False, "qa": True, "ner": True}
    assert metrics["sw"]["floor"] == {
        "nli": pytest.approx(100 / 3, abs=1e-4),
        "qa": pytest.approx(100 / 6, abs=1e-4),
        "ner": 0.0,
    }
    assert metrics["sw"]["eval"]["qa"]["focus-standard"] == pytest.approx(100 * 42 / N)  # mean of 41, 42, 43 right


def test_missing_results_render_as_notes(tmp_path):
    plan = make_results(tmp_path, langs=("sw",), with_evals=False)
    (tmp_path / paths.fill(paths.TOKEN_FREQUENCY_LOSS, lang="sw")).unlink()
    plan.skipped["sw"] = {"nli": "no XNLI data", "qa": "no QA data", "ner": "no NER data"}
    for m, o, s in plan.pretrain:
        run_dir = tmp_path / paths.fill(paths.PRETRAIN_DIR, lang="sw", method=m, objective=o, pseed=s)
        (run_dir / "metrics.parquet").unlink()
    build.write_report(filled_params(PARAMS), _report(PARAMS), plan, tmp_path)
    text = (tmp_path / paths.REPORT).read_text()
    sw = section(text, "## sw")
    assert "_No continued-pretraining results for this language._" in sw
    assert "_No downstream results for this language._" in sw
    assert "* sw / qa: no QA data" in section(text, "## What was skipped and why")


def test_a_study_that_stops_at_initialisation_says_so_and_compares_the_initialisations(tmp_path):
    """No pretraining and no fine-tuning configured (config/hypernet.yaml's shape): the opening and the set-up say so,
    the hypernetwork's training is stated from its stats.json, and the verdict is the init family's."""
    make_results(tmp_path, langs=("sw",), with_evals=False)
    plan = report_plans.Plan(languages=["sw"])
    stats = {
        "steps": 600,
        "tokens": 1_000_000,
        "train_seconds": 1200.0,
        "tokens_per_second": 833.3,
        "peak_memory_bytes": 2**32,
        "parameters": 2_000_000,
        "vocab_sizes": [2000, 9000, 14000],
        "curve": [{"lm_loss": 8.0}] * 20 + [{"lm_loss": 7.0}] * 20,
    }
    write(tmp_path, paths.fill(paths.HYPERNET, pseed=1) + "/stats.json", stats)
    build.write_report(filled_params(PARAMS), _report(PARAMS), plan, tmp_path)
    text = (tmp_path / paths.REPORT).read_text()
    assert "network seeds" not in text  # one network seed: nothing to add
    assert "scored right after initialisation (no pretraining or fine-tuning configured)" in text.split("## Verdict")[0]
    assert "* Continued pretraining: none configured (pretrain.pairs)" in text
    assert "* Downstream evaluation: no fine-tuning configured;" in text
    assert (
        "* Hypernetwork (init method hypernet): trained once on the study's train splits, 600 steps, 1,000,000 "
        "tokens in 20.0 min (833 tokens/s, peak memory 4.00 GiB, 2,000,000 parameters) on 3 sampled tokenizers of "
        "2,000–14,000 tokens; its LM loss under the sampled tokenizers 8.00 → 7.00"
    ) in text
    # three network seeds: seed 1's line, then the seeds' count and spread
    for k, seconds in ((2, 1500.0), (3, 1320.0)):
        write(tmp_path, paths.fill(paths.HYPERNET, pseed=k) + "/stats.json", {**stats, "train_seconds": seconds})
    build.write_report(filled_params(PARAMS), _report(PARAMS), plan, tmp_path)
    text = (tmp_path / paths.REPORT).read_text()
    assert (
        "(mean of the first and the last 20 steps). 3 network seeds, each trained so (the init of pretraining seed k "
        "applies network seed k, so the pretrained runs' spread holds the network's seed variance): 20.0–25.0 min a "
        "seed; the numbers above are network seed 1's"
    ) in text
    bullets = [b for b in section(section(text, "## Verdict"), "### sw").splitlines() if b.startswith("- ")]
    assert [b.split("**")[1] for b in bullets] == [
        "Right after initialisation, valid loss, later − earlier method of init.methods (negative is better)",
        "Right after initialisation against the unigram floor (negative: the model uses the context)",
    ]


def test_inputs_name_every_artefact_of_the_plan():
    plan = report_plans.Plan(
        languages=["sw"],
        pretrain=[("focus+svd", "selfish", 2)],
        gradients=[("focus+svd", "selfish", 1)],
        token_frequency=True,
        evals={"sw": [{"task": "nli", "model": "focus+svd-selfish-pseed2", "seed": 2}]},
        skipped={"sw": {}},
    )
    inputs = set(report_plans.inputs(plan).values())
    assert {
        "results/sw/pretrain/focus+svd/selfish/pseed2",
        "results/sw/token_frequency_blocks.parquet",
        "results/sw/gradients/focus+svd/selfish/pseed1.parquet",
        "results/sw/eval/nli/focus+svd-selfish-pseed2/seed2.json",
    } <= inputs
    assert all(k.isidentifier() for k in report_plans.inputs(plan))


def test_cli_runs_the_stage(tmp_path, monkeypatch):
    from conftest import REPO
    from vocabtransfer.app.cli import main
    from vocabtransfer.plan.stages import STAGES

    plan = make_results(tmp_path)
    monkeypatch.setattr(build, "plan", lambda params, stages: plan)
    monkeypatch.chdir(tmp_path)
    assert main(["report", "--params", str(REPO / "params.yaml")]) == 0
    for name, template in STAGES["report"].outputs.items():
        assert (tmp_path / template).exists(), name
    assert (tmp_path / paths.REPORT).read_text().startswith("# vocabtransfer: report\n\n")


def test_a_difference_whose_interval_alone_excludes_zero_is_said_apart_from_a_win():
    """Holm can reject what the uncorrected interval suggests: such a row is neither better nor plain
    'no detectable difference' but says so, in the tables and in the verdict."""
    from vocabtransfer.evaluate.stats import Difference
    from vocabtransfer.report.tables import NO_DIFFERENCE, NOT_AFTER_CORRECTION, Family, Row, Settings
    from vocabtransfer.report.verdict import family_sentence

    def diff(low, high, adjusted):
        return Difference(
            diff=(low + high) / 2,
            low=low,
            high=high,
            p_value=0.01,
            n_pseeds=3,
            n_fseeds=1,
            n_clusters=40,
            adjusted_p=adjusted,
        )

    kept, lost, flat = (
        Row("a − random", "qa", diff(1.0, 3.0, 0.02)),
        Row("b − random", "qa", diff(0.5, 2.0, 0.09)),
        Row("c − random", "qa", diff(-1.0, 2.0, 0.5)),
    )
    settings = Settings(2000, 0.95, "holm", 0, min_clusters=30)
    assert [r.status(settings) for r in (kept, lost, flat)] == ["better", NOT_AFTER_CORRECTION, NO_DIFFERENCE]
    assert lost.better(settings) is None
    sentence = family_sentence(Family("qa: method − random", "", [kept, lost, flat]), "qa", settings, "qa")
    assert "better: a − random +2.0 [+1.0, +3.0]" in sentence
    assert f"{NOT_AFTER_CORRECTION}: b − random +1.2 [+0.5, +2.0]" in sentence
    assert f"{NO_DIFFERENCE}: c − random +0.5 [-1.0, +2.0]" in sentence


def test_too_few_clusters_or_a_single_run_get_no_word():
    """A difference on fewer clusters than report.min_clusters, or on one pretraining and one fine-tuning
    run, is neither better nor worse, whatever its interval: the verdict says what is missing."""
    from vocabtransfer.evaluate.stats import Difference
    from vocabtransfer.report.tables import Family, Row, Settings
    from vocabtransfer.report.verdict import family_sentence

    settings = Settings(2000, 0.95, "holm", 0, min_clusters=30)
    clear = dict(diff=4.1, low=1.8, high=6.9, p_value=0.001, adjusted_p=0.002)
    few = Row("focus − random (standard)", "qa", Difference(**clear, n_pseeds=3, n_fseeds=1, n_clusters=10))
    single = Row("focus − random (init)", "qa", Difference(**clear, n_pseeds=1, n_fseeds=1, n_clusters=120))
    enough = Row("omp − random (standard)", "qa", Difference(**clear, n_pseeds=3, n_fseeds=1, n_clusters=30))
    assert few.status(settings) == "10 clusters: too few to tell" and few.better(settings) is None
    assert single.status(settings) == "1 seed: too few to tell" and single.better(settings) is None
    assert enough.status(settings) == "better"
    sentence = family_sentence(Family("qa: method − random", "", [few, single, enough]), "qa", settings, "qa")
    assert "better: omp − random (standard) +4.1 [+1.8, +6.9]" in sentence
    assert "10 clusters: too few to tell: focus − random (standard) +4.1 [+1.8, +6.9]" in sentence
    assert "1 seed: too few to tell: focus − random (init) +4.1 [+1.8, +6.9]" in sentence


def test_a_report_on_too_few_clusters_words_no_difference(tmp_path):
    """The same results with report.min_clusters above their 20 test clusters and 20 held-out blocks: no
    row is better or worse, no task is learned or compared, and the verdict says why."""
    plan = make_results(tmp_path, langs=("sw",))
    params = {**PARAMS, "languages": ["sw"], "report": {**PARAMS["report"], "min_clusters": 30}}
    build.write_report(filled_params(params), _report(params), plan, tmp_path)
    text = (tmp_path / paths.REPORT).read_text()
    verdict = section(text, "## Verdict")
    sw = section(verdict, "### sw")
    assert not re.search(r"\b(better|worse):|\((helps|costs)[;)]|lower loss \(helps\) in", sw), sw
    assert "**qa: cannot tell whether it is learned (20 clusters: too few to tell)**: the models above its floor" in sw
    assert "**nli: not learned at these sizes**" in verdict  # nobody is above the majority class at all
    assert "20 clusters: too few to tell: focus − random (standard) -1.0" in verdict
    down = section(section(text, "## sw"), "### Downstream tasks")
    assert "#### qa (f1) — 20 clusters: too few to tell" in down
    assert json.loads((tmp_path / paths.REPORT_METRICS).read_text())["sw"]["learned"]["qa"] is False


def test_every_objective_is_compared_with_standard():
    """A third objective (distill) gets its own family against standard and its own verdict bullets."""
    import pandas as pd

    from vocabtransfer.report import comparisons, tables
    from vocabtransfer.report.verdict import language_verdict

    lang = read.Language(lang="sw")
    for objective, shift in (("standard", 0.0), ("distill", -0.2)):
        for s in PSEEDS:
            sums, counts = block_losses("focus", "standard", s)
            lang.curves[("focus", objective, s)] = pd.DataFrame({"step": [0], "valid_loss": [6.0]})
            lang.blocks[("focus", objective, s)] = pd.DataFrame(
                {"block": range(BLOCKS), "loss_sum": sums + 10 * shift, "n_tokens": counts}
            )
    settings = tables.Settings(2000, 0.95, "holm", 42, min_clusters=10)
    families = comparisons.families(lang, settings, {})
    family = next(f for f in families if f.title == "Distill − standard, per method")
    assert not any(f.title.startswith("Selfish") for f in families)
    row = family.rows[0]
    assert (row.label, row.measure, round(row.diff.diff, 3), row.status(settings)) == (
        "focus",
        "valid loss",
        -0.2,
        "better",
    )
    bullets = language_verdict("sw", families, {}, settings)
    assert any(b.startswith("- **distill − standard, focus**: valid loss -0.200 [") for b in bullets), bullets


def test_only_the_pairs_that_ran_are_compared_with_random():
    """pretrain.pairs: random-standard, focus-standard, focus-distill: focus − random for standard only (no
    random-distill ran, so no "no paired runs" row for it); distill − standard for focus."""
    import pandas as pd

    from vocabtransfer.report import comparisons, tables

    lang = read.Language(lang="sw")
    for method, objective, shift in (
        ("random", "standard", 0.3),
        ("focus", "standard", 0.0),
        ("focus", "distill", -0.2),
    ):
        for s in PSEEDS:
            sums, counts = block_losses("focus", "standard", s)
            lang.curves[(method, objective, s)] = pd.DataFrame({"step": [0], "valid_loss": [6.0]})
            lang.blocks[(method, objective, s)] = pd.DataFrame(
                {"block": range(BLOCKS), "loss_sum": sums + 10 * shift, "n_tokens": counts}
            )
    settings = tables.Settings(2000, 0.95, "holm", 42, min_clusters=10)
    families = {f.title: f for f in comparisons.families(lang, settings, {})}
    vs_random = families["Valid loss after pretraining: method − random"]
    assert [(r.label, round(r.diff.diff, 3)) for r in vs_random.rows] == [("focus − random (standard)", -0.3)]
    assert [r.label for r in families["Distill − standard, per method"].rows] == ["focus"]


def test_a_gguf_source_is_said_to_be_a_quantisation(tmp_path):
    """config/gemma.yaml's source is a Q4_K_M file: the set-up says the weights are a quantisation, and to how
    many bits (the file's name says 4; its embedding matrix, two thirds of the weights, is at 8)."""
    plan = make_results(tmp_path, with_evals=False)
    write(
        tmp_path,
        paths.SOURCE_BASE_STATS,
        {
            "route": "package",
            "resolved": "/cache/gemma-3-270m-q4_k_m.gguf",
            "gguf_sha256": "a5fd3b62230aa5ec" + "0" * 48,
            "gguf_tensor_types": ["F32", "Q4_K", "Q5_0", "Q6_K", "Q8_0"],
            # Gemma 3 270M's Q4_K_M file: the embedding matrix stays at 8 bits
            "gguf_type_weights": {
                "Q8_0": 169246720,
                "Q5_0": 63406080,
                "Q4_K": 23592960,
                "Q6_K": 11796480,
                "F32": 55936,
            },
        },
    )
    build.write_report(filled_params(PARAMS), _report(PARAMS), plan, tmp_path)
    setup = section((tmp_path / paths.REPORT).read_text(), "## Set-up")
    assert (
        "* Source weights: **a quantisation of the released model to 4–8 bits per weight (Q8_0 for 169.2 M, "
        "Q5_0 for 63.4 M, Q4_K for 23.6 M, Q6_K for 11.8 M)**, read from the GGUF file `gemma-3-270m-q4_k_m.gguf` "
        "(sha256 a5fd3b62230a…)"
    ) in " ".join(setup.split())
    (tmp_path / paths.SOURCE_BASE_STATS).write_text(json.dumps({"route": "hub"}))  # a plain checkpoint: nothing said
    build.write_report(filled_params(PARAMS), _report(PARAMS), plan, tmp_path)
    assert "Source weights" not in (tmp_path / paths.REPORT).read_text()


def test_a_method_only_initialised_gets_zero_shot_bits_per_byte_paired_with_every_random_initialisation():
    """`mean` is not pretrained: token_frequency_loss scores its one initialisation (pseed 1); the table
    pairs it with each of random's three initialisations, so its − random row rests on 3 seeds, and the
    difference is the mean over random's seeds, by hand."""
    import pandas as pd

    from vocabtransfer.report.bpb import bits_per_byte_table
    from vocabtransfer.report.bpb_markdown import bits_per_byte_section
    from vocabtransfer.report.tables import Settings

    n = 40
    rng = np.random.default_rng(0)
    n_bytes = 60 + np.arange(n) % 9
    rows = []

    def add(method, objective, pseed, bits_per_byte):
        for line in range(n):
            rows.append(
                {
                    "method": method,
                    "objective": objective,
                    "pseed": pseed,
                    "line": line,
                    "bits": float(bits_per_byte[line] * n_bytes[line]),
                    "n_bytes": int(n_bytes[line]),
                    "n_tokens": 20,
                    "n_scored": 20,
                }
            )

    add("source", "source", 0, 1.0 + 0.1 * rng.random(n))
    random_bpb = {p: 4.0 + 0.2 * p + 0.1 * rng.random(n) for p in (1, 2, 3)}
    for p, v in random_bpb.items():
        add("random", "init", p, v)
    mean_bpb = 2.0 + 0.1 * rng.random(n)
    add("mean", "init", 1, mean_bpb)
    add("floor", "unigram-target", 0, 3.0 + 0.1 * rng.random(n))
    lang = read.Language("sw", bits_per_byte=pd.DataFrame(rows))
    settings = Settings(2000, 0.95, "holm", 0, min_clusters=30)
    table = bits_per_byte_table(lang, settings)
    row = next(r for r in table.rows if r.method == "mean")
    d = row.vs_baseline.diff
    assert d.n_pseeds == 3 and d.n_clusters == n
    by_hand = np.mean(
        [(mean_bpb * n_bytes).sum() / n_bytes.sum() - (v * n_bytes).sum() / n_bytes.sum() for v in random_bpb.values()]
    )
    assert d.diff == pytest.approx(by_hand) and d.high < 0
    # its own score rests on its one initialisation, and says so
    assert row.score.n_pseeds == 1 and row.score.diff == pytest.approx((mean_bpb * n_bytes).sum() / n_bytes.sum())
    assert row.runs == "1 initialisation" and row.vs_baseline.runs_text == "1 initialisation, random: 3 seeds"
    # against the floor (no seeds on either side) its interval holds the test set's variance only: worded, with
    # its p marked as such, and said to rest on one initialisation
    assert row.vs_floor.test_set_only and row.vs_floor.status(settings) == "better"
    text = "\n".join(bits_per_byte_section(lang, table, settings))
    assert cells(text, "mean", "init")[3] == "1 initialisation"
    vs_floor = cells(section(text, "#### Bits per byte: model − best floor"), "mean (init) − best floor")
    assert vs_floor[3].endswith(" †") and vs_floor[5:] == ["✱ better", f"1 initialisation, {n} clusters"]
    assert "†: no seed variance behind the row" in text
    vs_random = cells(section(text, "#### Bits per byte: method − random"), "mean − random (init)")
    assert not vs_random[3].endswith("†") and vs_random[6] == f"1 initialisation, random: 3 seeds, {n} clusters"


def test_job_time_is_the_sum_of_the_benchmarks_seconds(tmp_path):
    """The `s` column of each benchmark table (its last row: the job's last run) summed: jobs of 10 s and 20 s
    (one of them run twice, 5 s then 20 s) are 30 s of job time, whatever the files' times; the set-up says so."""
    for name, seconds in (("a", ["10.0"]), ("b", ["5.0", "20.0"])):
        table = tmp_path / paths.LOGS / "benchmarks" / "stage" / f"{name}.tsv"
        table.parent.mkdir(parents=True, exist_ok=True)
        table.write_text("s\th:m:s\tmax_rss\n" + "".join(f"{x}\t0:00:10\t100\n" for x in seconds), encoding="utf-8")
    (tmp_path / paths.LOGS / "benchmarks" / "stage" / "empty.tsv").write_text("s\th:m:s\n", encoding="utf-8")
    assert build.job_seconds(tmp_path) == pytest.approx(30.0)
    assert build.job_seconds(tmp_path / "none") is None


def test_every_table_line_fits_160_characters_and_a_wider_one_is_caught(rendered):
    """The report's tables (the bucket table has 3 buckets here, the study's 11) stay within 160 characters a
    line: a wide one is split into tables that repeat what a row is; the check itself catches a wider line."""
    from vocabtransfer.report.markdown import md_table

    _, _, text = rendered
    assert not wide_table_rows(text)
    headers = ["method", "objective"] + [f"b{i} (ranks {1000 * i}–{1000 * i + 999})" for i in range(11)]
    rows = [["focus", "standard"] + [f"{i + 0.5:.2f}" for i in range(11)]]
    assert len(md_table(headers, rows).splitlines()[0]) > 160 or "\n\n" in md_table(headers, rows)
    split = md_table(headers, rows, keys=2)
    tables = split.split("\n\n")
    assert len(tables) >= 2 and not wide_table_rows(split)
    assert all(t.splitlines()[2].startswith("| focus    | standard    |") for t in tables)  # each says what a row is
    assert sorted(h.strip() for t in tables for h in t.splitlines()[0].strip("| ").split(" | ")[2:]) == sorted(
        headers[2:]
    )  # every column once
    assert wide_table_rows("| " + "x" * 158 + " |") and not wide_table_rows("| " + "x" * 156 + " |")


def test_seed_counts_agree_in_number():
    """`1 fine-tuning seed`, `3 fine-tuning seeds`; a report says no `seed(s)` and no `1 … seeds`."""
    from vocabtransfer.report.tables import seeds_text

    def d(p, f):
        return stats.Difference(0.1, 0.0, 0.2, 0.05, n_pseeds=p, n_fseeds=f, n_clusters=40)

    assert seeds_text(d(0, 1)) == "1 fine-tuning seed" and seeds_text(d(0, 3)) == "3 fine-tuning seeds"
    assert seeds_text(d(1, 0)) == "1 pretraining seed" and seeds_text(d(3, 0)) == "3 pretraining seeds"
    assert seeds_text(d(3, 2)) == "3 pretraining × 2 fine-tuning seeds" and seeds_text(d(1, 1)) == (
        "1 pretraining × 1 fine-tuning seed"
    )
    assert seeds_text(d(0, 0)) == "one model" and seeds_text(None) == "–"
    assert wording_faults("best: source, 1 fine-tuning seeds, 120 clusters; each with 3 pretraining seed(s)") == [
        "1 fine-tuning seeds",
        "seed(s)",
    ]


def test_the_rendered_report_words_its_counts_and_its_job_time_from_the_numbers(rendered, tmp_path):
    _, plan, text = rendered
    assert not wording_faults(text)
    assert "each with 3 pretraining seeds" in text and "fine-tuning seeds 1, 2 per model" in text


def test_the_smallest_detectable_difference_widens_with_the_table():
    """A half-width of 1.0 at 95 %: 1.0 for a table of one comparison; for four, scaled to the Bonferroni level
    z(1 − 0.05 / 8) / z(0.975) = 2.4977 / 1.9600."""
    from vocabtransfer.report.tables import Settings
    from vocabtransfer.report.verdict import detectable

    settings = Settings(resamples=10, confidence=0.95, correction="holm", seed=1, min_clusters=30)
    d = stats.Difference(diff=0.2, low=-0.8, high=1.2, p_value=0.5, n_pseeds=3, n_fseeds=1, n_clusters=40)
    assert detectable([d], settings, 1) == pytest.approx(1.0)
    assert detectable([d], settings, 4) == pytest.approx(2.4977 / 1.95996, rel=1e-4)


def test_the_end_of_a_pretraining_run_is_its_last_step_when_seeds_evaluate_at_different_steps():
    """Token budgets fall on different steps per seed where padding varies the tokens a step: the "(end)" column
    of the continued-pretraining table is every seed's last evaluation (step 270 here), not the last step of the
    seed read last (the table read 10k-token losses as the end before the steps were sorted)."""
    import pandas as pd

    from vocabtransfer.report.markdown import pretrain_section

    lang = read.Language(lang="sw")
    steps = {1: [0, 4, 50, 270], 2: [0, 5, 52, 270], 3: [0, 4, 55, 270]}
    for s, at in steps.items():
        loss = {0: 16.0, 4: 12.0, 5: 12.0, 50: 8.5, 52: 8.5, 55: 8.6, 270: 7.0 + s / 100}
        lang.curves[("focus", "standard", s)] = pd.DataFrame({"step": at, "valid_loss": [loss[a] for a in at]})
    lines = pretrain_section(lang, "results/report/figures/sw_valid_loss.png")
    row = next(line for line in "\n".join(lines).splitlines() if line.startswith("| focus"))
    assert "7.020 (7.010–7.030, 3 seeds)" in row, row


def test_the_claims_of_both_languages_are_corrected_together_and_the_buckets_apart(rendered):
    """One headline family per report: every table the verdict states claims from, in sw and de, says it is
    Holm-corrected over the same N comparisons, and its adjusted p is Holm over all N raw p-values at once; the
    frequency buckets are exploratory, each table corrected over its own rows and not counted in N."""
    _, _, text = rendered
    n, rows = headline_rows(text)
    assert n == len(rows) > 2 * 10  # both languages' claims, more than any one table
    joint = joint_holm(text)
    titles = set()
    for lang, title, caption, table in comparison_tables(text):
        titles.add(title)
        exploratory = "(exploratory)" in title
        ranking = "its own family, apart from the headline family" in caption  # the recommendation's (own Holm)
        assert ("exploratory: Holm over this table's" in caption) == exploratory, (title, caption)
        assert ranking == (title.startswith("Ranking after pretraining") or title.startswith("The pick against"))
        apart = exploratory or ranking
        assert (f"Holm over the {n} comparisons of the headline family" in caption) != apart, (title, caption)
        present = {k: r for k, r in table.items() if r["p"] != "–"}
        own = stats.correct([float(r["p"].split()[0]) for r in present.values()], "holm")
        for ((label, measure), r), alone in zip(present.items(), own):
            want = alone if apart else joint[(lang, label, measure)]
            assert float(r["adjusted p"]) == pytest.approx(want, rel=0.02), (lang, title, label, measure)
    assert {
        "Right after initialisation: valid loss",
        "Valid loss after pretraining: method − random",
        "qa: method − random",
        "Selfish − standard, per method",
        "Bits per byte: method − random",
        "Bits per byte: model − best floor",
        "Selfish − standard by token frequency (exploratory)",
    } <= titles
    # the verdict and the method section name the family and its size
    verdict = " ".join(section(text, "## Verdict").split())
    assert f"survives the correction (Holm over the {n} comparisons of the headline family: every difference" in verdict
    assert "by token frequency (exploratory: Holm over this table's 6 comparisons, apart from the headline" in verdict
    method = " ".join(section(text, "## How the intervals are computed").split())
    assert "over one family for the whole report, the headline family" in method and "exploratory" in method
