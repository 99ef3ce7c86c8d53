"""File batches: attach up to 2000 files at once, poll them, cancel them."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse

from services.common.vocabulary import MAX_BATCH_FILES
from services.gateway import objects
from services.gateway.attach import Attachment
from services.gateway.auth import key_name
from services.gateway.file_bodies import FileBatchCreate
from services.gateway.ingest import resolve_chunking
from services.gateway.operations import operation
from services.gateway.params import json_body
from services.gateway.requests import parse
from services.gateway.routes import poll_headers, services
from services.pb import store_pb2


@operation(
    f"Attach up to {MAX_BATCH_FILES} files",
    "FileBatch",
    FileBatchCreate,
    returns={"vector_store_id": "/vector_store_id", "batch_id": "/id"},
)
async def create_batch(request: Request) -> JSONResponse:
    deps = services(request)
    asked = parse(FileBatchCreate, await json_body(request))
    model = await deps.attacher.model(request.path_params["vector_store_id"])
    if asked.files is None:
        strategy = resolve_chunking(asked.chunking_strategy, model)
        entries = [
            Attachment(strategy, file_id=file_id, attributes=asked.attributes)
            for file_id in asked.file_ids or ()
        ]
    else:
        entries = [
            Attachment(
                resolve_chunking(
                    item.chunking_strategy, model, f"files[{index}].chunking_strategy"
                ),
                file_id=item.file_id,
                attributes=item.attributes,
            )
            for index, item in enumerate(asked.files)
        ]
    batch = await deps.attacher.attach_batch(
        request.path_params["vector_store_id"], entries, key_name(request.scope)
    )
    return JSONResponse(objects.file_batch(batch))


def _ref(request: Request) -> store_pb2.FileBatchRef:
    return store_pb2.FileBatchRef(
        vector_store_id=request.path_params["vector_store_id"],
        batch_id=request.path_params["batch_id"],
    )


@operation("Retrieve a file batch", "FileBatch")
async def get_batch(request: Request) -> JSONResponse:
    batch = await services(request).store.GetFileBatch(_ref(request))
    return JSONResponse(objects.file_batch(batch), headers=poll_headers(request))


@operation("Cancel a file batch", "FileBatch")
async def cancel_batch(request: Request) -> JSONResponse:
    batch = await services(request).store.CancelFileBatch(_ref(request))
    return JSONResponse(objects.file_batch(batch))
