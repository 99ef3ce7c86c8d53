"""Operator routes for API keys and projects: make a key (its secret is in this answer only)
in a project, list keys with their usage, revoke one; make and list projects. Admin scope,
like every /admin route."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse

from services.common.vocabulary import SCOPES
from services.gateway import objects_admin
from services.gateway.errors import invalid
from services.gateway.operations import operation, query_param
from services.gateway.params import json_body, optional_int, optional_str, required_str
from services.gateway.routes import services
from services.pb import store_pb2

MAX_LIMIT = 2**31 - 1


@operation("Make an API key (its secret is in this answer only)", "ApiKey", "ApiKeyRequest")
async def create_key(request: Request) -> JSONResponse:
    deps = services(request)
    body = await json_body(request)
    name = required_str(body, "name", max_chars=64)
    scope = required_str(body, "scope")
    if scope not in SCOPES:
        raise invalid(f"'scope' must be one of {', '.join(SCOPES)}", param="scope")
    stores = body.get("vector_stores") or []
    if not isinstance(stores, list) or not all(isinstance(s, str) for s in stores):
        raise invalid("'vector_stores' must be a list of vector store ids", param="vector_stores")
    shared = body.get("project_conversations", False)
    if not isinstance(shared, bool):
        raise invalid(
            "'project_conversations' must be true or false", param="project_conversations"
        )
    created = await deps.store.CreateApiKey(
        store_pb2.CreateApiKeyRequest(
            name=name,
            scope=scope,
            vector_stores=stores,
            requests_per_minute=optional_int(body, "requests_per_minute", 0, 0, MAX_LIMIT),
            tokens_per_day=optional_int(body, "tokens_per_day", 0, 0, 2**62),
            project=optional_str(body, "project", max_chars=64) or "",
            project_conversations=shared,
        )
    )
    deps.keys.created()
    return JSONResponse(objects_admin.api_key(created.key, secret=created.secret))


@operation(
    "API keys and their usage",
    "ApiKeyList",
    query=[query_param("revoked", {"type": "boolean"}, "include revoked keys")],
)
async def list_keys(request: Request) -> JSONResponse:
    revoked = request.query_params.get("revoked", "false").lower() in ("1", "true", "yes")
    reply = await services(request).store.ListApiKeys(store_pb2.ListApiKeysRequest(revoked=revoked))
    return JSONResponse(objects_admin.unpaged([objects_admin.api_key(key) for key in reply.keys]))


@operation("Revoke an API key for good", "ApiKey")
async def revoke_key(request: Request) -> JSONResponse:
    deps = services(request)
    revoked = await deps.store.RevokeApiKey(
        store_pb2.RevokeApiKeyRequest(name=request.path_params["name"])
    )
    deps.keys.forget()
    return JSONResponse(objects_admin.api_key(revoked, revoked=True))


@operation(
    "Make a project (what vector stores, files, conversations and keys belong to)",
    "Project",
    "ProjectRequest",
)
async def create_project(request: Request) -> JSONResponse:
    body = await json_body(request)
    name = required_str(body, "name", max_chars=64)
    made = await services(request).store.CreateProject(store_pb2.CreateProjectRequest(name=name))
    return JSONResponse(objects_admin.project(made))


@operation("List projects", "ProjectList")
async def list_projects(request: Request) -> JSONResponse:
    reply = await services(request).store.ListProjects(store_pb2.ListProjectsRequest())
    return JSONResponse(objects_admin.unpaged([objects_admin.project(p) for p in reply.projects]))
