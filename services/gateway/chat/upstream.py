"""The operator's chat model: an OpenAI-compatible chat-completions endpoint (llama.cpp's
server, llama-cpp-python's, Ollama, vLLM, OpenAI...). ragd builds the context, calls it,
streams its tokens through and records the turn; generation is the upstream's job.

Failures are the gateway's errors, naming the upstream: unreachable 503, too slow 504, broken
502, overloaded 429; its refusal of a request it cannot take (a context too long) 400.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from services.gateway import errors
from services.gateway.model_aliases import NO_ALIASES, ModelAliases


@dataclass(frozen=True)
class ChatSettings:
    # Up to and including /v1, e.g. http://127.0.0.1:8080/v1.
    base_url: str
    # Sent as `model`; clients may name another in their request.
    model: str
    api_key: str | None = None
    timeout: float = 120.0
    # The upstream's context window (prompt plus reply), and the tokens the prompt is fitted
    # to leave free for the reply.
    context_tokens: int = 8192
    max_output_tokens: int = 512
    # A reply's limit when the request sets none; 0: what the context leaves (as OpenAI).
    default_output_tokens: int = 0
    # Whether it calls tools (RAGD_CHAT_TOOLS): function tools pass through to it and it
    # drives file_search. Off: file_search searches with the user's words, function tools 400.
    tools: bool = True
    # The store's lease on a background response this gateway runs: renewed every third of
    # it; a gateway that dies leaves the response failed within about this long.
    background_lease_seconds: float = 30.0
    # Names clients send for other models (RAGD_CHAT_MODEL_ALIASES), e.g. gpt-4o-mini.
    aliases: ModelAliases = NO_ALIASES

    def resolve(self, requested: object) -> str:
        """The model a request's `model` means: `model` when absent, an alias's target,
        otherwise the name as sent (an upstream may serve several)."""
        if requested is None or requested == "":
            return self.model
        if not isinstance(requested, str):
            raise errors.InvalidRequest("'model' must be a string", param="model")
        served = requested.lower() == self.model.lower()
        return self.aliases.target(requested, served=served) or requested

    @property
    def names(self) -> list[str]:
        """The chat models a client may name, as /v1/models lists them."""
        return [self.model, *self.aliases.names]


class ChatUpstream:
    def __init__(self, settings: ChatSettings) -> None:
        self.settings = settings
        headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
        self._http = httpx.AsyncClient(
            base_url=settings.base_url.rstrip("/"),
            headers=headers,
            timeout=httpx.Timeout(settings.timeout, connect=5.0),
        )

    async def close(self) -> None:
        await self._http.aclose()

    async def answers(self, timeout: float) -> bool:
        """Whether the upstream answers at all (GET /models, for readiness): any reply but a
        server error or a refusal of ragd's credentials counts, as not every server lists
        its models."""
        try:
            reply = await self._http.get("/models", timeout=timeout)
        except httpx.HTTPError:
            return False
        return reply.status_code < 500 and reply.status_code not in (401, 403)

    def _where(self) -> str:
        return f"the chat upstream at {self.settings.base_url}"

    def _failure(self, error: httpx.HTTPError) -> errors.ApiError:
        if isinstance(error, httpx.TimeoutException):
            return errors.Timeout(
                f"{self._where()} did not answer within {self.settings.timeout:g} s "
                "(RAGD_CHAT_TIMEOUT)"
            )
        return errors.Unavailable(
            f"{self._where()} cannot be reached ({type(error).__name__}); check that it runs "
            "and RAGD_CHAT_BASE_URL",
            retry_after=2,
        )

    async def _refusal(self, reply: httpx.Response) -> errors.ApiError:
        text = (await reply.aread()).decode("utf-8", "replace")[:500]
        try:
            message = str(json.loads(text).get("error", {}).get("message") or text)
        except (ValueError, AttributeError):
            message = text
        status = reply.status_code
        if status == 429:
            retry = reply.headers.get("retry-after", "")
            return errors.Overloaded(
                f"{self._where()} is overloaded: {message}",
                retry_after=int(retry) if retry.isdigit() else 1,
            )
        if status in (401, 403):
            return errors.BadGateway(
                f"{self._where()} refused ragd's credentials ({status}); check RAGD_CHAT_API_KEY"
            )
        if status == 400 and "context" in message.lower():
            return errors.InvalidRequest(
                f"{self._where()} cannot take this context: {message}",
                param="input",
                code="context_length_exceeded",
            )
        if 400 <= status < 500:
            return errors.InvalidRequest(f"{self._where()} refused the request: {message}")
        return errors.BadGateway(f"{self._where()} failed with {status}: {message}")

    def body(self, messages: list[dict[str, str]], params: Mapping[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": params.get("model") or self.settings.model}
        body["messages"] = messages
        for name in ("temperature", "top_p", "max_tokens"):
            if params.get(name) is not None:
                body[name] = params[name]
        return body

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """One chat completion, whole."""
        try:
            reply = await self._http.post("/chat/completions", json={**body, "stream": False})
        except httpx.HTTPError as error:
            raise self._failure(error) from None
        if reply.status_code != 200:
            raise await self._refusal(reply)
        try:
            data: dict[str, Any] = reply.json()
            data["choices"][0]["message"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise errors.BadGateway(
                f"{self._where()} sent a reply that is not a chat completion"
            ) from None
        return data

    async def stream(self, body: dict[str, Any]) -> AsyncGenerator[dict[str, Any]]:
        """The chunks of a streamed chat completion (server-sent events), as they come."""
        request = {**body, "stream": True, "stream_options": {"include_usage": True}}
        try:
            async with self._http.stream("POST", "/chat/completions", json=request) as reply:
                if reply.status_code != 200:
                    raise await self._refusal(reply)
                async for data in _events(reply):
                    if data == b"[DONE]":
                        return
                    try:
                        chunk = json.loads(data)
                    except ValueError:
                        raise errors.BadGateway(
                            f"{self._where()} streamed a line that is not JSON"
                        ) from None
                    if isinstance(chunk, dict):
                        yield chunk
        except httpx.HTTPError as error:
            raise self._failure(error) from None

    async def forward(self, body: dict[str, Any]) -> httpx.Response:
        """Sends a client's chat-completions request as it is; the caller reads the reply
        (streamed or not) and closes it."""
        try:
            request = self._http.build_request("POST", "/chat/completions", json=body)
            reply = await self._http.send(request, stream=True)
        except httpx.HTTPError as error:
            raise self._failure(error) from None
        if reply.status_code != 200:
            failure = await self._refusal(reply)
            await reply.aclose()
            raise failure
        return reply


async def _events(reply: httpx.Response) -> AsyncGenerator[bytes]:
    """The `data:` payloads of a server-sent event stream, from its raw bytes (cheaper than
    decoding to text line by line: this runs for every token)."""
    pending = b""
    async for block in reply.aiter_bytes():
        pending += block
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.startswith(b"data:"):
                yield line[5:].strip()
    if pending.startswith(b"data:"):
        yield pending[5:].strip()
