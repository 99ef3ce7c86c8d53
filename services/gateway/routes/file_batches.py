"""File batches: attach up to 2000 files at once, poll them, cancel them."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from services.common.model_info import ModelInfo
from services.common.vocabulary import MAX_BATCH_FILES
from services.gateway import objects
from services.gateway.attach import Attachment
from services.gateway.auth import key_name
from services.gateway.errors import invalid
from services.gateway.ingest import resolve_chunking
from services.gateway.operations import operation
from services.gateway.params import attributes, json_body
from services.gateway.routes import poll_headers, services
from services.pb import store_pb2


@operation(
    f"Attach up to {MAX_BATCH_FILES} files",
    "FileBatch",
    "FileBatchCreate",
    returns={"vector_store_id": "/vector_store_id", "batch_id": "/id"},
)
async def create_batch(request: Request) -> JSONResponse:
    deps = services(request)
    body = await json_body(request)
    model = await deps.attacher.model(request.path_params["vector_store_id"])
    file_ids, files = body.get("file_ids"), body.get("files")
    if (file_ids is None) == (files is None):
        raise invalid("send either 'file_ids' or 'files', not both", param="file_ids")
    entries: list[Attachment] = []
    if file_ids is not None:
        if not isinstance(file_ids, list) or not all(isinstance(f, str) for f in file_ids):
            raise invalid("'file_ids' must be an array of file ids", param="file_ids")
        attrs = attributes(body)
        strategy = resolve_chunking(body.get("chunking_strategy"), model)
        entries = [Attachment(strategy, file_id=file_id, attributes=attrs) for file_id in file_ids]
    else:
        if not isinstance(files, list):
            raise invalid("'files' must be an array", param="files")
        entries = [_entry(item, index, model) for index, item in enumerate(files)]
    if not 1 <= len(entries) <= MAX_BATCH_FILES:
        raise invalid(
            f"a batch holds 1 to {MAX_BATCH_FILES} files, got {len(entries)}",
            param="file_ids" if file_ids is not None else "files",
        )
    batch = await deps.attacher.attach_batch(
        request.path_params["vector_store_id"], entries, key_name(request.scope)
    )
    return JSONResponse(objects.file_batch(batch))


def _entry(item: Any, index: int, model: ModelInfo) -> Attachment:
    if not isinstance(item, dict) or not isinstance(item.get("file_id"), str):
        raise invalid(f"'files[{index}]' must be an object with a 'file_id'", param="files")
    return Attachment(
        resolve_chunking(item.get("chunking_strategy"), model, f"files[{index}].chunking_strategy"),
        file_id=item["file_id"],
        attributes=attributes(item),
    )


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
