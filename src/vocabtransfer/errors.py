"""The one exception type that the CLI turns into a single readable error line."""


class VocabTransferError(Exception):
    """Bad input or configuration: the message names the file or key, the cause and the fix."""
