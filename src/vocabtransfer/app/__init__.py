"""The application on top of every phase: running one job, the run's plan (skip lines, preflight), the dvc.yaml
generator and the command line (`vocabtransfer <stage>`), over the stage table of vocabtransfer.plan."""
