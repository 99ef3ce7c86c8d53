"""Request bodies declared once: one pydantic model per body gives the validation (types,
limits, enums) and the JSON Schema /openapi.json embeds (openapi.py reads it from the
operation's `body`).

The error contract stays OpenAI's and ragd's own: `parse` turns pydantic's first complaint
into an InvalidRequest (a 400, never pydantic's 422) whose `param` names the body's member at
fault (or a field's own `Param`), whose `code` is a stable one (invalid_type,
missing_required_parameter, invalid_value, string_too_long, or the code a validator raises)
and whose message names the field as the client wrote it ("'ranking_options.ranker' must be
one of ..."). Models are strict, as the hand-written checks were: 10.0 is not an integer, "10"
not a number, 1 not a boolean; unknown members are ignored, as OpenAI's are.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails, PydanticCustomError
from pydantic_core.core_schema import ErrorType

from services.gateway.errors import InvalidRequest

Schema = dict[str, Any]


@dataclass(frozen=True)
class Param:
    """Field metadata: the `param` its errors name, where that is not the body's member (the
    hand-written checks named some nested fields by their own name)."""

    name: str


class RequestModel(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)
    # A member sent as null reads as absent (its default), as the hand-written checks read
    # it; a body where null means something (an update's "clear it") says False.
    nulls_are_absent: ClassVar[bool] = True

    @model_validator(mode="before")
    @classmethod
    def _absent_nulls(cls, data: Any) -> Any:
        if cls.nulls_are_absent and isinstance(data, dict) and None in data.values():
            return {key: value for key, value in data.items() if value is not None}
        return data


M = TypeVar("M", bound=RequestModel)


def parse(model: type[M], body: dict[str, Any]) -> M:
    """The body as `model`, or a 400 in OpenAI's shape naming the first field at fault."""
    try:
        return model.model_validate(body)
    except ValidationError as error:
        raise refusal(model, error.errors(include_url=False)[0]) from None


def fail(code: str, message: str) -> PydanticCustomError:
    """A validator's own refusal: `message` as the client reads it (a "{path}" in it names the
    field), with a stable `code`."""
    return PydanticCustomError(code, message)


# pydantic's error types -> ragd's code and message (the field's path and details filled in).
_TYPES = {
    "string_type": "a string",
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "a boolean",
    "list_type": "an array",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
}
_BOUNDS = ("greater_than_equal", "less_than_equal", "greater_than", "less_than")
_PYDANTIC_TYPES = frozenset(typing.get_args(ErrorType))


def refusal(model: type[BaseModel], problem: ErrorDetails) -> InvalidRequest:
    fields = _fields_along(model, problem["loc"])
    path = _path(problem["loc"])
    param = next((p.name for f in reversed(fields) for p in f.metadata if isinstance(p, Param)), "")
    param = param or (str(problem["loc"][0]) if problem["loc"] else "")
    kind, given = problem["type"], problem.get("input")
    if kind == "missing":
        return InvalidRequest(
            f"'{path}' is required", param=param, code="missing_required_parameter"
        )
    if kind in _TYPES:
        return InvalidRequest(f"'{path}' must be {_TYPES[kind]}", param=param, code="invalid_type")
    if kind in _BOUNDS and fields and math.isfinite(sum(bounds := _bounds(fields[-1]))):
        low, high = bounds
        return InvalidRequest(
            f"'{path}' must be between {low:g} and {high:g}, got {given}", param=param
        )
    if kind == "literal_error" and fields:
        choices = typing.get_args(_unwrapped(fields[-1].annotation))
        return InvalidRequest(
            f"'{path}' must be one of {', '.join(map(str, choices))}, got {given!r}",
            param=param,
        )
    if kind == "string_too_long":
        limit = (problem.get("ctx") or {}).get("max_length")
        return InvalidRequest(
            f"'{path}' is longer than {limit} characters", param=param, code="string_too_long"
        )
    message = problem["msg"].replace("{path}", path)
    if kind in _PYDANTIC_TYPES:
        # Any other of pydantic's complaints, in its words after the field's path.
        return InvalidRequest(f"'{path}': {message}", param=param)
    # A validator's own (fail): its message and code.
    return InvalidRequest(message, param=param, code=kind)


def _unwrapped(annotation: Any) -> Any:
    """Literal[...] out of Optional[Literal[...]]."""
    if typing.get_origin(annotation) is Literal:
        return annotation
    for arg in typing.get_args(annotation):
        if typing.get_origin(arg) is Literal:
            return arg
    return annotation


def _bounds(field: FieldInfo) -> tuple[float, float]:
    low, high = -math.inf, math.inf
    for item in field.metadata:
        for name in ("ge", "gt"):
            bound = getattr(item, name, None)
            low = bound if isinstance(bound, int | float) else low
        for name in ("le", "lt"):
            bound = getattr(item, name, None)
            high = bound if isinstance(bound, int | float) else high
    return low, high


def _fields_along(model: type[BaseModel], loc: Sequence[int | str]) -> list[FieldInfo]:
    """The fields an error's location passes through, outermost first."""
    found: list[FieldInfo] = []
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        fields = getattr(current, "model_fields", None)
        if not isinstance(fields, dict) or part not in fields:
            continue
        field = fields[part]
        found.append(field)
        current = _model_in(field.annotation)
    return found


def _model_in(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        inner = _model_in(arg)
        if inner is not None:
            return inner
    return None


def _path(loc: Sequence[int | str]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def _valid_unicode(value: str) -> str:
    # JSON can carry lone surrogates ("\ud800"), which have no UTF-8 form (nor a protobuf one).
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise fail("invalid_value", "'{path}' is not valid Unicode text (lone surrogate)") from None
    return value


def text(max_chars: int | None = None) -> Any:
    """A string type: valid Unicode, and at most `max_chars` characters."""
    return Annotated[str, Field(max_length=max_chars), AfterValidator(_valid_unicode)]


# In a field's WithJsonSchema: a reference to one of schemas.py's components (pydantic
# resolves every "$ref" against its own definitions, so the reference is made afterwards).
COMPONENT = "x-ragd-component"


def component(name: str) -> Schema:
    return {COMPONENT: name}


def json_schema(model: type[BaseModel]) -> tuple[Schema, dict[str, Schema]]:
    """The model's JSON Schema for /openapi.json, and the schemas it refers to (components)."""
    schema = _referenced(model.model_json_schema(ref_template="#/components/schemas/{model}"))
    return schema, schema.pop("$defs", {})


def _referenced(schema: Any) -> Any:
    if isinstance(schema, dict):
        if COMPONENT in schema:
            return {"$ref": f"#/components/schemas/{schema[COMPONENT]}"}
        # pydantic's titles repeat the field names.
        return {key: _referenced(value) for key, value in schema.items() if key != "title"}
    if isinstance(schema, list):
        return [_referenced(item) for item in schema]
    return schema
