"""Continued pretraining: LM batches, packing, distillation, sharding, the training loop, the pretrain stage."""
