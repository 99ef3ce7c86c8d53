"""Tool calling for the local chat upstream (services/local_chat.py): llama-cpp-python's own
server with a chat handler of ours, `--chat_format ragd-chatml-tools`, run by
`python -m services.local_chat_tools` with the server's usual arguments.

llama-cpp-python's `chatml-function-calling` format is the model: ChatML with the functions
listed in the system message, the model choosing between `message:` and
`functions.<name>:` under a grammar, and the arguments generated under a grammar made from
the function's JSON Schema (valid JSON even from a 135M model). Ours differs where that one
stops short of what an OpenAI client sends: it shows the model `tool` messages (the results
of its calls; the stock template drops them), takes `tool_choice: "required"` (a call, of the
model's choosing) and streams a call the model chose itself (the stock one refuses). Under
`auto`, a turn whose last message is a function's result is answered with a message: a model
this small calls the same function again and again otherwise. The
server is wrapped so that it also takes OpenAI's `response_format: {"type": "json_schema"}`
(llama-cpp-python takes a schema as `{"type": "json_object", "schema": ...}`).

This is a stand-in for an operator's model, run as its own process: ragd's services never
import it.
"""

from __future__ import annotations

import json
from typing import Any

import llama_cpp
from llama_cpp import llama_chat_format, llama_grammar

FORMAT = "ragd-chatml-tools"
# The arguments of one call at most, in tokens (the grammar closes the JSON well before).
MAX_ARGUMENT_TOKENS = 512
_END = "<|im_end|>"


def _block(role: str, text: str) -> str:
    return f"<|im_start|>{role}\n{text}{_END}\n"


def _system_note(tools: list[dict[str, Any]]) -> str:
    lines = ["", "", "You have access to the following functions:"]
    for tool in tools:
        function = tool["function"]
        lines.append(f"\nfunctions.{function['name']}: {function.get('description') or ''}")
        lines.append(json.dumps(function.get("parameters") or {}))
    lines += [
        "",
        "Answer with a message, or call a function. To answer, begin with 'message:'. To call "
        "a function, begin with 'functions.<function_name>:' and its arguments as JSON. "
        "Once a function has returned, answer the user with a message.",
    ]
    return "\n".join(lines)


def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
    """The ChatML prompt, up to the assistant's turn."""
    prompt = ""
    system = [m for m in messages if m.get("role") == "system"]
    if tools and not system:
        prompt += _block("system", "You are a helpful assistant." + _system_note(tools))
    for message in messages:
        role, content = message.get("role"), _text(message.get("content"))
        if role == "system":
            prompt += _block("system", content + (_system_note(tools) if tools else ""))
        elif role == "user":
            prompt += _block("user", content)
        elif role == "tool":
            prompt += _block("tool", content)
        elif role == "assistant":
            calls = message.get("tool_calls") or []
            if content:
                prompt += _block("assistant", ("message:\n" if tools else "") + content)
            if calls:
                body = "\n".join(
                    f"functions.{call['function']['name']}:\n{call['function']['arguments']}"
                    for call in calls
                )
                prompt += _block("assistant", body)
    return prompt + "<|im_start|>assistant\n"


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


def _grammar(schema: Any) -> llama_grammar.LlamaGrammar:
    try:
        return llama_grammar.LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False)
    except Exception:  # a schema the converter cannot take: any JSON object
        return llama_grammar.LlamaGrammar.from_string(llama_grammar.JSON_GBNF, verbose=False)


def _answer_grammar(response_format: Any) -> llama_grammar.LlamaGrammar | None:
    if not isinstance(response_format, dict) or response_format.get("type") != "json_object":
        return None
    if "schema" in response_format:
        return _grammar(response_format["schema"])
    return llama_grammar.LlamaGrammar.from_string(llama_grammar.JSON_GBNF, verbose=False)


