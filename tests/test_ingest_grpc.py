"""The gateway's gRPC bulk-ingest API against a real stack: outcomes, re-sends, broken streams,
API keys, and bounded gateway memory while thousands of documents stream through.

RAGD_TEST_INGEST_DOCS sets the size of the memory test (default 1500; `make test-ingest-large`
runs 10000).
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.client.errors import Unauthenticated, Unreachable
from services.client.ingest import Document, IngestClient, Progress, State, Summary
from services.launcher import Stack
from services.pb import store_pb2, store_pb2_grpc
from tests.harness import free_port, started_stack

KEY = "ingest-test-key"
WINDOW = 32
DOCS = int(os.environ.get("RAGD_TEST_INGEST_DOCS", "1500"))


@pytest.fixture(scope="module")
def own_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from started_stack(
        tmp_path_factory.mktemp("ingest"),
        RAGD_API_KEYS=KEY,
        RAGD_INGEST_WINDOW=str(WINDOW),
        RAGD_EMBED_CACHE="true",
    )


@pytest.fixture(scope="module")
def rest(own_stack: Stack) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=own_stack.gateway_url, headers=headers, timeout=60) as http:
        yield http


@pytest.fixture
def ingest(own_stack: Stack) -> Iterator[IngestClient]:
    with IngestClient(own_stack.ingest_target, KEY) as client:
        yield client


def new_store(rest: httpx.Client) -> str:
    reply = rest.post("/v1/vector_stores", json={"name": f"grpc-{uuid.uuid4().hex[:8]}"})
    assert reply.status_code == 200, reply.text
    store_id: str = reply.json()["id"]
    return store_id


def file_total(rest: httpx.Client) -> int:
    reply = rest.get("/v1/files", params={"limit": 10000})
    assert reply.status_code == 200, reply.text
    return len(reply.json()["data"])


def store_counts(rest: httpx.Client, store_id: str) -> dict[str, int]:
    reply = rest.get(f"/v1/vector_stores/{store_id}")
    assert reply.status_code == 200, reply.text
    body = reply.json()
    return {**body["file_counts"], "chunks": body["chunk_count"]}


def run(client: IngestClient, docs: list[Document], store: str) -> tuple[list[Progress], Summary]:
    events: list[Progress] = []
    summary = None
    for event in client.ingest(docs, vector_store=store):
        if isinstance(event, Summary):
            summary = event
        else:
            events.append(event)
    assert summary is not None
    return events, summary


def finals(events: list[Progress]) -> dict[int, Progress]:
    """The one final event of each document, checking that no document ends twice."""
    result: dict[int, Progress] = {}
    accepted: set[int] = set()
    for event in events:
        if event.final:
            assert event.position not in result, f"{event.ref} ended twice"
            result[event.position] = event
        else:
            assert event.position not in result, f"{event.ref} accepted after it ended"
            accepted.add(event.position)
    assert accepted <= set(result)
    return result


def mixed_documents() -> list[Document]:
    long_text = "\n\n".join(
        f"Paragraph {n}: the lighthouse keeper logged the storm, the tide and the ships. " * 3
        for n in range(12)
    )
    return [
        Document("alpha.txt", text="Alpha: the chimera has a goat's head and a lion's body."),
        Document("beta.md", data=b"# Beta\n\nTides are caused by the gravity of the Moon.\n"),
        Document("gamma.html", data=b"<html><body><p>Gamma rays are light.</p></body></html>"),
        Document("alpha-copy.txt", text="Alpha: the chimera has a goat's head and a lion's body."),
        Document("bad.txt", data=b"\xff\xfe\x00 not utf-8"),
        Document("tool.exe", data=b"MZ\x90\x00"),
        Document("lost.txt", text="nowhere to go", vector_store="no-such-store"),
        Document(
            "log.txt",
            text=long_text,
            attributes={"lang": "en", "year": 2024, "draft": False},
            chunk_size_tokens=100,
            chunk_overlap_tokens=20,
        ),
    ]


def test_info_health_and_api_keys(own_stack: Stack, ingest: IngestClient) -> None:
    info = ingest.info()
    assert info.window == WINDOW
    assert {"", ".txt", ".md", ".pdf"} <= info.supported_suffixes
    assert info.dimensions == 384 and info.max_input_tokens == 256
    with IngestClient(own_stack.ingest_target) as anonymous:
        with pytest.raises(Unauthenticated, match="missing API key"):
            anonymous.info()
        with pytest.raises(Unauthenticated):
            list(anonymous.ingest([Document("a.txt", text="a")], vector_store="x"))
    with IngestClient(own_stack.ingest_target, "wrong") as wrong, pytest.raises(Unauthenticated):
        wrong.info()
    # Health stays open, as /health does over REST.
    with grpc.insecure_channel(own_stack.ingest_target) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="ragd.ingest.v1.Ingest"), timeout=5
        )
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
    with IngestClient(f"127.0.0.1:{free_port()}", KEY) as nowhere, pytest.raises(Unreachable):
        nowhere.info()


def test_each_document_ends_once_and_resending_adds_nothing(
    rest: httpx.Client, ingest: IngestClient
) -> None:
    store_id = new_store(rest)
    docs = mixed_documents()
    events, summary = run(ingest, docs, store_id)
    ended = finals(events)
    assert len(ended) == len(docs)
    states = {docs[p].filename: e for p, e in ended.items()}
    for name in ("beta.md", "gamma.html", "log.txt"):
        assert states[name].state is State.COMPLETED, states[name]
        assert states[name].chunks >= 1
    assert states["log.txt"].chunks > 3  # 100-token chunks
    # The same content twice in one stream is indexed once.
    pair = sorted([states["alpha.txt"], states["alpha-copy.txt"]], key=lambda e: e.state.value)
    assert [e.state for e in pair] == [State.COMPLETED, State.UNCHANGED]
    assert pair[0].file_id == pair[1].file_id and pair[1].chunks == pair[0].chunks
    assert (states["bad.txt"].state, states["bad.txt"].error_code) == (State.FAILED, "invalid_file")
    assert states["tool.exe"].error_code == "unsupported_file"
    assert states["lost.txt"].error_code == "not_found"
    assert "ragd index create" in states["lost.txt"].error_message
    assert (summary.documents, summary.completed, summary.unchanged, summary.failed) == (8, 4, 1, 3)
    assert summary.chunks == sum(e.chunks for e in ended.values() if e.state is State.COMPLETED)

    attrs = rest.get(f"/v1/vector_stores/{store_id}/files/{states['log.txt'].file_id}").json()
    assert attrs["attributes"] == {"lang": "en", "year": 2024, "draft": False}
    assert attrs["chunking_strategy"]["static"]["max_chunk_size_tokens"] == 100
    counts, files = store_counts(rest, store_id), file_total(rest)
    assert (counts["completed"], counts["failed"], counts["total"]) == (4, 1, 5)
    assert counts["chunks"] == summary.chunks

    # Re-sent: nothing new is stored or indexed; the failed file is tried again, in place.
    events, summary = run(ingest, docs, store_id)
    again = {docs[p].filename: e for p, e in finals(events).items()}
    for name in ("alpha.txt", "alpha-copy.txt", "beta.md", "gamma.html", "log.txt"):
        assert again[name].state is State.UNCHANGED, again[name]
        assert again[name].file_id == states[name].file_id
    assert again["bad.txt"].file_id == states["bad.txt"].file_id
    assert again["bad.txt"].error_code == "invalid_file"
    assert (summary.completed, summary.unchanged, summary.failed, summary.chunks) == (0, 5, 3, 0)
    assert store_counts(rest, store_id) == counts
    assert file_total(rest) == files


def numbered(count: int, prefix: str) -> list[Document]:
    return [
        Document(f"{prefix}-{n}.txt", text=f"{prefix} record {n}: {n * 7919} is item {n}.")
        for n in range(count)
    ]


def test_both_doors_refuse_a_store_of_another_model_at_once_in_the_same_words(
    own_stack: Stack, rest: httpx.Client, ingest: IngestClient
) -> None:
    with grpc.insecure_channel(own_stack.store_target) as channel:
        other = store_pb2_grpc.StoreStub(channel).CreateVectorStore(
            store_pb2.CreateVectorStoreRequest(name="other-model", model="bge-small", dimensions=8)
        )
    files_before = file_total(rest)
    text = "Basalt columns form as lava cools and contracts."
    over_rest = rest.post(
        f"/v1/vector_stores/{other.id}/files", json={"text": text, "filename": "basalt.txt"}
    )
    assert over_rest.status_code == 400, over_rest.text
    error = over_rest.json()["error"]
    assert error["code"] == "failed_precondition"
    assert "indexed with bge-small (8 dims), not all-MiniLM-L6-v2 (384 dims)" in error["message"]

    events, summary = run(ingest, [Document("basalt.txt", text=text)], other.id)
    # Refused before it was stored: never ACCEPTED, failed in the store's words.
    assert [(e.state, e.error_code, e.error_message) for e in events] == [
        (State.FAILED, "failed_precondition", error["message"])
    ]
    assert (summary.documents, summary.failed) == (1, 1)
    assert file_total(rest) == files_before
    assert store_counts(rest, other.id)["total"] == 0


def test_broken_stream_loses_nothing_and_resuming_duplicates_nothing(
    rest: httpx.Client, ingest: IngestClient
) -> None:
    store_id = new_store(rest)
    docs = numbered(24, "broken")
    files = file_total(rest)
    accepted: dict[int, str] = {}
    stream = ingest.ingest(docs, vector_store=store_id)
    for event in stream:
        assert isinstance(event, Progress)
        if event.state is State.ACCEPTED:
            accepted[event.position] = event.file_id
        if len(accepted) >= 6:
            break
    stream.close()  # the client cancels the call: the stream breaks mid-way

    events, summary = run(ingest, docs, store_id)
    ended = finals(events)
    assert len(ended) == len(docs)
    assert all(e.state in (State.COMPLETED, State.UNCHANGED) for e in ended.values())
    assert summary.completed + summary.unchanged == len(docs)
    assert summary.unchanged >= len(accepted)
    for position, file_id in accepted.items():
        # Acknowledged before the break: kept, and recognised when sent again.
        assert ended[position].state is State.UNCHANGED
        assert ended[position].file_id == file_id
    counts = store_counts(rest, store_id)
    assert (counts["completed"], counts["total"]) == (len(docs), len(docs))
    assert file_total(rest) == files + len(docs)


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")


class PeakRss(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = rss_bytes(pid)
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(0.1):
            self.peak = max(self.peak, rss_bytes(self.pid))

    def stop(self) -> int:
        self._done.set()
        self.join()
        return self.peak


def test_thousands_of_documents_keep_gateway_memory_bounded(
    own_stack: Stack, rest: httpx.Client, ingest: IngestClient
) -> None:
    # 64 KiB each, but all of it a <script> the parser skips except one sentence, the same in
    # every document: each one is stored, attached and run through the whole pipeline, but
    # only the first pays for the embedder (the embedding cache has the rest), so the stream
    # moves DOCS * 64 KiB in reasonable time.
    size = 64 * 1024
    pulled = [0]

    def documents() -> Iterator[Document]:
        for n in range(DOCS):
            pulled[0] += 1
            script = os.urandom(size // 2).hex()
            body = "<p>A record of the memory test.</p>"
            html = f"<html><script>{script}</script><body>{body}</body></html>"
            yield Document(f"page-{n}.html", data=html.encode())

    store_id = new_store(rest)
    pid = own_stack.children["gateway"].pid
    ingest.info()  # connections and first-call allocations happen before the baseline
    before = rss_bytes(pid)
    sampler = PeakRss(pid)
    sampler.start()
    ended, ahead, summary = 0, 0, None
    started = time.monotonic()
    try:
        for event in ingest.ingest(documents(), vector_store=store_id):
            if isinstance(event, Summary):
                summary = event
            elif event.final:
                ended += 1
                ahead = max(ahead, pulled[0] - ended)
    finally:
        peak = sampler.stop()
    after = rss_bytes(pid)
    seconds = time.monotonic() - started
    streamed = DOCS * (size + 100)
    print(
        f"\n{DOCS} documents, {streamed / 2**20:.0f} MiB in {seconds:.1f} s: gateway RSS "
        f"{before / 2**20:.0f} MiB before, {peak / 2**20:.0f} peak, {after / 2**20:.0f} after; "
        f"at most {ahead} documents read ahead of their outcome (window {WINDOW})"
    )
    assert summary is not None and summary.completed == DOCS, summary
    assert store_counts(rest, store_id)["completed"] == DOCS
    # The client runs ahead of the outcomes by at most the server's window plus what the
    # transport's flow-control windows hold (a few MiB, whatever the stream's length).
    assert (ahead - WINDOW) * size <= 8 * 2**20
    # Buffering the stream would take ~100 MiB at the default size.
    assert peak - before < 40 * 2**20
