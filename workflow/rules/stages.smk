# Every ordinary stage's rule, generated from the stage declarations, in topological order
# (vocabtransfer.plan.stages.STAGES, the DAG in one place; docs/stages.md shows it):
# its inputs, outputs, params leaves, log, benchmark, threads, priority and cluster resources all
# come from the table through the helpers in common.smk, and its shell is `vocabtransfer <stage>`
# with one option per wildcard (STAGE_SHELL: `{rule}` and the `args` param, because a `shell:`
# string is formatted when the job runs, after the loop variable has moved on). Rules that really differ are written by hand in their own file
# and named in HAND_WRITTEN.

HAND_WRITTEN = ("report",)  # report.smk: its figures are registered for `snakemake --report`

for _name in (name for name in STAGES if name not in HAND_WRITTEN):

    rule:
        name:
            _name
        input:
            unpack(stage_input(_name)),
        output:
            **stage_output(_name),
        params:
            leaves=stage_params(_name),
            args=stage_args(_name),
            launch=stage_launch(_name),
        log:
            stage_log(_name),
        benchmark:
            stage_benchmark(_name)
        threads: stage_threads(_name)
        priority: stage_priority(_name)
        resources:
            **stage_resources(_name),
        shell:
            STAGE_SHELL
