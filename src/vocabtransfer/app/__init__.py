"""The application on top of every phase: the stage table in DAG order, running one job, the run's plan,
the dvc.yaml generator and the command line (`vocabtransfer <stage>`)."""
