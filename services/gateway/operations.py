"""What each REST operation takes and returns, attached to its handler.

A route module writes an endpoint once: the handler and, on it, `@operation(...)` with its
summary, its body and response schemas (component names in schemas.py, or the request model
that reads the body), its query parameters and its links. app.ROUTES gives it a path and a
method; openapi.py reads the rest from the endpoint, as Starlette's own SchemaGenerator reads
an endpoint's docstring. No web framework here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from services.gateway.schemas import Schema

Endpoint = Callable[..., Any]
E = TypeVar("E", bound=Endpoint)
_ATTRIBUTE = "__ragd_operation__"


@dataclass(frozen=True)
class Operation:
    summary: str
    # Component schema names; `body` is a JSON body unless `form` says multipart. A body may
    # also be a request model (requests.py), whose JSON Schema the document embeds.
    response: str | None = None
    body: Any = None
    form: Any = None
    body_required: bool = True
    query: Sequence[Schema] = field(default_factory=list)
    # Extra media types of a JSON body route that also takes multipart.
    also_form: Any = None
    # Path parameters the response gives values for (a JSON pointer into its body), so the
    # description links this operation to the ones that take them (stateful clients follow).
    returns: dict[str, str] = field(default_factory=dict)
    # With "stream": true in the body, the answer is server-sent events.
    events: bool = False
    # Answers other than 200 that are not OpenAI's error object: status -> schema name.
    other: dict[str, str] = field(default_factory=dict)
    # The media type of a success that is not JSON (a download, the metrics' text).
    media: str | None = None


def operation(
    summary: str, response: str | None = None, body: Any = None, **details: Any
) -> Callable[[E], E]:
    """Attaches the operation's description to its handler (see Operation)."""

    def attach(endpoint: E) -> E:
        setattr(endpoint, _ATTRIBUTE, Operation(summary, response, body, **details))
        return endpoint

    return attach


def operation_of(endpoint: Endpoint) -> Operation | None:
    found = getattr(endpoint, _ATTRIBUTE, None)
    return found if isinstance(found, Operation) else None


def query_param(name: str, schema: Schema, description: str = "") -> Schema:
    """A query parameter, never required."""
    parameter: Schema = {"name": name, "in": "query", "required": False, "schema": schema}
    if description:
        parameter["description"] = description
    return parameter


def paging_params(max_limit: int = 100, before: bool = True) -> list[Schema]:
    """OpenAI's list parameters (params.paging reads them)."""
    params = [
        query_param("limit", {"type": "integer", "minimum": 1, "maximum": max_limit}),
        query_param("order", {"enum": ["asc", "desc"]}),
        query_param("after", {"type": "string"}, "an object id: the page after it"),
    ]
    if before:
        params.append(query_param("before", {"type": "string"}, "an object id: the page before it"))
    return params


INCLUDE_PARAM = query_param(
    "include",
    {"type": "array", "items": {"enum": ["file_search_call.results"]}},
    "file_search_call.results: the results of file_search calls",
)
