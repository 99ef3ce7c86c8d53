"""`ragd chat`'s habits against a real stack and a real chat upstream (llama_cpp.server on
SmolLM2-135M-Instruct), with API keys on: --forget and the audit entry naming who deleted
what, --no-store keeping nothing, --resume bringing back the model, and the line history,
recalled with the up arrow by `ragd` running in a pseudo-terminal."""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner, Result
from rich.console import Console

from services.cli.chat import MODEL_KEY, Session
from services.cli.main import cli
from services.client.chat import ChatClient
from services.launcher import Stack
from tests.chat_fixtures import CHAT_CONTEXT, chat_upstream
from tests.harness import ROOT, ok, started_stack

BOOTSTRAP = "bootstrap-secret-key"
HELLO = "Say hello."
ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|[\x01\x02]")


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with chat_upstream(tmp_path_factory.mktemp("chat-logs")) as url:
        yield url


@pytest.fixture(scope="module")
def chat_stack(tmp_path_factory: pytest.TempPathFactory, upstream: str) -> Iterator[Stack]:
    yield from started_stack(
        tmp_path_factory.mktemp("chat-cli"),
        RAGD_CHAT_BASE_URL=upstream,
        RAGD_CHAT_MODEL="smollm2",
        RAGD_CHAT_CONTEXT_TOKENS=str(CHAT_CONTEXT),
        RAGD_CHAT_MAX_OUTPUT_TOKENS="16",
        RAGD_CHAT_DEFAULT_OUTPUT_TOKENS="16",
        RAGD_API_KEYS=BOOTSTRAP,
    )


