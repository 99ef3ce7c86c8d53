"""GET /openapi.json: the REST API described from the app's own routes.

The paths, methods and path parameters come from the Starlette routes; what each endpoint
takes and returns is in OPERATIONS, keyed by the endpoint function, and the bodies' schemas
(with the same limits the routes validate with) in schemas.py. A route without an entry here
fails the spec build, so a new route cannot go undescribed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from services.common import vocabulary as v
from services.gateway.metrics import metrics
from services.gateway.routes import (
    admin,
    chat,
    conversations,
    embeddings,
    file_batches,
    files,
    health,
    keys,
    responses,
    vector_store_files,
    vector_stores,
    version,
)
from services.gateway.schemas import SCHEMAS, Schema, ref
from services.gateway.schemas_chat import CHAT_SCHEMAS

Endpoint = Callable[..., Any]


def _query(name: str, schema: Schema, description: str = "") -> Schema:
    parameter: Schema = {"name": name, "in": "query", "required": False, "schema": schema}
    if description:
        parameter["description"] = description
    return parameter


def _paging(max_limit: int = 100, before: bool = True) -> list[Schema]:
    params = [
        _query("limit", {"type": "integer", "minimum": 1, "maximum": max_limit}),
        _query("order", {"enum": ["asc", "desc"]}),
        _query("after", {"type": "string"}, "an object id: the page after it"),
    ]
    if before:
        params.append(_query("before", {"type": "string"}, "an object id: the page before it"))
    return params


_INCLUDE = _query(
    "include",
    {"type": "array", "items": {"enum": ["file_search_call.results"]}},
    "file_search_call.results: the results of file_search calls",
)


@dataclass(frozen=True)
class Operation:
    summary: str
    # Component schema names; `body` is a JSON body unless `form` says multipart.
    response: str | None = None
    body: str | None = None
    form: str | None = None
    body_required: bool = True
    query: Sequence[Schema] = field(default_factory=list)
    # Extra media types of a JSON body route that also takes multipart.
    also_form: str | None = None
    # Path parameters the response gives values for (a JSON pointer into its body), so the
    # description links this operation to the ones that take them (stateful clients follow).
    returns: dict[str, str] = field(default_factory=dict)
    # With "stream": true in the body, the answer is server-sent events.
    events: bool = False
    # Answers other than 200 that are not OpenAI's error object: status -> schema name.
    other: dict[str, str] = field(default_factory=dict)


OPERATIONS: dict[Endpoint, Operation] = {
    health.health: Operation("Liveness: the gateway process is up", "Health"),
    version.version: Operation("Versions of every service of the stack and its models", "Version"),
    metrics: Operation("Prometheus metrics (text exposition format)"),
    health.ready: Operation(
        "Readiness: 200 while the store serves (degraded: what is missing), 503 when it "
        "does not or a required dependency is down",
        "Readiness",
        other={"503": "Readiness"},
        query=[
            _query(
                "require",
                {"type": "string", "pattern": "^(store|embedder|chat)(,(store|embedder|chat))*$"},
                "dependencies that must be up too, comma-separated: embedder, chat",
            )
        ],
    ),
    admin.backup: Operation(
        "Online backup of the store's database",
        "BackupResult",
        "BackupRequest",
        body_required=False,
    ),
    admin.restore: Operation(
        "Replace the database with a backup (checked first; the replaced one is kept)",
        "RestoreResult",
        "RestoreRequest",
    ),
    keys.create_key: Operation(
        "Make an API key (its secret is in this answer only)", "ApiKey", "ApiKeyRequest"
    ),
    keys.list_keys: Operation(
        "API keys and their usage",
        "ApiKeyList",
        query=[_query("revoked", {"type": "boolean"}, "include revoked keys")],
    ),
    keys.revoke_key: Operation("Revoke an API key for good", "ApiKey"),
    keys.create_project: Operation(
        "Make a project (what vector stores, files, conversations and keys belong to)",
        "Project",
        "ProjectRequest",
    ),
    keys.list_projects: Operation("List projects", "ProjectList"),
    admin.list_backups: Operation("The backups in the store's backup directory", "BackupList"),
    admin.download_backup: Operation(
        "Download a backup's file",
        query=[_query("path", {"type": "string"}, "the backup's name, as listed")],
    ),
    admin.vacuum: Operation("Reclaim the space of deleted data", "VacuumResult"),
    admin.stats: Operation("Global and per vector store statistics", "Stats"),
    admin.audit: Operation(
        "Audit log of requests and ingests, newest first",
        "AuditList",
        query=[
            _query("limit", {"type": "integer", "minimum": 1, "maximum": 1000}),
            _query("operation", {"enum": list(v.AUDIT_OPERATIONS)}),
            _query("store", {"type": "string"}, "a vector store id"),
            _query("before", {"type": "integer", "minimum": 0}, "an entry id"),
            _query("key", {"type": "string"}, "an API key's name"),
        ],
    ),
    embeddings.embeddings: Operation("Create embeddings", "EmbeddingList", "EmbeddingRequest"),
    embeddings.models: Operation("List the served models", "ModelList"),
    embeddings.model: Operation("Retrieve a served model", "Model"),
    files.create_file: Operation(
        "Upload a file", "File", form="FileUpload", returns={"file_id": "/id"}
    ),
    files.list_files: Operation(
        "List files",
        "FileList",
        query=[*_paging(10000, before=False), _query("purpose", {"type": "string"})],
    ),
    files.get_file: Operation("Retrieve a file", "File"),
    files.delete_file: Operation("Delete a file everywhere", "Deleted"),
    files.file_content: Operation("Download a file's bytes"),
    vector_stores.create_vector_store: Operation(
        "Create a vector store",
        "VectorStore",
        "VectorStoreCreate",
        returns={"vector_store_id": "/id"},
    ),
    vector_stores.list_vector_stores: Operation(
        "List vector stores", "VectorStoreList", query=_paging()
    ),
    vector_stores.get_vector_store: Operation("Retrieve a vector store", "VectorStore"),
    vector_stores.update_vector_store: Operation(
        "Modify a vector store", "VectorStore", "VectorStoreUpdate"
    ),
    vector_stores.delete_vector_store: Operation("Delete a vector store", "Deleted"),
    vector_stores.search_vector_store: Operation(
        "Search a vector store", "SearchPage", "SearchRequest"
    ),
    vector_stores.reindex_vector_store: Operation(
        "Re-index a vector store with another model or chunking (ragd extension)",
        "VectorStore",
        "VectorStoreReindex",
    ),
    vector_stores.cancel_reindex: Operation(
        "Cancel a vector store's re-index (ragd extension)", "VectorStore"
    ),
    vector_store_files.attach_file: Operation(
        "Attach a file (ingested asynchronously)",
        "VectorStoreFile",
        "VectorStoreFileCreate",
        also_form="VectorStoreFileUpload",
        returns={"vector_store_id": "/vector_store_id", "file_id": "/id"},
    ),
    vector_store_files.list_files: Operation(
        "List a vector store's (or a file batch's) files",
        "VectorStoreFileList",
        query=[*_paging(), _query("filter", {"enum": list(v.FILE_STATUSES)})],
    ),
    vector_store_files.get_file: Operation("Retrieve a vector store file", "VectorStoreFile"),
    vector_store_files.update_file: Operation(
        "Update a vector store file's attributes", "VectorStoreFile", "VectorStoreFileUpdate"
    ),
    vector_store_files.delete_file: Operation(
        "Remove a file (its chunks and vectors) from the vector store", "Deleted"
    ),
    vector_store_files.file_content: Operation(
        "The file's stored chunks", "VectorStoreFileContent"
    ),
    file_batches.create_batch: Operation(
        f"Attach up to {v.MAX_BATCH_FILES} files",
        "FileBatch",
        "FileBatchCreate",
        returns={"vector_store_id": "/vector_store_id", "batch_id": "/id"},
    ),
    file_batches.get_batch: Operation("Retrieve a file batch", "FileBatch"),
    file_batches.cancel_batch: Operation("Cancel a file batch", "FileBatch"),
    conversations.create_conversation: Operation(
        "Create a conversation",
        "Conversation",
        "ConversationCreate",
        body_required=False,
        returns={"conversation_id": "/id"},
    ),
    conversations.list_conversations: Operation(
        "List conversations, most recently active first (ragd extension)",
        "ConversationList",
        query=_paging(),
    ),
    conversations.search_history: Operation(
        "Search the items of every conversation, or of one (ragd extension)",
        "HistorySearchPage",
        "HistorySearchRequest",
    ),
    conversations.get_conversation: Operation("Retrieve a conversation", "Conversation"),
    conversations.update_conversation: Operation(
        "Update a conversation's metadata (or title)", "Conversation", "ConversationUpdate"
    ),
    conversations.delete_conversation: Operation(
        "Delete a conversation with its items", "ConversationDeleted"
    ),
    conversations.create_items: Operation(
        f"Add up to {v.MAX_NEW_ITEMS} items to a conversation",
        "ItemList",
        "ItemsCreate",
        query=[_INCLUDE],
    ),
    conversations.list_items: Operation(
        "List a conversation's items", "ItemList", query=[*_paging(), _INCLUDE]
    ),
    conversations.get_item: Operation("Retrieve an item", "Item", query=[_INCLUDE]),
    conversations.delete_item: Operation(
        "Delete an item (returns the conversation)", "Conversation"
    ),
    responses.create_response: Operation(
        "Create a model response (function tools, file_search over vector stores, structured "
        "output, background runs; history kept)",
        "Response",
        "ResponseCreate",
        returns={"response_id": "/id"},
        events=True,
    ),
    responses.get_response: Operation(
        "Retrieve a response (stream=true: its events after starting_after)",
        "Response",
        query=[
            _INCLUDE,
            _query("stream", {"type": "boolean"}, "the response's events, followed to its end"),
            _query(
                "starting_after",
                {"type": "integer", "minimum": 0},
                "with stream: the sequence number after which events start",
            ),
        ],
    ),
    responses.cancel_response: Operation("Cancel a background response", "Response"),
    responses.delete_response: Operation("Delete a response", "ResponseDeleted"),
    responses.list_input_items: Operation(
        "List a response's input items",
        "ItemList",
        query=[*_paging(before=False), _INCLUDE],
    ),
    chat.chat_completions: Operation(
        "Chat completion from the chat upstream (recorded with X-Ragd-Conversation)",
        "ChatCompletion",
        "ChatCompletionRequest",
        events=True,
    ),
}

_PATH_PARAM = re.compile(r"{(\w+)}")


def _content(schema: str) -> Schema:
    return {"application/json": {"schema": ref(schema)}}


def _operation(path: str, method: str, endpoint: Endpoint) -> Schema:
    spec = OPERATIONS.get(endpoint)
    if spec is None:
        raise LookupError(f"{method.upper()} {path} has no entry in openapi.OPERATIONS")
    success: Schema = {"description": "OK"}
    if spec.response:
        success["content"] = _content(spec.response)
    elif endpoint in (files.file_content, admin.download_backup):
        success["content"] = {"application/octet-stream": {"schema": {"type": "string"}}}
    elif endpoint is metrics:
        success["content"] = {"text/plain": {"schema": {"type": "string"}}}
    if spec.events:
        success["content"]["text/event-stream"] = {"schema": {"type": "string"}}
    operation: Schema = {
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
        operation["parameters"] = parameters
    content: Schema = {}
    if spec.body:
        content.update(_content(spec.body))
    for form in (spec.form, spec.also_form):
        if form:
            content["multipart/form-data"] = {"schema": ref(form)}
    if content:
        operation["requestBody"] = {"required": spec.body_required, "content": content}
    return operation


def _link(operations: Sequence[tuple[str, Schema]], returns: dict[str, str]) -> Schema:
    """Links to every operation whose path parameters the response gives values for."""
    links: Schema = {}
    for path, operation in operations:
        names = set(_PATH_PARAM.findall(path))
        if names and names <= set(returns):
            links[operation["operationId"]] = {
                "operationId": operation["operationId"],
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
            operation = _operation(route.path, lowered, route.endpoint)
            paths.setdefault(route.path, {})[lowered] = operation
            every.append((route.path, operation, route.endpoint))
    for _, operation, endpoint in every:
        returns = OPERATIONS[endpoint].returns
        if returns:
            links = _link([(path, other) for path, other, _ in every], returns)
            operation["responses"]["200"]["links"] = links
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
            "schemas": {**SCHEMAS, **CHAT_SCHEMAS},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
        "paths": paths,
    }


async def openapi(request: Request) -> JSONResponse:
    """This document, built once per app."""
    state = request.app.state
    if getattr(state, "openapi", None) is None:
        state.openapi = build_spec(request.app.routes)
    return JSONResponse(state.openapi)


OPERATIONS[openapi] = Operation("This document")
