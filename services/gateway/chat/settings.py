"""What a stored response keeps of its request, typed from the turn to the store and back.

The store keeps the settings as opaque JSON (it reads none of them); the gateway writes them
from a ResponseSettings and reads them back into one, so a setting is named once, here. A
record written by an older gateway or by the chat-completions passthrough may lack settings
or hold values of another shape: those read as their defaults rather than failing a GET.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, ValidationError

if TYPE_CHECKING:
    from services.gateway.chat.turn import TurnRequest


class ResponseSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    instructions: str | None = None
    # As the client sent them, echoed.
    tools: list[dict[str, Any]] = []
    tool_choice: str | dict[str, Any] = "auto"
    parallel_tool_calls: bool = True
    max_tool_calls: int | None = None
    include: list[str] = []
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    truncation: str = "disabled"
    metadata: dict[str, str] = {}
    store: bool = True
    text: dict[str, Any] = {"format": {"type": "text"}}
    reasoning: dict[str, Any] | None = None
    top_logprobs: int | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    background: bool = False
    # Extension: history items left out to fit the model's context (truncation "auto").
    truncated_input_items: int = 0
    # "chat.completions" for a turn recorded by the passthrough.
    api: str = "responses"

    def json_text(self) -> str:
        """As the store keeps it."""
        return self.model_dump_json()

    @classmethod
    def read(cls, text: str) -> ResponseSettings:
        """A record's settings; a value of another shape reads as its default."""
        try:
            raw = json.loads(text or "{}")
        except ValueError:
            raw = {}
        if not isinstance(raw, dict):
            raw = {}
        try:
            return cls.model_validate(raw)
        except ValidationError as error:
            wrong = {str(problem["loc"][0]) for problem in error.errors() if problem["loc"]}
            return cls.model_validate({k: v for k, v in raw.items() if k not in wrong})


def settings(request: TurnRequest, dropped: int, reply_tokens: int | None) -> ResponseSettings:
    """What the stored response keeps of its request (rendered back by GET); `reply_tokens`
    is the reply's limit applied, echoed as max_output_tokens when the request set none."""
    tools = request.tools
    return ResponseSettings(
        instructions=request.instructions,
        tools=tools.echo,
        tool_choice=tools.choice.raw,
        parallel_tool_calls=tools.parallel,
        max_tool_calls=tools.max_calls,
        include=request.include,
        max_output_tokens=request.max_output_tokens or reply_tokens,
        temperature=request.temperature,
        top_p=request.top_p,
        truncation=request.truncation,
        metadata=request.metadata,
        store=request.store,
        text=request.text,
        reasoning=request.reasoning,
        top_logprobs=request.top_logprobs,
        user=request.user,
        safety_identifier=request.safety_identifier,
        prompt_cache_key=request.prompt_cache_key,
        background=request.background,
        truncated_input_items=dropped,
    )
