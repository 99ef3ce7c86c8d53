"""Who a store call is for, and every object it names checked against them: one interceptor
for every RPC, so that no route or RPC can forget the ownership check.

The gateway names the caller in metadata (services/common/tenancy.py). For each RPC,
REFERENCES says which request fields name which kind of object; the interceptor collects
them, and RpcBase._call has the repository refuse any the caller does not reach (as an unknown
id, access.check) before the RPC's own work, on the same thread. Listings, searches and
creations read the caller with `caller()` and narrow or stamp what they do (access.py).
tests/test_store_access.py fails for an RPC whose request names an id that is neither
referenced here nor listed in UNCHECKED with the reason.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import grpc

from services.common import tenancy
from services.store.access import CONVERSATION, FILE, RESPONSE, VECTOR_STORE
from services.store.records import EVERYTHING, Access

# RPC -> (request field, kind): the objects each names. A repeated field (or a field of a
# repeated message, "files.file_id") names each of its values.
REFERENCES: dict[str, tuple[tuple[str, str], ...]] = {
    "GetVectorStore": (("id", VECTOR_STORE),),
    "DeleteVectorStore": (("id", VECTOR_STORE),),
    "UpdateVectorStore": (("id", VECTOR_STORE),),
    "CancelReindex": (("id", VECTOR_STORE),),
    "StartReindex": (("vector_store_id", VECTOR_STORE),),
    "AddChunks": (("vector_store_id", VECTOR_STORE),),
    "Search": (("vector_store_id", VECTOR_STORE),),
    "GetFile": (("id", FILE),),
    "GetFileContent": (("id", FILE),),
    "DeleteFile": (("id", FILE),),
    "AttachFile": (("vector_store_id", VECTOR_STORE), ("file_id", FILE)),
    "GetVectorStoreFile": (("vector_store_id", VECTOR_STORE),),
    "ListVectorStoreFiles": (("vector_store_id", VECTOR_STORE),),
    "UpdateVectorStoreFile": (("vector_store_id", VECTOR_STORE),),
    "DetachFile": (("vector_store_id", VECTOR_STORE),),
    "GetVectorStoreFileChunks": (("vector_store_id", VECTOR_STORE),),
    "CreateFileBatch": (("vector_store_id", VECTOR_STORE), ("files.file_id", FILE)),
    "GetFileBatch": (("vector_store_id", VECTOR_STORE),),
    "CancelFileBatch": (("vector_store_id", VECTOR_STORE),),
    "GetConversation": (("id", CONVERSATION),),
    "UpdateConversation": (("id", CONVERSATION),),
    "DeleteConversation": (("id", CONVERSATION),),
    "AddItems": (("conversation_id", CONVERSATION),),
    "ListItems": (("conversation_id", CONVERSATION),),
    "GetItem": (("conversation_id", CONVERSATION),),
    "DeleteItem": (("conversation_id", CONVERSATION),),
    "SearchHistory": (("conversation_id", CONVERSATION),),
    "RecordResponse": (
        ("conversation_id", CONVERSATION),
        ("previous_response_id", RESPONSE),
    ),
    "GetResponse": (("id", RESPONSE),),
    "DeleteResponse": (("id", RESPONSE),),
    "ListResponseInputItems": (("response_id", RESPONSE),),
    "GetHistory": (("conversation_id", CONVERSATION), ("previous_response_id", RESPONSE)),
    "StartResponse": (
        ("response.conversation_id", CONVERSATION),
        ("response.previous_response_id", RESPONSE),
    ),
    "RenewResponse": (("id", RESPONSE),),
    "CancelResponse": (("id", RESPONSE),),
}

# Request fields that name something but are not checked here, and why.
UNCHECKED: dict[str, str] = {
    # Within an object checked above: a vector store's files and batches, a conversation's
    # items are found inside it, never across.
    "GetVectorStoreFile.file_id": "inside the checked vector store",
    "UpdateVectorStoreFile.file_id": "inside the checked vector store",
    "DetachFile.file_id": "inside the checked vector store",
    "GetVectorStoreFileChunks.file_id": "inside the checked vector store",
    "ListVectorStoreFiles.batch_id": "inside the checked vector store",
    "GetFileBatch.batch_id": "inside the checked vector store",
    "CancelFileBatch.batch_id": "inside the checked vector store",
    "GetItem.item_id": "inside the checked conversation",
    "DeleteItem.item_id": "inside the checked conversation",
    # Cursors: the listing finds them among what the caller reaches, or answers as for an
    # unknown cursor (access.py's clauses).
    "ListVectorStores.after": "listing cursor",
    "ListVectorStores.before": "listing cursor",
    "ListFiles.after": "listing cursor",
    "ListConversations.after": "listing cursor",
    "ListConversations.before": "listing cursor",
    "ListItems.after": "cursor inside the checked conversation",
    "ListItems.before": "cursor inside the checked conversation",
    "ListVectorStoreFiles.after": "cursor inside the checked vector store",
    "ListVectorStoreFiles.before": "cursor inside the checked vector store",
    "ListResponseInputItems.after": "cursor inside the checked response",
    # New objects, named by the caller: the store stamps them with the caller's project.
    "AddChunks.file_id": "a file written here, in the vector store's project (ingest.py)",
    "RecordResponse.id": "the new response's id",
    "StartResponse.response.id": "the new response's id",
    # New items keep the id they were streamed under unless it is taken (then a fresh one).
    "CreateConversation.items.id": "a new item's id",
    "AddItems.items.id": "a new item's id",
    "RecordResponse.inputs.id": "a new item's id",
    "RecordResponse.outputs.id": "a new item's id",
    "StartResponse.response.inputs.id": "a new item's id",
    "StartResponse.response.outputs.id": "a new item's id",
    # The gateway's own calls (ingest workers, audit, key usage) and the operator's (admin
    # routes, which take an admin key): never made on behalf of a project's key.
    "ClaimJobs.worker_id": "ingest workers",
    "RenewJob.job_id": "ingest workers",
    "RenewJob.worker_id": "ingest workers",
    "CompleteJob.worker_id": "ingest workers",
    "FailJob.worker_id": "ingest workers",
    "CompleteJob.job_id": "ingest workers",
    "FailJob.job_id": "ingest workers",
    "RecordAudit.entries.id": "the gateway's audit log",
    "RecordAudit.entries.vector_store_id": "the gateway's audit log",
    "ListAudit.vector_store_id": "admin",
    "ListAudit.before_id": "admin",
    "PendingItemTexts.after": "the history indexer",
}


@dataclass(frozen=True)
class Pending:
    """A call's caller and the (kind, id) pairs its request names, to be checked."""

    caller: Access = EVERYTHING
    references: tuple[tuple[str, str], ...] = ()


