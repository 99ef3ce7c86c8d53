"""Store RPCs on files, their membership in collections, and file batches."""

from __future__ import annotations

from services.common.grpc_server import Context
from services.pb import store_pb2 as pb
from services.store.records import BatchFileInput, NewFile
from services.store.wire.guard import caller
from services.store.wire.messages import (
    attributes_from_message,
    batch_message,
    chunking_from_message,
    collection_file_message,
    file_message,
    model_from_message,
    stored_chunk_message,
)
from services.store.wire.rpc_base import (
    RpcBase,
    list_args,
)


class FileRpcs(RpcBase):
    async def CreateFile(self, request: pb.CreateFileRequest, context: Context) -> pb.File:
        who = caller()
        file = await self._call(
            context,
            lambda: self._repository.create_file(
                request.filename, request.purpose, request.content, caller=who
            ),
        )
        return file_message(file)

    async def GetFile(self, request: pb.GetFileRequest, context: Context) -> pb.File:
        return file_message(
            await self._call(context, lambda: self._repository.get_file(request.id))
        )

    async def ListFiles(
        self, request: pb.ListFilesRequest, context: Context
    ) -> pb.ListFilesResponse:
        limit, order = list_args(request.limit, request.order)
        who = caller()
        page = await self._call(
            context,
            lambda: self._repository.list_files(
                caller=who,
                limit=limit,
                order=order,
                after=request.after or None,
                purpose=request.purpose or None,
            ),
        )
        return pb.ListFilesResponse(
            files=[file_message(item) for item in page.items], has_more=page.has_more
        )

    async def GetFileContent(self, request: pb.GetFileRequest, context: Context) -> pb.FileContent:
        file, content = await self._call(
            context, lambda: self._repository.get_file_content(request.id)
        )
        return pb.FileContent(file=file_message(file), content=content)

    async def DeleteFile(
        self, request: pb.GetFileRequest, context: Context
    ) -> pb.DeleteFileResponse:
        await self._call(context, lambda: self._repository.delete_file(request.id))
        return pb.DeleteFileResponse(id=request.id, deleted=True)

    # Files in collections

    async def AttachFile(
        self, request: pb.AttachFileRequest, context: Context
    ) -> pb.CollectionFile:
        upload = None
        if request.HasField("upload"):
            item = request.upload
            upload = NewFile(item.filename, item.content, item.purpose or "assistants")
        record = await self._call(
            context,
            lambda: self._repository.attach_file(
                request.collection_id,
                request.file_id,
                attributes_from_message(request.attributes),
                chunking_from_message(request.chunking, request.HasField("chunking")),
                model=model_from_message(request.model, request.HasField("model")),
                upload=upload,
                key_name=request.key_name,
            ),
        )
        return collection_file_message(record)

    async def GetCollectionFile(
        self, request: pb.CollectionFileRef, context: Context
    ) -> pb.CollectionFile:
        record = await self._call(
            context,
            lambda: self._repository.get_collection_file(request.collection_id, request.file_id),
        )
        return collection_file_message(record)

    async def ListCollectionFiles(
        self, request: pb.ListCollectionFilesRequest, context: Context
    ) -> pb.ListCollectionFilesResponse:
        limit, order = list_args(request.limit, request.order)
        page = await self._call(
            context,
            lambda: self._repository.list_collection_files(
                request.collection_id,
                limit=limit,
                order=order,
                after=request.after or None,
                before=request.before or None,
                status=request.status or None,
                batch_id=request.batch_id or None,
            ),
        )
        return pb.ListCollectionFilesResponse(
            files=[collection_file_message(item) for item in page.items], has_more=page.has_more
        )

    async def UpdateCollectionFile(
        self, request: pb.UpdateCollectionFileRequest, context: Context
    ) -> pb.CollectionFile:
        record = await self._call(
            context,
            lambda: self._repository.update_collection_file(
                request.collection_id,
                request.file_id,
                attributes_from_message(request.attributes),
            ),
        )
        return collection_file_message(record)

    async def DetachFile(
        self, request: pb.CollectionFileRef, context: Context
    ) -> pb.DetachFileResponse:
        await self._call(
            context, lambda: self._repository.detach_file(request.collection_id, request.file_id)
        )
        return pb.DetachFileResponse(file_id=request.file_id, deleted=True)

    async def GetCollectionFileChunks(
        self, request: pb.CollectionFileRef, context: Context
    ) -> pb.CollectionFileChunks:
        record, chunks = await self._call(
            context,
            lambda: self._repository.get_collection_file_chunks(
                request.collection_id, request.file_id
            ),
        )
        return pb.CollectionFileChunks(
            file=collection_file_message(record),
            chunks=[stored_chunk_message(chunk) for chunk in chunks],
        )

    # Batches

    async def CreateFileBatch(
        self, request: pb.CreateFileBatchRequest, context: Context
    ) -> pb.FileBatch:
        def work() -> pb.FileBatch:
            batch_files = [
                BatchFileInput(
                    file_id=item.file_id,
                    attributes=attributes_from_message(item.attributes),
                    chunking=chunking_from_message(item.chunking, item.HasField("chunking")),
                )
                for item in request.files
            ]
            batch = self._repository.create_file_batch(
                request.collection_id,
                batch_files,
                model=model_from_message(request.model, request.HasField("model")),
                key_name=request.key_name,
            )
            return batch_message(batch)

        return await self._call(context, work)

    async def GetFileBatch(self, request: pb.FileBatchRef, context: Context) -> pb.FileBatch:
        batch = await self._call(
            context,
            lambda: self._repository.get_file_batch(request.collection_id, request.batch_id),
        )
        return batch_message(batch)

    async def CancelFileBatch(self, request: pb.FileBatchRef, context: Context) -> pb.FileBatch:
        batch = await self._call(
            context,
            lambda: self._repository.cancel_file_batch(request.collection_id, request.batch_id),
        )
        return batch_message(batch)
