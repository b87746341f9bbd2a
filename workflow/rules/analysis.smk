# Analyses of continued pretraining: held-out loss by token frequency (every pretrained and
# init-only model of a language) and the three-part gradient on each token's embedding (one job
# per pretrained method × objective).


rule token_frequency_loss:
    input:
        unpack(stage_input("token_frequency_loss")),
    output:
        **stage_output("token_frequency_loss"),
    params:
        leaves=stage_params("token_frequency_loss"),
    log:
        stage_log("token_frequency_loss"),
    benchmark:
        stage_benchmark("token_frequency_loss")
    threads: stage_threads("token_frequency_loss")
    priority: stage_priority("token_frequency_loss")
    resources:
        **stage_resources("token_frequency_loss"),
    shell:
        "vocabtransfer token_frequency_loss --lang {wildcards.lang} " + STAGE_ARGS


rule gradient_scenarios:
    input:
        unpack(stage_input("gradient_scenarios")),
    output:
        **stage_output("gradient_scenarios"),
    params:
        leaves=stage_params("gradient_scenarios"),
    log:
        stage_log("gradient_scenarios"),
    benchmark:
        stage_benchmark("gradient_scenarios")
    threads: stage_threads("gradient_scenarios")
    priority: stage_priority("gradient_scenarios")
    resources:
        **stage_resources("gradient_scenarios"),
    shell:
        "vocabtransfer gradient_scenarios --lang {wildcards.lang} --method '{wildcards.method}' "
        "--objective {wildcards.objective} " + STAGE_ARGS
