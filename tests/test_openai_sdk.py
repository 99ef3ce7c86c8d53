"""The official openai SDK against the running stack: ragd as a drop-in base_url."""

from __future__ import annotations

import io
from collections.abc import Iterator

import numpy as np
import openai
import pytest
from openai import OpenAI

from services.launcher import Stack

# Three files with attributes, for searches with filters (tests/test_sdk_engines.py too).
CAPITALS: dict[str, tuple[str, dict[str, str | float | bool]]] = {
    "rome.txt": (
        "Rome is the capital of Italy, founded on seven hills by the Tiber.",
        {"country": "it", "year": 753},
    ),
    "paris.txt": (
        "Paris is the capital of France; the Seine runs through its centre.",
        {"country": "fr", "year": 250},
    ),
    "berlin.txt": (
        "Berlin is the capital of Germany, on the rivers Spree and Havel.",
        {"country": "de", "year": 1237},
    ),
}


@pytest.fixture(scope="module")
def sdk(stack: Stack) -> Iterator[OpenAI]:
    with OpenAI(base_url=stack.gateway_url + "/v1", api_key="unused", max_retries=0) as client:
        yield client


def text_file(name: str, text: str) -> tuple[str, io.BytesIO]:
    return name, io.BytesIO(text.encode())


def test_embeddings_float_and_base64(sdk: OpenAI) -> None:
    floats = sdk.embeddings.create(
        model="all-MiniLM-L6-v2", input=["hello world"], encoding_format="float"
    )
    assert len(floats.data[0].embedding) == 384
    assert floats.usage.prompt_tokens > 0
    # The SDK asks for base64 by default and decodes it itself.
    default = sdk.embeddings.create(model="all-MiniLM-L6-v2", input="hello world")
    np.testing.assert_allclose(default.data[0].embedding, floats.data[0].embedding, atol=1e-6)


def test_files_create_retrieve_content_delete(sdk: OpenAI) -> None:
    created = sdk.files.create(file=text_file("notes.txt", "some notes"), purpose="assistants")
    assert created.object == "file"
    assert created.bytes == len("some notes")
    assert sdk.files.retrieve(created.id).filename == "notes.txt"
    assert sdk.files.content(created.id).content == b"some notes"
    assert sdk.files.delete(created.id).deleted is True
    with pytest.raises(openai.NotFoundError):
        sdk.files.retrieve(created.id)


def test_files_expires_after_sets_expires_at(sdk: OpenAI) -> None:
    """The SDK sends expires_after as the form fields expires_after[anchor] and [seconds]; the
    store's sweep deletes the file then (tests/test_store_retention.py moves its clock)."""
    created = sdk.files.create(
        file=text_file("brief.txt", "short-lived"),
        purpose="assistants",
        expires_after={"anchor": "created_at", "seconds": 3600},
    )
    assert created.expires_at == created.created_at + 3600
    assert sdk.files.retrieve(created.id).expires_at == created.expires_at
    kept = sdk.files.create(file=text_file("kept.txt", "kept"), purpose="assistants")
    assert kept.expires_at is None
    for bad in (
        {"anchor": "created_at", "seconds": 60},
        {"anchor": "last_active_at", "seconds": 3600},
    ):
        with pytest.raises(openai.BadRequestError) as refused:
            sdk.files.create(
                file=text_file("x.txt", "x"),
                purpose="assistants",
                expires_after=bad,  # type: ignore[arg-type]
            )
        assert refused.value.param == "expires_after"


def test_files_list_pagination(sdk: OpenAI) -> None:
    ids = {
        sdk.files.create(file=text_file(f"page{i}.txt", f"page {i}"), purpose="user_data").id
        for i in range(5)
    }
    first = sdk.files.list(limit=2, purpose="user_data")
    assert len(first.data) == 2
    assert first.has_more is True
    seen = {f.id for f in sdk.files.list(limit=2, purpose="user_data")}  # auto-paginates
    assert ids <= seen


