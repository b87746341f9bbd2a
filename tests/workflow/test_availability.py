"""A language with only a corpus: which jobs it has and what it skips, decided before any job;
data files as Snakemake inputs and DVC deps; the stages read the config Snakemake sees; checks
that stop a run before any job."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from vocabtransfer.plan import availability
from vocabtransfer.app.plan import preflight
from vocabtransfer.app import dvcgen
from vocabtransfer.app.params import validate_params
from vocabtransfer.plan.params_root import Params
from vocabtransfer.errors import VocabTransferError, brief
from vocabtransfer.plan.stages import STAGES

from conftest import BIN, REPO

MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def corpus_only_root(root: Path, shared: Path, lines: int = 3000) -> Path:
    """A data root with a corpus for `xx` (a slice of the Swahili text), the English source text and
    the English XNLI file, and nothing else for xx: no dictionary, no xx XNLI file."""
    (root / "pretrain_text").mkdir(parents=True)
    (root / "xnli").mkdir()
    with open(shared / "pretrain_text" / "sw.txt", encoding="utf-8") as fh:
        (root / "pretrain_text" / "xx.txt").write_text("".join(next(fh) for _ in range(lines)), encoding="utf-8")
    (root / "pretrain_text" / "en.txt").symlink_to(shared / "pretrain_text" / "en.txt")
    (root / "xnli" / "dev-en.tsv").symlink_to(shared / "xnli" / "dev-en.tsv")
    return root


def xx_params(dictionaries: dict | None = None, **init_eval) -> Params:
    return Params(
        validate_params(
            {
                "languages": ["xx"],
                "source_model": MINILM,
                "corpus": {"sources": {"xx": {"path": "pretrain_text/xx.txt"}}},
                "init": {"methods": ["random", "fvt", "wechsel"], "wechsel": {"dictionaries": dictionaries or {}}},
                "pretrain": {"methods": ["random", "fvt", "wechsel"], "objectives": ["standard"]},
                "init_eval": init_eval,
            }
        )
    )


def test_corpus_only_language_has_every_job_that_needs_nothing_more(shared_data, data_root):
    corpus_only_root(data_root, shared_data, lines=10)
    params = xx_params()
    assert availability.methods(params, "xx") == ["random", "fvt"]
    no_dictionary = "no dictionary: init.wechsel.dictionaries has no entry for xx"
    assert preflight(params) == [
        "skipping source_fasttext (no language can run init wechsel)",
        f"xx: skipping word_fasttext (init wechsel does not run: {no_dictionary})",
        "skipping source_snmf (init.methods has no snmf or <method>+snmf)",
        "skipping hypernet pseed1 (init.methods has no hypernet)",
        f"xx: skipping init wechsel pseed1 ({no_dictionary})",
        f"xx: init_eval without retrieval (no XNLI file: {data_root}/xnli/dev-xx.tsv not found (init_eval.xnli))",
        f"xx: skipping pretrain wechsel standard pseed1 ({no_dictionary})",
        *(
            f"xx: skipping 4 finetune_eval jobs: {task} random-standard-pseed1 1, {task} fvt-standard-pseed1 1, {task} "
            f"wechsel-standard-pseed1 1, … 1 more (no data for 'xx': eval.tasks.{task}.data has no entry 'xx')"
            for task in ("nli", "qa", "ner")
        ),
        *(
            f"xx: skipping floor {task} (no data for 'xx': eval.tasks.{task}.data has no entry 'xx')"
            for task in ("nli", "qa", "ner")
        ),
        f"xx: skipping gradient_scenarios wechsel standard pseed1 ({no_dictionary})",
    ]
    # dvc.yaml: the same plan
    stages = yaml.safe_load(dvcgen.generate(params))["stages"]
    assert set(stages) == {
        "corpus",
        "source_model",
        "tokenizer",
        "pretokenize",
        "fasttext",
        "overlap",
        "source_head",
        "init_random_pseed1",
        "init_fvt_pseed1",
        "init_eval",
        "pretrain_random_standard_pseed1",
        "pretrain_fvt_standard_pseed1",
        "token_frequency_loss",
        "gradient_scenarios_random_standard_pseed1",
        "gradient_scenarios_fvt_standard_pseed1",
        "report",
        "export",
    }
    eval_deps = stages["init_eval"]["do"]["deps"]
    assert "results/${item.lang}/init/fvt/pseed1" in eval_deps and not any("wechsel" in d for d in eval_deps)
    assert stages["init_eval"]["foreach"]["xx"] == {
        "lang": "xx",
        "data_source_text": f"{data_root}/pretrain_text/en.txt",
    }
    # a dictionary that is named but missing: the method cannot run, and the plan refuses it (asked for by name)
    params = xx_params(dictionaries={"xx": "wechsel_dicts/xx.txt"})
    assert availability.method_reason(params, "xx", "wechsel") == (
        f"no dictionary: {data_root}/wechsel_dicts/xx.txt not found (init.wechsel.dictionaries.xx)"
    )
    with pytest.raises(VocabTransferError, match=r"init.wechsel.dictionaries.xx: .* not found, and init.methods"):
        preflight(params)


def test_retrieval_sentences_zero_skips_retrieval(shared_data, data_root):
    corpus_only_root(data_root, shared_data, lines=10)
    (data_root / "xnli" / "dev-xx.tsv").symlink_to(shared_data / "xnli" / "dev-sw.tsv")
    assert availability.retrieval_reason(xx_params(), "xx") is None
    params = xx_params(retrieval_sentences=0)
    assert availability.retrieval_reason(params, "xx") == "init_eval.retrieval_sentences is 0"
    assert "data_xnli" not in STAGES["init_eval"].data_files(params, {"lang": "xx"})
    from vocabtransfer.evaluate.retrieval import read_xnli_premises

    assert read_xnli_premises("xnli/dev-{lang}.tsv", "en", "xx", 0) == ([], [])
    assert len(read_xnli_premises("xnli/dev-{lang}.tsv", "en", "xx", 7)[0]) == 7


def test_a_missing_corpus_file_stops_before_any_job(data_root):
    with pytest.raises(VocabTransferError, match=r"corpus.sources.xx.path: .*pretrain_text/xx.txt not found"):
        preflight(xx_params())


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda tmp: tmp.mkdir() or tmp, r"source_model: '.*' is a directory without config.json, so not a model"),
        (lambda tmp: tmp / "nope", r"source_model: '.*nope' is neither an existing directory nor a hub id"),
        (lambda tmp: "./models/bert", r"source_model: './models/bert' is neither an existing directory nor a hub id"),
    ],
)
def test_a_source_model_that_is_not_a_model_stops_the_cli(tmp_path, capsys, make, match):
    from vocabtransfer.app.cli import main

    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["source_model"] = str(make(tmp_path / "model"))
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(params))
    assert main(["validate", "--params", str(tmp_path / "p.yaml")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and re.search(match, err), err


def test_errors_are_one_line():
    try:
        raise ValueError("first line\n  second line\nthird")
    except ValueError as exc:
        assert brief(exc) == "ValueError: first line"
        assert (
            str(VocabTransferError(f"x.bin: cannot load ({exc})"))
            == "x.bin: cannot load (first line second line third)"
        )


def test_a_tokenizer_load_error_is_one_line(tmp_path):
    from vocabtransfer.model.hub import load_tokenizer

    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").write_text("{not json")
    (tmp_path / "tok" / "tokenizer_config.json").write_text("{}")
    with pytest.raises(VocabTransferError) as info:
        load_tokenizer(tmp_path / "tok")
    assert "\n" not in str(info.value) and "cannot load a tokenizer" in str(info.value)


# --------------------------------------------------------------------------- end to end (Snakemake, DVC)


def run(cmd: list[str], cwd: Path, env: dict, ok: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if ok and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
        )
    return proc


def job_table(out: str) -> dict[str, int]:
    if "Job stats:" not in out:
        return {}
    table = out.split("Job stats:")[1]
    return {
        m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)\s*$", table, re.M) if m.group(1) != "total"
    }


# tiny settings laid over the repository's params.yaml as a *partial* overlay
OVERLAY = {
    "languages": ["xx"],
    "corpus": {"sources": {"xx": {"path": "pretrain_text/xx.txt"}}},
    "tokenizer": {"vocab_size": 600},
    "fasttext": {"dim": 16, "epochs": 1, "min_count": 2, "bucket": 50000},
    "source_head": {"steps": 2, "batch_size": 4, "seq_len": 32, "train_blocks": 8, "eval_lines": 8, "eval_every": 1},
    "init": {"methods": ["random", "fvt", "wechsel"]},
    "init_eval": {"max_lines": 8, "seq_len": 32, "batch_size": 8},
    "pretrain": {
        "methods": ["random", "fvt", "wechsel"],
        "objectives": ["standard"],
        "steps": 2,
        "batch_size": 4,
        "seq_len": 32,
        "warmup_steps": 0,
        "eval_every": 1,
        "eval_lines": 8,
        "log_every": 1,
        "save_every": 2,
    },
    "token_frequency_loss": {"buckets": 3, "max_lines": 8, "seq_len": 32},
    "gradient_scenarios": {"batches": 1, "batch_size": 2, "seq_len": 32},
}
# xx has no task data, so no finetune_eval job; the report says so
XX_JOBS = {
    "corpus": 1,
    "source_model": 1,
    "tokenizer": 1,
    "pretokenize": 1,
    "fasttext": 1,
    "overlap": 1,
    "source_head": 1,
    "init": 2,
    "init_eval": 1,
    "pretrain": 2,
    "token_frequency_loss": 1,
    "gradient_scenarios": 2,
    "report": 1,
    "export": 1,
    "all": 1,
}


@pytest.fixture(scope="module")
def xx_run(tmp_path_factory, shared_data):
    """A checkout-like directory whose params.yaml is the repository's; the run adds the language xx
    with `--configfile overlay.yaml` (partial) and `--config` on top."""
    work = tmp_path_factory.mktemp("xx")
    data = corpus_only_root(work / "data", shared_data)
    shutil.copy(REPO / "Snakefile", work)
    shutil.copytree(REPO / "workflow", work / "workflow", symlinks=False)
    shutil.copytree(REPO / "src", work / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copy(REPO / "params.yaml", work)
    (work / "overlay.yaml").write_text(yaml.safe_dump(OVERLAY))
    env = {
        **os.environ,
        "VOCABTRANSFER_DATA": str(data),
        "PATH": f"{BIN}:{os.environ['PATH']}",
        "HF_HUB_OFFLINE": "1",
        "DVC_NO_ANALYTICS": "1",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    # `all` and the export (a target of its own), named before --configfile and --config, which take every word
    # after them; DVC's stages include the export, so the run builds it for `dvc status` to find nothing to do
    args = ["all", "results/xx/export", "--configfile", "overlay.yaml", "--config", "corpus={max_bytes: 200000}"]
    plan = run([str(BIN / "snakemake"), "-n", *args], work, env)
    done = run([str(BIN / "snakemake"), "--cores", "2", *args], work, env)
    return work, env, args, plan, done


@pytest.mark.slow
def test_corpus_only_language_runs_through_the_report(xx_run):
    import pyarrow.parquet as pq

    work, env, args, plan, done = xx_run
    # the dry run plans every stage that can run and none that cannot, and says why
    assert job_table(plan.stdout) == XX_JOBS, plan.stdout
    assert (
        "xx: skipping init wechsel pseed1 (no dictionary: init.wechsel.dictionaries has no entry for xx)" in plan.stderr
    )
    assert "xx: init_eval without retrieval (no XNLI file:" in plan.stderr
    rows = pq.read_table(work / "results/xx/init_eval.parquet").to_pylist()
    assert [r["method"] for r in rows] == ["source", "random", "fvt", "floor:unigram-target"]
    assert all(r["retrieval_en2xx"] is None for r in rows) and all(r["loss"] > 0 for r in rows)
    # the stages saw the merged config: the overlay's vocabulary and the --config value
    assert json.loads((work / "results/xx/corpus/stats.json").read_text())["max_bytes"] == 200000
    assert json.loads((work / "results/xx/tokenizer_stats.json").read_text())["vocab_size"] <= 600
    assert json.loads((work / "results/xx/init/fvt/pseed1/stats.json").read_text())["target_vocab"] <= 600
    # the report covers xx and says why it has no downstream results
    report = (work / "results/report.md").read_text()
    assert "no data for 'xx'" in report and "eval.tasks.ner.data" in report


@pytest.mark.slow
def test_a_full_alternative_config_is_what_the_stages_read(xx_run, tmp_path):
    work, env, _, _, _ = xx_run
    full = yaml.safe_load((REPO / "params.yaml").read_text())
    full.update(languages=["xx"], seed=9)
    full["corpus"]["sources"] = {"xx": {"path": "pretrain_text/xx.txt"}}
    (work / "full.yaml").write_text(yaml.safe_dump(full))
    before = set((work / ".snakemake/vocabtransfer").glob("params.*.yaml"))
    out = run([str(BIN / "snakemake"), "-n", "-p", "--configfile", "full.yaml"], work, env)
    written = set((work / ".snakemake/vocabtransfer").glob("params.*.yaml")) - before
    assert len(written) == 1
    seen = yaml.safe_load(written.pop().read_text())
    assert seen["seed"] == 9 and seen["languages"] == ["xx"]
    # Snakemake's own config is params.yaml with full.yaml over it: sw's sources stay in both
    assert set(seen["corpus"]["sources"]) == {"sw", "de", "xx"}
    assert '--params "$VOCABTRANSFER_PARAMS"' in out.stdout


@pytest.mark.slow
def test_an_edited_corpus_file_reruns_exactly_its_dependents(xx_run):
    work, env, args, _, _ = xx_run
    # DVC on the config of the run (the merged file is a complete params.yaml)
    # the run's merged config (another test may have written one of another config beside it)
    merged = [
        p
        for p in (work / ".snakemake/vocabtransfer").glob("params.*.yaml")
        if yaml.safe_load(p.read_text())["tokenizer"]["vocab_size"] == 600
    ]
    assert len(merged) == 1
    merged = merged[0]
    assert yaml.safe_load(merged.read_text())["corpus"]["max_bytes"] == 200000
    assert job_table(run([str(BIN / "snakemake"), "-n", *args], work, env).stdout) == {}
    # DVC records the run in a copy (`dvc commit` rewrites the outputs it caches)
    dvc_work = work.parent / "xx-dvc"
    shutil.copytree(work, dvc_work, symlinks=True, ignore=shutil.ignore_patterns(".snakemake"))
    shutil.copy(merged, dvc_work / "params.yaml")
    dvc_env = {**env, "VOCABTRANSFER_DATA": str(dvc_work / "data")}
    run([str(BIN / "vocabtransfer"), "dvc-yaml"], dvc_work, dvc_env)
    for cmd in (["git", "init", "-q"], [str(BIN / "dvc"), "init", "-q"], [str(BIN / "dvc"), "commit", "-f", "-q"]):
        run(cmd, dvc_work, dvc_env)
    assert "up to date" in run([str(BIN / "dvc"), "status"], dvc_work, dvc_env).stdout.lower()

    for root in (work, dvc_work):  # one byte of the corpus file
        corpus = root / "data/pretrain_text/xx.txt"
        corpus.write_bytes(corpus.read_bytes().replace(b"a", b"e", 1))
    status = run([str(BIN / "dvc"), "status"], dvc_work, dvc_env).stdout
    assert set(re.findall(r"^(\S+):\s*$", status, re.M)) == {"corpus@xx"}, status
    assert "data/pretrain_text/xx.txt" in status
    jobs = job_table(run([str(BIN / "snakemake"), "-n", *args], work, env).stdout)
    assert jobs == {k: v for k, v in XX_JOBS.items() if k not in ("source_model", "source_head")}, (
        jobs
    )  # no corpus input


@pytest.mark.slow
def test_bad_params_stop_snakemake_before_any_job(xx_run, tmp_path):
    work, env, _, _, _ = xx_run
    for overlay, message in (
        ({"tokenizer": {"vocab_size": "big"}}, "tokenizer.vocab_size: 'big' is not of type"),
        ({"source_model": str(tmp_path)}, "is a directory without config.json"),
    ):
        (work / "bad.yaml").write_text(yaml.safe_dump(overlay))
        proc = run([str(BIN / "snakemake"), "-n", "--configfile", "bad.yaml"], work, env, ok=False)
        assert proc.returncode != 0 and "Job stats" not in proc.stdout
        lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert len(lines) == 1 and message in lines[0] and "params.yaml + bad.yaml" in lines[0], proc.stderr
