"""vocabtransfer: move a pretrained language model to a new language.

The library behind the `vocabtransfer` command: one module per pipeline concept
(corpus, tokenizer, pretokenize, auxiliary, overlap, methods, ...), each usable
without Snakemake or DVC.
"""

__version__ = "0.1.0"

from vocabtransfer.errors import VocabTransferError

__all__ = ["VocabTransferError", "__version__"]
