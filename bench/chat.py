"""Scenario 7, what ragd adds to a chat turn: time to first token and total time of a
streamed turn through /v1/responses against the same prompt sent to the chat upstream
directly (llama_cpp.server on the packaged SmolLM2-135M-Instruct), with and without
file_search; and the file_search itself (a vector-store search of the same query).

The direct call gets exactly the messages ragd would send (built with ragd's own context
code from the passages the search returned), temperature 0 and the same reply length, so
the upstream does the same work both ways; the variants alternate in every repeat (the
server reuses a prompt's cached prefix, which then helps them alike).

Target (issue 14): at most 5 ms added to a turn besides retrieval. The stack of these rows
searches with the user's words (RAGD_CHAT_TOOLS=off), so that the direct call can be given
the same prompt; a second stack, calling tools, measures a function-call round trip
(bench/chat_tools.py).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import httpx

from bench import chat_tools
from bench.context import Context, timed
from bench.ingest import create_store
from bench.processes import free_port, running_stack
from bench.stats import Row, median
from services import local_chat
from services.gateway.chat import context as prompt_context
from services.gateway.chat.context import Passage
from services.gateway.chat.items import message

SCENARIO = "7 chat turn"
TARGET_ADDED_MS = 5.0
QUESTION = "Who designed the Zorblatt reactor, and where?"
DOCUMENTS = {
    "zorblatt.txt": "The Zorblatt reactor was designed by Mira Quenby in Lisbon in 1987. "
    "It runs on compressed seaweed and produces 40 megawatts.",
    "granite.txt": "Granite countertops are polished with diamond pads of increasing grit.",
    "tides.txt": "Spring tides at Brannock Point rise up to 6 metres twice a month.",
}
REPLY_TOKENS = 32
MODEL = "smollm2"


@dataclass(frozen=True)
class Timing:
    first_token_ms: float
    total_ms: float


def _stream(http: httpx.Client, path: str, body: dict[str, Any], first: str) -> Timing:
    """Posts a streaming request; `first` is how a text piece is recognized in its events."""
    began = time.perf_counter()
    first_at = None
    with http.stream("POST", path, json=body) as reply:
        if reply.status_code != 200:
            raise RuntimeError(f"POST {path} -> {reply.status_code}: {reply.read()[:300]!r}")
        for line in reply.iter_lines():
            if first_at is None and line.startswith("data:") and first in line:
                event = json.loads(line[5:])
                if _is_text(event):
                    first_at = time.perf_counter()
    done = time.perf_counter()
    if first_at is None:
        raise RuntimeError(f"{path} streamed no text")
    return Timing((first_at - began) * 1000, (done - began) * 1000)


def _is_text(event: dict[str, Any]) -> bool:
    if event.get("type") == "response.output_text.delta":
        return bool(event.get("delta"))
    choices = event.get("choices") or []
    return bool(choices and (choices[0].get("delta") or {}).get("content"))


def _direct_body(passages: list[Passage]) -> dict[str, Any]:
    prompt = prompt_context.build(
        instructions=None,
        history=[],
        inputs=[message("user", QUESTION)],
        passages=passages,
        budget=local_chat.CONTEXT_TOKENS - REPLY_TOKENS,
        truncation="disabled",
    )
    return {
        "model": MODEL,
        "messages": prompt.messages,
        "temperature": 0.0,
        "max_tokens": REPLY_TOKENS,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def _turn_body(store_id: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": MODEL,
        "input": QUESTION,
        "temperature": 0.0,
        "max_output_tokens": REPLY_TOKENS,
        "stream": True,
        # A stored turn, as a client of conversations would make.
        "store": True,
    }
    if store_id:
        body["tools"] = [{"type": "file_search", "vector_store_ids": [store_id]}]
    return body


def _passages(http: httpx.Client, store_id: str) -> list[Passage]:
    body = {**_turn_body(store_id), "stream": False, "include": ["file_search_call.results"]}
    reply = http.post("/v1/responses", json=body).json()
    results = reply["output"][0]["results"]
    return [
        Passage(n, r["file_id"], r["filename"], r["text"], r["score"], r["attributes"])
        for n, r in enumerate(results, start=1)
    ]


def _search_ms(http: httpx.Client, store_id: str) -> float:
    began = time.perf_counter()
    reply = http.post(f"/v1/vector_stores/{store_id}/search", json={"query": QUESTION})
    reply.raise_for_status()
    return (time.perf_counter() - began) * 1000


@dataclass
class Samples:
    first: list[float]
    total: list[float]

    def add(self, timing: Timing) -> None:
        self.first.append(timing.first_token_ms)
        self.total.append(timing.total_ms)


def run(ctx: Context) -> None:
    repeats = max(5, ctx.config.repeats * 4)
    port = free_port()
    log = open(ctx.run_dir / "chat-upstream.log", "ab")  # noqa: SIM115 (closed below)
    try:
        with (
            timed(ctx, "chat upstream start"),
            local_chat.running(port, log, ctx.config.threads) as upstream,
            httpx.Client(base_url=upstream, timeout=300.0) as direct,
        ):
            settings = {
                "RAGD_CHAT_BASE_URL": upstream,
                "RAGD_CHAT_MODEL": MODEL,
                "RAGD_CHAT_CONTEXT_TOKENS": str(local_chat.CONTEXT_TOKENS),
            }
            with (
                running_stack(
                    ctx.run_dir / "chat-stack",
                    ctx.config.threads,
                    None,
                    None,
                    **settings,
                    RAGD_CHAT_TOOLS="off",
                ) as stack,
                httpx.Client(base_url=stack.url, timeout=300.0) as http,
            ):
                _measure(ctx, http, direct, repeats)
            with (
                running_stack(
                    ctx.run_dir / "chat-tools-stack", ctx.config.threads, None, None, **settings
                ) as stack,
                httpx.Client(base_url=stack.url, timeout=300.0) as http,
            ):
                chat_tools.measure(ctx, http, direct, repeats)
    finally:
        log.close()


def _measure(ctx: Context, http: httpx.Client, direct: httpx.Client, repeats: int) -> None:
    store_id = create_store(http, "chat-bench")
    for name, text in DOCUMENTS.items():
        http.post(f"/v1/vector_stores/{store_id}/files", json={"filename": name, "text": text})
    deadline = time.monotonic() + 120
    while http.get(f"/v1/vector_stores/{store_id}").json()["file_counts"]["completed"] < 3:
        if time.monotonic() > deadline:
            raise RuntimeError("the bench documents were not indexed")
        time.sleep(0.2)
    passages = _passages(http, store_id)
    plain_direct = _direct_body([])
    searched_direct = _direct_body(passages)
    runs = {name: Samples([], []) for name in ("direct", "ragd", "direct+", "ragd+fs")}
    searches: list[float] = []
    calls = {
        "direct": lambda: _stream(direct, "/chat/completions", plain_direct, "content"),
        "direct+": lambda: _stream(direct, "/chat/completions", searched_direct, "content"),
        "ragd": lambda: _stream(http, "/v1/responses", _turn_body(None), "delta"),
        "ragd+fs": lambda: _stream(http, "/v1/responses", _turn_body(store_id), "delta"),
    }
    # The server reuses the part of a prompt it shares with the one before: no call follows
    # one with the same prompt, and the order flips every round. The first round (model
    # pages, caches) is not counted.
    orders = (("direct", "direct+", "ragd", "ragd+fs"), ("ragd", "ragd+fs", "direct", "direct+"))
    for round_ in range(repeats + 1):
        for name in orders[round_ % 2]:
            runs[name].add(calls[name]())
        searches.append(_search_ms(http, store_id))
    for samples in runs.values():
        del samples.first[0], samples.total[0]
    # The same prompts again, back to back: the server has each one cached, so a turn costs
    # it one token's work and what is left is what ragd adds.
    warm = {name: Samples([], []) for name in runs}
    for plain, searched in (("direct", "ragd"), ("direct+", "ragd+fs")):
        calls[plain]()
        for round_ in range(repeats):
            for name in (plain, searched) if round_ % 2 else (searched, plain):
                warm[name].add(calls[name]())
    search = median(searches[1:])
    figures = {name: (median(s.first), median(s.total)) for name, s in runs.items()}
    cached = {name: (median(s.first), median(s.total)) for name, s in warm.items()}
    ctx.detail(SCENARIO).update(
        {
            "repeats": repeats,
            "file_search_ms": search,
            "passages": len(passages),
            "median_ms": {k: {"first_token": v[0], "total": v[1]} for k, v in figures.items()},
            "cached_prompt_median_ms": {
                k: {"first_token": v[0], "total": v[1]} for k, v in cached.items()
            },
        }
    )
    ctx.log(f"chat turn medians (ms): {figures}; cached {cached}; file_search {search:.1f}")
    _rows(ctx, figures, cached, search)


def _rows(
    ctx: Context,
    figures: dict[str, tuple[float, float]],
    cached: dict[str, tuple[float, float]],
    search: float,
) -> None:
    for name, kind, baseline, column in (
        ("time to first token, no tools", "ragd", "direct", 0),
        ("total turn time, no tools", "ragd", "direct", 1),
        ("time to first token, file_search", "ragd+fs", "direct+", 0),
        ("total turn time, file_search", "ragd+fs", "direct+", 1),
    ):
        ctx.add(
            Row(
                SCENARIO,
                f"{name} (ms)",
                figures[kind][column],
                "ms",
                "upstream direct, same prompt",
                figures[baseline][column],
                direction="lower",
            )
        )
    ctx.add(Row(SCENARIO, "file_search (vector-store search, ms)", search, "ms", direction="lower"))
    plain = cached["ragd"][0] - cached["direct"][0]
    searched = cached["ragd+fs"][0] - cached["direct+"][0]
    ctx.add(
        Row(
            SCENARIO,
            "added to first token, cached prompt, no tools (ms)",
            plain,
            "ms",
            target=TARGET_ADDED_MS,
            direction="lower",
            target_on_value=True,
            note=f"{cached['ragd'][0]:.1f} vs {cached['direct'][0]:.1f} ms",
        )
    )
    ctx.add(
        Row(
            SCENARIO,
            "added to first token besides retrieval, cached prompt, file_search (ms)",
            searched - search,
            "ms",
            target=TARGET_ADDED_MS,
            direction="lower",
            target_on_value=True,
            note=f"{cached['ragd+fs'][0]:.1f} vs {cached['direct+'][0]:.1f} ms, "
            f"less {search:.1f} ms of search",
        )
    )
