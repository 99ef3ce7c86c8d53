"""API errors in OpenAI's shape, and the one place gRPC statuses become HTTP statuses."""

from __future__ import annotations

import logging
from typing import Any

import grpc
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse

log = logging.getLogger(__name__)


class ApiError(Exception):
    """An error the client should see: status, message and OpenAI's type/param/code."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        type: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type or _default_type(status)
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


def invalid(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


def not_found(message: str, param: str | None = None) -> ApiError:
    return ApiError(404, message, param=param, code="not_found")


def _default_type(status: int) -> str:
    if status == 401:
        return "authentication_error"
    if status == 403:
        return "permission_error"
    if status == 404:
        return "not_found_error"
    if status == 429:
        return "rate_limit_error"
    if status >= 500:
        return "server_error"
    return "invalid_request_error"


# gRPC status -> (HTTP status, OpenAI code). Client errors pass the service's message through:
# the services write those for users. Server errors get a message of our own.
_GRPC_TO_HTTP: dict[grpc.StatusCode, tuple[int, str | None]] = {
    grpc.StatusCode.INVALID_ARGUMENT: (400, "invalid_value"),
    grpc.StatusCode.FAILED_PRECONDITION: (400, "failed_precondition"),
    grpc.StatusCode.OUT_OF_RANGE: (400, "invalid_value"),
    grpc.StatusCode.NOT_FOUND: (404, "not_found"),
    grpc.StatusCode.ALREADY_EXISTS: (409, "already_exists"),
    grpc.StatusCode.ABORTED: (409, "conflict"),
    grpc.StatusCode.UNAUTHENTICATED: (401, "invalid_api_key"),
    grpc.StatusCode.PERMISSION_DENIED: (403, "permission_denied"),
    grpc.StatusCode.RESOURCE_EXHAUSTED: (429, "rate_limit_exceeded"),
    grpc.StatusCode.UNIMPLEMENTED: (501, "not_implemented"),
    grpc.StatusCode.UNAVAILABLE: (503, "service_unavailable"),
    grpc.StatusCode.DEADLINE_EXCEEDED: (504, "timeout"),
    grpc.StatusCode.CANCELLED: (503, "cancelled"),
}


def from_grpc(error: grpc.aio.AioRpcError, service: str) -> ApiError:
    """Translates a failed gRPC call to `service` ("embedder" or "store") into an ApiError."""
    status, code = _GRPC_TO_HTTP.get(error.code(), (500, "server_error"))
    details = error.details() or ""
    if status < 500:
        headers = {"Retry-After": "1"} if status == 429 else None
        return ApiError(
            status, details or f"the {service} refused the request", code=code, headers=headers
        )
    if status == 503:
        message = f"the {service} service is unavailable; retry shortly"
        return ApiError(503, message, code=code, headers={"Retry-After": "1"})
    if status == 504:
        return ApiError(504, f"the {service} service did not answer in time", code=code)
    if status == 501:
        return ApiError(501, details or f"not implemented by the {service}", code=code)
    log.error("%s call failed: %s %s", service, error.code(), details)
    return ApiError(500, f"internal error in the {service} service", code="server_error")


async def handle_api_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)


async def handle_http_exception(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    message = exc.detail if isinstance(exc.detail, str) else "request failed"
    if exc.status_code == 404:
        message = f"no route for {request.method} {request.url.path}"
    elif exc.status_code == 405:
        message = f"method {request.method} is not allowed on {request.url.path}"
    error = ApiError(exc.status_code, message)
    return JSONResponse(error.body(), status_code=exc.status_code, headers=exc.headers)


async def handle_unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    error = ApiError(500, "internal server error", code="server_error")
    return JSONResponse(error.body(), status_code=500)


EXCEPTION_HANDLERS = {
    ApiError: handle_api_error,
    HTTPException: handle_http_exception,
    Exception: handle_unexpected,
}
