"""Operator routes for API keys and projects: make a key (its secret is in this answer only)
in a project, list keys with their usage, revoke one; make and list projects. Admin scope,
like every /admin route."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse

from services.gateway import objects_admin
from services.gateway.admin_bodies import ApiKeyRequest, ProjectRequest
from services.gateway.operations import operation, query_param
from services.gateway.params import json_body
from services.gateway.requests import parse
from services.gateway.routes import services
from services.pb import store_pb2


@operation("Make an API key (its secret is in this answer only)", "ApiKey", ApiKeyRequest)
async def create_key(request: Request) -> JSONResponse:
    deps = services(request)
    asked = parse(ApiKeyRequest, await json_body(request))
    created = await deps.store.CreateApiKey(
        store_pb2.CreateApiKeyRequest(
            name=asked.name,
            scope=asked.scope,
            vector_stores=asked.vector_stores,
            requests_per_minute=asked.requests_per_minute,
            tokens_per_day=asked.tokens_per_day,
            project=asked.project,
            project_conversations=asked.project_conversations,
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
    ProjectRequest,
)
async def create_project(request: Request) -> JSONResponse:
    asked = parse(ProjectRequest, await json_body(request))
    made = await services(request).store.CreateProject(
        store_pb2.CreateProjectRequest(name=asked.name)
    )
    return JSONResponse(objects_admin.project(made))


@operation("List projects", "ProjectList")
async def list_projects(request: Request) -> JSONResponse:
    reply = await services(request).store.ListProjects(store_pb2.ListProjectsRequest())
    return JSONResponse(objects_admin.unpaged([objects_admin.project(p) for p in reply.projects]))
