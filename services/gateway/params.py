"""Reading and validating request bodies and query strings; every failure names its param."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request

from services.gateway.errors import invalid


async def json_body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        raise invalid("the request body is empty; send a JSON object")
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise invalid(f"the request body is not valid JSON: {error}") from None
    if not isinstance(body, dict):
        raise invalid("the request body must be a JSON object")
    return body


def optional_str(body: dict[str, Any], name: str, default: str | None = None) -> str | None:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, str):
        raise invalid(f"'{name}' must be a string", param=name, code="invalid_type")
    return value


def required_str(body: dict[str, Any], name: str) -> str:
    value = optional_str(body, name)
    if value is None:
        raise invalid(f"'{name}' is required", param=name, code="missing_required_parameter")
    return value


def optional_int(body: dict[str, Any], name: str, default: int, minimum: int, maximum: int) -> int:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(f"'{name}' must be an integer", param=name, code="invalid_type")
    if not minimum <= value <= maximum:
        raise invalid(
            f"'{name}' must be between {minimum} and {maximum}, got {value}",
            param=name,
            code="invalid_value",
        )
    return value


def optional_number(
    body: dict[str, Any], name: str, default: float, minimum: float, maximum: float
) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise invalid(f"'{name}' must be a number", param=name, code="invalid_type")
    if not minimum <= value <= maximum:
        raise invalid(
            f"'{name}' must be between {minimum} and {maximum}, got {value}",
            param=name,
            code="invalid_value",
        )
    return float(value)


def optional_object(body: dict[str, Any], name: str) -> dict[str, Any] | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise invalid(f"'{name}' must be an object", param=name, code="invalid_type")
    return value


def metadata(body: dict[str, Any], name: str = "metadata") -> dict[str, str]:
    """OpenAI metadata: at most 16 pairs, keys up to 64 chars, string values up to 512."""
    value = optional_object(body, name) or {}
    if len(value) > 16:
        raise invalid(f"'{name}' can have at most 16 keys", param=name)
    for key, item in value.items():
        if len(key) > 64:
            raise invalid(f"'{name}' keys must be at most 64 characters", param=name)
        if not isinstance(item, str) or len(item) > 512:
            raise invalid(f"'{name}' values must be strings of at most 512 characters", param=name)
    return dict(value)


def attributes(body: dict[str, Any], name: str = "attributes") -> dict[str, str | float | bool]:
    """OpenAI attributes: at most 16 keys; values strings (<= 512 chars), numbers or booleans."""
    value = optional_object(body, name) or {}
    if len(value) > 16:
        raise invalid(f"'{name}' can have at most 16 keys", param=name)
    result: dict[str, str | float | bool] = {}
    for key, item in value.items():
        if len(key) > 64:
            raise invalid(f"'{name}' keys must be at most 64 characters", param=name)
        if isinstance(item, str) and len(item) > 512:
            raise invalid(f"'{name}.{key}' is longer than 512 characters", param=name)
        if not isinstance(item, str | int | float | bool):
            raise invalid(
                f"'{name}.{key}' must be a string, number or boolean",
                param=name,
                code="invalid_type",
            )
        result[key] = item
    return result


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
