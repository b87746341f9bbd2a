# Auxiliary stages: fastText embeddings of the target tokens and the vocabulary overlap.


rule fasttext:
    input:
        unpack(stage_input("fasttext")),
    output:
        **stage_output("fasttext"),
    params:
        leaves=stage_params("fasttext"),
    log:
        stage_log("fasttext"),
    benchmark:
        stage_benchmark("fasttext")
    # one thread keeps fastText bit-reproducible (fasttext.reproducible)
    threads: 1 if config["fasttext"]["reproducible"] else stage_threads("fasttext")
    priority: stage_priority("fasttext")
    resources:
        **stage_resources("fasttext"),
    shell:
        "vocabtransfer fasttext --lang {wildcards.lang} " + STAGE_ARGS


rule overlap:
    input:
        unpack(stage_input("overlap")),
    output:
        **stage_output("overlap"),
    params:
        leaves=stage_params("overlap"),
    log:
        stage_log("overlap"),
    benchmark:
        stage_benchmark("overlap")
    threads: stage_threads("overlap")
    priority: stage_priority("overlap")
    resources:
        **stage_resources("overlap"),
    shell:
        "vocabtransfer overlap --lang {wildcards.lang} " + STAGE_ARGS