def test_vector_store_lifecycle(sdk: OpenAI) -> None:
    store = sdk.vector_stores.create(name="sdk", metadata={"team": "search"})
    assert store.status == "completed"
    assert sdk.vector_stores.retrieve(store.id).metadata == {"team": "search"}
    renamed = sdk.vector_stores.update(store.id, name="sdk-renamed")
    assert renamed.name == "sdk-renamed"
    # OpenAI's VectorStore type has no description yet: ragd echoes it as an extra field.
    described = sdk.vector_stores.create(name="sdk-described", description="team handbook")
    assert (described.model_extra or {})["description"] == "team handbook"
    assert (store.model_extra or {})["description"] is None
    updated = sdk.vector_stores.update(described.id, extra_body={"description": "handbook v2"})
    assert (updated.model_extra or {})["description"] == "handbook v2"
    assert sdk.vector_stores.delete(described.id).deleted is True
    listed = [s.id for s in sdk.vector_stores.list(limit=100)]
    assert store.id in listed
    assert sdk.vector_stores.delete(store.id).deleted is True
    with pytest.raises(openai.NotFoundError):
        sdk.vector_stores.retrieve(store.id)


def test_upload_and_poll_then_search_with_filters(sdk: OpenAI) -> None:
    store = sdk.vector_stores.create(name="sdk-search")
    docs = CAPITALS
    for name, (text, attrs) in docs.items():
        vs_file = sdk.vector_stores.files.upload_and_poll(
            vector_store_id=store.id, file=text_file(name, text), poll_interval_ms=50
        )
        assert vs_file.status == "completed", vs_file.last_error
        updated = sdk.vector_stores.files.update(
            file_id=vs_file.id, vector_store_id=store.id, attributes=attrs
        )
        assert updated.attributes == attrs
    results = sdk.vector_stores.search(store.id, query="capital city on a river")
    assert {r.filename for r in results.data} == set(docs)
    only_old = sdk.vector_stores.search(
        store.id,
        query="capital city on a river",
        filters={"type": "lt", "key": "year", "value": 1000},
    )
    assert {r.filename for r in only_old.data} == {"rome.txt", "paris.txt"}
    either = sdk.vector_stores.search(
        store.id,
        query="capital",
        filters={
            "type": "or",
            "filters": [
                {"type": "eq", "key": "country", "value": "de"},
                {"type": "in", "key": "country", "value": ["it"]},
            ],
        },
        max_num_results=1,
    )
    assert len(either.data) == 1
    assert either.data[0].filename in {"berlin.txt", "rome.txt"}
    assert either.data[0].attributes is not None
    strict = sdk.vector_stores.search(
        store.id, query="capital", ranking_options={"score_threshold": 0.99}
    )
    assert strict.data == []


def test_file_batch_upload_and_poll(sdk: OpenAI) -> None:
    store = sdk.vector_stores.create(name="sdk-batch")
    files = [
        text_file(f"batch{i}.md", f"# Note {i}\n\nBatch document number {i}.") for i in range(6)
    ]
    batch = sdk.vector_stores.file_batches.upload_and_poll(
        vector_store_id=store.id, files=files, poll_interval_ms=50
    )
    assert batch.status == "completed"
    assert batch.object == "vector_store.files_batch"
    assert batch.file_counts.completed == 6
    listed = sdk.vector_stores.file_batches.list_files(batch_id=batch.id, vector_store_id=store.id)
    assert len(listed.data) == 6
    assert sdk.vector_stores.retrieve(store.id).file_counts.completed == 6


def test_deleting_a_file_removes_it_from_stores(sdk: OpenAI) -> None:
    store = sdk.vector_stores.create(name="sdk-delete")
    vs_file = sdk.vector_stores.files.upload_and_poll(
        vector_store_id=store.id,
        file=text_file("gone.txt", "A unique passage about purple elephants."),
        poll_interval_ms=50,
    )
    assert sdk.vector_stores.search(store.id, query="purple elephants").data
    sdk.files.delete(vs_file.id)
    assert sdk.vector_stores.search(store.id, query="purple elephants").data == []
    assert sdk.vector_stores.retrieve(store.id).file_counts.total == 0


