"""The web console (/console) in headless Chromium against the real stack: what a first-time
user does, through the page only (create a store, upload two files, search, chat, operations,
delete), and the API key form. Screenshots of each page at 1280 and 390 px go to
$RAGD_SCREENSHOTS (default tests/.artifacts/console/, not committed).

Debian's chromium driven by Playwright's Python package (`make setup` installs both; Playwright's
own browser download is never used). Without /usr/bin/chromium the module is skipped.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from services.launcher import Stack
from tests.chat_fixtures import CHAT_CONTEXT, chat_upstream
from tests.harness import ROOT, started_stack

CHROMIUM = Path("/usr/bin/chromium")
if not CHROMIUM.exists():
    pytest.skip(
        "no /usr/bin/chromium: the console's browser tests need Debian's chromium package "
        "(`make setup` installs it when run as root; else: apt-get install chromium)",
        allow_module_level=True,
    )

from playwright.sync_api import Browser, Page, expect, sync_playwright  # noqa: E402

ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WIDTHS = {1280: 800, 390: 844}
KEY = "console-test-key"
CHIMERA = (
    "The chimera is a fire-breathing monster of Greek myth with the body of a lion, the head "
    "of a goat rising from its back, and a serpent for a tail."
)
TIDES = "Tides are caused by the gravity of the Moon pulling on the oceans of the Earth."
QUESTION = "Which monster has the head of a goat?"
# Long enough for a cold stack's first embeddings and a small chat model's reply.
SLOW = 60_000


def screenshots() -> Path:
    folder = Path(os.environ.get("RAGD_SCREENSHOTS") or ROOT / "tests" / ".artifacts" / "console")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def shoot(page: Page, name: str) -> None:
    """The page at both widths, whole (full_page), then back at 1280."""
    for width, height in WIDTHS.items():
        page.set_viewport_size({"width": width, "height": height})
        page.screenshot(path=str(screenshots() / f"{name}-{width}.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": WIDTHS[1280]})


def run(command: list[str]) -> str:
    """A snippet's output (stdout), after it succeeded."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def completed(api: httpx.Client, path: str) -> None:
    """Waits for a vector store file to leave in_progress."""
    deadline = time.monotonic() + SLOW / 1000
    while api.get(path).json()["status"] == "in_progress":
        assert time.monotonic() < deadline
        time.sleep(0.1)


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with chat_upstream(tmp_path_factory.mktemp("console-chat")) as url:
        yield url


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, upstream: str) -> Iterator[Stack]:
    yield from started_stack(
        tmp_path_factory.mktemp("console"),
        RAGD_CHAT_BASE_URL=upstream,
        RAGD_CHAT_MODEL="smollm2",
        RAGD_CHAT_CONTEXT_TOKENS=str(CHAT_CONTEXT),
        RAGD_CHAT_MAX_OUTPUT_TOKENS="32",
        RAGD_CHAT_DEFAULT_OUTPUT_TOKENS="32",
    )


