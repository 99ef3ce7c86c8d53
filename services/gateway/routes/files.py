"""The Files API: upload, list, retrieve, download, delete."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from services.common.vocabulary import (
    FILE_EXPIRES_ANCHOR,
    FILE_PURPOSES,
    MAX_FILE_EXPIRES_SECONDS,
    MIN_FILE_EXPIRES_SECONDS,
)
from services.gateway import objects
from services.gateway.auth import charge
from services.gateway.errors import invalid
from services.gateway.operations import operation, paging_params, query_param
from services.gateway.params import paging
from services.gateway.routes import services
from services.gateway.uploads import form_json, read_upload
from services.pb import store_pb2


def _expires_after(fields: dict[str, Any]) -> int:
    """The seconds of OpenAI's expires_after, as the SDK's multipart form sends it
    (expires_after[anchor], expires_after[seconds]) or as one JSON field; 0 when absent."""
    raw = form_json(fields, "expires_after")
    if raw is None:
        anchor, seconds = fields.get("expires_after[anchor]"), fields.get("expires_after[seconds]")
        if anchor is None and seconds is None:
            return 0
        raw = {"anchor": anchor, "seconds": seconds}
    if not isinstance(raw, dict) or raw.get("anchor") != FILE_EXPIRES_ANCHOR:
        raise invalid(
            f"'expires_after.anchor' must be '{FILE_EXPIRES_ANCHOR}'", param="expires_after"
        )
    seconds = raw.get("seconds")
    # A form carries the number as text.
    if isinstance(seconds, str) and seconds.isascii() and seconds.isdigit():
        seconds = int(seconds)
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int)
        or not MIN_FILE_EXPIRES_SECONDS <= seconds <= MAX_FILE_EXPIRES_SECONDS
    ):
        raise invalid(
            f"'expires_after.seconds' must be an integer from {MIN_FILE_EXPIRES_SECONDS} to "
            f"{MAX_FILE_EXPIRES_SECONDS}",
            param="expires_after",
        )
    return seconds


@operation("Upload a file", "File", form="FileUpload", returns={"file_id": "/id"})
async def create_file(request: Request) -> JSONResponse:
    deps = services(request)
    upload = await read_upload(request, deps.config.max_upload_bytes)
    purpose = upload.fields.get("purpose")
    if not isinstance(purpose, str) or not purpose:
        raise invalid(
            "'purpose' is required, e.g. 'assistants'",
            param="purpose",
            code="missing_required_parameter",
        )
    if purpose not in FILE_PURPOSES:
        raise invalid(
            f"'purpose' must be one of {', '.join(FILE_PURPOSES)}, got {purpose!r}",
            param="purpose",
        )
    created = await deps.store.CreateFile(
        store_pb2.CreateFileRequest(
            filename=upload.filename,
            purpose=purpose,
            content=upload.content,
            expires_after_seconds=_expires_after(upload.fields),
        ),
    )
    charge(request.scope, stored=len(upload.content))
    return JSONResponse(objects.file(created))


@operation(
    "List files",
    "FileList",
    query=[*paging_params(10000, before=False), query_param("purpose", {"type": "string"})],
)
async def list_files(request: Request) -> JSONResponse:
    store = services(request).store
    reply = await store.ListFiles(
        store_pb2.ListFilesRequest(
            **paging(request, default=10000, maximum=10000, before=False),
            purpose=request.query_params.get("purpose", ""),
        ),
    )
    return JSONResponse(objects.page([objects.file(f) for f in reply.files], reply.has_more))


@operation("Retrieve a file", "File")
async def get_file(request: Request) -> JSONResponse:
    file_id = request.path_params["file_id"]
    item = await services(request).store.GetFile(store_pb2.GetFileRequest(id=file_id))
    return JSONResponse(objects.file(item))


@operation("Download a file's bytes", media="application/octet-stream")
async def file_content(request: Request) -> Response:
    file_id = request.path_params["file_id"]
    reply = await services(request).store.GetFileContent(store_pb2.GetFileRequest(id=file_id))
    return Response(reply.content, media_type="application/octet-stream")


@operation("Delete a file everywhere", "Deleted")
async def delete_file(request: Request) -> JSONResponse:
    file_id = request.path_params["file_id"]
    reply = await services(request).store.DeleteFile(store_pb2.GetFileRequest(id=file_id))
    return JSONResponse(objects.deleted(reply.id, "file", reply.deleted))
