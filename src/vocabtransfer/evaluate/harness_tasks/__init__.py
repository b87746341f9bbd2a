"""vocabtransfer's offline lm-evaluation-harness tasks: YAML task folders for `TaskManager(include_path=...)`."""
