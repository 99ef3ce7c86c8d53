"""Scenario 7, part two: what ragd adds to a turn with one function-call round trip (the
model calls the client's function, the client sends its output back, the model answers)
against the same two calls sent to the chat upstream directly.

ragd's side is two /v1/responses requests: the call (a forced tool_choice, answered whole)
and the answer (the function_call_output with previous_response_id, streamed). The direct
side sends the upstream exactly the bodies ragd sends it: the same messages (the question,
the assistant's tool call with the upstream's call id, the tool's result), tools, tool_choice
and reply length, temperature 0. The variants alternate in every round; the server's prompt
cache helps them alike. Target: at most 5 ms added besides retrieval (there is none here).
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from bench.context import Context
from bench.stats import Row, median
from services.gateway.chat.tools import FunctionTool

SCENARIO = "7 chat turn"
TARGET_ADDED_MS = 5.0
QUESTION = "What is the weather in Lisbon?"
RESULT = "Sunny, 24 degrees, a light breeze from the sea."
# The answer is cut here (both ways): the round trip, not the reply, is measured.
REPLY_TOKENS = 16
MODEL = "smollm2"
WEATHER: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
_UPSTREAM_TOOLS = [FunctionTool.model_validate(WEATHER).upstream()]


def _ragd(http: httpx.Client) -> tuple[float, float]:
    """(first token of the answer, whole round trip) in ms, through ragd."""
    began = time.perf_counter()
    first = http.post(
        "/v1/responses",
        json={
            "model": MODEL,
            "input": QUESTION,
            "tools": [WEATHER],
            "tool_choice": {"type": "function", "name": "get_weather"},
            "temperature": 0.0,
            "max_output_tokens": REPLY_TOKENS,
        },
    ).json()
    call = first["output"][0]
    if call["type"] != "function_call":
        raise RuntimeError(f"no function call: {first['output']}")
    body = {
        "model": MODEL,
        "input": [{"type": "function_call_output", "call_id": call["call_id"], "output": RESULT}],
        "previous_response_id": first["id"],
        "tools": [WEATHER],
        "temperature": 0.0,
        "max_output_tokens": REPLY_TOKENS,
        "stream": True,
    }
    return _streamed(http, "/v1/responses", body, began)


def _direct(direct: httpx.Client) -> tuple[float, float]:
    """The same round trip, the upstream called as ragd calls it."""
    began = time.perf_counter()
    asked = [{"role": "user", "content": QUESTION}]
    common = {
        "model": MODEL,
        "temperature": 0.0,
        "max_tokens": REPLY_TOKENS,
        "tools": _UPSTREAM_TOOLS,
        "parallel_tool_calls": True,
    }
    first = direct.post(
        "/chat/completions",
        json={
            **common,
            "messages": asked,
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "stream": False,
        },
    ).json()
    call = first["choices"][0]["message"]["tool_calls"][0]
    messages = [
        *asked,
        {"role": "assistant", "tool_calls": [{k: call[k] for k in ("id", "type", "function")}]},
        {"role": "tool", "tool_call_id": call["id"], "content": RESULT},
    ]
    body = {
        **common,
        "messages": messages,
        "tool_choice": "auto",
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    return _streamed(direct, "/chat/completions", body, began)


def _streamed(
    http: httpx.Client, path: str, body: dict[str, Any], began: float
) -> tuple[float, float]:
    first_at = None
    with http.stream("POST", path, json=body) as reply:
        if reply.status_code != 200:
            raise RuntimeError(f"POST {path} -> {reply.status_code}: {reply.read()[:300]!r}")
        for line in reply.iter_lines():
            if first_at is None and line.startswith("data:") and _is_text(line[5:]):
                first_at = time.perf_counter()
    done = time.perf_counter()
    if first_at is None:
        raise RuntimeError(f"{path} streamed no text")
    return (first_at - began) * 1000, (done - began) * 1000


def _is_text(data: str) -> bool:
    if "delta" not in data:
        return False
    event = json.loads(data)
    if event.get("type") == "response.output_text.delta":
        return bool(event.get("delta"))
    choices = event.get("choices") or []
    return bool(choices and (choices[0].get("delta") or {}).get("content"))


def measure(ctx: Context, http: httpx.Client, direct: httpx.Client, repeats: int) -> None:
    """Rounds of both round trips in turn (the order flips every round; the first round,
    which pages the model in and fills caches, is not counted); what ragd adds is the median
    of each round's difference, which a machine's load drifting between rounds moves less
    than a difference of medians."""
    samples: dict[str, list[tuple[float, float]]] = {"ragd": [], "direct": []}
    calls = {"ragd": lambda: _ragd(http), "direct": lambda: _direct(direct)}
    for round_ in range(repeats * 2 + 1):
        for name in ("ragd", "direct") if round_ % 2 else ("direct", "ragd"):
            timing = calls[name]()
            if round_:
                samples[name].append(timing)
    first = {name: median([t[0] for t in runs]) for name, runs in samples.items()}
    total = {name: median([t[1] for t in runs]) for name, runs in samples.items()}
    pairs = list(zip(samples["ragd"], samples["direct"], strict=True))
    # Up to the answer's first token: the call's turn whole (recorded) and the answer's
    # turn until it streams, as the file_search rows measure a turn.
    added = median([mine[0] - theirs[0] for mine, theirs in pairs])
    added_total = median([mine[1] - theirs[1] for mine, theirs in pairs])
    ctx.detail(SCENARIO)["function_call_round_trip_median_ms"] = {
        **{name: {"first_token": first[name], "total": total[name]} for name in samples},
        "added_first_token": added,
        "added_total": added_total,
    }
    ctx.log(
        f"function-call round trip medians (ms): first {first}, total {total}, added to the "
        f"first token {added:.1f}, to the total {added_total:.1f}"
    )
    ctx.add(
        Row(
            SCENARIO,
            "function-call round trip, to the answer's first token (ms)",
            first["ragd"],
            "ms",
            "upstream direct, same calls",
            first["direct"],
            direction="lower",
        )
    )
    ctx.add(
        Row(
            SCENARIO,
            "function-call round trip, total (ms)",
            total["ragd"],
            "ms",
            "upstream direct, same calls",
            total["direct"],
            direction="lower",
            note=f"paired median difference {added_total:.1f} ms (the answer relayed token by "
            "token, and recorded)",
        )
    )
    ctx.add(
        Row(
            SCENARIO,
            "added to a function-call round trip, to the answer's first token (ms)",
            added,
            "ms",
            target=TARGET_ADDED_MS,
            direction="lower",
            target_on_value=True,
            note=f"median of {len(pairs)} paired rounds: the call's turn (recorded) and the "
            "answer's turn (history read) until it streams",
        )
    )
