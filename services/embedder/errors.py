"""What can go wrong with the texts sent to the embedder, named for the caller.

Each message is safe to show to clients and says which input is at fault and what to do;
the servicer maps all of them to INVALID_ARGUMENT.
"""

from __future__ import annotations


class EmbedderError(Exception):
    """Base of the embedder's domain errors."""


class EmptyInput(EmbedderError):
    """No texts at all (index None), or an empty string at `index`."""

    def __init__(self, index: int | None = None) -> None:
        if index is None:
            message = "no input texts; send at least one"
        else:
            message = f"input {index} is an empty string; every input needs at least one character"
        super().__init__(message)
        self.index = index


class InputTooLong(EmbedderError):
    """An input has more tokens than the model accepts and truncation was not requested."""

    def __init__(self, index: int, tokens: int, limit: int) -> None:
        super().__init__(
            f"input {index} has {tokens} tokens but the model accepts at most {limit}; "
            "shorten it or allow truncation"
        )
        self.index = index
        self.tokens = tokens
        self.limit = limit


class InvalidInput(EmbedderError):
    """An input that cannot be read as text (for example invalid UTF-8)."""

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(f"input {index} {reason}")
        self.index = index
        self.reason = reason


class ModelLoadError(Exception):
    """The GGUF file cannot be served (missing, unreadable, or not a sentence-embedding model)."""


class UpstreamError(Exception):
    """The embedding upstream failed (remote.py). `transient`: down, slow, 429 or 5xx, worth
    retrying like a dead replica; else it refused for good (a bad key, a wrong width)."""

    def __init__(self, message: str, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient
