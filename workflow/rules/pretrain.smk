# Continued pretraining: one job per language × method × objective (pretrain.methods ×
# pretrain.objectives). Trainer checkpoints live in checkpoints/, outside the declared
# outputs, so a killed job resumes where it stopped.

wildcard_constraints:
    objective="standard|selfish",


rule pretrain:
    input:
        unpack(stage_input("pretrain")),
    output:
        **stage_output("pretrain"),
    params:
        leaves=stage_params("pretrain"),
    log:
        stage_log("pretrain"),
    benchmark:
        stage_benchmark("pretrain")
    threads: stage_threads("pretrain")
    priority: stage_priority("pretrain")
    resources:
        **stage_resources("pretrain"),
    shell:
        "vocabtransfer pretrain --lang {wildcards.lang} --method '{wildcards.method}' "
        "--objective {wildcards.objective} " + STAGE_ARGS
