"""API key and project RPCs: thin adapters over Repository's key and project methods
(services/store/keys.py, projects.py)."""

from __future__ import annotations

import grpc

from services.common.grpc_server import Context
from services.pb import store_pb2 as pb
from services.store.records import ApiKey, KeyUsage, Project
from services.store.wire.messages import copied
from services.store.wire.rpc_base import RpcBase


def key_message(key: ApiKey) -> pb.ApiKey:
    return copied(pb.ApiKey, key)


class KeyRpcs(RpcBase):
    async def CreateApiKey(
        self, request: pb.CreateApiKeyRequest, context: Context
    ) -> pb.CreatedApiKey:
        key, secret = await self._call(
            context,
            lambda: self._repository.create_api_key(
                request.name,
                request.scope,
                list(request.vector_stores),
                request.requests_per_minute,
                request.tokens_per_day,
                request.project,
                request.project_conversations,
            ),
        )
        return pb.CreatedApiKey(key=key_message(key), secret=secret)

    async def AuthenticateApiKey(
        self, request: pb.AuthenticateApiKeyRequest, context: Context
    ) -> pb.ApiKey:
        key = await self._call(
            context, lambda: self._repository.authenticate_api_key(request.secret)
        )
        if key is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, "no live API key has this secret")
        assert key is not None
        return key_message(key)

    async def ListApiKeys(
        self, request: pb.ListApiKeysRequest, context: Context
    ) -> pb.ListApiKeysResponse:
        found = await self._call(context, lambda: self._repository.list_api_keys(request.revoked))
        return pb.ListApiKeysResponse(keys=[key_message(key) for key in found])

    async def RevokeApiKey(self, request: pb.RevokeApiKeyRequest, context: Context) -> pb.ApiKey:
        key = await self._call(context, lambda: self._repository.revoke_api_key(request.name))
        return key_message(key)

    async def RecordKeyUsage(
        self, request: pb.RecordKeyUsageRequest, context: Context
    ) -> pb.RecordKeyUsageResponse:
        usages = [
            KeyUsage(
                name=usage.name,
                requests=usage.requests,
                searches=usage.searches,
                embedded_tokens=usage.embedded_tokens,
                bytes_stored=usage.bytes_stored,
                last_used_at=usage.last_used_at,
            )
            for usage in request.usages
        ]
        await self._call(context, lambda: self._repository.record_key_usage(usages))
        return pb.RecordKeyUsageResponse()

    async def GetKeyState(self, request: pb.GetKeyStateRequest, context: Context) -> pb.KeyState:
        state = await self._call(context, self._repository.key_state)
        return pb.KeyState(keys=state.keys, revoked=state.revoked)

    async def CreateProject(self, request: pb.CreateProjectRequest, context: Context) -> pb.Project:
        project = await self._call(context, lambda: self._repository.create_project(request.name))
        return project_message(project)

    async def ListProjects(
        self, request: pb.ListProjectsRequest, context: Context
    ) -> pb.ListProjectsResponse:
        found = await self._call(context, self._repository.list_projects)
        return pb.ListProjectsResponse(projects=[project_message(item) for item in found])


def project_message(project: Project) -> pb.Project:
    return copied(pb.Project, project)
