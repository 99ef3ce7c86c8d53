"""Files in a vector store: attach (and the direct-upload extension), list, get, update, detach."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse

from services.common.vocabulary import FILE_STATUSES
from services.gateway import attach, objects
from services.gateway.attributes import attributes_message
from services.gateway.auth import charge, key_name
from services.gateway.errors import invalid
from services.gateway.file_bodies import (
    VectorStoreFileCreate,
    VectorStoreFileUpdate,
    VectorStoreFileUpload,
)
from services.gateway.ingest import resolve_chunking
from services.gateway.operations import operation, paging_params, query_param
from services.gateway.params import MAX_JSON_BYTES, json_body, paging
from services.gateway.parsing import UnsupportedFile, check_supported
from services.gateway.requests import parse
from services.gateway.routes import poll_headers, services
from services.gateway.uploads import Upload, form_json, read_upload, text_upload
from services.pb import store_pb2


def _ref(request: Request) -> store_pb2.VectorStoreFileRef:
    return store_pb2.VectorStoreFileRef(
        vector_store_id=request.path_params["vector_store_id"],
        file_id=request.path_params["file_id"],
    )


@operation(
    "Attach a file (ingested asynchronously)",
    "VectorStoreFile",
    VectorStoreFileCreate,
    also_form=VectorStoreFileUpload,
    returns={"vector_store_id": "/vector_store_id", "file_id": "/id"},
)
async def attach_file(request: Request) -> JSONResponse:
    """OpenAI's {"file_id": ...}, or (extension) a multipart file / JSON {"text", "filename"}."""
    deps = services(request)
    limit = deps.config.max_upload_bytes
    asked: VectorStoreFileCreate | VectorStoreFileUpload
    upload: Upload | None = None
    if request.headers.get("content-type", "").startswith("multipart/form-data"):
        upload = await read_upload(request, limit)
        fields = {
            "file": upload.content,
            "attributes": form_json(upload.fields, "attributes"),
            "chunking_strategy": form_json(upload.fields, "chunking_strategy"),
        }
        asked = parse(VectorStoreFileUpload, fields)
    else:
        # The text extension carries the upload in the JSON body, escaped: room for twice it.
        asked = parse(
            VectorStoreFileCreate, await json_body(request, limit=2 * limit + MAX_JSON_BYTES)
        )
        if asked.file_id is None and asked.text is not None:
            upload = text_upload(asked.text, asked.filename, limit)
    content = None
    if upload is not None:
        try:
            check_supported(upload.filename)
        except UnsupportedFile as error:
            raise invalid(str(error), param="file", code="unsupported_file") from None
        content = attach.Upload(upload.filename, upload.content)
    item = attach.Attachment(
        strategy=resolve_chunking(
            asked.chunking_strategy,
            await deps.attacher.model(request.path_params["vector_store_id"]),
        ),
        file_id=getattr(asked, "file_id", None) or "",
        upload=content,
        attributes=asked.attributes,
    )
    attached = await deps.attacher.attach(
        request.path_params["vector_store_id"], item, key_name(request.scope)
    )
    if content is not None and not attached.deduplicated:
        charge(request.scope, stored=len(content.content))
    return JSONResponse(objects.vector_store_file(attached))


@operation(
    "List a vector store's (or a file batch's) files",
    "VectorStoreFileList",
    query=[*paging_params(), query_param("filter", {"enum": list(FILE_STATUSES)})],
)
async def list_files(request: Request) -> JSONResponse:
    status = request.query_params.get("filter", "")
    if status and status not in FILE_STATUSES:
        raise invalid(f"'filter' must be one of {', '.join(FILE_STATUSES)}", param="filter")
    reply = await services(request).store.ListVectorStoreFiles(
        store_pb2.ListVectorStoreFilesRequest(
            vector_store_id=request.path_params["vector_store_id"],
            **paging(request),
            status=status,
            batch_id=request.path_params.get("batch_id", ""),
        )
    )
    data = [objects.vector_store_file(f) for f in reply.files]
    return JSONResponse(objects.page(data, reply.has_more))


@operation("Retrieve a vector store file", "VectorStoreFile")
async def get_file(request: Request) -> JSONResponse:
    item = await services(request).store.GetVectorStoreFile(_ref(request))
    return JSONResponse(objects.vector_store_file(item), headers=poll_headers(request))


@operation("Update a vector store file's attributes", "VectorStoreFile", VectorStoreFileUpdate)
async def update_file(request: Request) -> JSONResponse:
    asked = parse(VectorStoreFileUpdate, await json_body(request))
    ref = _ref(request)
    item = await services(request).store.UpdateVectorStoreFile(
        store_pb2.UpdateVectorStoreFileRequest(
            vector_store_id=ref.vector_store_id,
            file_id=ref.file_id,
            attributes=attributes_message(asked.attributes),
        )
    )
    return JSONResponse(objects.vector_store_file(item))


@operation("Remove a file (its chunks and vectors) from the vector store", "Deleted")
async def delete_file(request: Request) -> JSONResponse:
    reply = await services(request).store.DetachFile(_ref(request))
    return JSONResponse(objects.deleted(reply.file_id, "vector_store.file.deleted", reply.deleted))


@operation("The file's stored chunks", "VectorStoreFileContent")
async def file_content(request: Request) -> JSONResponse:
    reply = await services(request).store.GetVectorStoreFileChunks(_ref(request))
    return JSONResponse(objects.file_content(reply.chunks))
