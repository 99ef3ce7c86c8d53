"""What an upstream model reads for a turn: instructions, retrieved passages, history and the
new input, fitted to its context window. Plain functions, no I/O.

Tokens are estimated from characters (CHARS_PER_TOKEN, conservative for English text and
the common tokenizers), so the estimate errs on the side of a shorter prompt.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from services.gateway.chat.items import ChatItem, chat_messages, paired
from services.gateway.errors import InvalidRequest

CHARS_PER_TOKEN = 3.5
# Role markers and separators each message costs in a chat template.
MESSAGE_OVERHEAD = 8


# Share of the prompt budget retrieved passages may take; the lowest ranked go beyond it.
PASSAGE_SHARE = 0.5


@dataclass(frozen=True)
class Passage:
    """A retrieved chunk, numbered for citation in the prompt ([1], [2], ...)."""

    number: int
    file_id: str
    filename: str
    text: str
    score: float
    attributes: dict[str, str | float | bool] = field(default_factory=dict)

    def result(self) -> dict[str, Any]:
        """As a file_search_call's result."""
        return {
            "file_id": self.file_id,
            "filename": self.filename,
            "score": self.score,
            "text": self.text,
            "attributes": self.attributes,
        }


@dataclass(frozen=True)
class Prompt:
    messages: list[dict[str, Any]]
    # History items left out to fit the context (truncation "auto").
    dropped_items: int
    estimated_tokens: int
    # The passages the model reads (the best that fit in PASSAGE_SHARE of the budget).
    passages: list[Passage] = field(default_factory=list)


def estimate(messages: Sequence[dict[str, Any]]) -> int:
    return sum(_size(m) + MESSAGE_OVERHEAD for m in messages)


def _size(message: dict[str, Any]) -> int:
    chars = len(message.get("content") or "")
    if message.get("tool_calls"):
        chars += len(json.dumps(message["tool_calls"]))
    return int(chars / CHARS_PER_TOKEN)


_CITE = (
    "Answer from the sources below when they help. After a sentence that uses a source, "
    "cite it by its number in brackets, like [1]."
)


def _sources(passages: Sequence[Passage]) -> str:
    lines = [_CITE, ""]
    for passage in passages:
        lines.append(f"[{passage.number}] {passage.filename}:\n{passage.text.strip()}")
    return "\n\n".join(lines)


def sources_message(passages: Sequence[Passage]) -> dict[str, str]:
    return {"role": "system", "content": _sources(passages)}


def search_result(
    call_id: str, passages: Sequence[Passage], budget: int
) -> tuple[dict[str, str], list[Passage]]:
    """The tool message that hands a file_search call's results to the model: the best
    passages that fit in `budget` tokens, and those passages."""
    read = list(passages)
    while read and estimate([{"content": _sources(read)}]) > budget:
        read.pop()
    text = _sources(read) if read else "No passages were found."
    return {"role": "tool", "tool_call_id": call_id, "content": text}, read


def build(
    *,
    instructions: str | None,
    history: Sequence[ChatItem],
    inputs: Sequence[ChatItem],
    passages: Sequence[Passage],
    budget: int,
    truncation: str,
) -> Prompt:
    """The messages for the upstream, within `budget` tokens.

    History goes oldest turns first when it does not fit (truncation "auto"); with
    "disabled" a prompt over the budget is a 400, as OpenAI answers.
    """
    head = [{"role": "system", "content": instructions}] if instructions else []
    read = list(passages)
    while read and estimate([sources_message(read)]) > budget * PASSAGE_SHARE:
        read.pop()
    if read:
        head.append(sources_message(read))
    pairs = paired([*history, *inputs])
    current = chat_messages(inputs, pairs)
    if not current:
        raise InvalidRequest("'input' holds no text for the model to answer", param="input")
    past = chat_messages(history, pairs)
    fixed = estimate(head) + estimate(current)
    dropped = 0
    while past and fixed + estimate(past) > budget and truncation == "auto":
        past.pop(0)
        dropped += 1
        while past and past[0]["role"] == "tool":
            past.pop(0)  # a function's result goes with the call it answers
            dropped += 1
    total = fixed + estimate(past)
    if total > budget:
        raise InvalidRequest(
            f"the input is about {total} tokens, more than the {budget} the chat model can "
            "read besides its reply; shorten it, or send truncation 'auto' to drop the oldest "
            "turns",
            param="input",
            code="context_length_exceeded",
        )
    return Prompt(head + past + current, dropped, total, read)


_MARKER = re.compile(r"\[(\d{1,2})\]")
_WORD = re.compile(r"[^\W\d_]{4,}|\d{2,}", re.UNICODE)
# When the answer cites nothing (models small enough to run here rarely do), a passage
# counts as used if it holds this share of the answer's own words (those not in the
# question), or at least SHARED_WORDS of them: "40", "megawatts" and "designed" from a
# passage are its facts, even in a sentence the model embroidered.
OVERLAP = 0.4
SHARED_WORDS = 3
# Words too common to tell a passage's facts from any other text.
_COMMON = frozenset(
    "about also been could does each from have here into just like more most only other over "
    "should some such than that their them then there these they this those very were what "
    "when where which will with would your".split()
)


def _words(text: str) -> set[str]:
    return {word.casefold() for word in _WORD.findall(text)} - _COMMON


def citations(text: str, passages: Sequence[Passage], question: str = "") -> list[dict[str, Any]]:
    """file_citation annotations for the passages the answer used: those it cites as [n]
    (at the marker), else those holding most of what the answer says beyond the question
    (at the end of the text)."""
    by_number = {passage.number: passage for passage in passages}
    found: list[dict[str, Any]] = []
    for match in _MARKER.finditer(text):
        passage = by_number.get(int(match.group(1)))
        if passage is not None:
            found.append(_citation(passage, match.end()))
    if found:
        return found
    said = _words(text)
    own = (said - _words(question)) or said
    if not own:
        return []
    for passage in passages:
        shared = len(own & _words(passage.text))
        if shared >= SHARED_WORDS or shared / len(own) >= OVERLAP:
            found.append(_citation(passage, len(text)))
    return found


def _citation(passage: Passage, index: int) -> dict[str, object]:
    return {
        "type": "file_citation",
        "file_id": passage.file_id,
        "filename": passage.filename,
        "index": index,
    }