def handler(
    llama: llama_cpp.Llama,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    tool_choice: Any = None,
    response_format: Any = None,
    stream: bool = False,
    temperature: float = 0.2,
    top_p: float = 0.95,
    max_tokens: int | None = None,
    stop: str | list[str] | None = None,
    seed: int | None = None,
    **rest: Any,
) -> Any:
    if tool_choice == "none":
        tools = []
    sampling: dict[str, Any] = {"temperature": temperature, "top_p": top_p, "seed": seed}
    history_calls = any(m.get("tool_calls") or m.get("role") == "tool" for m in messages)
    if not tools and not history_calls:
        # No tools: the model's own chat template, exactly as llama_cpp.server would use it.
        plain: Any = llama._chat_handlers["chat_template.default"]
        return plain(
            llama=llama,
            messages=messages,
            response_format=response_format,
            stream=stream,
            max_tokens=max_tokens,
            stop=stop,
            **sampling,
            **rest,
        )
    prompt = render(messages, tools or [])
    stops = [_END, *([stop] if isinstance(stop, str) else stop or [])]

    def answer(prompt: str) -> Any:
        reply = llama.create_completion(
            prompt=prompt,
            stream=stream,
            stop=stops,
            max_tokens=max_tokens,
            grammar=_answer_grammar(response_format),
            **sampling,
        )
        return llama_chat_format._convert_completion_to_chat(reply, stream=stream)

    if not tools:
        return answer(prompt)  # calls and results in the history, none to make now
    by_name = {tool["function"]["name"]: tool for tool in tools}
    if isinstance(tool_choice, dict):
        name = str(tool_choice.get("function", {}).get("name"))
        if name not in by_name:
            raise ValueError(f"tool_choice names {name!r}, which is not in tools")
    else:
        # The model chooses, under a grammar: a message or one of the functions ("required":
        # one of the functions; after a function's result: a message).
        calls = [f'"functions.{name}:"' for name in by_name]
        answered = bool(messages) and messages[-1].get("role") == "tool"
        if tool_choice == "required":
            options = calls
        elif answered:
            options = ['"message:"']
        else:
            options = [*calls, '"message:"']
        decision = llama.create_completion(
            prompt=prompt,
            temperature=0,
            max_tokens=32,
            grammar=llama_grammar.LlamaGrammar.from_string(
                "root ::= " + " | ".join(options), verbose=False
            ),
        )
        chosen = str(decision["choices"][0]["text"]).rstrip(":")  # type: ignore[index]
        if chosen == "message":
            return answer(prompt + "message:\n")
        name = chosen.removeprefix("functions.")
    call = llama.create_completion(
        prompt=prompt + f"functions.{name}:\n",
        stream=stream,
        stop=stops,
        max_tokens=MAX_ARGUMENT_TOKENS,
        grammar=_grammar(by_name[name]["function"].get("parameters") or {"type": "object"}),
        **sampling,
    )
    return llama_chat_format._convert_completion_to_chat_function(name, call, stream)


class OpenAIResponseFormat:
    """ASGI wrapper: OpenAI's `{"type": "json_schema", "json_schema": {"schema": ...}}` as
    llama-cpp-python's `{"type": "json_object", "schema": ...}`."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].endswith("/chat/completions"):
            await self.app(scope, receive, send)
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        body = _translate(body)
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if sent:
                return await receive()  # type: ignore[no-any-return]
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        headers = [
            (key, value) for key, value in scope["headers"] if key.lower() != b"content-length"
        ]
        headers.append((b"content-length", str(len(body)).encode()))
        await self.app({**scope, "headers": headers}, replay, send)


def _translate(body: bytes) -> bytes:
    try:
        request = json.loads(body)
        wanted = request.get("response_format") or {}
    except (ValueError, AttributeError):
        return body
    if isinstance(wanted, dict) and wanted.get("type") == "json_schema":
        schema = (wanted.get("json_schema") or {}).get("schema") or {"type": "object"}
        request["response_format"] = {"type": "json_object", "schema": schema}
        return json.dumps(request).encode()
    return body


def main() -> None:
    """llama_cpp.server's own main, with this chat format registered and the request wrapper."""
    import argparse
    import os

    import uvicorn
    from llama_cpp.server.app import create_app
    from llama_cpp.server.cli import add_args_from_model, parse_model_from_args
    from llama_cpp.server.settings import ModelSettings, ServerSettings, Settings

    registry: Any = llama_chat_format.LlamaChatCompletionHandlerRegistry
    registry().register_chat_completion_handler(FORMAT, handler, overwrite=True)
    parser = argparse.ArgumentParser(description="llama_cpp.server with ragd's tool calling")
    add_args_from_model(parser, Settings)
    args = parser.parse_args()
    server: Any = parse_model_from_args(ServerSettings, args)
    model: Any = parse_model_from_args(ModelSettings, args)
    app = create_app(server_settings=server, model_settings=[model])
    uvicorn.run(
        OpenAIResponseFormat(app),
        host=os.getenv("HOST", server.host),
        port=int(os.getenv("PORT", server.port)),
        log_level="warning",
    )


if __name__ == "__main__":
    main()
