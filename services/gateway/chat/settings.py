"""What a stored response keeps of its request, and its token usage, typed from the turn to
the store and back.

The store keeps both as opaque JSON (it reads none of them); the gateway writes them from a
ResponseSettings and a Usage and reads them back into one, so a setting or a count is named
once, here. A record written by an older gateway may lack some or hold values of another
shape: those read as their defaults rather than failing a GET.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Self, TypedDict

from pydantic import BaseModel, ConfigDict, ValidationError

from services.common.vocabulary import FAILED, INCOMPLETE

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
    def read(cls, text: str) -> Self:
        """A record's settings; a value of another shape reads as its default."""
        try:
            raw = json.loads(text or "{}")
        except ValueError:
            raw = {}
        return cls.of(raw if isinstance(raw, dict) else {})

    @classmethod
    def of(cls, raw: dict[str, Any]) -> Self:
        """From JSON: a value of another shape is its default."""
        try:
            return cls.model_validate(raw)
        except ValidationError as error:
            wrong = {str(problem["loc"][0]) for problem in error.errors() if problem["loc"]}
            return cls.model_validate({k: v for k, v in raw.items() if k not in wrong})


class Failure(TypedDict):
    """Why a turn failed, as the store keeps it: our code (OpenAI's is derived when it is
    rendered: objects_chat.response_error) and the message."""

    code: str
    message: str


class Incomplete(TypedDict):
    """Why a reply was cut off: OpenAI's reason, or ours (client_disconnected)."""

    reason: str


def ending(text: str, status: str) -> tuple[Failure | None, Incomplete | None]:
    """A record's failure or cut-off, kept as one JSON object whose shape its status says."""
    try:
        raw = json.loads(text or "{}")
    except ValueError:
        raw = {}
    if not isinstance(raw, dict) or not raw:
        return None, None
    if status == FAILED:
        code = str(raw.get("code") or "server_error")
        return Failure(code=code, message=str(raw.get("message", ""))), None
    if status == INCOMPLETE:
        return None, Incomplete(reason=str(raw.get("reason") or ""))
    return None, None


class InputTokens(BaseModel):
    cached_tokens: int = 0
    cache_write_tokens: int = 0


class OutputTokens(BaseModel):
    reasoning_tokens: int = 0


class Usage(BaseModel):
    """A response's token usage, OpenAI's ResponseUsage (summed over a turn's rounds)."""

    model_config = ConfigDict(extra="ignore")

    input_tokens: int = 0
    input_tokens_details: InputTokens = InputTokens()
    output_tokens: int = 0
    output_tokens_details: OutputTokens = OutputTokens()
    total_tokens: int = 0

    @classmethod
    def upstream(cls, raw: dict[str, Any]) -> Usage:
        """A chat completion's usage in the Responses API's words."""
        prompt = int(raw.get("prompt_tokens") or 0)
        completion = int(raw.get("completion_tokens") or 0)
        read = raw.get("prompt_tokens_details") or {}
        thought = raw.get("completion_tokens_details") or {}
        return cls(
            input_tokens=prompt,
            input_tokens_details=InputTokens(
                cached_tokens=int(read.get("cached_tokens") or 0),
                cache_write_tokens=int(read.get("cache_write_tokens") or 0),
            ),
            output_tokens=completion,
            output_tokens_details=OutputTokens(
                reasoning_tokens=int(thought.get("reasoning_tokens") or 0)
            ),
            total_tokens=prompt + completion,
        )

    def __add__(self, other: Usage) -> Usage:
        mine, theirs = self.input_tokens_details, other.input_tokens_details
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            input_tokens_details=InputTokens(
                cached_tokens=mine.cached_tokens + theirs.cached_tokens,
                cache_write_tokens=mine.cache_write_tokens + theirs.cache_write_tokens,
            ),
            output_tokens=self.output_tokens + other.output_tokens,
            output_tokens_details=OutputTokens(
                reasoning_tokens=self.output_tokens_details.reasoning_tokens
                + other.output_tokens_details.reasoning_tokens
            ),
            total_tokens=self.total_tokens + other.total_tokens,
        )

    def json_text(self) -> str:
        """As the store keeps it."""
        return self.model_dump_json()

    @classmethod
    def read(cls, text: str) -> Usage | None:
        """A record's usage; none when the upstream counted no tokens (an older record's
        missing counts are zeros)."""
        try:
            raw = json.loads(text or "{}")
            counted = cls.model_validate(raw if isinstance(raw, dict) else {})
        except (ValueError, ValidationError):
            return None
        return counted if counted.total_tokens else None


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
