"""The pipeline itself: the stage table, artefact paths, params and their schema, what the data allow, the dvc.yaml
generator, locks."""
