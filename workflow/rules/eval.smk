# Downstream evaluation: one job per language × task × model × seed (finetune_eval);
# which jobs a language has follows from params and its data (finetune_eval.eval_jobs).


rule finetune_eval:
    input:
        unpack(stage_input("finetune_eval")),
    output:
        **stage_output("finetune_eval"),
    params:
        leaves=stage_params("finetune_eval"),
    log:
        stage_log("finetune_eval"),
    benchmark:
        stage_benchmark("finetune_eval")
    threads: stage_threads("finetune_eval")
    priority: stage_priority("finetune_eval")
    resources:
        **stage_resources("finetune_eval"),
    wildcard_constraints:
        task="|".join(config["eval"]["tasks"]),
        model=r"[A-Za-z0-9_+]+(-[A-Za-z0-9_]+)?",
        seed=r"\d+",
    shell:
        "vocabtransfer finetune_eval --lang {wildcards.lang} --task {wildcards.task} "
        "--model '{wildcards.model}' --seed {wildcards.seed} " + STAGE_ARGS
