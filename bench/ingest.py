"""Scenario 2, ingest end to end: man pages uploaded (POST /v1/files) and attached to a new
vector store as one file batch, until every file is `completed`, in chunks/s, against
embedding the very same chunks in-process (the faster of one model context with every thread
and the embedder's contexts side by side). This is what the OpenAI SDK's
`file_batches.upload_and_poll` does.

The in-process baseline is split in two halves run just before and just after the stack, so
that a change in machine load during the run weighs on both sides alike. A re-ingest of the
same documents into a new store shows what an embedding cache buys, once the build has one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import grpc
import httpx

from bench.context import Context, timed
from bench.corpus import Document
from bench.load import http_session, post_json, run_load
from bench.processes import RunningStack, running_stack
from bench.stats import Row, not_available
from services.embedder.model import EmbeddingModel
from services.gateway.chunking import chunk_text
from services.gateway.parsing import extract_text
from services.pb import store_pb2, store_pb2_grpc

SCENARIO = "2 ingest"
# Issue 33: the pipeline (upload, parse, chunk, queue, embed through gRPC, store) keeps at
# least this share of what the embedder's model does in process on the same chunks.
TARGET_VS_IN_PROCESS = 0.9
# A re-ingest this much faster than the first one means embeddings were served from a cache.
_CACHE_SPEEDUP = 2.0
_POLL_SECONDS = 0.2
# OpenAI's limit on files per batch.
_BATCH_FILES = 2000
_WARM_UP = Document("bench-warm-up.txt", "A benchmark warm-up document, not a man page. " * 40)


def create_store(http: httpx.Client, name: str) -> str:
    store_id = post_json(http, "/v1/vector_stores", {"name": name})["id"]
    assert isinstance(store_id, str)
    return store_id


def upload(http: httpx.Client, doc: Document) -> str:
    """POST /v1/files, as the OpenAI SDK's upload_and_poll does for each file."""
    reply = http.post(
        "/v1/files",
        files={"file": (doc.name, doc.text.encode("utf-8"), "text/plain")},
        data={"purpose": "assistants"},
    )
    if reply.status_code != 200:
        raise RuntimeError(f"POST /v1/files -> {reply.status_code}: {reply.text[:300]}")
    file_id: str = reply.json()["id"]
    return file_id


def attach_and_wait(http: httpx.Client, store_id: str, file_ids: Sequence[str]) -> None:
    """Attaches the files in batches, then polls the batches until none is in progress."""
    batches = []
    for start in range(0, len(file_ids), _BATCH_FILES):
        body = {"file_ids": list(file_ids[start : start + _BATCH_FILES])}
        batch = post_json(http, f"/v1/vector_stores/{store_id}/file_batches", body)
        batches.append(batch["id"])
    pending = list(batches)
    while pending:
        time.sleep(_POLL_SECONDS)
        still = []
        for batch_id in pending:
            reply = http.get(f"/v1/vector_stores/{store_id}/file_batches/{batch_id}")
            reply.raise_for_status()
            batch = reply.json()
            if batch["status"] == "in_progress":
                still.append(batch_id)
            elif batch["file_counts"]["completed"] != batch["file_counts"]["total"]:
                raise RuntimeError(f"batch {batch_id} did not complete: {batch}")
        pending = still


@dataclass(frozen=True)
class Ingested:
    store_id: str
    seconds: float
    chunks: int
    file_ids: list[str]
    chunking: dict[str, Any]


def ingest(
    stack: RunningStack,
    docs: Sequence[Document],
    uploaders: int,
    name: str,
    uploaded: Sequence[str] | None = None,
) -> Ingested:
    """From the first upload (or, given `uploaded` file ids, from the attach) until every
    file of a new vector store is completed."""
    with httpx.Client(base_url=stack.url, timeout=600.0) as http:
        store_id = create_store(http, name)
        began = time.perf_counter()
        if uploaded is None:
            file_ids = run_load(
                docs, uploaders, http_session(stack.url), upload, lambda c: c.close()
            ).results
        else:
            file_ids = list(uploaded)
        attach_and_wait(http, store_id, file_ids)
        seconds = time.perf_counter() - began
        listed = http.get(f"/v1/vector_stores/{store_id}/files", params={"limit": 1})
        listed.raise_for_status()
        chunking = listed.json()["data"][0]["chunking_strategy"]
    with grpc.insecure_channel(stack.store_target) as channel:
        vector_store = store_pb2_grpc.StoreStub(channel).GetVectorStore(
            store_pb2.GetVectorStoreRequest(id=store_id)
        )
    return Ingested(store_id, seconds, int(vector_store.chunk_count), file_ids, chunking)


def _static_sizes(chunking: dict[str, Any]) -> tuple[int, int]:
    static = chunking["static"]
    return int(static["max_chunk_size_tokens"]), int(static["chunk_overlap_tokens"])


def chunks_in_process(ctx: Context, docs: Sequence[Document], size: int, overlap: int) -> list[str]:
    """The gateway's own chunker and text extraction, counting with the same tokenizer."""
    model = ctx.model()

    def count(texts: Sequence[str]) -> list[int]:
        return [len(ids) for ids in model.tokenize(texts)]

    chunks: list[str] = []
    for doc in docs:
        text = extract_text(doc.name, doc.text.encode("utf-8"))
        special = model.info.special_tokens
        chunks += [c.text for c in chunk_text(text, count, size, overlap, special)]
    return chunks


