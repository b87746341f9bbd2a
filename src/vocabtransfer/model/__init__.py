"""The model foundation every phase uses: loading, swapping and saving models (hub, GGUF, Hugging Face
directories), LM data (masking, batches), each architecture's LM head and the fused objectives through it."""
