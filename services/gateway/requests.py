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
    PlainValidator,
    Tag,
    ValidationError,
    WithJsonSchema,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails, PydanticCustomError
from pydantic_core.core_schema import ErrorType

from services.common.vocabulary import (
    MAX_ATTRIBUTE_CHARS,
    MAX_ATTRIBUTES,
    MAX_KEY_CHARS,
    MAX_METADATA,
    MAX_METADATA_CHARS,
)
from services.gateway.errors import InvalidRequest
from services.gateway.schemas import ATTRIBUTE, Schema


@dataclass(frozen=True)
class Param:
    """Field metadata: the `param` its errors name, where that is not the body's member (the
    hand-written checks named some nested fields by their own name). `whole`: every error
    inside the field names it, even one of a nested field with a Param of its own (a
    response's tools are all "tools")."""

    name: str
    whole: bool = False


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


def parse(model: type[M], body: Any, *, at: str = "") -> M:
    """The body as `model`, or a 400 in OpenAI's shape naming the first field at fault. `at`:
    where `body` sits in a larger one ("files[2].chunking_strategy"), which errors then name
    (the path's start, and the param)."""
    try:
        return model.model_validate(body)
    except ValidationError as error:
        raise refusal(model, error.errors(include_url=False)[0], at) from None


def fail(code: str, message: str, param: str = "") -> PydanticCustomError:
    """A validator's own refusal: `message` as the client reads it (a "{path}" in it names the
    field), with a stable `code`; `param` where the field's own would not do (a check of the
    whole body)."""
    return PydanticCustomError(code, message, {"param": param} if param else None)


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


def refusal(model: type[BaseModel], problem: ErrorDetails, at: str = "") -> InvalidRequest:
    fields, loc = _walk(model, problem["loc"])
    path = _path([at, *loc] if at else loc)
    params = [p for f in fields for p in f.metadata if isinstance(p, Param)]
    param = next((p.name for p in params if p.whole), params[-1].name if params else "")
    kind, given, context = problem["type"], problem.get("input"), problem.get("ctx") or {}
    param = at or context.get("param") or param or (str(loc[0]) if loc else "")
    if kind == "missing":
        return InvalidRequest(
            f"'{path}' is required", param=param, code="missing_required_parameter"
        )
    if kind in _TYPES:
        return InvalidRequest(f"'{path}' must be {_TYPES[kind]}", param=param, code="invalid_type")
    if kind in _BOUNDS and fields and math.isfinite(sum(bounds := _bounds(fields[-1]))):
        low, high = bounds
        return InvalidRequest(
            f"'{path}' must be between {_number(low)} and {_number(high)}, got {given}",
            param=param,
        )
    if kind == "literal_error" and fields:
        choices = typing.get_args(_unwrapped(fields[-1].annotation))
        return InvalidRequest(
            f"'{path}' must be one of {', '.join(map(str, choices))}, got {given!r}",
            param=param,
        )
    if kind == "string_too_long" or (kind == "too_long" and isinstance(given, str)):
        return InvalidRequest(
            f"'{path}' is longer than {context.get('max_length')} characters",
            param=param,
            code="string_too_long",
        )
    if kind == "too_long":
        items = "keys" if context.get("field_type") == "Dictionary" else "items"
        return InvalidRequest(
            f"'{path}' can have at most {context.get('max_length')} {items}", param=param
        )
    if kind == "too_short" and context.get("min_length") == 1:
        return InvalidRequest(f"'{path}' must not be empty", param=param)
    message = problem["msg"].replace("{path}", path)
    if kind in _PYDANTIC_TYPES:
        # Any other of pydantic's complaints, in its words after the field's path.
        return InvalidRequest(f"'{path}': {message}", param=param)
    # A validator's own (fail): its message and code.
    return InvalidRequest(message, param=param, code=kind)