def test_identical_content_under_two_file_ids_is_two_files(sdk: OpenAI) -> None:
    # An ingest script run twice uploads the same bytes again: each upload is its own file in
    # the store, polled by its own id, with its own attributes, counted (issue 30).
    store = sdk.vector_stores.create(name="sdk-twins")
    text = "The otter colony at Moss Landing counts forty-two animals this spring."
    polled = [
        sdk.vector_stores.files.upload_and_poll(
            vector_store_id=store.id,
            file=text_file(f"otters-{run}.txt", text),
            attributes={"run": run},
            poll_interval_ms=50,
        )
        for run in (1, 2)
    ]
    assert [(f.status, f.attributes) for f in polled] == [
        ("completed", {"run": 1}),
        ("completed", {"run": 2}),
    ]
    uploaded = sdk.files.create(file=text_file("otters-3.txt", text), purpose="assistants")
    third = sdk.vector_stores.files.create_and_poll(
        vector_store_id=store.id, file_id=uploaded.id, attributes={"run": 3}, poll_interval_ms=50
    )
    assert (third.id, third.status) == (uploaded.id, "completed")
    assert sdk.vector_stores.retrieve(store.id).file_counts.completed == 3
    found = sdk.vector_stores.search(
        store.id, query="otters", filters={"type": "eq", "key": "run", "value": 2}
    )
    assert [hit.file_id for hit in found.data] == [polled[1].id]
    # A batch of files with one content counts every file.
    copies = [
        sdk.files.create(file=text_file(f"copy-{n}.txt", text), purpose="assistants").id
        for n in range(3)
    ]
    batch = sdk.vector_stores.file_batches.create_and_poll(
        vector_store_id=store.id, file_ids=copies, poll_interval_ms=50
    )
    assert (batch.status, batch.file_counts.completed, batch.file_counts.total) == (
        "completed",
        3,
        3,
    )


def test_hybrid_search_weights_are_honoured(sdk: OpenAI) -> None:
    """Issue 30.9: ranking_options.hybrid_search's weights share the fused score."""
    store = sdk.vector_stores.create(name="sdk-weights")
    for name, text in (
        ("words.txt", "A unique passage about purple elephants."),
        ("meaning.txt", "Grey mammals with long trunks roam the African savanna."),
    ):
        sdk.vector_stores.files.upload_and_poll(
            vector_store_id=store.id, file=text_file(name, text), poll_interval_ms=50
        )

    def scores(embedding_weight: float, text_weight: float) -> dict[str, float]:
        # The SDK's search params have no hybrid_search (its file_search tool has): extra_body.
        ranking = {
            "ranker": "default-2024-11-15",
            "hybrid_search": {"embedding_weight": embedding_weight, "text_weight": text_weight},
        }
        page = sdk.vector_stores.search(
            store.id, query="purple elephants", extra_body={"ranking_options": ranking}
        )
        return {hit.filename: hit.score for hit in page.data}

    meaning_only, words_only, even = scores(1, 0), scores(0, 1), scores(1, 1)
    # Without the vector ranking a passage sharing no word with the query has no evidence.
    assert words_only.get("meaning.txt", 0.0) == 0.0 < words_only["words.txt"]
    assert meaning_only["meaning.txt"] > 0.0
    assert even != meaning_only and even != words_only
    with pytest.raises(openai.BadRequestError):
        scores(0, 0)


def test_extensions_also_answer_to_namespaced_names(sdk: OpenAI) -> None:
    """Issue 30.10: ragd_<name> for an extension OpenAI may one day define; the plain name
    keeps working, and both at once must agree."""
    store = sdk.vector_stores.create(
        name="sdk-aliases", extra_body={"ragd_embedding_model": "all-MiniLM-L6-v2"}
    )
    sdk.vector_stores.files.upload_and_poll(
        vector_store_id=store.id,
        file=text_file("owls.txt", "Snowy owls hunt lemmings on the tundra."),
        poll_interval_ms=50,
    )
    spaced = sdk.vector_stores.search(
        store.id, query="owls", extra_body={"ragd_mode": "lexical", "ragd_exact": True}
    )
    plain = sdk.vector_stores.search(store.id, query="owls", extra_body={"mode": "lexical"})
    assert spaced.model_extra and spaced.model_extra["mode"] == "lexical"
    assert [hit.score for hit in spaced.data] == [hit.score for hit in plain.data]
    with pytest.raises(openai.BadRequestError) as both:
        sdk.vector_stores.search(
            store.id, query="owls", extra_body={"mode": "lexical", "ragd_mode": "vector"}
        )
    assert both.value.param == "ragd_mode"
    conversation = sdk.conversations.create(extra_body={"ragd_title": "Owls"})
    assert conversation.model_extra and conversation.model_extra["title"] == "Owls"
    embedded = sdk.embeddings.create(
        model="all-MiniLM-L6-v2", input="owl " * 400, extra_body={"ragd_truncate": True}
    )
    assert len(embedded.data[0].embedding) == 384
