"""Data stages: corpus, target tokenizer, pre-tokenisation, fastText auxiliary embeddings, vocabulary overlap."""