def embed_in_process(ctx: Context, chunks: Sequence[str], batch: int) -> tuple[float, float]:
    """Seconds to embed the chunks in process, `batch` at a time: with one model context of
    the whole thread budget, and with the embedder's contexts side by side (each thread of
    them takes the next batch)."""
    model = ctx.model()
    batches = [chunks[start : start + batch] for start in range(0, len(chunks), batch)]
    began = time.perf_counter()
    for texts in batches:
        model.embed(texts)
    alone = time.perf_counter() - began
    queue = iter(batches)
    lock = threading.Lock()

    def drain(context: EmbeddingModel) -> None:
        while True:
            with lock:
                texts = next(queue, None)
            if texts is None:
                return
            context.embed(texts)

    contexts = ctx.contexts()
    began = time.perf_counter()
    with ThreadPoolExecutor(len(contexts)) as pool:
        list(pool.map(drain, contexts))
    return alone, time.perf_counter() - began


def run(ctx: Context) -> None:
    config = ctx.config
    with timed(ctx, f"ingest: rendering {config.ingest_docs} man pages (cached after once)"):
        docs = ctx.corpus.documents(
            config.ingest_docs, config.ingest_min_chars, config.ingest_max_chars
        )
    detail = ctx.detail(SCENARIO)
    detail.update(
        documents=len(docs),
        characters=sum(len(d.text) for d in docs),
        uploaders=config.ingest_uploaders,
    )
    # The gateway embeds ingest chunks RAGD_EMBED_BATCH_SIZE (32) at a time; so does the baseline.
    batch = 32
    with running_stack(ctx.run_dir / "ingest", config.threads) as stack:
        ctx.cold_starts.append(stack.cold_start)
        # Warm-up (with a text outside the corpus, which a cache must not see early), and
        # the chunk sizes the gateway resolves for "auto".
        probe = ingest(stack, [_WARM_UP], 1, "bench-warm-up")
        size, overlap = _static_sizes(probe.chunking)
        chunks = chunks_in_process(ctx, docs, size, overlap)
        half = len(chunks) // 2
        with timed(ctx, f"ingest: in-process embedding, first half ({half} chunks)"):
            first = embed_in_process(ctx, chunks[:half], batch)
        with (
            timed(ctx, f"ingest: {len(docs)} documents through the stack"),
            ctx.profiling("ingest", stack.pids()),
        ):
            cold = ingest(stack, docs, config.ingest_uploaders, "bench-cold")
        with timed(ctx, f"ingest: in-process embedding, second half ({len(chunks) - half})"):
            second = embed_in_process(ctx, chunks[half:], batch)
        # The faster arrangement in process is the baseline.
        alone, side_by_side = first[0] + second[0], first[1] + second[1]
        in_process = min(alone, side_by_side)
        baseline = len(chunks) / in_process
        cold_rate = cold.chunks / cold.seconds
        detail.update(
            chunk_tokens=size,
            overlap_tokens=overlap,
            chunks_stack=cold.chunks,
            chunks_in_process=len(chunks),
            stack_seconds=cold.seconds,
            in_process_seconds=in_process,
            in_process_one_context_seconds=alone,
            in_process_side_by_side_seconds=side_by_side,
        )
        tokens = sum(len(ids) for ids in ctx.model().tokenize(chunks))
        detail.update(tokens=tokens)
        contexts = len(ctx.contexts())
        note = (
            f"{tokens / cold.seconds:,.0f} tokens/s, in process {tokens / in_process:,.0f} "
            f"tokens/s (one context of {config.threads} threads {tokens / alone:,.0f}, "
            f"{contexts} side by side {tokens / side_by_side:,.0f})"
        )
        if cold.chunks != len(chunks):
            note += f"; chunk counts differ: stack {cold.chunks}, in-process {len(chunks)}"
        ctx.add(
            Row(
                SCENARIO,
                f"ingest {len(docs)} man pages ({cold.chunks} chunks), cold, "
                f"{config.ingest_uploaders} uploaders",
                cold_rate,
                "chunks/s",
                baseline_name="in-process embedding of the same chunks",
                baseline=baseline,
                target=TARGET_VS_IN_PROCESS,
                note=note,
            )
        )
        _warm(ctx, stack, docs, cold, baseline)


def _warm(
    ctx: Context, stack: RunningStack, docs: list[Document], cold: Ingested, baseline: float
) -> None:
    """Attaches the already uploaded files to new stores: first a few, and all of them only
    if those came back much faster than the first ingest (an embedding cache)."""
    config = ctx.config
    name = "re-ingest into a new store (warm embedding cache)"
    count = config.warm_probe_docs
    with timed(ctx, f"ingest: warm-cache probe ({count} documents)"):
        probe = ingest(stack, docs[:count], 1, "probe", cold.file_ids[:count])
    probe_rate = probe.chunks / probe.seconds
    ctx.detail(SCENARIO)["warm_probe_chunks_per_s"] = probe_rate
    if probe_rate < _CACHE_SPEEDUP * cold.chunks / cold.seconds:
        ctx.add(
            not_available(
                SCENARIO,
                name,
                f"no embedding cache in this build: a re-ingest ran at {probe_rate:.1f} "
                f"chunks/s, like the first",
            )
        )
        return
    with timed(ctx, "ingest: warm re-ingest of every document"):
        warm = ingest(stack, docs, 1, "bench-warm", cold.file_ids)
    ctx.add(
        Row(
            SCENARIO,
            name,
            warm.chunks / warm.seconds,
            "chunks/s",
            baseline_name="in-process embedding of the same chunks",
            baseline=baseline,
        )
    )
