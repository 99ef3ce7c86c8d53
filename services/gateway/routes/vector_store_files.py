"""Files in a vector store: attach (and the direct-upload extension), list, get, update, detach."""

from __future__ import annotations

import json
from collections.abc import Sequence

from starlette.requests import Request
from starlette.responses import JSONResponse

from services.gateway import objects
from services.gateway.errors import invalid
from services.gateway.ingest import ChunkingStrategy, check_store_model, resolve_chunking
from services.gateway.params import attributes, json_body, query_choice, query_int
from services.gateway.parsing import UnsupportedFile, check_supported
from services.gateway.state import Services, services
from services.gateway.store_client import Attribute, attributes_message
from services.gateway.uploads import Upload, form_json, read_upload, text_upload
from services.pb import store_pb2

STATUSES = ("in_progress", "completed", "failed", "cancelled")


def _ref(request: Request) -> store_pb2.CollectionFileRef:
    return store_pb2.CollectionFileRef(
        collection_id=request.path_params["store_id"], file_id=request.path_params["file_id"]
    )


async def attach_many(
    deps: Services,
    store_id: str,
    files: Sequence[tuple[str, dict[str, Attribute], ChunkingStrategy]],
) -> store_pb2.FileBatch:
    """Attaches files in one store transaction (as a batch) and wakes the ingest workers."""
    model = await deps.embedder.info()
    batch: store_pb2.FileBatch = await deps.store.call(
        "CreateFileBatch",
        store_pb2.CreateFileBatchRequest(
            collection_id=store_id,
            # The store refuses the batch if it was indexed with another model.
            model=model.name,
            dimensions=model.dimensions,
            files=[
                store_pb2.BatchFile(
                    file_id=file_id,
                    attributes=attributes_message(attrs),
                    chunking_json=json.dumps(strategy.as_json()),
                )
                for file_id, attrs, strategy in files
            ],
        ),
    )
    deps.workers.wake()
    return batch


async def attach_file(request: Request) -> JSONResponse:
    """OpenAI's {"file_id": ...}, or (extension) a multipart file / JSON {"text", "filename"}."""
    deps = services(request)
    store_id = request.path_params["store_id"]
    limit = deps.config.max_upload_bytes
    if request.headers.get("content-type", "").startswith("multipart/form-data"):
        upload: Upload | None = await read_upload(request, limit)
    else:
        body = await json_body(request)
        upload = None if "file_id" in body else text_upload(body, limit)
    if upload is None:
        file_id = body["file_id"]
        if not isinstance(file_id, str) or not file_id:
            raise invalid("'file_id' must be a file id", param="file_id")
        fields = body
    else:
        try:
            check_supported(upload.filename)
        except UnsupportedFile as error:
            raise invalid(str(error), param="file", code="unsupported_file") from None
        # An unknown store, or one indexed with another model, fails before the upload is stored.
        collection = await deps.store.call(
            "GetCollection", store_pb2.GetCollectionRequest(id=store_id)
        )
        check_store_model(collection, await deps.embedder.info())
        created = await deps.store.call(
            "CreateFile",
            store_pb2.CreateFileRequest(
                filename=upload.filename, purpose="assistants", content=upload.content
            ),
        )
        file_id, fields = created.id, upload.fields
    attrs = attributes({"attributes": form_json(fields, "attributes")})
    model = await deps.embedder.info()
    strategy = resolve_chunking(form_json(fields, "chunking_strategy"), model)
    attached = await deps.store.call(
        "AttachFile",
        store_pb2.AttachFileRequest(
            collection_id=store_id,
            file_id=file_id,
            attributes=attributes_message(attrs),
            chunking_json=json.dumps(strategy.as_json()),
            # The store refuses the file if the vector store was indexed with another model.
            model=model.name,
            dimensions=model.dimensions,
        ),
    )
    deps.workers.wake()
    return JSONResponse(objects.vector_store_file(attached))


async def list_files(request: Request) -> JSONResponse:
    status = request.query_params.get("filter", "")
    if status and status not in STATUSES:
        raise invalid(f"'filter' must be one of {', '.join(STATUSES)}", param="filter")
    reply = await services(request).store.call(
        "ListCollectionFiles",
        store_pb2.ListCollectionFilesRequest(
            collection_id=request.path_params["store_id"],
            limit=query_int(request, "limit", 20, 1, 100),
            order=query_choice(request, "order", "desc", ("asc", "desc")),
            after=request.query_params.get("after", ""),
            before=request.query_params.get("before", ""),
            status=status,
            batch_id=request.path_params.get("batch_id", ""),
        ),
    )
    data = [objects.vector_store_file(f) for f in reply.files]
    return JSONResponse(objects.page(data, reply.has_more))


async def get_file(request: Request) -> JSONResponse:
    item = await services(request).store.call("GetCollectionFile", _ref(request))
    return JSONResponse(objects.vector_store_file(item))


async def update_file(request: Request) -> JSONResponse:
    body = await json_body(request)
    if "attributes" not in body:
        raise invalid("'attributes' is required", param="attributes")
    ref = _ref(request)
    item = await services(request).store.call(
        "UpdateCollectionFile",
        store_pb2.UpdateCollectionFileRequest(
            collection_id=ref.collection_id,
            file_id=ref.file_id,
            attributes=attributes_message(attributes(body)),
        ),
    )
    return JSONResponse(objects.vector_store_file(item))


async def delete_file(request: Request) -> JSONResponse:
    reply = await services(request).store.call("DetachFile", _ref(request))
    return JSONResponse(
        {"id": reply.file_id, "object": "vector_store.file.deleted", "deleted": reply.deleted}
    )


async def file_content(request: Request) -> JSONResponse:
    reply = await services(request).store.call("GetCollectionFileChunks", _ref(request))
    return JSONResponse(
        {
            "object": "vector_store.file_content.page",
            "data": [{"type": "text", "text": chunk.text} for chunk in reply.chunks],
            "has_more": False,
            "next_page": None,
        }
    )
