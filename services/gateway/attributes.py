"""Attribute values between OpenAI's JSON and the store's AttributeValue messages."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from services.pb import store_pb2

Attribute = str | float | bool


def attribute_value(value: Attribute) -> store_pb2.AttributeValue:
    if isinstance(value, bool):
        return store_pb2.AttributeValue(bool_value=value)
    if isinstance(value, int | float):
        return store_pb2.AttributeValue(number_value=float(value))
    return store_pb2.AttributeValue(string_value=value)


def attribute_python(value: store_pb2.AttributeValue) -> Attribute | None:
    kind = value.WhichOneof("kind")
    if kind is None:
        return None
    result: Attribute = getattr(value, kind)
    # JSON clients sent 2024, not 2024.0: give integral numbers back as integers.
    if kind == "number_value" and isinstance(result, float) and result.is_integer():
        return int(result)
    return result


def attributes_message(values: Mapping[str, Attribute]) -> dict[str, store_pb2.AttributeValue]:
    return {key: attribute_value(value) for key, value in values.items()}


def attributes_python(values: Mapping[str, store_pb2.AttributeValue]) -> dict[str, Any]:
    return {key: attribute_python(value) for key, value in values.items()}
