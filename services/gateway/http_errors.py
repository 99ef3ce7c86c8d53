"""The gateway's errors as HTTP responses in OpenAI's shape: the one place kinds get statuses."""

from __future__ import annotations

import logging
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse

from services.gateway import errors as e

log = logging.getLogger(__name__)

_STATUS: list[tuple[type[e.ApiError], int]] = [
    (e.InvalidRequest, 400),
    (e.Refused, 400),
    (e.Unauthenticated, 401),
    (e.PermissionDenied, 403),
    (e.NotFound, 404),
    (e.Conflict, 409),
    (e.TooLarge, 413),
    (e.Overloaded, 429),
    (e.StorageFull, 507),
    (e.NotImplementedHere, 501),
    (e.BadGateway, 502),
    (e.Unavailable, 503),
    (e.Timeout, 504),
]


def status_of(error: e.ApiError) -> int:
    for kind, status in _STATUS:
        if isinstance(error, kind):
            return status
    return 500


def error_type(status: int) -> str:
    """OpenAI's error `type` for a status."""
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


def retry_advice(status: int) -> dict[str, str]:
    """`x-should-retry: false` where sending the same request again cannot help (OpenAI's SDKs
    otherwise retry 408, 409, 429 and every 5xx): a client's mistake, a feature not set up."""
    if status == 501 or (400 <= status < 500 and status not in (408, 409, 429)):
        return {"x-should-retry": "false"}
    return {}


def body(status: int, message: str, param: str | None, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type(status), "param": param, "code": code}}


def response(error: e.ApiError, headers: dict[str, str] | None = None) -> JSONResponse:
    status = status_of(error)
    headers = {**retry_advice(status), **(headers or {})}
    if error.retry_after is not None:
        headers["Retry-After"] = str(error.retry_after)
    if isinstance(error, e.Unauthenticated):
        headers["WWW-Authenticate"] = "Bearer"
    return JSONResponse(
        body(status, error.message, error.param, error.code), status_code=status, headers=headers
    )


async def handle_api_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, e.ApiError)
    return response(exc)


async def handle_http_exception(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    message = exc.detail if isinstance(exc.detail, str) else "request failed"
    # Starlette's own refusals, e.g. a malformed multipart body.
    code = "request_too_large" if exc.status_code == 413 else "invalid_request"
    if exc.status_code == 404:
        message, code = f"no route for {request.method} {request.url.path}", "unknown_route"
    elif exc.status_code == 405:
        message = f"method {request.method} is not allowed on {request.url.path}"
        code = "method_not_allowed"
    return JSONResponse(
        body(exc.status_code, message, None, code),
        status_code=exc.status_code,
        headers={**retry_advice(exc.status_code), **(exc.headers or {})},
    )


async def handle_unicode(request: Request, exc: Exception) -> JSONResponse:
    # Only client text can hold a lone surrogate; the routes name the field where they can.
    message = "the request holds text that is not valid Unicode (a lone surrogate)"
    return JSONResponse(
        body(400, message, None, "invalid_value"), status_code=400, headers=retry_advice(400)
    )


async def handle_unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return JSONResponse(body(500, "internal server error", None, "server_error"), status_code=500)


EXCEPTION_HANDLERS = {
    e.ApiError: handle_api_error,
    HTTPException: handle_http_exception,
    UnicodeEncodeError: handle_unicode,
    Exception: handle_unexpected,
}
