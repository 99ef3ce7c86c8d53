"""`ragd chat`: conversations with the stack's chat model from a terminal, streamed, kept in
the store like any other conversation (the same objects as /v1/conversations).

The conversation's metadata remembers the index, the system prompt and the model it was
started with, so `--resume` answers the same way without repeating them. `--no-store` keeps
nothing: the turns travel with each request (`store: false`) and vanish with the session.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from services.cli import render
from services.cli.lines import Lines
from services.client.chat import ChatClient, Conversation, Reply, follow, item_text
from services.client.errors import ClientError, NotFound

RESULTS = "file_search_call.results"
# Metadata keys of a conversation started here (OpenAI's limit: 512 characters a value).
INDEX_KEY, SYSTEM_KEY, MODEL_KEY = "ragd_index", "ragd_system", "ragd_model"
MAX_META_CHARS = 512
# Turns shown when a conversation is resumed.
RESUME_SHOWN = 6
HELP = (
    "/clear starts a new conversation, /regen asks the last question again, /sources shows "
    "what the last answer was given, /quit (or Ctrl-D) leaves. Ctrl-C stops a reply and keeps "
    "what came as incomplete."
)


@dataclass
class Session:
    client: ChatClient
    out: Console
    model: str | None
    system: str | None
    vector_store_id: str | None
    # False: nothing is kept on the server; the turns so far go with each request.
    store: bool = True
    conversation: Conversation | None = None
    last: Reply | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    turns: list[dict[str, Any]] = field(default_factory=list)

    def body(self, text: str) -> dict[str, Any]:
        body: dict[str, Any] = {"input": text}
        if not self.store:
            body["input"] = [*self.turns, _message("user", text)]
            body["store"] = False
        if self.conversation is not None:
            body["conversation"] = self.conversation.id
        if self.model:
            body["model"] = self.model
        if self.system:
            body["instructions"] = self.system
        if self.vector_store_id:
            body["tools"] = [{"type": "file_search", "vector_store_ids": [self.vector_store_id]}]
            # Every turn with an index searches it (the model writes the queries).
            body["tool_choice"] = "required"
            body["include"] = [RESULTS]
        return body

    def start(self) -> Conversation | None:
        """A new conversation (None without a store: the session's turns start over)."""
        self.last = None
        if not self.store:
            self.turns.clear()
            return None
        metadata = {}
        if self.vector_store_id:
            metadata[INDEX_KEY] = self.vector_store_id
        if self.system and len(self.system) <= MAX_META_CHARS:
            metadata[SYSTEM_KEY] = self.system
        if self.model and len(self.model) <= MAX_META_CHARS:
            metadata[MODEL_KEY] = self.model
        self.conversation = self.client.create_conversation(metadata)
        return self.conversation

    def ask(self, text: str) -> Reply:
        """Streams the answer to the terminal; Ctrl-C stops it (the server keeps what it
        sent, as incomplete, unless nothing is stored)."""
        if self.conversation is None and self.store:
            self.start()
        reply = self._ask(text)
        if not self.store:
            self.turns += [_message("user", text), _message("assistant", reply.text)]
        return reply

    def _ask(self, text: str) -> Reply:
        reply = Reply()
        try:
            with self.client.stream(self.body(text)) as events:
                for piece in follow(events, reply):
                    self.out.print(escape(piece), end="", soft_wrap=True)
        except KeyboardInterrupt:
            reply.status = "incomplete"
            self.out.print()
            kept = ": the reply so far is kept as incomplete" if self.store else ""
            self.out.print(f"[dim](stopped{kept})[/]")
            self.last = reply
            return reply
        self.out.print()
        if reply.error:
            raise ClientError(f"the chat model failed: {reply.error}")
        if reply.status == "incomplete":
            self.out.print("[dim](cut off at the reply length limit)[/]")
        sources(self.out, reply, brief=True)
        self.last = reply
        return reply

    def regen(self) -> str | None:
        """Drops the last question and everything after it; returns the question."""
        if not self.store:
            if not self.turns:
                return None
            question = str(self.turns[-2]["content"])
            del self.turns[-2:]
            return question
        if self.conversation is None:
            return None
        items = self.client.items(self.conversation.id, last=50)
        asked = [
            index
            for index, item in enumerate(items)
            if item.get("type") == "message" and item.get("role") == "user"
        ]
        if not asked:
            return None
        question = item_text(items[asked[-1]])
        for item in reversed(items[asked[-1] :]):
            self.client.delete_item(self.conversation.id, item["id"])
        return question


def _message(role: str, text: str) -> dict[str, Any]:
    return {"type": "message", "role": role, "content": text}


def sources(out: Console, reply: Reply, brief: bool = False) -> None:
    if not reply.sources:
        if not brief:
            out.print("[dim]no sources: this answer searched nothing[/]")
        return
    cited = set(reply.cited)
    if brief:
        names = []
        for number, source in enumerate(reply.sources, start=1):
            mark = "*" if source.get("file_id") in cited else ""
            names.append(f"[{number}]{mark} {escape(str(source.get('filename', '')))}")
        out.print("[dim]sources: " + ", ".join(names) + "[/]")
        return
    for number, source in enumerate(reply.sources, start=1):
        mark = " (cited)" if source.get("file_id") in cited else ""
        out.print(
            f"[bold][{number}][/] {escape(str(source.get('filename', '')))}"
            f" [dim]score {float(source.get('score', 0)):.3f}{mark}[/]"
        )
        out.print(f"    {escape(render.snippet(str(source.get('text', ''))))}")


def ago(seconds: int) -> str:
    delta = max(0, int(time.time()) - seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if delta >= size:
            return f"{delta // size}{unit} ago"
    return "just now"


def conversations_table(conversations: list[Conversation]) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("ID", no_wrap=True)
    table.add_column("TITLE", overflow="fold")
    table.add_column("TURNS", justify="right")
    table.add_column("LAST ACTIVE", no_wrap=True)
    for conversation in conversations:
        table.add_row(
            conversation.id,
            escape(conversation.title or "(untitled)"),
            str(conversation.turn_count),
            ago(conversation.last_active_at),
        )
    return table


def show_recent(session: Session, items: list[dict[str, Any]]) -> None:
    messages = [item for item in items if item.get("type") == "message"][-RESUME_SHOWN:]
    for item in messages:
        who = "you" if item.get("role") == "user" else str(item.get("role"))
        style = "bold cyan" if who == "you" else "bold green"
        flag = "" if item.get("status") == "completed" else f" [dim]({item.get('status')})[/]"
        session.out.print(f"[{style}]{who}>[/] {escape(item_text(item))}{flag}", soft_wrap=True)


def resume(session: Session, which: str, quiet: bool = False) -> None:
    """Continues a conversation with what it started with; `quiet` (for --json) shows none
    of it."""
    client = session.client
    conversation = which_conversation(client, which)
    session.conversation = conversation
    session.vector_store_id = (
        session.vector_store_id or conversation.metadata.get(INDEX_KEY) or None
    )
    session.system = session.system or conversation.metadata.get(SYSTEM_KEY) or None
    session.model = session.model or conversation.metadata.get(MODEL_KEY) or None
    if quiet:
        return
    title = escape(conversation.title or "(untitled)")
    session.out.print(f"[dim]resuming {conversation.id}: {title}[/]")
    show_recent(session, client.items(conversation.id, last=RESUME_SHOWN * 3))


def interactive(session: Session, lines: Lines) -> None:
    out = session.out
    out.print(f"[dim]{HELP}[/]")
    if session.conversation is not None:
        out.print(f"[dim]conversation {session.conversation.id}[/]")
    if not session.store:
        out.print("[dim]not stored: this session is forgotten when it ends[/]")
    try:
        _loop(session, lines)
    finally:
        lines.save()
    if session.conversation is not None:
        out.print(f"[dim]resume with: ragd chat --resume {session.conversation.id}[/]")


def _loop(session: Session, lines: Lines) -> None:
    out = session.out
    prompt = click.style("you", fg="cyan", bold=True) + "> "
    while True:
        try:
            text = lines.read(prompt)
        except (EOFError, KeyboardInterrupt, click.Abort):
            out.print()
            break
        text = text.strip()
        if not text:
            continue
        if text in ("/quit", "/exit"):
            break
        if text == "/help":
            out.print(f"[dim]{HELP}[/]")
            continue
        if text == "/clear":
            conversation = session.start()
            started = conversation.id if conversation else "(not stored)"
            out.print(f"[dim]new conversation {started}[/]")
            continue
        if text == "/sources":
            if session.last is None:
                out.print("[dim]nothing asked yet[/]")
            else:
                sources(out, session.last)
            continue
        if text == "/regen":
            question = session.regen()
            if question is None:
                out.print("[dim]nothing to ask again yet[/]")
                continue
            out.print(f"[dim]asking again: {escape(question)}[/]")
            text = question
        elif text.startswith("/"):
            out.print(f"[dim]unknown command {escape(text.split()[0])}; {HELP}[/]")
            continue
        out.print("[bold green]assistant>[/] ", end="")
        session.ask(text)


def once(session: Session, question: str, as_json: bool) -> None:
    """`-q`: one answer, then exit (the conversation stays, for --resume, unless nothing is
    stored)."""
    if session.conversation is None and session.store:
        session.start()
    if as_json:
        response = session.client.respond(session.body(question))
        click.echo(json.dumps(response, indent=2, ensure_ascii=False))
        return
    session.ask(question)


def which_conversation(client: ChatClient, which: str) -> Conversation:
    """A conversation by id, or `last`: the most recently active."""
    if which != "last":
        return client.get_conversation(which)
    recent = client.recent_conversations(limit=1)
    if not recent:
        raise NotFound("no conversation yet: start one with `ragd chat`")
    return recent[0]


def forget(out: Console, client: ChatClient, which: str) -> None:
    """Deletes the conversation from the store: its items, their full-text rows and vectors,
    its responses. The audit log names the API key that did it."""
    conversation = which_conversation(client, which)
    client.delete_conversation(conversation.id)
    title = escape(conversation.title or "(untitled)")
    items = conversation.item_count
    out.print(
        f"forgot {conversation.id}: {title} ({items} item{'' if items == 1 else 's'}, with "
        "their search index and vectors)",
        soft_wrap=True,
    )


def history_hits(out: Console, client: ChatClient, query: str, k: int, as_json: bool) -> None:
    hits = client.search_history(query, k=k)
    if as_json:
        click.echo(json.dumps([hit.__dict__ for hit in hits], indent=2, ensure_ascii=False))
        return
    if not hits:
        out.print(f"nothing in the history matches '{escape(query)}'")
        return
    titles: dict[str, str] = {}
    for hit in hits:
        if hit.conversation_id not in titles:
            titles[hit.conversation_id] = client.get_conversation(hit.conversation_id).title
        out.print(
            f"[bold]{hit.conversation_id}[/] #{hit.position} "
            f"[dim]{escape(titles[hit.conversation_id] or '(untitled)')} · {ago(hit.created_at)}"
            f" · score {hit.score:.2f}[/]"
        )
        out.print(f"    [cyan]{escape(hit.role)}:[/] {escape(render.snippet(hit.text))}")
