"""Continued pretraining: loading and saving models, LM batches, the objectives (losses), the pretrain stage."""
