"""The one exception type that the CLI turns into a single readable error line."""


def brief(exc: BaseException, limit: int = 200) -> str:
    """`Type: first line of the message` (at most `limit` characters): a library's exception as
    part of a one-line error."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0] if lines else ""
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class VocabTransferError(Exception):
    """Bad input or configuration: the message names the file or key, the cause and the fix.

    The message is always one line: line breaks of an embedded library message are folded."""

    def __init__(self, message: object = "", *args: object) -> None:
        super().__init__(" ".join(str(message).split()) if "\n" in str(message) else message, *args)
