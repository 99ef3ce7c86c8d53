"""OpenAI attribute filters (JSON) checked and turned into the store's Filter message."""

from __future__ import annotations

from typing import Any

from services.common.vocabulary import (
    FILTER_COMPARISONS,
    FILTER_COMPOUNDS,
    MAX_FILTER_DEPTH,
    MAX_KEY_CHARS,
)
from services.gateway.attributes import attribute_value
from services.gateway.errors import invalid
from services.gateway.params import check_text
from services.gateway.requests import attribute_value as checked
from services.pb import store_pb2

COMPARISONS = FILTER_COMPARISONS
COMPOUNDS = FILTER_COMPOUNDS
MAX_DEPTH = MAX_FILTER_DEPTH


def parse_filter(raw: Any, path: str = "filters", depth: int = 0) -> store_pb2.Filter:
    if depth > MAX_DEPTH:
        raise invalid(f"'{path}' nests deeper than {MAX_DEPTH} levels", param="filters")
    if not isinstance(raw, dict):
        raise invalid(f"'{path}' must be an object", param="filters")
    kind = raw.get("type")
    if kind in COMPOUNDS:
        nested = raw.get("filters")
        if not isinstance(nested, list) or not nested:
            raise invalid(f"'{path}.filters' must be a non-empty array", param="filters")
        children = [
            parse_filter(item, f"{path}.filters[{index}]", depth + 1)
            for index, item in enumerate(nested)
        ]
        return store_pb2.Filter(compound=store_pb2.CompoundFilter(op=kind, filters=children))
    if kind not in COMPARISONS:
        raise invalid(
            f"'{path}.type' must be one of {', '.join(COMPARISONS + COMPOUNDS)}, got {kind!r}",
            param="filters",
        )
    key = raw.get("key")
    if not isinstance(key, str) or not key:
        raise invalid(f"'{path}.key' must be a non-empty string", param="filters")
    check_text(key, f"{path}.key", MAX_KEY_CHARS, param="filters")
    value = raw.get("value")
    comparison = store_pb2.Comparison(key=key, op=kind)
    if kind in ("in", "nin"):
        if not isinstance(value, list) or not value:
            raise invalid(f"'{path}.value' must be a non-empty array for '{kind}'", param="filters")
        comparison.values.extend(_scalar(item, path) for item in value)
    else:
        if kind in ("gt", "gte", "lt", "lte") and isinstance(value, bool):
            raise invalid(
                f"'{path}.value' must be a number or string for '{kind}'", param="filters"
            )
        comparison.value.CopyFrom(_scalar(value, path))
    return store_pb2.Filter(comparison=comparison)


def _scalar(value: Any, path: str) -> store_pb2.AttributeValue:
    return attribute_value(checked(value, f"{path}.value", param="filters"))
