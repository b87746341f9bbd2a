"""The export's rule and card on made-up results (the stage on the shared workflow run: test_workflow.py; GGUF:
test_gguf_export.py): the exported seed of the report's pick is its median run; the model card's metadata is what
huggingface_hub's parser reads."""

from __future__ import annotations

import pandas as pd

from vocabtransfer.report.model_card import CardFacts, render, source_facts
from vocabtransfer.report.read import Language
from vocabtransfer.report.baseline_choice import final_losses
from vocabtransfer.report.export_pick import exported_run, median_seed
from vocabtransfer.report.tables import Settings


def language(finals: dict[tuple[str, str, int], float]) -> Language:
    """A language whose runs end at these valid losses (each curve: 9.0 at step 0, then the final loss)."""
    lang = Language(lang="sw")
    for run, loss in finals.items():
        lang.curves[run] = pd.DataFrame({"step": [0, 10], "valid_loss": [9.0, loss]})
    return lang


def test_the_exported_seed_is_the_median_and_only_baselines_are_named_as_such():
    """The seed rule (the method is the report's pick, tests/unit/test_recommend.py): the median final loss, the lower
    middle one for an even count; where only baselines ran, the lowest mean of them, said in the card."""
    finals = {
        ("focus", "standard", 1): 5.3,
        ("focus", "standard", 2): 5.0,
        ("focus", "standard", 3): 5.1,  # median seed 3
        ("fvt", "standard", 1): 5.0,
        ("fvt", "standard", 2): 5.2,  # an even count: the lower middle, seed 1
    }
    assert median_seed(finals, "focus", "standard") == (3, 5.1)
    assert median_seed(finals, "fvt", "standard") == (1, 5.0)
    assert median_seed(finals, "omp", "standard") is None
    assert final_losses(language(finals)) == finals
    settings = Settings(200, 0.95, "holm", 0, 5)
    only = exported_run(language({("random", "standard", 1): 6.0, ("random", "standard", 2): 5.0}), settings, "random")
    assert only.baselines_only and only.run == ("random", "standard", 2) and "Only baselines" in only.sentence()
    assert exported_run(language({}), settings, "random") is None


def test_the_model_card_carries_the_hubs_metadata_and_the_runs_numbers(tmp_path):
    from huggingface_hub import ModelCard

    source = tmp_path / "source"
    source.mkdir()
    (source / "README.md").write_text("---\nlicense: mit\n---\n# a source\n")
    license_, base = source_facts("owner/model", str(source), None)
    assert (license_, base) == ("mit", "owner/model")
    assert source_facts("package:some_gguf", None, "google/gemma-3-270m")[1] == "google/gemma-3-270m"
    assert source_facts(str(source), str(source), None) == ("mit", None)  # a local directory is no Hub id
    facts = CardFacts(
        lang="sw",
        model_name="focus-standard-pseed1",
        method="focus",
        objective="standard",
        pseed=1,
        source_model="owner/model",
        kind="causal",
        why="Recommended by the rule: …",
        run_stats={"tokens_seen": 123456, "steps": 12, "initial_valid_loss": 9.1, "final_valid_loss": 6.2},
        tokenizer_size=3000,
        license=license_,
        base_model=base,
        bits_per_byte=1.234,
        gguf_note="export.gguf is none",
        rebuild=["snakemake --cores 2 results/sw/export"],
    )
    (tmp_path / "README.md").write_text(render(facts))
    card = ModelCard.load(tmp_path / "README.md")
    assert card.data.base_model == "owner/model" and card.data.license == "mit" and card.data.language == ["sw"]
    assert card.data.library_name == "transformers" and card.data.pipeline_tag == "text-generation"
    assert "init-focus" in card.data.tags and "gguf" not in card.data.tags
    assert "123,456 target tokens" in card.text and "9.100 → 6.200" in card.text and "1.234" in card.text
    assert "not fine-tuned" in card.text and "No GGUF file: export.gguf is none" in card.text
