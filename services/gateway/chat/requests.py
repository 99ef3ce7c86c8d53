"""The bodies of POST /v1/responses and POST /v1/chat/completions, declared once
(gateway/requests.py: the validation, OpenAI's limits, and the JSON Schema /openapi.json
embeds).

A Responses body is read into a TurnRequest: every field OpenAI defines that ragd acts on is
validated; fields that change nothing here are accepted as the SDKs send them, and unknown
ones are ignored. Loosely typed on purpose: the input items (chat/items.py checks them as a
conversation's items are checked and keeps their bodies as opaque JSON), a function's
`parameters` and a structured output's `schema` (JSON Schemas, passed to the model as sent).

A chat-completions body is passed to the upstream as sent: its model only checks what ragd
reads (the messages' roles, `stream`, `model`) and the shapes OpenAI gives the rest; a
message's content and unknown members are the upstream's to judge.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    ConfigDict,
    Discriminator,
    Field,
    PlainValidator,
    PrivateAttr,
    Tag,
    WithJsonSchema,
    model_validator,
)
from pydantic.functional_validators import ModelWrapValidatorHandler

from services.common.vocabulary import MAX_NEW_ITEMS
from services.gateway.chat.items import ChatItem, parse_items
from services.gateway.chat.outputs import RESULTS
from services.gateway.chat.tools import (
    TOOL_CHOICES,
    ChoiceBody,
    FunctionName,
    JsonSchema,
    ToolList,
    Tools,
    tools,
)
from services.gateway.chat.turn import LOGPROBS, TurnRequest
from services.gateway.errors import invalid
from services.gateway.requests import Metadata, Param, RequestModel, Text, fail
from services.gateway.schemas_chat import INPUT_ITEM

# OpenAI's includables; only file_search results change what ragd returns.
INCLUDABLES = (
    RESULTS,
    "web_search_call.action.sources",
    "code_interpreter_call.outputs",
    "computer_call_output.output.image_url",
    "message.input_image.image_url",
    LOGPROBS,
    "reasoning.encrypted_content",
)
TRUNCATIONS = ("auto", "disabled")
VERBOSITIES = ("low", "medium", "high")
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
SUMMARIES = ("auto", "concise", "detailed")
MAX_TOP_LOGPROBS = 20
MAX_INSTRUCTIONS_CHARS = 256 * 1024
MAX_OUTPUT_TOKENS = 1 << 20


def _items(raw: Any) -> list[ChatItem]:
    # chat/items.py checks each item (as a conversation's) and names its own path.
    return parse_items(raw, "input")


Input = Annotated[
    list[ChatItem],
    PlainValidator(_items),
    WithJsonSchema(
        {
            "oneOf": [
                {"type": "string", "pattern": r"\S"},
                {"type": "array", "minItems": 1, "items": INPUT_ITEM},
            ]
        }
    ),
]


class ConversationRef(RequestModel):
    id: Annotated[Text, Field(min_length=1, max_length=256)]


def _conversation_kind(raw: Any) -> str | None:
    return "id" if isinstance(raw, str) else "ref" if isinstance(raw, dict) else None


Conversation = Annotated[
    Annotated[Annotated[Text, Field(min_length=1, max_length=256)], Tag("id")]
    | Annotated[ConversationRef, Tag("ref")],
    Discriminator(
        _conversation_kind,
        custom_error_type="invalid_value",
        custom_error_message="'conversation' must be a conversation id or {'id': ...}",
    ),
]


class PlainFormat(RequestModel):
    type: Literal["text", "json_object"]


class SchemaFormat(RequestModel):
    type: Literal["json_schema"]
    name: Annotated[FunctionName, Param("text.format.name")]
    schema_: Annotated[JsonSchema, Field(alias="schema"), Param("text.format.schema")]
    strict: Annotated[bool, Param("text.format.strict")] = False
    description: Text | None = None


def _format_kind(raw: Any) -> Any:
    kind = raw.get("type") if isinstance(raw, dict) else None
    return (
        "schema" if kind == "json_schema" else "plain" if kind in ("text", "json_object") else None
    )


Format = Annotated[
    Annotated[PlainFormat, Tag("plain")] | Annotated[SchemaFormat, Tag("schema")],
    Discriminator(
        _format_kind,
        custom_error_type="invalid_value",
        custom_error_message="'text.format.type' must be one of text, json_object, json_schema",
    ),
]


class ResponseText(RequestModel):
    """OpenAI's `text`: the answer's `format` and `verbosity`, as the response echoes them."""

    format: Annotated[Format | None, Param("text.format")] = None
    verbosity: Annotated[Literal[VERBOSITIES] | None, Param("text.verbosity")] = None  # type: ignore[valid-type]

    def shown(self) -> dict[str, Any]:
        wanted = self.format or PlainFormat(type="text")
        if isinstance(wanted, PlainFormat):
            shown: dict[str, Any] = {"format": {"type": wanted.type}}
        else:
            shown = {"format": wanted.model_dump(by_alias=True, exclude_none=True)}
        if self.verbosity is not None:
            shown["verbosity"] = self.verbosity
        return shown


class Reasoning(RequestModel):
    """OpenAI's `reasoning`: its effort goes to the upstream as reasoning_effort; the
    upstream's reasoning text comes back as a reasoning item (no summaries are written)."""

    effort: Annotated[Literal[EFFORTS] | None, Param("reasoning.effort")] = None  # type: ignore[valid-type]
    summary: Annotated[Literal[SUMMARIES] | None, Param("reasoning.summary")] = None  # type: ignore[valid-type]
    generate_summary: Annotated[
        Literal[SUMMARIES] | None,  # type: ignore[valid-type]
        Param("reasoning.summary"),
        Field(description="summary's older name"),
    ] = None

    def shown(self) -> dict[str, Any]:
        return {"effort": self.effort, "summary": self.summary or self.generate_summary}


