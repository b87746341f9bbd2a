# The study's report: results/report.md, its figures, the valid-loss curves (DVC plots) and
# metrics.json (DVC metrics). Written by hand: its figures directory is registered with
# `report(...)` so that `snakemake --report` shows them, which the generated rules do not do.


rule report:
    input:
        unpack(stage_input("report")),
    output:
        **{k: v for k, v in stage_output("report").items() if k != "figures"},
        figures=report(
            directory(paths.REPORT_FIGURES),
            patterns=["{name}.png"],
            caption="../report/figures.rst",
            category="Report",
        ),
    params:
        leaves=stage_params("report"),
        args=stage_args("report"),
        launch=stage_launch("report"),
    log:
        stage_log("report"),
    benchmark:
        stage_benchmark("report")
    threads: stage_threads("report")
    priority: stage_priority("report")
    resources:
        **stage_resources("report"),
    shell:
        STAGE_SHELL
