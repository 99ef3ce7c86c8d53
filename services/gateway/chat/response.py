"""OpenAI's response object, for a turn under way and for one read back from the store, and
what a stored response keeps of its request. Plain functions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from services.gateway.chat.turn import TurnRequest


def settings(request: TurnRequest, dropped: int) -> dict[str, Any]:
    """What the stored response keeps of its request (rendered back by GET)."""
    tools = request.tools
    return {
        "instructions": request.instructions,
        "tools": tools.echo,
        "tool_choice": tools.choice.raw,
        "parallel_tool_calls": tools.parallel,
        "max_tool_calls": tools.max_calls,
        "include": request.include,
        "max_output_tokens": request.max_output_tokens,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "truncation": request.truncation,
        "metadata": request.metadata,
        "store": request.store,
        "text": request.text,
        "reasoning": request.reasoning,
        "top_logprobs": request.top_logprobs,
        "user": request.user,
        "safety_identifier": request.safety_identifier,
        "prompt_cache_key": request.prompt_cache_key,
        "background": request.background,
        "truncated_input_items": dropped,
    }


def response_object(
    *,
    id: str,
    created_at: float,
    status: str,
    model: str,
    settings: dict[str, Any],
    previous_response_id: str,
    conversation_id: str,
    outputs: Sequence[dict[str, Any]],
    usage: dict[str, Any] | None,
    error: dict[str, Any] | None,
    incomplete: dict[str, Any] | None,
    completed_at: float | None = None,
) -> dict[str, Any]:
    return {
        "id": id,
        "object": "response",
        "created_at": created_at,
        "completed_at": completed_at,
        "status": status,
        "background": settings.get("background", False),
        "model": model,
        "output": list(outputs),
        "instructions": settings.get("instructions"),
        "metadata": settings.get("metadata") or {},
        "temperature": settings.get("temperature"),
        "top_p": settings.get("top_p"),
        "top_logprobs": settings.get("top_logprobs"),
        "max_output_tokens": settings.get("max_output_tokens"),
        "max_tool_calls": settings.get("max_tool_calls"),
        "previous_response_id": previous_response_id or None,
        "conversation": {"id": conversation_id} if conversation_id else None,
        "tools": settings.get("tools") or [],
        "tool_choice": settings.get("tool_choice") or "auto",
        "parallel_tool_calls": settings.get("parallel_tool_calls", True),
        "truncation": settings.get("truncation") or "disabled",
        "text": settings.get("text") or {"format": {"type": "text"}},
        "reasoning": settings.get("reasoning"),
        "user": settings.get("user"),
        "safety_identifier": settings.get("safety_identifier"),
        "prompt_cache_key": settings.get("prompt_cache_key"),
        "store": settings.get("store", True),
        "usage": usage,
        "error": error,
        "incomplete_details": incomplete,
        # Extension: history items left out to fit the model's context (truncation "auto").
        "truncated_input_items": settings.get("truncated_input_items", 0),
    }
