# Embedding initialisation: the source model's LM head, WECHSEL's word-level fastText
# models, the shared semi-NMF of the source embeddings, one init job per language ×
# method, and the evaluation right after init.


rule source_head:
    input:
        unpack(stage_input("source_head")),
    output:
        **stage_output("source_head"),
    params:
        leaves=stage_params("source_head"),
    log:
        stage_log("source_head"),
    benchmark:
        stage_benchmark("source_head")
    threads: stage_threads("source_head")
    priority: stage_priority("source_head")
    resources:
        **stage_resources("source_head"),
    shell:
        "vocabtransfer source_head " + STAGE_ARGS


rule source_fasttext:
    input:
        unpack(stage_input("source_fasttext")),
    output:
        **stage_output("source_fasttext"),
    params:
        leaves=stage_params("source_fasttext"),
    log:
        stage_log("source_fasttext"),
    benchmark:
        stage_benchmark("source_fasttext")
    # one thread keeps fastText bit-reproducible (fasttext.reproducible)
    threads: 1 if config["fasttext"]["reproducible"] else stage_threads("source_fasttext")
    priority: stage_priority("source_fasttext")
    resources:
        **stage_resources("source_fasttext"),
    shell:
        "vocabtransfer source_fasttext " + STAGE_ARGS


rule word_fasttext:
    input:
        unpack(stage_input("word_fasttext")),
    output:
        **stage_output("word_fasttext"),
    params:
        leaves=stage_params("word_fasttext"),
    log:
        stage_log("word_fasttext"),
    benchmark:
        stage_benchmark("word_fasttext")
    threads: 1 if config["fasttext"]["reproducible"] else stage_threads("word_fasttext")
    priority: stage_priority("word_fasttext")
    resources:
        **stage_resources("word_fasttext"),
    shell:
        "vocabtransfer word_fasttext --lang {wildcards.lang} " + STAGE_ARGS


rule source_snmf:
    input:
        unpack(stage_input("source_snmf")),
    output:
        **stage_output("source_snmf"),
    params:
        leaves=stage_params("source_snmf"),
    log:
        stage_log("source_snmf"),
    benchmark:
        stage_benchmark("source_snmf")
    threads: stage_threads("source_snmf")
    priority: stage_priority("source_snmf")
    resources:
        **stage_resources("source_snmf"),
    shell:
        "vocabtransfer source_snmf " + STAGE_ARGS


rule init:
    input:
        unpack(stage_input("init")),
    output:
        **stage_output("init"),
    params:
        leaves=stage_params("init"),
    log:
        stage_log("init"),
    benchmark:
        stage_benchmark("init")
    threads: stage_threads("init")
    priority: stage_priority("init")
    resources:
        **stage_resources("init"),
    shell:
        "vocabtransfer init --lang {wildcards.lang} --method '{wildcards.method}' " + STAGE_ARGS


rule init_eval:
    input:
        unpack(stage_input("init_eval")),
    output:
        **stage_output("init_eval"),
    params:
        leaves=stage_params("init_eval"),
    log:
        stage_log("init_eval"),
    benchmark:
        stage_benchmark("init_eval")
    threads: stage_threads("init_eval")
    priority: stage_priority("init_eval")
    resources:
        **stage_resources("init_eval"),
    shell:
        "vocabtransfer init_eval --lang {wildcards.lang} " + STAGE_ARGS
