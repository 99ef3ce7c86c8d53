"""The REST API against the real stack: embeddings, vector stores, search, errors."""

from __future__ import annotations

import base64
import time
from typing import Any

import httpx
import numpy as np
import pytest

from tests import engines


def embed(client: httpx.Client, inputs: Any, **extra: Any) -> httpx.Response:
    return client.post("/v1/embeddings", json={"input": inputs, **extra})


def vectors(response: httpx.Response) -> np.ndarray:
    assert response.status_code == 200, response.text
    return np.array([item["embedding"] for item in response.json()["data"]], dtype=np.float32)


def assert_error(response: httpx.Response, status: int, param: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    if param is not None:
        assert error["param"] == param
    return error


def test_health_and_ready(client: httpx.Client) -> None:
    assert client.get("/health").json() == {"status": "ok"}
    ready = client.get("/ready")
    assert ready.status_code == 200
    body = ready.json()
    disk = body.pop("disk")
    assert body == {
        "status": "ready",
        "degraded": [],
        "embedder": "SERVING",
        "store": "SERVING",
        "chat": None,
        "unserved_models": [],
        "vector_index": "available",
        "engine": engines.stack_engine(),
    }
    assert "X-Ragd-Degraded" not in ready.headers
    assert client.get("/ready?require=embedder").status_code == 200
    # A chat model is not configured here: requiring one is not ready; a typo is a 400.
    assert client.get("/ready?require=chat").status_code == 503
    wrong = client.get("/ready", params={"require": "embeder"})
    assert wrong.status_code == 400 and wrong.json()["error"]["param"] == "require"
    assert disk["full"] is False and 0 < disk["free_bytes"] <= disk["total_bytes"]


def test_models_lists_the_served_model(client: httpx.Client) -> None:
    body = client.get("/v1/models").json()
    assert body["object"] == "list"
    assert [m["id"] for m in body["data"]] == ["all-MiniLM-L6-v2"]


def test_embeddings_shape_usage_and_norm(client: httpx.Client) -> None:
    response = embed(client, ["first text", "second, longer text here"])
    body = response.json()
    assert body["object"] == "list"
    assert body["model"] == "all-MiniLM-L6-v2"
    assert [d["index"] for d in body["data"]] == [0, 1]
    matrix = vectors(response)
    assert matrix.shape == (2, 384)
    np.testing.assert_allclose(np.linalg.norm(matrix, axis=1), 1.0, atol=1e-5)
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > 4


def test_single_string_and_base64_match_float(client: httpx.Client) -> None:
    floats = vectors(embed(client, "the same text"))
    encoded = embed(client, "the same text", encoding_format="base64").json()
    raw = base64.b64decode(encoded["data"][0]["embedding"])
    np.testing.assert_allclose(np.frombuffer(raw, dtype="<f4"), floats[0], atol=1e-6)


def test_semantic_ordering(client: httpx.Client) -> None:
    query, close, far = vectors(
        embed(
            client,
            [
                "a cat sits on the mat",
                "a kitten rests on a rug",
                "quarterly bond yields rose sharply",
            ],
        )
    )
    assert query @ close > query @ far + 0.2


def test_model_name_is_checked(client: httpx.Client) -> None:
    assert embed(client, "x", model="all-minilm-l6-v2").status_code == 200
    error = assert_error(embed(client, "x", model="text-embedding-3-small"), 404, "model")
    assert "all-MiniLM-L6-v2" in error["message"]


def test_a_vector_store_names_its_model_or_is_refused(client: httpx.Client) -> None:
    """`embedding_model` used to be ignored: a store asked for another model came out on the
    served one without a word."""
    accepted: list[Any] = ["all-minilm-l6-v2", {"name": "all-MiniLM-L6-v2", "dimensions": 384}]
    for model in accepted:
        made = client.post("/v1/vector_stores", json={"embedding_model": model})
        assert made.status_code == 200, made.text
        assert made.json()["embedding_model"] == {"name": "all-MiniLM-L6-v2", "dimensions": 384}
    before = client.get("/v1/vector_stores", params={"limit": 100}).json()["data"]
    refused: list[tuple[Any, str]] = [
        (
            "bge-small-en-v1.5",
            "'bge-small-en-v1.5' is not served here; this server embeds with 'all-MiniLM-L6-v2'",
        ),
        ({"name": "all-MiniLM-L6-v2", "dimensions": 256}, "must be 384 for all-MiniLM-L6-v2"),
        ({"model": "x"}, "takes 'name' and 'dimensions'"),
        (7, "must be a model name"),
    ]
    for model, words in refused:
        error = assert_error(
            client.post("/v1/vector_stores", json={"name": "refused", "embedding_model": model}),
            400,
            "embedding_model",
        )
        assert words in error["message"], error
    # Nothing was made on the way.
    assert client.get("/v1/vector_stores", params={"limit": 100}).json()["data"] == before


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": ""}, "input"),
        ({"input": []}, "input"),
        ({"input": ["ok", ""]}, "input"),
        ({"input": [1, 2, 3]}, "input"),
        ({"input": [[1, 2]]}, "input"),
        ({"input": 5}, "input"),
        ({}, "input"),
        ({"input": ["x"] * 2049}, "input"),
        ({"input": "x", "encoding_format": "int8"}, "encoding_format"),
        ({"input": "x", "dimensions": 256}, "dimensions"),
    ],
)
def test_bad_embedding_requests_are_400(
    client: httpx.Client, body: dict[str, Any], param: str
) -> None:
    assert_error(client.post("/v1/embeddings", json=body), 400, param)


