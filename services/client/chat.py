"""Conversations and streamed responses over REST, for `ragd chat` and scripts.

The shapes are OpenAI's Conversations and Responses APIs (any OpenAI SDK drives them too);
this adds ragd's extensions (the list of conversations, history search, titles) and a stream
that can be abandoned mid-reply: closing it is what tells the server to keep the reply as
`incomplete`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

from services.client.errors import ClientError
from services.client.rest import RestClient, error_from, unreachable


@dataclass(frozen=True)
class Conversation:
    id: str
    title: str
    created_at: int
    last_active_at: int
    item_count: int
    turn_count: int
    metadata: dict[str, str]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Conversation:
        return cls(
            id=data["id"],
            title=data.get("title") or "",
            created_at=int(data.get("created_at") or 0),
            last_active_at=int(data.get("last_active_at") or data.get("created_at") or 0),
            item_count=int(data.get("item_count") or 0),
            turn_count=int(data.get("turn_count") or 0),
            metadata=dict(data.get("metadata") or {}),
        )


def item_text(item: dict[str, Any]) -> str:
    return "".join(
        str(part.get("text", ""))
        for part in item.get("content") or []
        if isinstance(part, dict) and part.get("type") in ("input_text", "output_text", "text")
    )


@dataclass(frozen=True)
class HistoryHit:
    conversation_id: str
    position: int
    role: str
    text: str
    score: float
    created_at: int


@dataclass
class Reply:
    """What a streamed response produced, filled as its events arrive."""

    response_id: str = ""
    text: str = ""
    status: str = "in_progress"
    # file_search results (with include=file_search_call.results) and the cited file ids.
    sources: list[dict[str, Any]] = field(default_factory=list)
    cited: list[str] = field(default_factory=list)
    error: str = ""
    response: dict[str, Any] = field(default_factory=dict)


class ChatClient(RestClient):
    def create_conversation(self, metadata: dict[str, str] | None = None) -> Conversation:
        body = {"metadata": metadata} if metadata else {}
        return Conversation.from_json(self.request("POST", "/v1/conversations", json=body))

    def get_conversation(self, conversation_id: str) -> Conversation:
        return Conversation.from_json(self.request("GET", f"/v1/conversations/{conversation_id}"))

    def delete_conversation(self, conversation_id: str) -> None:
        """The conversation and everything it holds, from the store."""
        self.request("DELETE", f"/v1/conversations/{conversation_id}")

    def recent_conversations(self, limit: int = 20) -> list[Conversation]:
        page = self.request("GET", "/v1/conversations", params={"limit": limit})
        return [Conversation.from_json(item) for item in page["data"]]

    def items(self, conversation_id: str, last: int = 100) -> list[dict[str, Any]]:
        """The conversation's `last` items, oldest first."""
        page = self.request(
            "GET",
            f"/v1/conversations/{conversation_id}/items",
            params={"limit": min(100, last), "order": "desc"},
        )
        return list(reversed(page["data"]))

    def delete_item(self, conversation_id: str, item_id: str) -> None:
        self.request("DELETE", f"/v1/conversations/{conversation_id}/items/{item_id}")

    def search_history(self, query: str, k: int = 10) -> list[HistoryHit]:
        page = self.request(
            "POST", "/v1/conversations/search", json={"query": query, "max_num_results": k}
        )
        return [
            HistoryHit(
                conversation_id=hit["conversation_id"],
                position=int(hit.get("position") or 0),
                role=str(hit["item"].get("role") or hit["item"].get("type") or ""),
                text=item_text(hit["item"]),
                score=float(hit.get("score") or 0.0),
                created_at=int(hit.get("created_at") or 0),
            )
            for hit in page["data"]
        ]

    def respond(self, body: dict[str, Any]) -> dict[str, Any]:
        """One response, whole."""
        result: dict[str, Any] = self.request("POST", "/v1/responses", json=body)
        return result

    @contextmanager
    def stream(self, body: dict[str, Any]) -> Iterator[Iterator[dict[str, Any]]]:
        """The events of a streamed response. Leaving the block early closes the connection,
        and the server keeps what it had sent as an incomplete reply."""
        request = {**body, "stream": True}
        try:
            with self._http.stream("POST", "/v1/responses", json=request) as reply:
                if reply.status_code >= 400:
                    reply.read()
                    raise error_from(reply, "POST", "/v1/responses")
                yield _events(reply)
        except httpx.TransportError as error:
            raise unreachable(self.base_url, error) from None


def _events(reply: httpx.Response) -> Iterator[dict[str, Any]]:
    for line in reply.iter_lines():
        if line.startswith("data:"):
            try:
                event = json.loads(line[5:])
            except ValueError:
                raise ClientError("the gateway streamed an event that is not JSON") from None
            if isinstance(event, dict):
                yield event


def follow(events: Iterator[dict[str, Any]], reply: Reply) -> Iterator[str]:
    """The reply's text as it streams, piece by piece; `reply` gathers the rest."""
    for event in events:
        kind = event.get("type", "")
        if kind == "response.created":
            reply.response_id = event["response"]["id"]
        elif kind == "response.output_text.delta":
            piece = str(event.get("delta", ""))
            reply.text += piece
            yield piece
        elif (
            kind == "response.output_item.done" and event["item"].get("type") == "file_search_call"
        ):
            reply.sources = list(event["item"].get("results") or [])
        elif kind == "response.output_text.annotation.added":
            reply.cited.append(str(event["annotation"].get("file_id", "")))
        elif kind == "error":
            reply.error = str(event.get("message", ""))
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            reply.response = event["response"]
            reply.status = reply.response.get("status", kind.rsplit(".", 1)[1])