def _number(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


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


def _walk(
    model: type[BaseModel], loc: Sequence[int | str]
) -> tuple[list[FieldInfo], list[int | str]]:
    """The fields an error's location passes through, outermost first, and the location as
    the client wrote it: without the tags pydantic puts in it for a tagged union's member."""
    found: list[FieldInfo] = []
    shown: list[int | str] = []
    current: Any = model
    for part in loc:
        if isinstance(part, str):
            member = _tagged(current, part)
            if member is not None:
                current = member
                continue
            fields = getattr(_model_in(current), "model_fields", None)
            named = {f.alias or name: f for name, f in (fields or {}).items()}
            if part in named:
                found.append(named[part])
                current = named[part].annotation
        shown.append(part)
    return found, shown


def _tagged(annotation: Any, tag: str) -> Any:
    """The member of a tagged union (in `annotation`) whose Tag is `tag`."""
    if typing.get_origin(annotation) is Annotated:
        inner, *extras = typing.get_args(annotation)
        if any(isinstance(extra, Tag) and extra.tag == tag for extra in extras):
            return inner
        return _tagged(inner, tag)
    for arg in typing.get_args(annotation):
        member = _tagged(arg, tag)
        if member is not None:
            return member
    return None


def _model_in(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        inner = _model_in(arg)
        if inner is not None:
            return inner
    return None


def _path(loc: Sequence[int | str]) -> str:
    """A location as the client reads it: "files[2].attributes.year", "metadata.kéy key"."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part == "[key]":
            text += " key"
        else:
            text += f".{part}" if text else part
    # A key can hold a lone surrogate, which no UTF-8 reply can carry.
    return text.encode("utf-8", "replace").decode("utf-8")


def _valid_unicode(value: str) -> str:
    # JSON can carry lone surrogates ("\ud800"), which have no UTF-8 form (nor a protobuf one).
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise fail("invalid_value", "'{path}' is not valid Unicode text (lone surrogate)") from None
    return value


# Strings: valid Unicode, within their limits.
Text = Annotated[str, AfterValidator(_valid_unicode)]
Key = Annotated[Text, Field(max_length=MAX_KEY_CHARS)]


def _attribute(value: Any) -> str | float | bool:
    """One attribute value: a string, a number a float can hold, or a boolean."""
    if isinstance(value, str):
        if len(value) > MAX_ATTRIBUTE_CHARS:
            raise fail(
                "string_too_long", f"'{{path}}' is longer than {MAX_ATTRIBUTE_CHARS} characters"
            )
        return _valid_unicode(value)
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            raise fail("invalid_value", "'{path}' must be a finite number")
        return value
    raise fail("invalid_type", "'{path}' must be a string, number or boolean")


Attribute = Annotated[str | float | bool, PlainValidator(_attribute), WithJsonSchema(ATTRIBUTE)]
# OpenAI's attributes of a vector store file: at most 16, keys up to 64 characters.
Attributes = Annotated[dict[Key, Attribute], Field(max_length=MAX_ATTRIBUTES)]


def attribute_value(value: Any, name: str, param: str) -> str | float | bool:
    """One attribute value outside a model (a filter's), its errors naming `name`."""
    try:
        return _attribute(value)
    except PydanticCustomError as error:
        message = error.message().replace("{path}", name)
        raise InvalidRequest(message, param=param, code=error.type) from None


class _AttributesOnly(RequestModel):
    attributes: Attributes


def attributes_of(value: Any) -> dict[str, str | float | bool]:
    """Attributes outside a body (a gRPC ingest's document), checked as a body's are."""
    return parse(_AttributesOnly, {"attributes": value}).attributes


# OpenAI's metadata: at most 16 pairs, keys up to 64 characters, string values up to 512.
Metadata = Annotated[
    dict[Key, Annotated[Text, Field(max_length=MAX_METADATA_CHARS)]],
    Field(max_length=MAX_METADATA),
]


# In a field's WithJsonSchema: a reference to one of schemas.py's components (pydantic
# resolves every "$ref" against its own definitions, so the reference is made afterwards).
COMPONENT = "x-ragd-component"


def component(name: str) -> Schema:
    return {COMPONENT: name}


# A model named XBody (beside a domain value named X) is described as X.
_SUFFIX = "Body"


def schema_name(model: type[BaseModel]) -> str:
    return model.__name__.removesuffix(_SUFFIX)


def json_schema(model: type[BaseModel]) -> tuple[Schema, dict[str, Schema]]:
    """The model's JSON Schema for /openapi.json, and the schemas it refers to (components)."""
    schema = _referenced(model.model_json_schema(ref_template="#/components/schemas/{model}"))
    parts = schema.pop("$defs", {})
    return schema, {name.removesuffix(_SUFFIX): part for name, part in parts.items()}


def _referenced(schema: Any) -> Any:
    if isinstance(schema, dict):
        if COMPONENT in schema:
            return {"$ref": f"#/components/schemas/{schema[COMPONENT]}"}
        if isinstance(schema.get("$ref"), str):
            return {**schema, "$ref": schema["$ref"].removesuffix(_SUFFIX)}
        # pydantic's titles repeat the field names (a property named title is a schema).
        return {
            key: _referenced(value)
            for key, value in schema.items()
            if not (key == "title" and isinstance(value, str))
        }
    if isinstance(schema, list):
        return [_referenced(item) for item in schema]
    return schema
