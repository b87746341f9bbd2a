"""params.yaml validation: defaults, and one clear error naming the key path."""

from __future__ import annotations

import pytest
import yaml

from vocabtransfer.cli import main
from vocabtransfer.config import load_params, validate_params
from vocabtransfer.errors import VocabTransferError

from conftest import REPO


def minimal(**over):
    p = {"languages": ["sw"], "source_model": "x/y", "corpus": {"sources": {"sw": {"path": "sw.txt"}}}}
    p.update(over)
    return p


def test_repository_params_validate_and_defaults_fill_in():
    params = load_params(REPO / "params.yaml")
    assert params["languages"] == ["sw", "de"]
    assert params["fasttext"] == {"mode": "tokenlevel", "pretrained_path": None, "model": "cbow", "dim": 100,
                                  "epochs": 3, "min_count": 10, "neg": 10, "reproducible": True}


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
        ({"fasttext": {"epoch": 3}}, "fasttext: unknown key(s) 'epoch'; allowed keys: dim, epochs,"),
        ({"tokenizer": {"family": "sentencepiece"}}, "tokenizer.family: 'sentencepiece' is not allowed; allowed values: 'auto', 'wordpiece', 'unigram', 'bpe'"),
        ({"languages": ["Swahili"]}, "languages.0:"),
        ({"corpus": {"sources": {"sw": {"url": "https://x.org/a.txt"}}}}, "corpus.sources.sw: "),
        ({"corpus": {"sources": {}}}, "corpus.sources: no source for language(s) sw"),
    ],
)
def test_bad_params_name_the_key_and_allowed_values(over, expected):
    with pytest.raises(VocabTransferError) as err:
        validate_params(minimal(**over), source="params.yaml")
    assert str(err.value).startswith("params.yaml: ")
    assert expected in str(err.value)
    assert "\n" not in str(err.value)


def test_cli_reports_bad_params_in_one_line_and_fails(tmp_path, capsys):
    bad = tmp_path / "params.yaml"
    bad.write_text(yaml.safe_dump(minimal(fasttext={"dim": -1})))
    assert main(["validate", "--params", str(bad)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "fasttext.dim" in err[0] and "minimum" in err[0]


def test_cli_unknown_language_fails_with_clear_error(tmp_path, capsys):
    p = tmp_path / "params.yaml"
    p.write_text(yaml.safe_dump(minimal()))
    assert main(["corpus", "--lang", "xx", "--params", str(p)]) == 1
    err = capsys.readouterr().err
    assert "unknown language 'xx'" in err and "sw" in err


def test_cli_unknown_stage_is_rejected(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["no-such-stage"])
    assert exc.value.code != 0
    assert "invalid choice: 'no-such-stage'" in capsys.readouterr().err


def test_method_defaults_match_the_schema():
    """The methods' Python-API defaults (options={}) are the schema's: a pipeline run and a library call agree."""
    from vocabtransfer.methods import factorized, focus, ofa, snmf, wechsel

    init = validate_params(minimal())["init"]
    assert ofa.DEFAULTS == init["ofa"]
    assert snmf.DEFAULTS == init["snmf"]
    assert focus.DEFAULTS == init["focus"]
    assert factorized.SVD_DEFAULTS == init["svd"]
    assert factorized.SNMF_DEFAULTS == {k: init["snmf"][k] for k in factorized.SNMF_DEFAULTS}
    assert {k: init["wechsel"][k] for k in wechsel.DEFAULTS if k != "dictionaries"} == {
        k: v for k, v in wechsel.DEFAULTS.items() if k != "dictionaries"}
