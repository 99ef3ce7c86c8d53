"""The bodies of the operator routes (API keys, projects, backup, restore), declared once
(requests.py)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from services.common import vocabulary as v
from services.gateway.requests import RequestModel, Text, fail

# The store checks a key's and a project's name in full (letters, digits, '.', '_', '-').
Name = Annotated[Text, Field(max_length=64)]
MAX_REQUESTS_PER_MINUTE = 2**31 - 1
MAX_TOKENS_PER_DAY = 2**62


class ApiKeyRequest(RequestModel):
    name: Name
    scope: Literal[v.SCOPES]  # type: ignore[valid-type]
    vector_stores: list[Text] = Field(default_factory=list)
    requests_per_minute: Annotated[int, Field(ge=0, le=MAX_REQUESTS_PER_MINUTE)] = 0
    tokens_per_day: Annotated[int, Field(ge=0, le=MAX_TOKENS_PER_DAY)] = 0
    project: Annotated[
        Name,
        Field(
            description="The project's id or name (default: the default project); the key "
            "reaches that project's objects only. Admin keys belong to the default project."
        ),
    ] = ""
    project_conversations: Annotated[
        bool,
        Field(
            description="For a key limited to some vector stores: it reaches every "
            "conversation and response of its project, not only those it made."
        ),
    ] = False


class ProjectRequest(RequestModel):
    name: Name


class BackupRequest(RequestModel):
    path: Annotated[
        Text,
        Field(
            description="File name inside the store's backup directory (RAGD_BACKUP_DIR); "
            "default ragd-<UTC time>.db. Absolute or escaping paths are a 400, an existing "
            "file a 409."
        ),
    ] = ""


class RestoreRequest(RequestModel):
    path: Annotated[
        Text,
        Field(
            description="A backup's name inside the store's backup directory, as GET "
            "/admin/backups lists them."
        ),
    ] = ""
    from_replica: Annotated[
        bool,
        Field(
            description="Instead of a backup: the Litestream replica's latest state "
            "(RAGD_REPLICA_URL)."
        ),
    ] = False
    timestamp: Annotated[
        Text, Field(description="With from_replica: the replica's state at this RFC 3339 time.")
    ] = ""

    @model_validator(mode="after")
    def _one_source(self) -> RestoreRequest:
        if self.from_replica == bool(self.path):
            raise fail(
                "invalid_value",
                "name a backup in 'path' (GET /admin/backups lists them) or set 'from_replica'",
                "path",
            )
        if self.timestamp and not self.from_replica:
            raise fail(
                "invalid_value", "'timestamp' applies to a restore from the replica", "timestamp"
            )
        return self
