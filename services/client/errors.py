"""What a client call can fail with; each message says what went wrong and what to do."""

from __future__ import annotations


class ClientError(Exception):
    """A call to ragd failed. `status` is the HTTP status when there was one."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code


class Unreachable(ClientError):
    """The gateway (REST or gRPC ingest) could not be reached."""


class Unauthenticated(ClientError):
    """The gateway wants an API key, or refused the one sent."""


class NotFound(ClientError):
    """No such vector store (or file, or route)."""


class Conflict(ClientError):
    """A name is ambiguous or already taken."""
