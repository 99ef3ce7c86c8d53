"""Store RPCs on files, their membership in vector stores, and file batches."""

from __future__ import annotations

from services.common.grpc_server import Context
from services.pb import store_pb2 as pb
from services.store.records import BatchFileInput, NewFile
from services.store.wire.guard import caller
from services.store.wire.messages import (
    attributes_from_message,
    batch_message,
    chunking_from_message,
    file_message,
    model_from_message,
    stored_chunk_message,
    vector_store_file_message,
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
                request.filename,
                request.purpose,
                request.content,
                caller=who,
                expires_after_seconds=request.expires_after_seconds,
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

    # Files in vector stores

    async def AttachFile(
        self, request: pb.AttachFileRequest, context: Context
    ) -> pb.VectorStoreFile:
        upload = None
        if request.HasField("upload"):
            item = request.upload
            upload = NewFile(item.filename, item.content, item.purpose or "assistants")
        record = await self._call(
            context,
            lambda: self._repository.attach_file(
                request.vector_store_id,
                request.file_id,
                attributes_from_message(request.attributes),
                chunking_from_message(request.chunking, request.HasField("chunking")),
                model=model_from_message(request.model, request.HasField("model")),
                upload=upload,
                key_name=request.key_name,
            ),
        )
        return vector_store_file_message(record)

    async def GetVectorStoreFile(
        self, request: pb.VectorStoreFileRef, context: Context
    ) -> pb.VectorStoreFile:
        record = await self._call(
            context,
            lambda: self._repository.get_vector_store_file(
                request.vector_store_id, request.file_id
            ),
        )
        return vector_store_file_message(record)

    async def ListVectorStoreFiles(
        self, request: pb.ListVectorStoreFilesRequest, context: Context
    ) -> pb.ListVectorStoreFilesResponse:
        limit, order = list_args(request.limit, request.order)
        page = await self._call(
            context,
            lambda: self._repository.list_vector_store_files(
                request.vector_store_id,
                limit=limit,
                order=order,
                after=request.after or None,
                before=request.before or None,
                status=request.status or None,
                batch_id=request.batch_id or None,
            ),
        )
        return pb.ListVectorStoreFilesResponse(
            files=[vector_store_file_message(item) for item in page.items], has_more=page.has_more
        )

    async def UpdateVectorStoreFile(
        self, request: pb.UpdateVectorStoreFileRequest, context: Context
    ) -> pb.VectorStoreFile:
        record = await self._call(
            context,
            lambda: self._repository.update_vector_store_file(
                request.vector_store_id,
                request.file_id,
                attributes_from_message(request.attributes),
            ),
        )
        return vector_store_file_message(record)

    async def DetachFile(
        self, request: pb.VectorStoreFileRef, context: Context
    ) -> pb.DetachFileResponse:
        await self._call(
            context, lambda: self._repository.detach_file(request.vector_store_id, request.file_id)
        )
        return pb.DetachFileResponse(file_id=request.file_id, deleted=True)

    async def GetVectorStoreFileChunks(
        self, request: pb.VectorStoreFileRef, context: Context
    ) -> pb.VectorStoreFileChunks:
        record, chunks = await self._call(
            context,
            lambda: self._repository.get_vector_store_file_chunks(
                request.vector_store_id, request.file_id
            ),
        )
        return pb.VectorStoreFileChunks(
            file=vector_store_file_message(record),
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
                request.vector_store_id,
                batch_files,
                model=model_from_message(request.model, request.HasField("model")),
                key_name=request.key_name,
            )
            return batch_message(batch)

        return await self._call(context, work)

    async def GetFileBatch(self, request: pb.FileBatchRef, context: Context) -> pb.FileBatch:
        batch = await self._call(
            context,
            lambda: self._repository.get_file_batch(request.vector_store_id, request.batch_id),
        )
        return batch_message(batch)

    async def CancelFileBatch(self, request: pb.FileBatchRef, context: Context) -> pb.FileBatch:
        batch = await self._call(
            context,
            lambda: self._repository.cancel_file_batch(request.vector_store_id, request.batch_id),
        )
        return batch_message(batch)