@pytest.fixture(scope="module")
def keyed_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """API keys required, and no chat model."""
    yield from started_stack(tmp_path_factory.mktemp("console-keys"), RAGD_API_KEYS=KEY)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh tab (its own sessionStorage); fails the test on a script error or a CSP refusal."""
    context = browser.new_context(viewport={"width": 1280, "height": WIDTHS[1280]})
    context.set_default_timeout(15_000)
    tab = context.new_page()
    problems: list[str] = []
    tab.on("pageerror", lambda error: problems.append(f"script error: {error}"))
    tab.on(
        "console",
        lambda message: (
            problems.append(message.text) if "Content Security Policy" in message.text else None
        ),
    )
    try:
        yield tab
        assert problems == []
    finally:
        context.close()


def test_a_first_visit_create_upload_search_chat_operations_delete(
    page: Page, stack: Stack, tmp_path: Path
) -> None:
    page.goto(f"{stack.gateway_url}/console")
    assert page.url.endswith("/console/#/stores")
    expect(page.get_by_role("heading", level=1)).to_have_text("Vector stores")
    expect(page.get_by_text("No vector stores yet")).to_be_visible()

    page.get_by_label("Name", exact=True).fill("myths")
    page.get_by_role("button", name="Create").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("myths")
    store_id = page.url.rsplit("/", 1)[1]
    assert store_id.startswith("vs_")

    # Two files by the file input, with an attribute, followed until completed.
    page.get_by_label("Key", exact=True).fill("topic")
    page.get_by_label("Value", exact=True).fill("legend")
    (tmp_path / "chimera.txt").write_text(CHIMERA)
    (tmp_path / "tides.txt").write_text(TIDES)
    page.set_input_files("#file-input", [tmp_path / "chimera.txt", tmp_path / "tides.txt"])
    rows = page.locator(".upload-row")
    expect(rows).to_have_count(2)
    expect(page.locator('.upload-row[data-state="completed"]')).to_have_count(2, timeout=SLOW)
    expect(page.get_by_text("2 of 2 files done")).to_be_visible()
    table = page.locator(".files-body table")
    expect(table.locator("tbody tr")).to_have_count(2)
    expect(table).to_contain_text("chimera.txt")
    expect(table).to_contain_text('topic="legend"')
    expect(table.locator(".badge-completed")).to_have_count(2)
    page.get_by_label("Status", exact=True).select_option("failed")
    expect(page.get_by_text("No failed files.")).to_be_visible()
    page.get_by_label("Status", exact=True).select_option("")
    expect(table.locator("tbody tr")).to_have_count(2)
    shoot(page, "store")

    # Search: the chimera's passage first, the query's words marked, the request to copy.
    page.get_by_role("link", name="Search this store").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Search")
    page.get_by_label("Query", exact=True).fill("monster with a goat head")
    page.get_by_role("button", name="Add filter").click()
    page.get_by_label("Value", exact=True).fill("legend")
    page.get_by_role("button", name="Search", exact=True).click()
    first = page.locator(".result").first
    expect(first.locator(".filename")).to_have_text("chimera.txt")
    expect(first.locator("mark").filter(has_text=re.compile("^goat$"))).to_have_count(1)
    expect(first.locator("mark").filter(has_text=re.compile("^monster$"))).to_have_count(1)
    # Hybrid (the default): where each list ranked it.
    expect(page.locator(".result-summary")).to_contain_text("ranked by hybrid")
    expect(first.locator(".ranks")).to_have_text(re.compile(r"^vector #\d+ · lexical #\d+$"))
    # The snippets are the same request: run as they are, they find the same passage first.
    curl = page.locator(".snippet pre").first
    expect(curl).to_contain_text(f"/v1/vector_stores/{store_id}/search")
    answer = json.loads(run(["bash", "-c", curl.text_content() or ""]))
    assert answer["search_query"] == ["monster with a goat head"]
    assert answer["data"][0]["filename"] == "chimera.txt"
    shoot(page, "search")
    python = page.locator(".snippet pre").nth(1)
    page.get_by_label("Mode", exact=True).select_option("lexical")
    expect(python).to_contain_text('extra_body={"mode": "lexical"}')
    printed = run([sys.executable, "-c", python.text_content() or ""])
    assert printed.splitlines()[0].split()[1] == "chimera.txt", printed
    page.get_by_role("button", name="Search", exact=True).click()
    expect(page.locator(".result-summary")).to_contain_text("ranked by lexical")
    expect(page.locator(".result").first.locator(".filename")).to_have_text("chimera.txt")
    expect(page.locator(".result .ranks")).to_have_count(0)

    # Operations: the stats of what was just indexed; a backup.
    page.get_by_role("link", name="Operations", exact=True).click()
    cards = page.locator(".cards")
    expect(cards.locator(".card").filter(has_text="Vector stores")).to_contain_text("1")
    expect(cards.locator(".card").filter(has_text="Jobs pending")).to_be_visible()
    expect(cards.locator(".card").filter(has_text="Cache hit rate")).to_be_visible()
    expect(page.locator("section").filter(has_text="Audit log")).to_contain_text("search")
    page.get_by_role("button", name="Back up now").click()
    expect(page.get_by_text(re.compile(r"Written \S*ragd-\S+\.db"))).to_be_visible()
    shoot(page, "ops")

    # Chat: one streamed turn with file_search over the store, its passages shown; resumed.
    page.goto(f"{stack.gateway_url}/console/#/chat?store={store_id}")
    expect(page.get_by_label("myths")).to_be_checked()
    page.get_by_label("Message", exact=True).fill(QUESTION)
    page.get_by_role("button", name="Send").click()
    expect(page.locator(".composer .status")).to_have_text(re.compile("Done|Stopped"), timeout=SLOW)
    # The page names the conversation once the stream has closed, a moment after "Done".
    expect(page).to_have_url(re.compile(r"#/chat/conv_\w+$"))
    expect(page.locator(".turn.search summary")).to_contain_text("Searched")
    expect(page.locator(".passage .filename").first).to_have_text("chimera.txt")
    assert page.locator(".turn.assistant .text").inner_text().strip()
    page.reload()
    expect(page.locator(".turn.user .text")).to_have_text(QUESTION)
    expect(page.locator(".conversations a[aria-current=page]")).to_contain_text(QUESTION[:20])
    shoot(page, "chat")

    # Delete, confirmed in the dialog (Cancel first: nothing happens).
    page.get_by_role("link", name="Stores", exact=True).click()
    expect(page.locator("tbody tr")).to_have_count(1)
    shoot(page, "stores")
    page.get_by_role("button", name="Delete myths").click()
    page.get_by_role("dialog").get_by_role("button", name="Cancel").click()
    expect(page.locator("tbody tr")).to_have_count(1)
    page.get_by_role("button", name="Delete myths").click()
    expect(page.get_by_role("dialog")).to_contain_text(store_id)
    page.get_by_role("dialog").get_by_role("button", name="Delete vector store").click()
    expect(page.get_by_text("No vector stores yet")).to_be_visible()


def test_the_console_asks_for_the_key_renders_user_text_as_text_and_says_there_is_no_chat(
    page: Page, keyed_stack: Stack
) -> None:
    auth = {"Authorization": f"Bearer {KEY}"}
    page.goto(f"{keyed_stack.gateway_url}/console/#/stores")
    expect(page.get_by_role("heading", level=1)).to_have_text("This ragd needs an API key")
    expect(page.get_by_text("missing API key")).to_be_visible()
    shoot(page, "key")
    page.get_by_label("API key").fill("wrong")
    page.get_by_role("button", name="Use this key").click()
    expect(page.get_by_text("The server refused the key")).to_be_visible()
    page.get_by_label("API key").fill(KEY)
    page.get_by_role("button", name="Use this key").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Vector stores")
    expect(page.locator("#key-state")).to_have_text("API key set")

    # What users wrote (a store's name, a file's name, its text) is shown as text, never run.
    hostile = '<img src=x onerror="window.pwned=1">'
    with httpx.Client(base_url=keyed_stack.gateway_url, headers=auth, timeout=60) as api:
        store_id = api.post("/v1/vector_stores", json={"name": hostile}).json()["id"]
        attached = api.post(
            f"/v1/vector_stores/{store_id}/files",
            json={"filename": "<script>window.pwned=1</script>.txt", "text": f"{hostile} goat"},
        ).json()
        completed(api, f"/v1/vector_stores/{store_id}/files/{attached['id']}")
    page.goto(f"{keyed_stack.gateway_url}/console/#/stores/{store_id}")
    expect(page.get_by_role("heading", level=1)).to_have_text(hostile)
    expect(page.locator(".files-body")).to_contain_text("<script>window.pwned=1</script>.txt")
    page.get_by_role("link", name="Search this store").click()
    page.get_by_label("Query", exact=True).fill("goat")
    page.get_by_role("button", name="Search", exact=True).click()
    expect(page.locator(".result .chunk")).to_have_text(f"{hostile} goat")
    expect(page.locator(".result mark")).to_have_text("goat")
    assert page.locator("main img, main script").count() == 0
    assert page.evaluate("window.pwned") is None

    # The page's hash survives a reload, and the key stays for the tab.
    page.get_by_role("link", name="Chat", exact=True).click()
    page.reload()
    expect(page.get_by_role("heading", level=1)).to_have_text("Chat")
    page.get_by_label("Message", exact=True).fill("Hello?")
    page.get_by_role("button", name="Send").click()
    expect(page.get_by_role("alert")).to_contain_text("no chat model is configured")
    # The conversation made for the refused turn is not kept.
    page.reload()
    expect(page.get_by_text("No conversations yet.")).to_be_visible()

    page.get_by_role("button", name="Forget key").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("This ragd needs an API key")

    # A read key browses; operations say they need an admin key.
    reader = httpx.post(
        f"{keyed_stack.gateway_url}/admin/keys",
        json={"name": "console-reader", "scope": "read"},
        headers=auth,
    ).json()["key"]
    page.get_by_label("API key").fill(reader)
    page.get_by_role("button", name="Use this key").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Chat")
    page.get_by_role("link", name="Operations", exact=True).click()
    expect(page.get_by_role("alert")).to_contain_text("Operations need an admin API key")
    expect(page.get_by_role("alert")).to_contain_text("read scope")
    shoot(page, "ops-read-key")


def test_the_console_is_served_without_a_key_and_only_its_own_files(keyed_stack: Stack) -> None:
    with httpx.Client(base_url=keyed_stack.gateway_url, timeout=60) as http:
        moved = http.get("/console")
        assert moved.status_code == 307 and moved.headers["location"] == "/console/"
        page = http.get("/console/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "script-src 'self'" in page.headers["content-security-policy"]
        script = http.get("/console/console.js")
        assert script.headers["content-type"].startswith("text/javascript")
        for path in ("/console/nothing.js", "/console/%2e%2e%2fapp.py", "/console/../app.py"):
            assert http.get(path).status_code == 404, path
        assert http.post("/console/").status_code == 405
        # The data stays behind the key.
        assert http.get("/v1/vector_stores").status_code == 401
