"""Bulk ingest sessions: a stream of documents in, their progress out. No gRPC here.

A session is the REST upload path run many times over: each document is stored and attached
by the one attach step (attach.py: one store transaction that also records its ingest job, or
finds the same content already there), then followed until the ingest workers finish its job.
It never holds more than `window` documents between reading them and reporting how they
ended, and reads the next document only when a slot is free, so a slow embedder slows the
sender (transport flow control does the rest).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from services.common.vocabulary import MAX_FILENAME_CHARS
from services.gateway import errors
from services.gateway.attach import Attachment, Upload
from services.gateway.clients import Store
from services.gateway.errors import invalid
from services.gateway.ingest import resolve_chunking
from services.gateway.keys import Principal, act_for
from services.gateway.parsing import UnsupportedFile, check_supported
from services.gateway.requests import attributes_of
from services.gateway.state import Services
from services.pb import store_pb2

log = logging.getLogger(__name__)

# Documents stored and attached at once per stream: enough to hide the store's round trips.
ACCEPT_CONCURRENCY = 8
# Unfinished documents checked per poll; polling only finds jobs that other gateways finished
# (this gateway's workers report their own at once).
POLL_BATCH = 16


class State(Enum):
    ACCEPTED = "accepted"
    COMPLETED = "completed"
    UNCHANGED = "unchanged"
    FAILED = "failed"


@dataclass(frozen=True)
class Document:
    ref: str
    vector_store: str
    filename: str
    # None: the client sent neither bytes nor text.
    content: bytes | None
    # Unvalidated, as for the REST API: OpenAI's attributes and chunking_strategy JSON.
    attributes: dict[str, Any] = field(default_factory=dict)
    chunking: dict[str, Any] | None = None


@dataclass(frozen=True)
class Progress:
    index: int
    ref: str
    state: State
    vector_store_id: str = ""
    file_id: str = ""
    chunks: int = 0
    error_code: str = ""
    error_message: str = ""
    duplicate: bool = False

    @property
    def final(self) -> bool:
        return self.state is not State.ACCEPTED


@dataclass
class Summary:
    documents: int = 0
    completed: int = 0
    unchanged: int = 0
    failed: int = 0
    chunks: int = 0
    seconds: float = 0.0


@dataclass(frozen=True)
class _Waiter:
    index: int
    ref: str
    duplicate: bool


@dataclass
class _Tracked:
    since: float
    waiters: list[_Waiter]


# Accepts still running, held here because a cancelled stream's session may be gone: an
# attach cut in half would leave a stored file that no vector store references.
_RUNNING: set[asyncio.Task[None]] = set()

_Key = tuple[str, str]  # (vector store id, file id)
Admit = Callable[[], Awaitable[Principal | None]]
_Event = Progress | BaseException | None  # None: the request stream has ended


async def resolve_vector_store(store: Store, ref: str) -> str:
    """The id of the vector store `ref` names: an id ("vs_...") or a name matching one store."""
    if not ref:
        raise invalid("the document names no vector store: set vector_store to an id or a name")
    if ref.startswith("vs_"):
        try:
            await store.GetVectorStore(store_pb2.GetVectorStoreRequest(id=ref))
            return ref
        except errors.NotFound:
            pass
    page = await store.ListVectorStores(
        store_pb2.ListVectorStoresRequest(limit=100, order="asc", name=ref)
    )
    matches = [c.id for c in page.vector_stores]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise errors.NotFound(_unknown_store(ref))
    more = ", ..." if page.has_more else ""
    raise errors.Conflict(
        f"{len(matches)}{'+' if more else ''} vector stores are named '{ref}' "
        f"({', '.join(matches)}{more}); send the id of the one you mean",
        code="ambiguous_name",
    )


def _unknown_store(ref: str) -> str:
    return (
        f"no vector store has the id or name '{ref}'; create it first "
        f"(POST /v1/vector_stores, or `ragd index create -n {ref}`)"
    )


class IngestSession:
    """One stream's documents: `async for event in session.run(documents)`."""

    def __init__(
        self,
        deps: Services,
        window: int,
        poll_seconds: float,
        principal: Principal | None = None,
        admit: Admit | None = None,
    ) -> None:
        """`principal`: the API key the documents come with (None: the API is open); a key
        limited to some vector stores finds no other, and the bytes it stores are counted.
        `admit` checks the key again before each document (its refusal ends the stream)."""
        self._deps = deps
        self._principal = principal
        self._admit = admit
        self._poll_seconds = poll_seconds
        self._window = asyncio.Semaphore(window)
        self._accepting = asyncio.Semaphore(ACCEPT_CONCURRENCY)
        # Unbounded, but never holds more than about two events per window slot.
        self._events: asyncio.Queue[_Event] = asyncio.Queue()
        self._tracked: dict[_Key, _Tracked] = {}
        self._stores: dict[str, asyncio.Task[str]] = {}
        self._summary = Summary()

    async def run(
        self, documents: AsyncIterator[Document]
    ) -> AsyncGenerator[Progress | Summary, None]:
        """Progress of each document as it happens, then the summary.

        Raises a transient errors.ApiError (and stops reading) when the store or embedder
        cannot be reached, or is overloaded: every following document would fail the same
        way, and the client re-sends.
        """
        started = time.monotonic()
        unsubscribe = self._deps.workers.subscribe(self._on_done)
        reader = asyncio.create_task(self._read(documents))
        poller = asyncio.create_task(self._poll())
        reading, finished = True, 0
        try:
            while reading or finished < self._summary.documents:
                event = await self._events.get()
                if event is None:
                    reading = False
                    continue
                if isinstance(event, BaseException):
                    raise event
                yield event
                if event.final:
                    finished += 1
                    self._count(event)
                    self._window.release()
            self._summary.seconds = time.monotonic() - started
            yield self._summary
        finally:
            unsubscribe()
            reader.cancel()
            poller.cancel()

    def _count(self, event: Progress) -> None:
        if event.state is State.COMPLETED:
            self._summary.completed += 1
            self._summary.chunks += event.chunks
        elif event.state is State.UNCHANGED:
            self._summary.unchanged += 1
        else:
            self._summary.failed += 1

    async def _read(self, documents: AsyncIterator[Document]) -> None:
        index = 0
        try:
            while True:
                # Wait for room before reading: while the window is full the stream is not
                # read, and the transport's flow control holds the sender back.
                await self._window.acquire()
                await self._accepting.acquire()
                try:
                    document = await anext(documents)
                except StopAsyncIteration:
                    break
                if self._admit is not None:
                    # The key again, before each document: a revocation or a spent daily limit
                    # ends the stream, a per-minute limit holds it back (reading waits).
                    self._principal = await self._admit()
                self._summary.documents += 1
                self._spawn(self._accept(index, document, self._principal))
                index += 1
        except Exception as error:
            self._events.put_nowait(error)
        self._events.put_nowait(None)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        _RUNNING.add(task)
        task.add_done_callback(_RUNNING.discard)

    async def _accept(self, index: int, document: Document, who: Principal | None) -> None:
        try:
            try:
                # Its store calls are made for the key (the store's ownership checks).
                act_for(who)
                event = await self._store_document(index, document, who)
            finally:
                self._accepting.release()
        except errors.ApiError as error:
            if errors.is_transient(error):
                self._events.put_nowait(error)
                return
            code = (
                (error.code or "invalid_value")
                if isinstance(error, errors.REFUSALS)
                else ("server_error")
            )
            event = Progress(index, document.ref, State.FAILED, "", "", 0, code, error.message)
        except Exception:
            log.exception("bulk ingest of %r failed", document.ref)
            event = Progress(
                index, document.ref, State.FAILED, "", "", 0, "server_error", "internal error"
            )
        self._events.put_nowait(event)

    async def _store_document(
        self, index: int, document: Document, who: Principal | None
    ) -> Progress:
        vector_store_id = await self._resolve(document.vector_store)
        if who is not None and not who.reaches(vector_store_id):
            # As for a store that does not exist: a limited key learns nothing of others.
            raise errors.NotFound(_unknown_store(document.vector_store))

        def failed(code: str, message: str) -> Progress:
            return Progress(
                index, document.ref, State.FAILED, vector_store_id, "", 0, code, message
            )

        if not document.filename:
            return failed("invalid_value", "the document has no filename")
        if len(document.filename) > MAX_FILENAME_CHARS:
            return failed(
                "invalid_value", f"the filename is longer than {MAX_FILENAME_CHARS} characters"
            )
        try:
            check_supported(document.filename)
        except UnsupportedFile as error:
            return failed("unsupported_file", str(error))
        content = document.content
        if content is None:
            return failed(
                "invalid_value", f"'{document.filename}' has no content: send data or text"
            )
        limit = self._deps.config.max_upload_bytes
        if len(content) > limit:
            return failed(
                "file_too_large",
                f"'{document.filename}' has {len(content)} bytes; the limit is {limit} "
                "(RAGD_MAX_UPLOAD_BYTES)",
            )
        item = Attachment(
            strategy=resolve_chunking(
                document.chunking, await self._deps.attacher.model(vector_store_id)
            ),
            upload=Upload(document.filename, content),
            attributes=attributes_of(dict(document.attributes)),
        )
        attached = await self._deps.attacher.attach(vector_store_id, item, who.name if who else "")
        if who is not None and not attached.deduplicated:
            self._deps.key_usage.add(who.name, stored=len(content))
        if attached.deduplicated:
            # The vector store has this content already (indexed, or being indexed).
            return self._existing(index, document.ref, attached)
        self._track(attached, _Waiter(index, document.ref, duplicate=False))
        return Progress(index, document.ref, State.ACCEPTED, vector_store_id, attached.file_id)

    async def _resolve(self, ref: str) -> str:
        task = self._stores.get(ref)
        if task is None:
            task = asyncio.create_task(resolve_vector_store(self._deps.store, ref))
            self._stores[ref] = task
        # Shielded: one cancelled document must not cancel the lookup the others share.
        return await asyncio.shield(task)

    def _existing(self, index: int, ref: str, item: store_pb2.VectorStoreFile) -> Progress:
        """A document whose content the vector store already has (indexed or being indexed)."""
        waiter = _Waiter(index, ref, duplicate=True)
        if item.status == "in_progress":
            self._track(item, waiter)
            return Progress(
                index, ref, State.ACCEPTED, item.vector_store_id, item.file_id, duplicate=True
            )
        return _outcome(waiter, item)

    def _track(self, item: store_pb2.VectorStoreFile, waiter: _Waiter) -> None:
        key = (item.vector_store_id, item.file_id)
        tracked = self._tracked.setdefault(key, _Tracked(time.monotonic(), []))
        tracked.waiters.append(waiter)

    def _finish(self, item: store_pb2.VectorStoreFile) -> None:
        tracked = self._tracked.pop((item.vector_store_id, item.file_id), None)
        for waiter in tracked.waiters if tracked else []:
            self._events.put_nowait(_outcome(waiter, item))

    def _on_done(self, item: store_pb2.VectorStoreFile) -> None:
        if item.status != "in_progress":
            self._finish(item)

    async def _poll(self) -> None:
        """Follows files whose jobs another gateway's workers run, a few at a time."""
        while True:
            await asyncio.sleep(self._poll_seconds)
            while True:
                horizon = time.monotonic() - self._poll_seconds
                due = [key for key, t in self._tracked.items() if t.since <= horizon]
                if not due:
                    break
                done = await asyncio.gather(*(self._check(key) for key in due[:POLL_BATCH]))
                if not any(done):
                    break

    async def _check(self, key: _Key) -> bool:
        vector_store_id, file_id = key
        try:
            item = await self._deps.store.GetVectorStoreFile(
                store_pb2.VectorStoreFileRef(vector_store_id=vector_store_id, file_id=file_id)
            )
        except errors.NotFound:
            item = store_pb2.VectorStoreFile(
                vector_store_id=vector_store_id,
                file_id=file_id,
                status="failed",
                last_error=store_pb2.LastError(
                    code="not_found",
                    message="the file was removed from the vector store before it was indexed",
                ),
            )
        except errors.ApiError as error:
            log.warning("cannot follow %s in %s: %s", file_id, vector_store_id, error.message)
            return False
        if item.status == "in_progress":
            # Not finished: look again only after another poll period.
            if key in self._tracked:
                self._tracked[key].since = time.monotonic()
            return False
        self._finish(item)
        return True


def _outcome(waiter: _Waiter, item: store_pb2.VectorStoreFile) -> Progress:
    """How a document ended, from its file's final row."""
    base = (waiter.index, waiter.ref)
    if item.status == "completed":
        state = State.UNCHANGED if waiter.duplicate else State.COMPLETED
        return Progress(*base, state, item.vector_store_id, item.file_id, item.chunk_count)
    if item.status == "cancelled":
        code, message = "cancelled", "the file was cancelled before it was indexed"
    else:
        code = item.last_error.code or "server_error"
        message = item.last_error.message or "indexing failed"
    return Progress(*base, State.FAILED, item.vector_store_id, item.file_id, 0, code, message)
