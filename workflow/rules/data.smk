# Text stages: raw corpus -> target tokenizer -> pre-tokenised corpus.


rule corpus:
    input:
        unpack(stage_input("corpus")),
    output:
        **stage_output("corpus"),
    params:
        leaves=stage_params("corpus"),
    log:
        stage_log("corpus"),
    benchmark:
        stage_benchmark("corpus")
    threads: stage_threads("corpus")
    priority: stage_priority("corpus")
    resources:
        **stage_resources("corpus"),
    shell:
        "vocabtransfer corpus --lang {wildcards.lang} " + STAGE_ARGS


rule tokenizer:
    input:
        unpack(stage_input("tokenizer")),
    output:
        **stage_output("tokenizer"),
    params:
        leaves=stage_params("tokenizer"),
    log:
        stage_log("tokenizer"),
    benchmark:
        stage_benchmark("tokenizer")
    threads: stage_threads("tokenizer")
    priority: stage_priority("tokenizer")
    resources:
        **stage_resources("tokenizer"),
    shell:
        "vocabtransfer tokenizer --lang {wildcards.lang} " + STAGE_ARGS


rule pretokenize:
    input:
        unpack(stage_input("pretokenize")),
    output:
        **stage_output("pretokenize"),
    params:
        leaves=stage_params("pretokenize"),
    log:
        stage_log("pretokenize"),
    benchmark:
        stage_benchmark("pretokenize")
    threads: stage_threads("pretokenize")
    priority: stage_priority("pretokenize")
    resources:
        **stage_resources("pretokenize"),
    shell:
        "vocabtransfer pretokenize --lang {wildcards.lang} " + STAGE_ARGS