_NONE = Pending()
_CURRENT: ContextVar[Pending | None] = ContextVar("ragd_store_call", default=None)


def caller() -> Access:
    """Who the current RPC serves (EVERYTHING for the gateway's own calls)."""
    return pending().caller


def pending() -> Pending:
    return _CURRENT.get() or _NONE


def access_of(metadata: Any) -> Access:
    found = tenancy.from_metadata(metadata or ())
    if found is None:
        return EVERYTHING
    return Access(
        project=found.project,
        key=found.key,
        vector_stores=found.vector_stores,
        project_conversations=found.project_conversations,
    )


def _values(message: Any, path: str) -> list[str]:
    head, _, rest = path.partition(".")
    value = getattr(message, head)
    items = list(value) if message.DESCRIPTOR.fields_by_name[head].is_repeated else [value]
    if rest:
        return [found for item in items for found in _values(item, rest)]
    return [str(item) for item in items if item]


def references(method: str, request: Any) -> tuple[tuple[str, str], ...]:
    return tuple(
        (kind, value)
        for path, kind in REFERENCES.get(method, ())
        for value in _values(request, path)
    )


Handler = Callable[[Any, Any], Awaitable[Any]]


class Guard(grpc.aio.ServerInterceptor):
    async def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        if handler is None or handler.unary_unary is None:
            return handler
        inner: Handler = handler.unary_unary
        method = details.method.rpartition("/")[2]

        async def guarded(request: Any, context: Any) -> Any:
            who = access_of(context.invocation_metadata())
            found = references(method, request) if not who.everything else ()
            token = _CURRENT.set(Pending(who, found))
            try:
                return await inner(request, context)
            finally:
                _CURRENT.reset(token)

        return grpc.unary_unary_rpc_method_handler(
            guarded,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
