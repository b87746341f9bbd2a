"""vocabtransfer: move a pretrained language model to a new language.

The library behind the `vocabtransfer` command: one module per pipeline concept
(corpus, tokenizer, pretokenize, auxiliary, overlap, methods, ...), each usable
without Snakemake or DVC.
"""

from vocabtransfer.version import __version__

from vocabtransfer.errors import VocabTransferError

__all__ = ["FOCUS", "VocabTransferError", "__version__"]


def __getattr__(name):
    if name == "FOCUS":  # lazy: `import vocabtransfer` stays light (no torch)
        from vocabtransfer.init.deepfocus import FOCUS  # lazy export: `import vocabtransfer` stays light

        return FOCUS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
