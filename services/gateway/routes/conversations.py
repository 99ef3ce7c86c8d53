"""Conversations and their items (OpenAI's Conversations API), a list of conversations and a
search over their history (extensions)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse

from services.common.vocabulary import MAX_NEW_ITEMS
from services.gateway import objects, objects_chat
from services.gateway.auth import charge
from services.gateway.chat.outputs import RESULTS
from services.gateway.conversation_bodies import (
    ConversationCreate,
    ConversationUpdate,
    HistorySearchRequest,
    ItemsCreate,
)
from services.gateway.operations import INCLUDE_PARAM, operation, paging_params
from services.gateway.params import extensions, json_body, paging
from services.gateway.requests import parse
from services.gateway.routes import services
from services.gateway.routes.vector_stores import DEGRADED_HEADER, DEGRADED_REASON
from services.gateway.search import query_vectors
from services.pb import store_pb2


def includes_results(request: Request) -> bool:
    """OpenAI's `include` query parameter (repeated, or include[]=)."""
    values = request.query_params.getlist("include") + request.query_params.getlist("include[]")
    return RESULTS in values


@operation(
    "Create a conversation",
    "Conversation",
    ConversationCreate,
    body_required=False,
    returns={"conversation_id": "/id"},
)
async def create_conversation(request: Request) -> JSONResponse:
    asked = parse(ConversationCreate, extensions(await json_body(request, required=False), "title"))
    reply = await services(request).store.CreateConversation(
        store_pb2.CreateConversationRequest(
            metadata=asked.metadata, title=asked.title, items=asked.items
        )
    )
    _indexed(request)
    return JSONResponse(objects_chat.conversation(reply.conversation))


def _indexed(request: Request) -> None:
    """New items: the background embedding looks now rather than at its next poll."""
    history = services(request).history
    if history is not None:
        history.wake()


@operation(
    "List conversations, most recently active first (ragd extension)",
    "ConversationList",
    query=paging_params(),
)
async def list_conversations(request: Request) -> JSONResponse:
    reply = await services(request).store.ListConversations(
        store_pb2.ListConversationsRequest(
            **paging(request),
        )
    )
    return JSONResponse(
        objects.page(
            [objects_chat.conversation(item) for item in reply.conversations], reply.has_more
        )
    )


@operation("Retrieve a conversation", "Conversation")
async def get_conversation(request: Request) -> JSONResponse:
    reply = await services(request).store.GetConversation(
        store_pb2.ConversationRef(id=request.path_params["conversation_id"])
    )
    return JSONResponse(objects_chat.conversation(reply))


@operation("Update a conversation's metadata (or title)", "Conversation", ConversationUpdate)
async def update_conversation(request: Request) -> JSONResponse:
    asked = parse(ConversationUpdate, extensions(await json_body(request), "title"))
    sent = asked.model_fields_set
    update = store_pb2.UpdateConversationRequest(
        id=request.path_params["conversation_id"],
        has_metadata="metadata" in sent,
        metadata=asked.metadata or {},
        has_title="title" in sent,
        title=asked.title or "",
    )
    reply = await services(request).store.UpdateConversation(update)
    return JSONResponse(objects_chat.conversation(reply))


@operation("Delete a conversation with its items", "ConversationDeleted")
async def delete_conversation(request: Request) -> JSONResponse:
    reply = await services(request).store.DeleteConversation(
        store_pb2.ConversationRef(id=request.path_params["conversation_id"])
    )
    return JSONResponse(objects_chat.deleted(reply.id, "conversation.deleted"))


@operation(
    f"Add up to {MAX_NEW_ITEMS} items to a conversation",
    "ItemList",
    ItemsCreate,
    query=[INCLUDE_PARAM],
)
async def create_items(request: Request) -> JSONResponse:
    asked = parse(ItemsCreate, await json_body(request))
    reply = await services(request).store.AddItems(
        store_pb2.AddItemsRequest(
            conversation_id=request.path_params["conversation_id"],
            items=asked.items,
        )
    )
    _indexed(request)
    results = includes_results(request)
    data = [objects_chat.item(item, results) for item in reply.items]
    return JSONResponse(objects.page(data, False))


@operation("List a conversation's items", "ItemList", query=[*paging_params(), INCLUDE_PARAM])
async def list_items(request: Request) -> JSONResponse:
    reply = await services(request).store.ListItems(
        store_pb2.ListItemsRequest(
            conversation_id=request.path_params["conversation_id"],
            **paging(request),
        )
    )
    results = includes_results(request)
    return JSONResponse(
        objects.page([objects_chat.item(i, results) for i in reply.items], reply.has_more)
    )


@operation("Retrieve an item", "Item", query=[INCLUDE_PARAM])
async def get_item(request: Request) -> JSONResponse:
    item = await services(request).store.GetItem(
        store_pb2.ItemRef(
            conversation_id=request.path_params["conversation_id"],
            item_id=request.path_params["item_id"],
        )
    )
    return JSONResponse(objects_chat.item(item, includes_results(request)))


@operation("Delete an item (returns the conversation)", "Conversation")
async def delete_item(request: Request) -> JSONResponse:
    reply = await services(request).store.DeleteItem(
        store_pb2.ItemRef(
            conversation_id=request.path_params["conversation_id"],
            item_id=request.path_params["item_id"],
        )
    )
    return JSONResponse(objects_chat.conversation(reply))


@operation(
    "Search the items of every conversation, or of one (ragd extension)",
    "HistorySearchPage",
    HistorySearchRequest,
)
async def search_history(request: Request) -> JSONResponse:
    """Extension: the items of every conversation (or of one) that best match a query, by
    words, meaning or both (hybrid, the default: items not embedded yet are found by their
    words)."""
    deps = services(request)
    body = parse(HistorySearchRequest, extensions(await json_body(request), "mode"))
    query, asked = body.query, body.mode
    mode, vectors = await query_vectors(
        deps.embedder, [query], asked, deps.config.search_embed_timeout
    )
    message = store_pb2.SearchHistoryRequest(
        query=query,
        k=body.max_num_results,
        conversation_id=request.path_params.get("conversation_id", ""),
        mode=mode,
    )
    if vectors is not None:
        message.query_vector, message.model = vectors.rows[0], vectors.model
        charge(request.scope, tokens=vectors.tokens)
    reply = await deps.store.SearchHistory(message, timeout=deps.config.search_store_timeout)
    degraded = mode != asked
    return JSONResponse(
        objects_chat.history_page(query, reply.hits, mode, degraded),
        headers={DEGRADED_HEADER: DEGRADED_REASON} if degraded else None,
    )
