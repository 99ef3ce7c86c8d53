"""GET /openapi.json: the REST API described from the app's own routes.

The paths, methods and path parameters come from the Starlette routes; what each endpoint
takes and returns is attached to the endpoint itself (operations.operation), and the bodies'
schemas are in schemas.py (with the same limits the routes validate with) or are the JSON
Schemas of the request models. A route without an operation fails the spec build, so a new
route cannot go undescribed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from services.gateway.operations import Endpoint, Operation, operation, operation_of
from services.gateway.requests import json_schema, schema_name
from services.gateway.schemas import SCHEMAS, Schema, ref
from services.gateway.schemas_chat import CHAT_SCHEMAS

_PATH_PARAM = re.compile(r"{(\w+)}")


def _content(schema: str) -> Schema:
    return {"application/json": {"schema": ref(schema)}}


def _described(endpoint: Endpoint) -> Operation:
    spec = operation_of(endpoint)
    assert spec is not None
    return spec


def _operation(path: str, method: str, endpoint: Endpoint) -> Schema:
    spec = operation_of(endpoint)
    if spec is None:
        raise LookupError(f"{method.upper()} {path} has no @operation on its endpoint")
    success: Schema = {"description": "OK"}
    if spec.response:
        success["content"] = _content(spec.response)
    elif spec.media:
        success["content"] = {spec.media: {"schema": {"type": "string"}}}
    if spec.events:
        success["content"]["text/event-stream"] = {"schema": {"type": "string"}}
    described: Schema = {
        "summary": spec.summary,
        "operationId": f"{method}_{endpoint.__name__}",
        "responses": {
            "200": success,
            **{
                status: {"description": schema, "content": _content(schema)}
                for status, schema in spec.other.items()
            },
            "default": {"description": "Error", "content": _content("Error")},
        },
    }
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in _PATH_PARAM.findall(path)
    ] + list(spec.query)
    if parameters:
        described["parameters"] = parameters
    content: Schema = {}
    if spec.body:
        content.update(_content(_body_name(spec.body)))
    for form in (spec.form, spec.also_form):
        if form:
            content["multipart/form-data"] = {"schema": ref(_body_name(form))}
    if content:
        described["requestBody"] = {"required": spec.body_required, "content": content}
    return described


def _body_name(body: str | type[BaseModel]) -> str:
    """A body's component: a schemas.py name, or a request model's (requests.py) name."""
    return body if isinstance(body, str) else schema_name(body)


def _request_models(routes: Sequence[BaseRoute]) -> dict[str, Schema]:
    """The JSON Schemas of the request models the routes read, and what they refer to."""
    found: dict[str, Schema] = {}
    for route in routes:
        spec = operation_of(route.endpoint) if isinstance(route, Route) else None
        models = [] if spec is None else [spec.body, spec.form, spec.also_form]
        for model in models:
            if not isinstance(model, type):
                continue
            schema, parts = json_schema(model)
            for name, part in {schema_name(model): schema, **parts}.items():
                if name in SCHEMAS or name in CHAT_SCHEMAS or found.get(name, part) != part:
                    raise ValueError(f"two schemas are called {name}")
                found[name] = part
    return found


def _link(operations: Sequence[tuple[str, Schema]], returns: dict[str, str]) -> Schema:
    """Links to every operation whose path parameters the response gives values for."""
    links: Schema = {}
    for path, other in operations:
        names = set(_PATH_PARAM.findall(path))
        if names and names <= set(returns):
            links[other["operationId"]] = {
                "operationId": other["operationId"],
                "parameters": {name: f"$response.body#{returns[name]}" for name in names},
            }
    return links


def build_spec(routes: Sequence[BaseRoute]) -> Schema:
    paths: dict[str, Schema] = {}
    every: list[tuple[str, Schema, Endpoint]] = []
    for route in routes:
        if not isinstance(route, Route):
            continue
        for method in sorted(route.methods or ()):
            if method == "HEAD":
                continue
            lowered = method.lower()
            described = _operation(route.path, lowered, route.endpoint)
            paths.setdefault(route.path, {})[lowered] = described
            every.append((route.path, described, route.endpoint))
    for _, described, endpoint in every:
        returns = _described(endpoint).returns
        if returns:
            links = _link([(path, other) for path, other, _ in every], returns)
            described["responses"]["200"]["links"] = links
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "ragd",
            "version": "0.1.0",
            "description": "OpenAI-compatible embeddings, files, vector stores, conversations "
            "and responses. When API "
            "keys are configured, /v1 and /admin routes need 'Authorization: Bearer <key>'.",
        },
        "components": {
            "schemas": {**SCHEMAS, **CHAT_SCHEMAS, **_request_models(routes)},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
        "paths": paths,
    }


@operation("This document")
async def openapi(request: Request) -> JSONResponse:
    """This document, built once per app."""
    state = request.app.state
    if getattr(state, "openapi", None) is None:
        state.openapi = build_spec(request.app.routes)
    return JSONResponse(state.openapi)