def _no_prompt(_: Any) -> Any:
    raise fail(
        "invalid_value", "ragd keeps no prompt templates: send 'instructions' and 'input' instead"
    )


class ResponseCreate(RequestModel):
    model: Annotated[Text, Field(max_length=256)] = ""
    input: Input
    instructions: Annotated[Text | None, Field(max_length=MAX_INSTRUCTIONS_CHARS)] = None
    previous_response_id: Text = ""
    conversation: Conversation | None = None
    store: Annotated[bool, Field(description="must stay true with a conversation")] = True
    background: Annotated[
        bool, Field(description="answer at once (queued) and run the turn apart")
    ] = False
    stream: bool = False
    prompt: Annotated[
        Any, AfterValidator(_no_prompt), Field(description="refused: ragd keeps no templates")
    ] = None
    tools: ToolList = Field(default_factory=list)
    tool_choice: ChoiceBody | None = None
    parallel_tool_calls: bool | None = None
    max_tool_calls: Annotated[int | None, Field(ge=1, le=1000)] = None
    include: list[Literal[INCLUDABLES]] = Field(default_factory=list)  # type: ignore[valid-type]
    max_output_tokens: Annotated[int | None, Field(ge=16, le=MAX_OUTPUT_TOKENS)] = None
    temperature: Annotated[float | None, Field(ge=0.0, le=2.0)] = None
    top_p: Annotated[float | None, Field(ge=0.0, le=1.0)] = None
    truncation: Literal[TRUNCATIONS] = "disabled"  # type: ignore[valid-type]
    metadata: Metadata = Field(default_factory=dict)
    text: ResponseText | None = None
    reasoning: Reasoning | None = None
    top_logprobs: Annotated[int | None, Field(ge=0, le=MAX_TOP_LOGPROBS)] = None
    user: Annotated[Text | None, Field(max_length=256)] = None
    safety_identifier: Annotated[Text | None, Field(max_length=64)] = None
    prompt_cache_key: Annotated[Text | None, Field(max_length=256)] = None

    model_config = ConfigDict(
        json_schema_extra={"not": {"required": ["conversation", "previous_response_id"]}}
    )
    _tools: Tools = PrivateAttr()

    @model_validator(mode="wrap")
    @classmethod
    def _consistent(
        cls, sent: Any, handler: ModelWrapValidatorHandler[ResponseCreate]
    ) -> ResponseCreate:
        """The members that must agree, and the tools read with `sent` (the body as the
        client sent it: its tools and tool_choice are echoed so)."""
        asked = handler(sent)
        if asked.conversation_id and asked.previous_response_id:
            raise fail(
                "invalid_value",
                "send 'conversation' or 'previous_response_id', not both",
                "conversation",
            )
        if asked.conversation_id and not asked.store:
            raise fail(
                "invalid_value",
                "a response in a conversation is stored: drop 'store': false or 'conversation'",
                "store",
            )
        if asked.background and not asked.store:
            raise fail(
                "invalid_value",
                "a background response is stored: drop 'store': false",
                "background",
            )
        asked._tools = tools(
            asked.tools, asked.tool_choice, asked.parallel_tool_calls, asked.max_tool_calls, sent
        )
        return asked

    @property
    def conversation_id(self) -> str:
        ref = self.conversation
        return ref.id if isinstance(ref, ConversationRef) else ref or ""

    def turn(self, default_model: str, can_call: bool = True) -> TurnRequest:
        """`can_call`: the upstream calls tools (function tools pass through to it)."""
        if self._tools.functions and not can_call:
            index = next(n for n, tool in enumerate(self.tools) if tool.type == "function")
            raise invalid(
                f"'tools[{index}]': the chat upstream does not call tools "
                "(RAGD_CHAT_TOOLS=off), so function tools cannot run",
                param="tools",
                code="unsupported_tool",
            )
        return TurnRequest(
            model=self.model or default_model,
            inputs=self.input,
            instructions=self.instructions,
            previous_response_id=self.previous_response_id,
            conversation_id=self.conversation_id,
            store=self.store,
            tools=self._tools,
            include=list(self.include),
            max_output_tokens=self.max_output_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            truncation=self.truncation,
            metadata=self.metadata,
            text=(self.text or ResponseText()).shown(),
            reasoning=self.reasoning.shown() if self.reasoning else None,
            top_logprobs=(
                self.top_logprobs
                if self.top_logprobs is not None
                else (0 if LOGPROBS in self.include else None)
            ),
            user=self.user,
            safety_identifier=self.safety_identifier,
            prompt_cache_key=self.prompt_cache_key,
            background=self.background,
        )


