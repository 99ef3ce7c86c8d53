"""Reading request bodies (JSON, within limits; their fields are read by each body's model,
requests.py) and validating query strings; every failure names its param."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from services.common import json_text
from services.gateway.errors import TooLarge, invalid

# Bodies of JSON routes, unless a route allows more (embeddings, text uploads): a search or a
# batch of 2000 file ids is a few hundred KiB at most.
MAX_JSON_BYTES = 1 << 20
# Nesting of any JSON body: OpenAI's filters, the deepest structure, nest 8 levels.
MAX_JSON_DEPTH = 32


async def read_body(request: Request, limit: int) -> bytes:
    """The raw body, refused with a 413 as soon as it exceeds `limit` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise body_too_large(limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise body_too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def body_too_large(limit: int) -> TooLarge:
    return TooLarge(
        f"the request body is larger than this route's limit of {limit} bytes",
        code="request_too_large",
    )


def decode_json(text: str | bytes, what: str, *, param: str | None = None) -> Any:
    """`text` as JSON, the one way every request body and JSON form field is read: JSON only
    (no NaN or Infinity), integers of at most json_text.MAX_INT_DIGITS digits, nested at most
    MAX_JSON_DEPTH levels; else a 400 that says so of `what` ("the request body",
    "'attributes'") and where, naming `param` (by default the body's member at fault)."""
    try:
        return json_text.loads(text, max_depth=MAX_JSON_DEPTH)
    except json_text.JsonRefused as refused:
        if param is None and refused.path and isinstance(refused.path[0], str):
            param = refused.path[0]
        raise invalid(f"{what} {refused.problem}", param=param, code=refused.code) from None


async def json_body(
    request: Request, *, limit: int = MAX_JSON_BYTES, required: bool = True
) -> dict[str, Any]:
    """The JSON object body, within `limit` bytes (see decode_json); {} for an empty body
    unless `required`."""
    raw = await read_body(request, limit)
    if not raw.strip():
        if not required:
            return {}
        raise invalid("the request body is empty; send a JSON object", code="missing_body")
    body = decode_json(raw, "the request body")
    if not isinstance(body, dict):
        raise invalid("the request body must be a JSON object", code="invalid_json")
    return body


def check_text(
    value: str, name: str, max_chars: int | None = None, *, param: str | None = None
) -> str:
    """`value` if it is valid Unicode (JSON can carry lone surrogates, which have no UTF-8
    form) and, with `max_chars`, no longer than that. `param` defaults to `name`'s first
    part."""
    param = param or name.split(".")[0].split(" ")[0]
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise invalid(f"'{name}' is not valid Unicode text (lone surrogate)", param=param) from None
    if max_chars is not None and len(value) > max_chars:
        raise invalid(
            f"'{name}' is longer than {max_chars} characters", param=param, code="string_too_long"
        )
    return value


def query_int(request: Request, name: str, default: int, minimum: int, maximum: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise invalid(f"'{name}' must be an integer", param=name, code="invalid_type") from None
    if not minimum <= value <= maximum:
        raise invalid(f"'{name}' must be between {minimum} and {maximum}", param=name)
    return value


def query_choice(request: Request, name: str, default: str, choices: tuple[str, ...]) -> str:
    value = request.query_params.get(name) or default
    if value not in choices:
        raise invalid(f"'{name}' must be one of {', '.join(choices)}", param=name)
    return value


def paging(
    request: Request, *, default: int = 20, maximum: int = 100, before: bool = True
) -> dict[str, Any]:
    """OpenAI's list parameters (`limit`, `order`, `after`, and `before` where the list has
    it) as the store's list requests take them."""
    page: dict[str, Any] = {
        "limit": query_int(request, "limit", default, 1, maximum),
        "order": query_choice(request, "order", "desc", ("asc", "desc")),
        "after": request.query_params.get("after", ""),
    }
    if before:
        page["before"] = request.query_params.get("before", "")
    return page


# Extension request fields whose plain names OpenAI might one day use: each also reads as
# "ragd_" + its name (README: "ragd's extensions"), the plain name kept working.
NAMESPACE = "ragd_"


def extensions(body: dict[str, Any], *names: str) -> dict[str, Any]:
    """The body with each extension sent as ragd_<name> read as <name>; both at once with
    different values is a 400."""
    plain = dict(body)
    for name in names:
        spaced = NAMESPACE + name
        if spaced not in plain:
            continue
        value = plain.pop(spaced)
        if name in plain and plain[name] != value:
            raise invalid(f"'{spaced}' and '{name}' are the same setting: send one", param=spaced)
        plain[name] = value
    return plain
