"""What can go wrong in the gateway, named for the caller and independent of the transport.

Routes, the ingest pipeline and the backend clients raise these; http_errors.py maps each kind
once to an HTTP status and OpenAI's error JSON, ingest_server.py once to a gRPC status. The
message is written for users and shown as it is.
"""

from __future__ import annotations

from typing import ClassVar


class ApiError(Exception):
    """Base of the errors a client sees: a message, and OpenAI's `param` and `code`."""

    default_code: ClassVar[str | None] = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code or self.default_code
        # Seconds after which a retry may succeed (transient errors).
        self.retry_after = retry_after


class InvalidRequest(ApiError):
    """The request itself is wrong: a missing, malformed or out-of-range value."""

    default_code = "invalid_value"


class InputTooLong(InvalidRequest):
    """Input `index` has `tokens` tokens, more than the model's context of `limit`."""

    default_code = "context_length_exceeded"

    def __init__(self, message: str, *, index: int, tokens: int, limit: int) -> None:
        super().__init__(message, param="input")
        self.index, self.tokens, self.limit = index, tokens, limit


class Refused(ApiError):
    """A valid request the current state does not allow, e.g. a vector store of another
    model."""

    default_code = "failed_precondition"


class ModelMismatch(Refused):
    """The vector store is indexed with another model than the vectors or query sent."""


class Unauthenticated(ApiError):
    default_code = "invalid_api_key"


class PermissionDenied(ApiError):
    default_code = "permission_denied"


class NotFound(ApiError):
    default_code = "not_found"


class Conflict(ApiError):
    """The name is taken or ambiguous, or another operation is in the way."""

    default_code = "conflict"


class TooLarge(ApiError):
    default_code = "file_too_large"


class Overloaded(ApiError):
    """A backend is saturated: retry after `retry_after` seconds."""

    default_code = "rate_limit_exceeded"


class StorageFull(ApiError):
    """The store's disk is full: nothing was written; retry once space is freed."""

    default_code = "storage_full"


class Unavailable(ApiError):
    """A backend cannot be reached (down, restarting, or its database busy)."""

    default_code = "service_unavailable"


class Timeout(ApiError):
    """A backend did not answer within the deadline."""

    default_code = "timeout"


class BadGateway(ApiError):
    """A backend answered something the gateway cannot use."""

    default_code = "bad_gateway"


class NotImplementedHere(ApiError):
    default_code = "not_implemented"


class Internal(ApiError):
    """A bug or an unexpected failure; details go to the log, not to the client."""

    default_code = "server_error"


# Failures that say nothing about the request: the same request may well succeed later. Ingest
# retries them with backoff, bulk ingest ends the stream on them (the client re-sends), and the
# audit log keeps its entries for the next attempt.
TRANSIENT: tuple[type[ApiError], ...] = (Overloaded, Unavailable, Timeout, StorageFull)


# The backend understood the request and said no: retrying the same request cannot help.
REFUSALS: tuple[type[ApiError], ...] = (InvalidRequest, Refused, NotFound, Conflict)


def is_transient(error: BaseException) -> bool:
    return isinstance(error, TRANSIENT)


def invalid(message: str, param: str | None = None, code: str | None = None) -> InvalidRequest:
    return InvalidRequest(message, param=param, code=code)


def not_found(message: str, param: str | None = None) -> NotFound:
    return NotFound(message, param=param)