class ChatMessage(RequestModel):
    """A message as ragd reads it: its role (a recorded turn keeps the messages after the
    last assistant one); its content and the rest are the upstream's to judge."""

    role: Text
    content: Annotated[Any, Field(description="a string or content parts")] = None


class ChatFunction(RequestModel):
    name: FunctionName
    description: Text | None = None
    parameters: JsonSchema | None = None
    strict: bool | None = None


class ChatTool(RequestModel):
    type: Literal["function"]
    function: ChatFunction


class NamedFunction(RequestModel):
    name: Text


class ChatFunctionChoice(RequestModel):
    type: Literal["function"]
    function: NamedFunction


def _chat_choice_kind(raw: Any) -> str | None:
    if isinstance(raw, str):
        return "mode" if raw in TOOL_CHOICES else None
    return "function" if isinstance(raw, dict) and raw.get("type") == "function" else None


ChatToolChoice = Annotated[
    Annotated[Literal[TOOL_CHOICES], Tag("mode")]  # type: ignore[valid-type]
    | Annotated[ChatFunctionChoice, Tag("function")],
    Discriminator(
        _chat_choice_kind,
        custom_error_type="invalid_value",
        custom_error_message=f"'tool_choice' must be one of {', '.join(TOOL_CHOICES)} or "
        "{'type': 'function', 'function': {'name': ...}}",
    ),
]


class JsonSchemaFormat(RequestModel):
    name: FunctionName
    schema_: Annotated[JsonSchema, Field(alias="schema")] = Field(default_factory=dict)
    strict: bool | None = None
    description: Text | None = None


class ChatSchemaFormat(RequestModel):
    type: Literal["json_schema"]
    json_schema: JsonSchemaFormat


ResponseFormat = Annotated[
    Annotated[PlainFormat, Tag("plain")] | Annotated[ChatSchemaFormat, Tag("schema")],
    Discriminator(
        _format_kind,
        custom_error_type="invalid_value",
        custom_error_message="'response_format.type' must be one of text, json_object, json_schema",
    ),
]


class ChatCompletionRequest(RequestModel):
    model_config = ConfigDict(
        json_schema_extra={
            "description": "passed to the chat upstream as sent; send the header "
            "X-Ragd-Conversation: <conversation id> to record the turn in a conversation (the "
            f"messages after the last assistant message, at most {MAX_NEW_ITEMS})"
        }
    )

    model: Text | None = None
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    stream: bool = False
    tools: list[ChatTool] | None = None
    tool_choice: ChatToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    temperature: Annotated[float | None, Field(ge=0.0, le=2.0)] = None
    top_p: Annotated[float | None, Field(ge=0.0, le=1.0)] = None
    max_tokens: Annotated[int | None, Field(ge=1)] = None
    max_completion_tokens: Annotated[int | None, Field(ge=1)] = None