@pytest.fixture(scope="module")
def admin(chat_stack: Stack) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {BOOTSTRAP}"}
    with httpx.Client(base_url=chat_stack.gateway_url, headers=headers, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def alice(admin: httpx.Client) -> str:
    """A named key with the write scope: the one the audit log must name."""
    made = ok(admin.post("/admin/keys", json={"name": "alice", "scope": "write"}))
    return str(made["key"])


def ragd(stack: Stack, key: str, *args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(
        cli,
        ["--url", stack.gateway_url, "--api-key", key, "chat", *args],
        input=input,
        catch_exceptions=False,
    )


def conversation_ids(admin: httpx.Client) -> set[str]:
    return {c["id"] for c in ok(admin.get("/v1/conversations", params={"limit": 100}))["data"]}


def test_forget_deletes_a_conversation_and_the_audit_names_who(
    chat_stack: Stack, admin: httpx.Client, alice: str
) -> None:
    as_alice = {"Authorization": f"Bearer {alice}"}
    item = {"role": "user", "content": "Where do zanzibar quokkas sleep?"}
    made = ok(admin.post("/v1/conversations", json={"items": [item]}, headers=as_alice))
    forgot = ragd(chat_stack, alice, "--forget", made["id"])
    assert forgot.exit_code == 0, forgot.output
    assert f"forgot {made['id']}: Where do zanzibar quokkas sleep? (1 item," in forgot.stdout
    assert admin.get(f"/v1/conversations/{made['id']}").status_code == 404
    found = ok(admin.post("/v1/conversations/search", json={"query": "zanzibar"}))
    assert found["data"] == []
    deadline = time.monotonic() + 30
    while True:
        entries = ok(admin.get("/admin/audit", params={"operation": "delete"}))["data"]
        mine = [e for e in entries if made["id"] in e["detail"]]
        if mine:
            break
        assert time.monotonic() < deadline, entries
        time.sleep(0.2)
    [entry] = mine
    assert entry["key"] == "alice"
    assert entry["detail"] == f"DELETE /v1/conversations/{made['id']} 200"
    missing = ragd(chat_stack, alice, "--forget", "conv_nosuch")
    assert missing.exit_code == 3 and "conv_nosuch" in missing.output


def test_no_store_keeps_nothing_on_the_server(chat_stack: Stack, admin: httpx.Client) -> None:
    before = conversation_ids(admin)
    once = ragd(chat_stack, BOOTSTRAP, "--no-store", "-q", HELLO, "--json")
    assert once.exit_code == 0, once.output
    response: dict[str, Any] = json.loads(once.stdout)
    assert response["store"] is False and response["conversation"] is None
    assert response["output"][-1]["content"][0]["text"]
    assert admin.get(f"/v1/responses/{response['id']}").status_code == 404
    session = ragd(chat_stack, BOOTSTRAP, "--no-store", input=f"{HELLO}\n/regen\n/quit\n")
    assert session.exit_code == 0, session.output
    assert "not stored" in session.stdout and f"asking again: {HELLO}" in session.stdout
    assert "resume with" not in session.stdout
    assert conversation_ids(admin) == before
    refused = ragd(chat_stack, BOOTSTRAP, "--no-store", "--resume", "last")
    assert refused.exit_code == 2 and "--no-store" in refused.output


def test_without_a_store_the_turns_travel_with_each_request(chat_stack: Stack) -> None:
    out = Console(file=io.StringIO())
    with ChatClient(chat_stack.gateway_url, BOOTSTRAP, timeout=120) as client:
        session = Session(client, out, None, None, None, store=False)
        first = session.ask(HELLO)
        body = session.body("And once more?")
        assert body["store"] is False and "conversation" not in body
        assert body["input"] == [
            {"type": "message", "role": "user", "content": HELLO},
            {"type": "message", "role": "assistant", "content": first.text},
            {"type": "message", "role": "user", "content": "And once more?"},
        ]
        # The gateway takes the history as input: the second turn is answered too.
        assert session.ask("And once more?").status in ("completed", "incomplete")
        assert len(session.turns) == 4
        assert session.regen() == "And once more?" and len(session.turns) == 2


def test_resume_brings_back_the_model(chat_stack: Stack, admin: httpx.Client) -> None:
    asked = ragd(chat_stack, BOOTSTRAP, "--model", "smollm2-fixture", "-q", HELLO, "--json")
    assert asked.exit_code == 0, asked.output
    first = json.loads(asked.stdout)
    assert first["model"] == "smollm2-fixture"
    conversation = first["conversation"]["id"]
    metadata = ok(admin.get(f"/v1/conversations/{conversation}"))["metadata"]
    assert metadata[MODEL_KEY] == "smollm2-fixture"
    resumed = ragd(chat_stack, BOOTSTRAP, "--resume", conversation, "-q", "Again?", "--json")
    assert resumed.exit_code == 0, resumed.output
    assert json.loads(resumed.stdout)["model"] == "smollm2-fixture"


class Terminal:
    """`ragd` in a pseudo-terminal, so that it edits lines with readline as it would for a
    person; what it writes is read back without its colours."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "services.cli", *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            cwd=ROOT,
            start_new_session=True,
        )
        os.close(slave)
        self.raw = b""

    @property
    def text(self) -> str:
        return ANSI.sub(b"", self.raw).decode(errors="replace")

    def expect(self, pattern: str, count: int = 1, timeout: float = 120.0) -> None:
        """Reads until `pattern` has appeared `count` times."""
        deadline = time.monotonic() + timeout
        while self.text.count(pattern) < count:
            assert self.process.poll() is None or time.monotonic() < deadline, self.text
            assert time.monotonic() < deadline, f"no {pattern!r} x{count} in:\n{self.text}"
            ready, _, _ = select.select([self.master], [], [], 0.2)
            if ready:
                try:
                    self.raw += os.read(self.master, 65536)
                except OSError:  # the child closed the terminal
                    time.sleep(0.1)

    def send(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def close(self) -> int:
        """Waits for the exit, keeping what was written until then."""
        try:
            code = self.process.wait(timeout=60)
            while select.select([self.master], [], [], 0.2)[0]:
                chunk = os.read(self.master, 65536)
                if not chunk:
                    break
                self.raw += chunk
        except OSError:  # EIO: every writer has closed the terminal
            pass
        finally:
            os.close(self.master)
        return code


def test_the_line_history_recalls_earlier_lines_in_a_terminal(
    chat_stack: Stack, admin: httpx.Client, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "RAGD_URL": chat_stack.gateway_url,
        "RAGD_API_KEY": BOOTSTRAP,
        "TERM": "xterm",
    }
    history = tmp_path / "state" / "ragd" / "chat_history"
    first = Terminal(["chat"], env)
    first.expect("you> ")
    first.send(HELLO.encode() + b"\r")
    first.expect("you> ", count=2)
    first.send(b"/quit\r")
    assert first.close() == 0, first.text
    assert history.read_text().splitlines() == [HELLO, "/quit"]
    assert history.stat().st_mode & 0o777 == 0o600

    # Up twice: past /quit to the question, asked again in a new conversation.
    second = Terminal(["chat"], env)
    second.expect("you> ")
    second.send(b"\x1b[A\x1b[A\r")
    second.expect("assistant> ")
    second.expect("you> ", count=2)
    second.send(b"\x04")  # Ctrl-D leaves too
    assert second.close() == 0, second.text
    conversation = second.text.rsplit("ragd chat --resume ", 1)[1].split()[0]
    items = ok(admin.get(f"/v1/conversations/{conversation}/items", params={"order": "asc"}))
    assert items["data"][0]["content"][0]["text"] == HELLO
    assert history.read_text().splitlines() == [HELLO, "/quit", HELLO]

    # --no-store writes nothing, not even what was typed.
    third = Terminal(["chat", "--no-store"], env)
    third.expect("you> ")
    third.send(b"/sources\r")
    third.expect("nothing asked yet")
    third.send(b"/quit\r")
    assert third.close() == 0, third.text
    assert history.read_text().splitlines() == [HELLO, "/quit", HELLO]
