"""Evaluation: downstream tasks (tasks/), fine-tuning, the loss right after initialisation, statistics, analyses of
pretraining."""
