"""Store RPCs on conversations, their items and responses."""

from __future__ import annotations

from services.common.grpc_server import Context
from services.common.vocabulary import LEXICAL
from services.pb import store_pb2 as pb
from services.store.wire.guard import caller
from services.store.wire.messages import (
    conversation_message,
    item_message,
    new_items_from_message,
    response_from_message,
    response_message,
)
from services.store.wire.rpc_base import RpcBase, list_args


class ConversationRpcs(RpcBase):
    async def CreateConversation(
        self, request: pb.CreateConversationRequest, context: Context
    ) -> pb.ConversationWithItems:
        who = caller()
        conversation, items = await self._call(
            context,
            lambda: self._repository.create_conversation(
                dict(request.metadata),
                request.title,
                new_items_from_message(request.items),
                caller=who,
            ),
        )
        return pb.ConversationWithItems(
            conversation=conversation_message(conversation),
            items=[item_message(item) for item in items],
        )

    async def GetConversation(
        self, request: pb.ConversationRef, context: Context
    ) -> pb.Conversation:
        return conversation_message(
            await self._call(context, lambda: self._repository.get_conversation(request.id))
        )

    async def UpdateConversation(
        self, request: pb.UpdateConversationRequest, context: Context
    ) -> pb.Conversation:
        conversation = await self._call(
            context,
            lambda: self._repository.update_conversation(
                request.id,
                metadata=dict(request.metadata) if request.has_metadata else None,
                title=request.title if request.has_title else None,
            ),
        )
        return conversation_message(conversation)

    async def DeleteConversation(
        self, request: pb.ConversationRef, context: Context
    ) -> pb.DeleteConversationResponse:
        await self._call(context, lambda: self._repository.delete_conversation(request.id))
        return pb.DeleteConversationResponse(id=request.id, deleted=True)

    async def ListConversations(
        self, request: pb.ListConversationsRequest, context: Context
    ) -> pb.ListConversationsResponse:
        limit, order = list_args(request.limit, request.order)
        who = caller()
        page = await self._call(
            context,
            lambda: self._repository.list_conversations(
                limit=limit,
                order=order,
                after=request.after or None,
                before=request.before or None,
                caller=who,
            ),
        )
        return pb.ListConversationsResponse(
            conversations=[conversation_message(item) for item in page.items],
            has_more=page.has_more,
        )

    async def AddItems(self, request: pb.AddItemsRequest, context: Context) -> pb.ItemList:
        items = await self._call(
            context,
            lambda: self._repository.add_items(
                request.conversation_id, new_items_from_message(request.items)
            ),
        )
        return pb.ItemList(items=[item_message(item) for item in items])

    async def ListItems(self, request: pb.ListItemsRequest, context: Context) -> pb.ItemList:
        limit, order = list_args(request.limit, request.order)
        page = await self._call(
            context,
            lambda: self._repository.list_items(
                request.conversation_id,
                limit=limit,
                order=order,
                after=request.after or None,
                before=request.before or None,
            ),
        )
        return pb.ItemList(
            items=[item_message(item) for item in page.items], has_more=page.has_more
        )

    async def GetItem(self, request: pb.ItemRef, context: Context) -> pb.ConversationItem:
        item = await self._call(
            context, lambda: self._repository.get_item(request.conversation_id, request.item_id)
        )
        return item_message(item)

    async def DeleteItem(self, request: pb.ItemRef, context: Context) -> pb.Conversation:
        conversation = await self._call(
            context, lambda: self._repository.delete_item(request.conversation_id, request.item_id)
        )
        return conversation_message(conversation)

    async def SearchHistory(
        self, request: pb.SearchHistoryRequest, context: Context
    ) -> pb.SearchHistoryResponse:
        who = caller()
        hits = await self._call(
            context,
            lambda: self._repository.search_history(
                request.query,
                request.k or 10,
                request.conversation_id,
                mode=request.mode or LEXICAL,
                vector=request.query_vector,
                model=request.model,
                caller=who,
            ),
        )
        return pb.SearchHistoryResponse(
            hits=[pb.HistoryHit(item=item_message(hit.item), score=hit.score) for hit in hits]
        )

    async def PendingItemTexts(
        self, request: pb.PendingItemTextsRequest, context: Context
    ) -> pb.PendingItemTextsResponse:
        texts = await self._call(
            context,
            lambda: self._repository.pending_item_texts(
                request.model, request.after, request.limit or 64
            ),
        )
        return pb.PendingItemTextsResponse(
            items=[pb.PendingItemText(key=item.key, text=item.text) for item in texts]
        )

    async def PutItemVectors(
        self, request: pb.PutItemVectorsRequest, context: Context
    ) -> pb.PutItemVectorsResponse:
        written = await self._call(
            context,
            lambda: self._repository.put_item_vectors(
                request.model, request.dimensions, list(request.keys), request.vectors
            ),
        )
        return pb.PutItemVectorsResponse(written=written)

    async def RecordResponse(
        self, request: pb.RecordResponseRequest, context: Context
    ) -> pb.ResponseRecord:
        who = caller()
        record = await self._call(
            context,
            lambda: self._repository.record_response(response_from_message(request), caller=who),
        )
        return response_message(record)

    async def StartResponse(
        self, request: pb.StartResponseRequest, context: Context
    ) -> pb.ResponseRecord:
        response = response_from_message(request.response)
        who = caller()
        record = await self._call(
            context,
            lambda: self._repository.start_response(response, request.lease_seconds, caller=who),
        )
        return response_message(record)

    async def RenewResponse(
        self, request: pb.RenewResponseRequest, context: Context
    ) -> pb.ResponseRecord:
        record = await self._call(
            context,
            lambda: self._repository.renew_response(
                request.id, request.status, request.lease_seconds
            ),
        )
        return response_message(record)

    async def CancelResponse(self, request: pb.ResponseRef, context: Context) -> pb.ResponseRecord:
        record = await self._call(context, lambda: self._repository.cancel_response(request.id))
        return response_message(record)

    async def GetResponse(self, request: pb.ResponseRef, context: Context) -> pb.ResponseRecord:
        record = await self._call(context, lambda: self._repository.get_response(request.id))
        return response_message(record)

    async def DeleteResponse(
        self, request: pb.ResponseRef, context: Context
    ) -> pb.DeleteResponseResponse:
        await self._call(context, lambda: self._repository.delete_response(request.id))
        return pb.DeleteResponseResponse(id=request.id, deleted=True)

    async def ListResponseInputItems(
        self, request: pb.ListResponseInputItemsRequest, context: Context
    ) -> pb.ItemList:
        limit, order = list_args(request.limit, request.order)
        page = await self._call(
            context,
            lambda: self._repository.list_response_input_items(
                request.response_id, limit=limit, order=order, after=request.after or None
            ),
        )
        return pb.ItemList(
            items=[item_message(item) for item in page.items], has_more=page.has_more
        )

    async def GetHistory(self, request: pb.GetHistoryRequest, context: Context) -> pb.ItemList:
        items = await self._call(
            context,
            lambda: self._repository.history(
                conversation_id=request.conversation_id,
                previous_response_id=request.previous_response_id,
                limit=request.limit or 500,
            ),
        )
        return pb.ItemList(items=[item_message(item) for item in items])