def test_malformed_json_is_400(client: httpx.Client) -> None:
    response = client.post(
        "/v1/embeddings", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert_error(response, 400)


def test_over_long_input_is_400_with_counts(client: httpx.Client) -> None:
    error = assert_error(embed(client, "word " * 600), 400)
    assert "256" in error["message"]


def test_unknown_route_is_404_in_openai_shape(client: httpx.Client) -> None:
    assert_error(client.get("/v1/nothing-here"), 404)


def create_store(client: httpx.Client, name: str = "test") -> dict[str, Any]:
    response = client.post("/v1/vector_stores", json={"name": name, "metadata": {"k": "v"}})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def wait_file(
    client: httpx.Client, store_id: str, file_id: str, timeout: float = 60.0
) -> dict[str, Any]:
    """Polls a vector store file until ingestion has finished, one way or another."""
    deadline = time.monotonic() + timeout
    while True:
        body: dict[str, Any] = client.get(f"/v1/vector_stores/{store_id}/files/{file_id}").json()
        if body["status"] != "in_progress":
            return body
        assert time.monotonic() < deadline, body
        time.sleep(0.05)


def attach_text(client: httpx.Client, store_id: str, text: str, filename: str) -> dict[str, Any]:
    response = client.post(
        f"/v1/vector_stores/{store_id}/files", json={"text": text, "filename": filename}
    )
    assert response.status_code == 200, response.text
    assert response.json()["status"] in ("in_progress", "completed")
    return wait_file(client, store_id, response.json()["id"])


def search(client: httpx.Client, store_id: str, query: Any, **extra: Any) -> httpx.Response:
    return client.post(f"/v1/vector_stores/{store_id}/search", json={"query": query, **extra})


PASSAGES = {
    "chimera.txt": "The chimera is a fire-breathing hybrid monster from Greek mythology, "
    "with the body of a lion, a goat's head rising from its back and a serpent for a tail.",
    "sourdough.txt": "Sourdough bread is leavened by a starter of wild yeast and lactic acid "
    "bacteria; the dough ferments slowly, which gives the crumb its tangy flavour.",
    "tides.txt": "Ocean tides are caused mainly by the Moon's gravity pulling on the Earth's "
    "oceans, producing two high tides and two low tides roughly every day.",
}


def test_chimera_smoke(client: httpx.Client) -> None:
    store = create_store(client, "chimera")
    assert store["object"] == "vector_store"
    assert store["metadata"] == {"k": "v"}
    for filename, text in PASSAGES.items():
        attached = attach_text(client, store["id"], text, filename)
        assert attached["status"] == "completed"
        assert attached["object"] == "vector_store.file"
    queries = {
        "which monster has a lion's body and a goat's head?": "chimera.txt",
        "how is bread made to rise with wild yeast": "sourdough.txt",
        "why does the sea level go up and down": "tides.txt",
    }
    for query, expected in queries.items():
        page = search(client, store["id"], query, max_num_results=3).json()
        assert page["object"] == "vector_store.search_results.page"
        top = page["data"][0]
        assert top["filename"] == expected, page
        assert top["content"] == [{"type": "text", "text": PASSAGES[expected]}]
        scores = [hit["score"] for hit in page["data"]]
        assert scores == sorted(scores, reverse=True)
        assert all(0.0 <= s <= 1.0 for s in scores)
    fetched = client.get(f"/v1/vector_stores/{store['id']}").json()
    assert fetched["file_counts"]["completed"] == 3
    assert fetched["usage_bytes"] > 0
    # Extensions: each file's name and chunks, in the listing too.
    listed = client.get(f"/v1/vector_stores/{store['id']}/files").json()["data"]
    assert {(f["filename"], f["chunk_count"]) for f in listed} == {(n, 1) for n in PASSAGES}


def test_multipart_upload_and_score_threshold(client: httpx.Client) -> None:
    store = create_store(client, "upload")
    text = "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen."
    response = client.post(
        f"/v1/vector_stores/{store['id']}/files",
        files={"file": ("plants.md", text.encode(), "text/markdown")},
        data={"attributes": '{"topic": "biology", "year": 2024}'},
    )
    assert response.status_code == 200, response.text
    assert response.json()["attributes"] == {"topic": "biology", "year": 2024}
    assert wait_file(client, store["id"], response.json()["id"])["status"] == "completed"
    hits = search(client, store["id"], "how do plants make sugar").json()["data"]
    assert hits[0]["filename"] == "plants.md"
    assert hits[0]["attributes"] == {"topic": "biology", "year": 2024}
    none = search(
        client, store["id"], "how do plants make sugar", ranking_options={"score_threshold": 0.99}
    ).json()
    assert none["data"] == []


def test_long_document_is_chunked_within_the_model_limit(client: httpx.Client) -> None:
    store = create_store(client, "long")
    paragraphs = [
        f"Paragraph {i} talks about topic number {i}. " + "Filler words follow here. " * 20
        for i in range(12)
    ]
    attached = attach_text(client, store["id"], "\n\n".join(paragraphs), "long.txt")
    assert attached["status"] == "completed"
    assert attached["chunking_strategy"]["static"]["max_chunk_size_tokens"] == 256
    content = client.get(f"/v1/vector_stores/{store['id']}/files/{attached['id']}/content")
    chunks = [item["text"] for item in content.json()["data"]]
    assert len(chunks) > 3
    # Every paragraph is indexed, and each chunk fits the model (256 tokens incl. specials).
    assert all(f"Paragraph {i} " in " ".join(chunks) for i in range(12))
    # The embeddings route rejects inputs over 256 tokens, so a 200 proves every chunk fits.
    assert embed(client, chunks).status_code == 200


def test_vector_store_list_get_delete(client: httpx.Client) -> None:
    ids = [create_store(client, f"list-{i}")["id"] for i in range(3)]
    page = client.get("/v1/vector_stores", params={"limit": 2}).json()
    assert page["object"] == "list"
    assert [s["id"] for s in page["data"]] == ids[::-1][:2]
    assert page["has_more"] is True
    rest = client.get("/v1/vector_stores", params={"limit": 100, "after": page["last_id"]})
    assert ids[0] in [s["id"] for s in rest.json()["data"]]
    deleted = client.delete(f"/v1/vector_stores/{ids[0]}").json()
    assert deleted == {"id": ids[0], "object": "vector_store.deleted", "deleted": True}
    assert_error(client.get(f"/v1/vector_stores/{ids[0]}"), 404)


def test_unknown_store_is_404(client: httpx.Client) -> None:
    assert_error(client.get("/v1/vector_stores/vs_missing"), 404)
    assert_error(search(client, "vs_missing", "anything"), 404)
    response = client.post(
        "/v1/vector_stores/vs_missing/files", json={"text": "t", "filename": "a.txt"}
    )
    assert_error(response, 404)


def test_unsupported_upload_is_400(client: httpx.Client) -> None:
    store = create_store(client, "bad-files")
    files = {"file": ("image.png", b"\x89PNG\r\n", "image/png")}
    response = client.post(f"/v1/vector_stores/{store['id']}/files", files=files)
    assert assert_error(response, 400, "file")["code"] == "unsupported_file"


@pytest.mark.parametrize(
    ("filename", "content", "message"),
    [
        ("latin1.txt", "caf\xe9".encode("latin-1"), "not UTF-8"),
        ("empty.txt", b"   \n", "no text"),
        ("broken.json", b"{not json", "not valid JSON"),
        # Past what Python's json reads without a bare ValueError or a RecursionError.
        ("huge.json", b'{"n": ' + b"9" * 5000 + b"}", "integer of 5000 digits"),
        ("deep.json", b"[" * 2000 + b"]" * 2000, "nests deeper than 200 levels"),
        ("fake.pdf", b"%PDF-1.4 garbage", "PDF"),
    ],
)
def test_unreadable_files_fail_with_invalid_file(
    client: httpx.Client, filename: str, content: bytes, message: str
) -> None:
    store = create_store(client, "bad-files")
    response = client.post(
        f"/v1/vector_stores/{store['id']}/files", files={"file": (filename, content)}
    )
    assert response.status_code == 200, response.text
    failed = wait_file(client, store["id"], response.json()["id"])
    assert failed["status"] == "failed"
    assert failed["last_error"]["code"] == "invalid_file"
    assert message in failed["last_error"]["message"]
    counts = client.get(f"/v1/vector_stores/{store['id']}").json()["file_counts"]
    assert counts["failed"] == 1


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"query": ""}, "query"),
        ({"query": "x", "max_num_results": 0}, "max_num_results"),
        ({"query": "x", "max_num_results": 51}, "max_num_results"),
        ({"query": "x", "ranking_options": {"score_threshold": 2}}, "score_threshold"),
    ],
)
def test_bad_search_requests_are_400(
    client: httpx.Client, body: dict[str, Any], param: str
) -> None:
    store = create_store(client, "bad-search")
    response = client.post(f"/v1/vector_stores/{store['id']}/search", json=body)
    assert_error(response, 400, param)


def test_static_chunk_sizes_take_openais_whole_range(client: httpx.Client) -> None:
    # MiniLM reads 256 tokens; a longer chunk is embedded as several windows (issue 30.8).
    store = create_store(client, "static")

    def attach(size: int) -> httpx.Response:
        return client.post(
            f"/v1/vector_stores/{store['id']}/files",
            json={
                "text": f"some text {size}",
                "filename": "a.txt",
                "chunking_strategy": {
                    "type": "static",
                    "static": {"max_chunk_size_tokens": size, "chunk_overlap_tokens": 100},
                },
            },
        )

    for size in (800, 4096):
        accepted = attach(size)
        assert accepted.status_code == 200, accepted.text
        assert accepted.json()["chunking_strategy"]["static"]["max_chunk_size_tokens"] == size
    error = assert_error(attach(4097), 400, "chunking_strategy")
    assert "max_chunk_size_tokens' must be between 100 and 4096" in error["message"]
