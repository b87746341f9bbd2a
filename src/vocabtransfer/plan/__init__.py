"""Planning: what the pipeline knows before any job, without importing the code that computes. The stage table
(each stage's `run` a lazy `"module:function"` reference), every params section's typed dataclass, the job
planners (inputs, rerun keys, which jobs run and why one is skipped), the init methods' catalog and what the
source model allows. It imports the pipeline's contracts below it and nothing of the phases above it: the CLI,
Snakemake and dvc.yaml plan from here, and a job's compute modules import what they need from here."""
