"""The Responses API's stream events, one type per kind ragd emits, as OpenAI names their fields
(openai/types/responses/response_*_event.py); tests/test_stream_events.py checks each has every
field of the SDK's type.

They are TypedDicts, not classes of their own: an event is the JSON object the client
receives, built once with its keys in the order sent, and the objects inside it (a response,
an output item, a content part, an annotation) are JSON too: output items are kept as OpenAI
sent or made them (see chat/items.py).
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict, get_args, get_type_hints

# A response, an output item, a content part, an annotation: rendered JSON.
Json = dict[str, Any]


class ResponseCreated(TypedDict):
    type: Literal["response.created"]
    sequence_number: int
    response: Json


class ResponseQueued(TypedDict):
    type: Literal["response.queued"]
    sequence_number: int
    response: Json


class ResponseInProgress(TypedDict):
    type: Literal["response.in_progress"]
    sequence_number: int
    response: Json


class ResponseCompleted(TypedDict):
    type: Literal["response.completed"]
    sequence_number: int
    response: Json


class ResponseIncomplete(TypedDict):
    type: Literal["response.incomplete"]
    sequence_number: int
    response: Json


class ResponseFailed(TypedDict):
    type: Literal["response.failed"]
    sequence_number: int
    response: Json


class Error(TypedDict):
    type: Literal["error"]
    sequence_number: int
    param: str | None
    # OpenAI's code (ours in the message: objects_chat.response_error).
    code: str
    message: str


class OutputItemAdded(TypedDict):
    type: Literal["response.output_item.added"]
    sequence_number: int
    output_index: int
    item: Json


class OutputItemDone(TypedDict):
    type: Literal["response.output_item.done"]
    sequence_number: int
    output_index: int
    item: Json


class FileSearchInProgress(TypedDict):
    type: Literal["response.file_search_call.in_progress"]
    sequence_number: int
    output_index: int
    item_id: str


class FileSearchSearching(TypedDict):
    type: Literal["response.file_search_call.searching"]
    sequence_number: int
    output_index: int
    item_id: str


class FileSearchCompleted(TypedDict):
    type: Literal["response.file_search_call.completed"]
    sequence_number: int
    output_index: int
    item_id: str


class ContentPartAdded(TypedDict):
    type: Literal["response.content_part.added"]
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    part: Json


class ContentPartDone(TypedDict):
    type: Literal["response.content_part.done"]
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    part: Json


class TextDelta(TypedDict):
    type: Literal["response.output_text.delta"]
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    delta: str
    logprobs: list[Json]


class TextDone(TypedDict):
    type: Literal["response.output_text.done"]
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    text: str
    logprobs: list[Json]


class AnnotationAdded(TypedDict):
    type: Literal["response.output_text.annotation.added"]
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    annotation_index: int
    annotation: Json


class ArgumentsDelta(TypedDict):
    type: Literal["response.function_call_arguments.delta"]
    sequence_number: int
    item_id: str
    output_index: int
    delta: str


class ArgumentsDone(TypedDict):
    type: Literal["response.function_call_arguments.done"]
    sequence_number: int
    item_id: str
    output_index: int
    # OpenAI sends the function's name too, though the SDK's type does not declare it.
    name: str
    arguments: str


Lifecycle = (
    ResponseCreated
    | ResponseQueued
    | ResponseInProgress
    | ResponseCompleted
    | ResponseIncomplete
    | ResponseFailed
)
Event = (
    Lifecycle
    | Error
    | OutputItemAdded
    | OutputItemDone
    | FileSearchInProgress
    | FileSearchSearching
    | FileSearchCompleted
    | ContentPartAdded
    | ContentPartDone
    | TextDelta
    | TextDone
    | AnnotationAdded
    | ArgumentsDelta
    | ArgumentsDone
)


def _kind(event: type[Any]) -> str:
    return str(get_args(get_type_hints(event)["type"])[0])


# Every kind ragd emits, by its `type`.
KINDS: dict[str, type[Any]] = {
    _kind(event): event
    for event in (
        ResponseCreated,
        ResponseQueued,
        ResponseInProgress,
        ResponseCompleted,
        ResponseIncomplete,
        ResponseFailed,
        Error,
        OutputItemAdded,
        OutputItemDone,
        FileSearchInProgress,
        FileSearchSearching,
        FileSearchCompleted,
        ContentPartAdded,
        ContentPartDone,
        TextDelta,
        TextDone,
        AnnotationAdded,
        ArgumentsDelta,
        ArgumentsDone,
    )
}
