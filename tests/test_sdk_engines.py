"""One OpenAI SDK program on each storage engine (issue 31): files, a vector store filled by
the SDK's polling helpers, searches in every mode with filters, a file deleted, a conversation
and its items. `make test` runs it on SQLite and on PostgreSQL; everything else of the SDK's
contract runs on PostgreSQL with `make test-postgres`."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest
from openai import OpenAI

from services.launcher import Stack
from tests.test_openai_sdk import CAPITALS as DOCS
from tests.test_openai_sdk import text_file


@pytest.fixture
def sdk(engine_stack: Stack) -> Iterator[OpenAI]:
    with OpenAI(base_url=engine_stack.gateway_url + "/v1", api_key="unused") as client:
        yield client


def found(page: object) -> list[str]:
    return [hit.filename for hit in page.data]  # type: ignore[attr-defined]


def test_an_sdk_program_runs_alike_on_each_engine(
    sdk: OpenAI, engine: str, engine_stack: Stack
) -> None:
    ready = httpx.get(engine_stack.gateway_url + "/ready").json()
    assert ready["engine"] == engine
    version = httpx.get(engine_stack.gateway_url + "/version").json()["store"]
    assert version["engine"] == engine
    assert ("postgresql" in version) == (engine == "postgres")
    store = sdk.vector_stores.create(name=f"capitals-{engine}", description="three capitals")
    ids = {}
    for name, (text, attributes) in DOCS.items():
        attached = sdk.vector_stores.files.upload_and_poll(
            vector_store_id=store.id, file=text_file(name, text), poll_interval_ms=50
        )
        assert attached.status == "completed", attached.last_error
        sdk.vector_stores.files.update(
            file_id=attached.id, vector_store_id=store.id, attributes=attributes
        )
        ids[name] = attached.id
    # The same bytes under another name: its own file, sharing the chunks.
    twin = sdk.vector_stores.files.upload_and_poll(
        vector_store_id=store.id, file=text_file("rome-copy.txt", DOCS["rome.txt"][0])
    )
    assert twin.status == "completed" and twin.id not in ids.values()
    counts = sdk.vector_stores.retrieve(store.id).file_counts
    assert (counts.completed, counts.total) == (4, 4)

    query = "which capital lies on the Seine?"
    for mode in ("hybrid", "vector", "lexical"):
        page = sdk.vector_stores.search(store.id, query=query, extra_body={"mode": mode})
        assert found(page)[0] == "paris.txt", (mode, found(page))
        scores = [hit.score for hit in page.data]
        assert scores == sorted(scores, reverse=True) and 0 < scores[-1] <= scores[0] <= 1
    old = sdk.vector_stores.search(
        store.id, query=query, filters={"type": "gt", "key": "year", "value": 1000}
    )
    assert found(old) == ["berlin.txt"]
    none = sdk.vector_stores.search(
        store.id, query=query, ranking_options={"score_threshold": 0.99}
    )
    assert none.data == []

    sdk.vector_stores.files.delete(file_id=ids["paris.txt"], vector_store_id=store.id)
    after = sdk.vector_stores.search(store.id, query=query)
    assert "paris.txt" not in found(after) and found(after)

    conversation = sdk.conversations.create(
        items=[{"type": "message", "role": "user", "content": "Which river runs through Rome?"}]
    )
    sdk.conversations.items.create(
        conversation.id,
        items=[{"type": "message", "role": "assistant", "content": "The Tiber."}],
    )
    items = sdk.conversations.items.list(conversation.id, order="asc")
    assert [item.role for item in items.data] == ["user", "assistant"]  # type: ignore[union-attr]

    assert sdk.vector_stores.delete(store.id).deleted
    with pytest.raises(openai.NotFoundError):
        sdk.vector_stores.retrieve(store.id)
