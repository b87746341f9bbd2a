"""The pipeline's contracts: the `Stage` declaration and a job's `Context`, artefact paths, params and their
schema machinery, names, locks."""
