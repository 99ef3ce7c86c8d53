"""The bodies of the Conversations API (create, update, add items) and of the history search
(a ragd extension), declared once (requests.py)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    PlainValidator,
    WithJsonSchema,
    model_validator,
)

from services.common import vocabulary as v
from services.gateway.chat.items import parse_items
from services.gateway.requests import Metadata, RequestModel, Text, fail
from services.gateway.schemas import QUERY
from services.gateway.schemas_chat import NEW_ITEMS
from services.pb import store_pb2

MAX_HISTORY_RESULTS = 100


def _items(raw: Any) -> list[store_pb2.NewItem]:
    # Each item is checked by chat/items.py (shared with a response's input), which names its
    # own path ("items[2].role").
    if isinstance(raw, list) and len(raw) > v.MAX_NEW_ITEMS:
        raise fail(
            "invalid_value", f"'items' can hold at most {v.MAX_NEW_ITEMS} items, got {len(raw)}"
        )
    if not isinstance(raw, list):
        raise fail("invalid_value", "'items' must be an array of items")
    return [item.message() for item in parse_items(raw, "items")]


def _first_items(raw: Any) -> list[store_pb2.NewItem]:
    return [] if raw == [] else _items(raw)


# A conversation may start empty; items added to one are at least one.
FirstItems = Annotated[
    list[store_pb2.NewItem],
    PlainValidator(_first_items),
    WithJsonSchema({**NEW_ITEMS, "minItems": 0}),
]
NewItems = Annotated[list[store_pb2.NewItem], PlainValidator(_items), WithJsonSchema(NEW_ITEMS)]
Title = Annotated[Text, Field(max_length=v.MAX_TITLE_CHARS)]


class ConversationCreate(RequestModel):
    items: FirstItems = Field(default_factory=list)
    metadata: Metadata = Field(default_factory=dict)
    title: Annotated[Title, Field(description="ragd extension; default: the first user line")] = ""


class ConversationUpdate(RequestModel):
    """Each field sent is changed; null clears it."""

    model_config = ConfigDict(
        json_schema_extra={"anyOf": [{"required": ["metadata"]}, {"required": ["title"]}]}
    )
    nulls_are_absent = False

    metadata: Metadata | None = None
    title: Title | None = None

    @model_validator(mode="after")
    def _something(self) -> ConversationUpdate:
        if not self.model_fields_set & {"metadata", "title"}:
            raise fail("invalid_value", "send 'metadata' (or 'title') to update", "metadata")
        return self


class ItemsCreate(RequestModel):
    items: NewItems


def _words(query: str) -> str:
    if not query.strip():
        raise fail("invalid_value", "'query' must not be empty")
    return query


class HistorySearchRequest(RequestModel):
    query: Annotated[
        Text,
        Field(max_length=v.MAX_QUERY_CHARS),
        AfterValidator(_words),
        WithJsonSchema(QUERY),
    ]
    max_num_results: Annotated[int, Field(ge=1, le=MAX_HISTORY_RESULTS)] = 10
    mode: Annotated[
        Literal[v.SEARCH_MODES],  # type: ignore[valid-type]
        Field(
            description="lexical (words), vector (meaning) or hybrid (both; items not yet "
            "embedded in the background are found by their words)"
        ),
    ] = v.HYBRID
