"""Embedding initialisation: the method registry (methods/), factorisations, the source LM head and semi-NMF, the init
stage."""
