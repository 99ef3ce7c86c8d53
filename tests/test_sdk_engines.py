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


# Gardening filler: ordinary sentences that say nothing about the lighthouse.
_FILLER = [
    "Tomatoes want full sun and steady water through the summer months.",
    "Compost made from leaves and kitchen scraps feeds the soil slowly.",
    "Mulch keeps the beds cool and holds back the weeds after rain.",
    "Beans climb any frame you give them and fix nitrogen in the ground.",
    "Prune the roses in late winter, just above an outward facing bud.",
    "Slugs come out at dusk and favour young lettuce over older leaves.",
    "A rain barrel under the gutter saves water for the dry weeks of August.",
    "Garlic planted in autumn is ready to lift by the middle of summer.",
]
LIGHTHOUSE = "The keeper of the Vell Island lighthouse painted its lamp room bright orange in 1887."


def long_document() -> str:
    """About 2,000 MiniLM tokens of gardening, then the one lighthouse sentence at its end."""
    paragraphs = [
        " ".join(_FILLER[(n + i) % len(_FILLER)] for i in range(6)) + f" (Plot {n}.)"
        for n in range(24)
    ]
    return "\n\n".join([*paragraphs, LIGHTHOUSE])


def test_openais_default_chunking_embeds_long_chunks_as_windows(sdk: OpenAI, engine: str) -> None:
    """Issue 30.8: OpenAI's own static chunking (800 tokens, 400 overlap) on a model that reads
    256: each chunk is embedded as several windows and found by any of them, once."""
    store = sdk.vector_stores.create(name=f"windows-{engine}")
    attached = sdk.vector_stores.files.upload_and_poll(
        vector_store_id=store.id,
        file=text_file("garden.txt", long_document()),
        chunking_strategy={
            "type": "static",
            "static": {"max_chunk_size_tokens": 800, "chunk_overlap_tokens": 400},
        },
        poll_interval_ms=50,
    )
    assert attached.status == "completed", attached.last_error
    assert attached.chunking_strategy.static.max_chunk_size_tokens == 800  # type: ignore[union-attr]
    content = sdk.vector_stores.files.content(attached.id, vector_store_id=store.id)
    chunks = [part.text or "" for part in content]
    assert len(chunks) >= 3 and LIGHTHOUSE in chunks[-1]

    # The answer is only in the last window of the last chunk: a vector search finds that
    # chunk, first, once, and hands back its whole text.
    page = sdk.vector_stores.search(
        store.id,
        query="What colour did the lighthouse keeper paint the lamp room?",
        max_num_results=10,
        extra_body={"mode": "vector"},
    )
    texts = [hit.content[0].text for hit in page.data]
    assert LIGHTHOUSE in texts[0], texts[0][-200:]
    assert len(texts) == len(set(texts)) == len(chunks)
    assert texts[0] == chunks[-1] and len(texts[0]) > 2_000  # far more than 256 tokens
    scores = [hit.score for hit in page.data]
    assert scores[0] > scores[1]
    # The same file in another vector store: its windows' vectors come from the embedding
    # cache, and it is found alike.
    again = sdk.vector_stores.create(name=f"windows-again-{engine}")
    copy = sdk.vector_stores.files.create_and_poll(
        vector_store_id=again.id,
        file_id=attached.id,
        chunking_strategy={
            "type": "static",
            "static": {"max_chunk_size_tokens": 800, "chunk_overlap_tokens": 400},
        },
        poll_interval_ms=50,
    )
    assert copy.status == "completed", copy.last_error
    repeat = sdk.vector_stores.search(
        again.id,
        query="What colour did the lighthouse keeper paint the lamp room?",
        max_num_results=10,
        extra_body={"mode": "vector"},
    )
    assert [hit.content[0].text for hit in repeat.data] == texts
    assert [hit.score for hit in repeat.data] == pytest.approx(scores, abs=1e-5)
    assert sdk.vector_stores.delete(again.id).deleted

    # OpenAI's whole range: 4096 is taken, 4097 is a 400 naming the field.
    large = sdk.vector_stores.files.upload_and_poll(
        vector_store_id=store.id,
        file=text_file("large.txt", long_document() + " Large."),
        chunking_strategy={
            "type": "static",
            "static": {"max_chunk_size_tokens": 4096, "chunk_overlap_tokens": 0},
        },
        poll_interval_ms=50,
    )
    assert large.status == "completed", large.last_error
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.vector_stores.files.upload_and_poll(
            vector_store_id=store.id,
            file=text_file("too-large.txt", "anything"),
            chunking_strategy={
                "type": "static",
                "static": {"max_chunk_size_tokens": 4097, "chunk_overlap_tokens": 0},
            },
        )
    error = refused.value.body
    assert isinstance(error, dict) and error["param"] == "chunking_strategy"
    assert "between 100 and 4096" in error["message"]
    assert sdk.vector_stores.delete(store.id).deleted
