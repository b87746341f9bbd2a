"""The DAG in one place (vocabtransfer.plan.stages) is in topological order: every stage comes after each
stage whose outputs it reads, the edges derived from the declared input and output templates over the jobs
of params.yaml and of every config/*.yaml laid over it (vocabtransfer.app.dag)."""

from __future__ import annotations

from conftest import REPO
from vocabtransfer.app import dag
from vocabtransfer.plan.stages import STAGES


def test_the_table_is_in_topological_order():
    graph = dag.edges(*dag.shipped_params(REPO))
    assert dag.out_of_order(graph) == []


def test_the_edges_are_read_from_the_templates():
    """A few edges by hand: a file input, a directory input, a partially filled template, and the report,
    which reads every evaluation (and, before this table, was listed before four of them)."""
    graph = dag.edges(*dag.shipped_params(REPO))
    assert {"corpus", "source_model"} <= graph["tokenizer"]
    assert graph["pretrain"] >= {"init", "pretokenize"} and "source_head" in graph["pretrain"]  # distill's teacher
    assert {"finetune_eval", "floor", "token_frequency_loss", "gradient_scenarios", "lm_eval"} <= graph["report"]
    assert graph["corpus"] == set() and graph["source_model"] == set()
    assert not any(graph[name] & {"report"} for name in STAGES)


def test_the_order_check_finds_a_stage_listed_before_what_it_reads():
    graph = {name: set() for name in STAGES}
    graph["tokenizer"] = {"report"}
    assert dag.out_of_order(graph) == ["tokenizer <- report"]


def test_every_artefact_path_names_the_stage_that_writes_it(tmp_path):
    """`stages.producer`: each output of each stage, and a file inside a directory output, maps back to that stage
    and output (what a torn artefact's error names); a path no stage writes maps to nothing. The hint of an error
    naming one: delete it where it is there, run its stage first where it is not."""
    from vocabtransfer.app.producers import producer, rerun_hint
    from vocabtransfer.plan.stages import STAGES
    from vocabtransfer.pipeline import paths

    sample = {
        "lang": "sw",
        "method": "fvt",
        "objective": "standard",
        "pseed": "2",
        "task": "qa",
        "model": "source",
        "seed": "1",
    }
    for stage in STAGES.values():
        for name, template in stage.outputs.items():
            path = paths.fill(template, **{k: v for k, v in sample.items() if "{" + k + "}" in template})
            assert producer(path) == (stage.name, path), (stage.name, name)
            if name in stage.directories:
                assert producer(f"{path}/model/model.safetensors") == (stage.name, path)
    assert producer(tmp_path / "results/sw/corpus/train.parquet", root=tmp_path) == (
        "corpus",
        "results/sw/corpus/train.parquet",
    )
    assert producer("data/pretrain_text/sw.txt") is None and producer("results/sw/unknown.bin") is None
    # an artefact that is there (torn, stale): the output to delete; one that is not there yet: the stage to run
    (tmp_path / "results/sw/overlap").mkdir(parents=True)
    (tmp_path / "results/sw/overlap/overlap.parquet").write_bytes(b"x")
    said = "results/sw/overlap/overlap.parquet: not a readable Parquet file (x); delete it and rerun"
    hint = rerun_hint(said, root=tmp_path)
    assert hint.startswith("results/sw/overlap/overlap.parquet is stage overlap's output: delete it (rm -r ")
    hint = rerun_hint("source model 'results/sw/init/fvt/pseed2/model': no such directory", root=tmp_path)
    assert hint == (
        "results/sw/init/fvt/pseed2 does not exist yet: it is stage init's output, so run that stage first "
        "(`vocabtransfer init --lang sw --method fvt --pseed 2`), or `snakemake --cores 2 results/sw/init/fvt/pseed2`, "
        "which runs it and every stage it needs"
    )
    assert "rm -r" not in rerun_hint("results/source/model: no such directory", root=tmp_path)
    assert rerun_hint("params.yaml: init.methods: 'focsu' is not a method") is None
