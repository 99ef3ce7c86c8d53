"""Conversations, their items and responses rendered as OpenAI's JSON objects, and the
history search page (an extension). The schemas they match are in schemas_chat.py;
tests/test_renderers.py checks every property is produced."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from services.common.vocabulary import COMPLETED
from services.gateway.chat.outputs import RESULTS
from services.gateway.chat.settings import Failure, Incomplete, ResponseSettings, Usage, ending
from services.pb import store_pb2


def conversation(item: store_pb2.Conversation) -> dict[str, Any]:
    return {
        "id": item.id,
        "object": "conversation",
        "created_at": item.created_at,
        "metadata": dict(item.metadata),
        # Extensions: what a list of conversations shows.
        "title": item.title or None,
        "last_active_at": item.last_active_at,
        "item_count": item.item_count,
        "turn_count": item.turn_count,
    }


def item(stored: store_pb2.ConversationItem, include_results: bool = True) -> dict[str, Any]:
    """A stored item as OpenAI's JSON: its body's fields with id, type, role and status (the
    body is the item as OpenAI sent it, kept opaque: see chat/items.py)."""
    body: dict[str, Any] = json.loads(stored.body_json or "{}")
    rendered: dict[str, Any] = {"id": stored.id, "type": stored.type, **body}
    if stored.role:
        rendered["role"] = stored.role
    rendered["status"] = stored.status
    if stored.type == "file_search_call":
        rendered.setdefault("queries", [])
        if not include_results:
            rendered["results"] = None
        else:
            rendered.setdefault("results", None)
    return rendered


def history_page(
    query: str, hits: Sequence[store_pb2.HistoryHit], mode: str, degraded: bool
) -> dict[str, Any]:
    """Extension: the items of conversations that best match a query."""
    data = [
        {
            "object": "conversation.search_result",
            "conversation_id": hit.item.conversation_id,
            "response_id": hit.item.response_id or None,
            "position": hit.item.position,
            "score": round(float(hit.score), 6),
            "created_at": hit.item.created_at,
            "item": item(hit.item, include_results=False),
        }
        for hit in hits
    ]
    return {
        "object": "list",
        "search_query": query,
        "data": data,
        "has_more": False,
        "mode": mode,
        "degraded": degraded,
    }


# OpenAI's codes for a failed response (openai/types/responses/response_error.py); a failure
# of ours with no counterpart is a server_error, its own code kept in the message.
_ERROR_CODES = {
    "rate_limit_exceeded": "rate_limit_exceeded",
    "storage_full": "server_error",
    "context_length_exceeded": "invalid_prompt",
    "invalid_value": "invalid_prompt",
}
# OpenAI's reasons for an incomplete response (Response.IncompleteDetails).
_INCOMPLETE_REASONS = ("max_output_tokens", "max_messages", "content_filter", "steered")


def response_error(code: str | None, message: str) -> dict[str, Any]:
    """A failure as OpenAI's ResponseError: one of its codes, ours in the message."""
    ours = code or "server_error"
    theirs = _ERROR_CODES.get(ours, "server_error")
    return {"code": theirs, "message": message if ours == theirs else f"{ours}: {message}"}


def _error(problem: Failure | None) -> dict[str, Any] | None:
    """The store keeps our code; OpenAI's is derived when rendered."""
    return response_error(problem["code"], problem["message"]) if problem else None


def _usage(counts: Usage | None) -> dict[str, Any] | None:
    """Null when the upstream reported no tokens (not zeros)."""
    return counts.model_dump() if counts and counts.total_tokens else None


def _incomplete(details: Incomplete | None) -> dict[str, Any] | None:
    """OpenAI's reason, or null with ours in the extension `ragd_reason` (a client that went
    away has no OpenAI counterpart)."""
    if not details:
        return None
    reason = details["reason"] or None
    if reason in _INCOMPLETE_REASONS:
        return {"reason": reason}
    return {"reason": None, "ragd_reason": reason}


def response(
    *,
    id: str,
    created_at: float,
    status: str,
    model: str,
    settings: ResponseSettings,
    previous_response_id: str,
    conversation_id: str,
    outputs: Sequence[dict[str, Any]],
    usage: Usage | None,
    error: Failure | None,
    incomplete: Incomplete | None,
    completed_at: float | None = None,
) -> dict[str, Any]:
    """OpenAI's response object, for a turn under way and for one read back."""
    return {
        "id": id,
        "object": "response",
        "created_at": created_at,
        # As OpenAI: only on a completed response.
        "completed_at": completed_at if status == COMPLETED else None,
        "status": status,
        "background": settings.background,
        "model": model,
        "output": list(outputs),
        "instructions": settings.instructions,
        "metadata": settings.metadata,
        "temperature": settings.temperature,
        "top_p": settings.top_p,
        "top_logprobs": settings.top_logprobs,
        "max_output_tokens": settings.max_output_tokens,
        "max_tool_calls": settings.max_tool_calls,
        "previous_response_id": previous_response_id or None,
        "conversation": {"id": conversation_id} if conversation_id else None,
        "tools": settings.tools,
        "tool_choice": settings.tool_choice,
        "parallel_tool_calls": settings.parallel_tool_calls,
        "truncation": settings.truncation,
        "text": settings.text,
        "reasoning": settings.reasoning,
        "user": settings.user,
        "safety_identifier": settings.safety_identifier,
        "prompt_cache_key": settings.prompt_cache_key,
        "store": settings.store,
        "usage": _usage(usage),
        "error": _error(error),
        "incomplete_details": _incomplete(incomplete),
        # Extension: history items left out to fit the model's context (truncation "auto").
        "truncated_input_items": settings.truncated_input_items,
    }


def stored_response(record: store_pb2.ResponseRecord, include: Sequence[str]) -> dict[str, Any]:
    """A stored response as OpenAI's object; file_search results only if `include` asks
    (as OpenAI's GET does, whatever the create request asked for)."""
    error, incomplete = ending(record.error_json, record.status)
    return response(
        id=record.id,
        created_at=record.created_at,
        status=record.status,
        model=record.model,
        settings=ResponseSettings.read(record.settings_json),
        previous_response_id=record.previous_response_id,
        conversation_id=record.conversation_id,
        outputs=[item(stored, RESULTS in include) for stored in record.outputs],
        usage=Usage.read(record.usage_json),
        error=error,
        incomplete=incomplete,
        completed_at=record.completed_at or None,
    )


def deleted(object_id: str, kind: str) -> dict[str, Any]:
    """A deleted conversation ("conversation.deleted") or response ("response.deleted")."""
    return {"id": object_id, "object": kind, "deleted": True}
