"""The Files API: upload, list, retrieve, download, delete."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, WithJsonSchema
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from services.common import vocabulary as v
from services.gateway import objects
from services.gateway.auth import charge
from services.gateway.operations import operation, paging_params, query_param
from services.gateway.params import paging
from services.gateway.requests import RequestModel, parse
from services.gateway.routes import services
from services.gateway.uploads import Upload, form_json, read_upload
from services.pb import store_pb2

BINARY = {"type": "string", "format": "binary"}


class FileExpiresAfterBody(RequestModel):
    anchor: Literal["created_at"]
    seconds: Annotated[int, Field(ge=v.MIN_FILE_EXPIRES_SECONDS, le=v.MAX_FILE_EXPIRES_SECONDS)]


class FileUpload(RequestModel):
    """The multipart form of an upload. The SDK sends expires_after as the fields
    expires_after[anchor] and expires_after[seconds]; a JSON string of it is taken too."""

    file: Annotated[Any, WithJsonSchema(BINARY)]
    purpose: Literal[v.FILE_PURPOSES]  # type: ignore[valid-type]
    expires_after: FileExpiresAfterBody | None = None


def _form(upload: Upload) -> dict[str, Any]:
    """The form's fields as FileUpload reads them."""
    fields: dict[str, Any] = {**upload.fields, "file": upload.content}
    expires = form_json(fields, "expires_after")
    anchor, seconds = fields.get("expires_after[anchor]"), fields.get("expires_after[seconds]")
    if expires is None and (anchor is not None or seconds is not None):
        # A form carries the number as text.
        if isinstance(seconds, str) and seconds.isdecimal() and len(seconds) < 16:
            seconds = int(seconds)
        expires = {"anchor": anchor, "seconds": seconds}
    fields["expires_after"] = expires
    return fields


@operation("Upload a file", "File", form=FileUpload, returns={"file_id": "/id"})
async def create_file(request: Request) -> JSONResponse:
    deps = services(request)
    upload = await read_upload(request, deps.config.max_upload_bytes)
    asked = parse(FileUpload, _form(upload))
    created = await deps.store.CreateFile(
        store_pb2.CreateFileRequest(
            filename=upload.filename,
            purpose=asked.purpose,
            content=upload.content,
            expires_after_seconds=asked.expires_after.seconds if asked.expires_after else 0,
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
