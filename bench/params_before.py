"""The body readers of params.py before every body had its model (requests.py), frozen here
as bench.request_parsing's baseline (the hand-written checks it compares with)."""

from __future__ import annotations

from typing import Any

from services.common.vocabulary import MAX_KEY_CHARS, MAX_METADATA, MAX_METADATA_CHARS
from services.gateway.errors import invalid
from services.gateway.params import check_text


def optional_str(
    body: dict[str, Any], name: str, default: str | None = None, max_chars: int | None = None
) -> str | None:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, str):
        raise invalid(f"'{name}' must be a string", param=name, code="invalid_type")
    return check_text(value, name, max_chars)


def required_str(body: dict[str, Any], name: str, max_chars: int | None = None) -> str:
    value = optional_str(body, name, max_chars=max_chars)
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
    if len(value) > MAX_METADATA:
        raise invalid(f"'{name}' can have at most {MAX_METADATA} keys", param=name)
    for key, item in value.items():
        check_text(key, f"{name} key", MAX_KEY_CHARS)
        if not isinstance(item, str):
            raise invalid(f"'{name}.{key}' must be a string", param=name, code="invalid_type")
        check_text(item, f"{name}.{key}", MAX_METADATA_CHARS)
    return dict(value)
