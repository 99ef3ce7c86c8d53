"""Bulk ingest over gRPC (protos/ingest.proto): stream documents, read their progress.

    with IngestClient("127.0.0.1:50053", api_key=key) as client:
        docs = (Document(filename=p.name, data=p.read_bytes()) for p in paths)
        for event in client.ingest(docs, vector store="notes"):
            if isinstance(event, Summary):
                print(event.completed, "indexed,", event.failed, "failed")
            elif event.state is State.FAILED:
                print(event.ref, event.error_message)

Documents are read from the iterable only as fast as the server takes them (it holds a bounded
window), so a generator that reads files lazily keeps memory flat. If the stream breaks after
it has made progress, the client opens a new one and re-sends the documents that had not ended:
the server recognises content it already has, so nothing is indexed twice.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import TracebackType
from typing import Any

import grpc

from services.client.errors import ClientError, Unauthenticated, Unreachable
from services.pb import ingest_pb2 as pb
from services.pb import ingest_pb2_grpc

DEFAULT_TARGET = "127.0.0.1:50053"
# Documents can be as large as the server's upload limit (32 MiB by default).
_MAX_MESSAGE = 64 * 1024 * 1024


class State(Enum):
    ACCEPTED = "accepted"
    COMPLETED = "completed"
    UNCHANGED = "unchanged"
    FAILED = "failed"


_STATES = {
    pb.DOCUMENT_STATE_ACCEPTED: State.ACCEPTED,
    pb.DOCUMENT_STATE_COMPLETED: State.COMPLETED,
    pb.DOCUMENT_STATE_UNCHANGED: State.UNCHANGED,
    pb.DOCUMENT_STATE_FAILED: State.FAILED,
}

Attribute = str | int | float | bool


@dataclass(frozen=True)
class Document:
    """One document: `data` (bytes, parsed by the filename's suffix) or `text`."""

    filename: str
    data: bytes | None = None
    text: str | None = None
    # An id ("vs_...") or a name; empty: the `vector_store` given to ingest().
    vector_store: str = ""
    # Echoed in the document's progress (e.g. its path).
    ref: str = ""
    attributes: Mapping[str, Attribute] = field(default_factory=dict)
    # Static chunking; None: the server's "auto" strategy.
    chunk_size_tokens: int | None = None
    chunk_overlap_tokens: int = 0


@dataclass(frozen=True)
class Progress:
    # The document's position in the iterable passed to ingest(), from 0.
    position: int
    ref: str
    state: State
    vector_store_id: str
    file_id: str
    # COMPLETED: chunks indexed; UNCHANGED: chunks of the file that already had the content.
    chunks: int
    error_code: str = ""
    error_message: str = ""
    # ACCEPTED only: the content was already being indexed for another document.
    duplicate: bool = False

    @property
    def final(self) -> bool:
        return self.state is not State.ACCEPTED


@dataclass(frozen=True)
class Summary:
    documents: int
    completed: int
    unchanged: int
    failed: int
    chunks: int
    seconds: float
    # Streams opened: more than 1 when a broken stream was resumed.
    streams: int


@dataclass(frozen=True)
class ServerInfo:
    model: str
    dimensions: int
    max_input_tokens: int
    max_document_bytes: int
    # "" stands for files without a suffix.
    supported_suffixes: frozenset[str]
    window: int


def _attribute(value: Attribute) -> pb.AttributeValue:
    if isinstance(value, bool):
        return pb.AttributeValue(bool_value=value)
    if isinstance(value, int | float):
        return pb.AttributeValue(number_value=float(value))
    return pb.AttributeValue(string_value=value)


def _request(document: Document, default_store: str) -> pb.IngestRequest:
    message = pb.Document(
        ref=document.ref,
        vector_store=document.vector_store or default_store,
        filename=document.filename,
        attributes={key: _attribute(value) for key, value in document.attributes.items()},
    )
    if document.data is not None:
        message.data = document.data
    elif document.text is not None:
        message.text = document.text
    if document.chunk_size_tokens is not None:
        message.chunking.CopyFrom(
            pb.StaticChunking(
                max_chunk_size_tokens=document.chunk_size_tokens,
                chunk_overlap_tokens=document.chunk_overlap_tokens,
            )
        )
    return pb.IngestRequest(document=message)


def client_error(error: grpc.RpcError, target: str) -> ClientError:
    """A failed call as a ClientError whose message says what to do."""
    code = error.code()
    details = error.details() or ""
    if code == grpc.StatusCode.UNAVAILABLE:
        return Unreachable(
            f"cannot reach the ragd ingest API at {target} ({details}); is the gateway running, "
            "and is this its RAGD_INGEST_LISTEN address?"
        )
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return Unauthenticated(f"{details}; set RAGD_API_KEY or pass --api-key")
    return ClientError(f"ingest failed: {code.name}: {details}", code=code.name.lower())


class _Stream:
    """One attempt: hands documents to gRPC's sending thread, remembering what it sent."""

    def __init__(self, lock: threading.Lock) -> None:
        self.sent: list[int] = []  # the server's index -> the document's position
        self.closed = False
        self._lock = lock


class IngestClient:
    """A gRPC channel to the gateway's ingest API. Thread-safe; close() when done."""

    def __init__(
        self, target: str = DEFAULT_TARGET, api_key: str | None = None, *, retries: int = 3
    ) -> None:
        self.target = target
        self._retries = retries
        self._metadata = (("authorization", f"Bearer {api_key}"),) if api_key else ()
        self._channel = grpc.insecure_channel(
            target,
            options=[
                ("grpc.max_send_message_length", _MAX_MESSAGE),
                ("grpc.max_receive_message_length", _MAX_MESSAGE),
            ],
        )
        self._stub = ingest_pb2_grpc.IngestStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> IngestClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def info(self, timeout: float = 10.0) -> ServerInfo:
        try:
            reply = self._stub.Info(pb.InfoRequest(), timeout=timeout, metadata=self._metadata)
        except grpc.RpcError as error:
            raise client_error(error, self.target) from None
        return ServerInfo(
            model=reply.model,
            dimensions=reply.dimensions,
            max_input_tokens=reply.max_input_tokens,
            max_document_bytes=reply.max_document_bytes,
            supported_suffixes=frozenset(reply.supported_suffixes),
            window=reply.window,
        )

    def ingest(
        self, documents: Iterable[Document], *, vector_store: str = ""
    ) -> Generator[Progress | Summary, None, None]:
        """Each document's progress as it happens (ACCEPTED, then how it ended), then a Summary.

        Closing the generator early cancels the stream (what it acknowledged is kept).

        Raises Unreachable, Unauthenticated or ClientError when the stream fails and cannot
        be resumed; documents reported ACCEPTED before that are indexed all the same.
        """
        source = iter(documents)
        lock = threading.Lock()
        unfinished: dict[int, Document] = {}  # sent, not yet ended
        accepted: dict[int, str] = {}  # accepted, not yet ended: position -> file id
        counter = iter(range(1 << 62))
        source_error: list[BaseException] = []
        totals = {State.COMPLETED: 0, State.UNCHANGED: 0, State.FAILED: 0}
        chunks = 0
        started = time.monotonic()
        streams = 0

        def requests(stream: _Stream, resend: list[int]) -> Iterator[pb.IngestRequest]:
            for position in resend:
                with lock:
                    if stream.closed:
                        return
                    stream.sent.append(position)
                    document = unfinished[position]
                yield _request(document, vector_store)
            while True:
                with lock:
                    if stream.closed:
                        return
                    try:
                        document = next(source)
                    except StopIteration:
                        return
                    except Exception as error:
                        # Ends the stream cleanly; raised once the server has finished.
                        source_error.append(error)
                        return
                    position = next(counter)
                    unfinished[position] = document
                    stream.sent.append(position)
                yield _request(document, vector_store)

        while True:
            streams += 1
            stream = _Stream(lock)
            with lock:
                resend = sorted(unfinished)
            call = self._stub.IngestDocuments(requests(stream, resend), metadata=self._metadata)
            progressed = False
            try:
                for response in call:
                    if response.HasField("summary"):
                        break
                    progressed = True
                    event = _progress(response.document, stream.sent, accepted)
                    if event is None:
                        continue
                    if event.final:
                        with lock:
                            unfinished.pop(event.position, None)
                        accepted.pop(event.position, None)
                        totals[event.state] += 1
                        chunks += event.chunks if event.state is State.COMPLETED else 0
                    elif not event.duplicate:
                        accepted[event.position] = event.file_id
                    yield event
                break
            except grpc.RpcError as error:
                with lock:
                    stream.closed = True
                resumable = error.code() == grpc.StatusCode.UNAVAILABLE and progressed
                if not resumable or streams > self._retries:
                    raise client_error(error, self.target) from None
                time.sleep(min(5.0, 0.5 * 2 ** (streams - 1)))
            finally:
                # A caller that stops iterating ends the stream (a no-op once it has ended).
                call.cancel()
        if source_error:
            raise source_error[0]
        yield Summary(
            documents=next(counter),
            completed=totals[State.COMPLETED],
            unchanged=totals[State.UNCHANGED],
            failed=totals[State.FAILED],
            chunks=chunks,
            seconds=time.monotonic() - started,
            streams=streams,
        )


def _progress(
    message: pb.DocumentProgress, sent: list[int], accepted: dict[int, str]
) -> Progress | None:
    """The server's message in terms of the caller's documents; None if already reported."""
    position = sent[message.index]
    state = _STATES.get(message.state)
    if state is None:
        raise ClientError(f"the server sent an unknown document state {message.state}")
    earlier = accepted.get(position)
    if earlier and earlier == message.file_id:
        # Re-sent after a broken stream: this client's earlier stream stored the content.
        if state is State.ACCEPTED:
            return None
        if state is State.UNCHANGED:
            state = State.COMPLETED
    return Progress(
        position=position,
        ref=message.ref,
        state=state,
        vector_store_id=message.vector_store_id,
        file_id=message.file_id,
        chunks=message.chunks,
        error_code=message.error.code,
        error_message=message.error.message,
        duplicate=message.duplicate,
    )


def describe(event: Progress) -> dict[str, Any]:
    """The event as JSON-ready data (for scripts and logs)."""
    return {
        "position": event.position,
        "ref": event.ref,
        "state": event.state.value,
        "vector_store_id": event.vector_store_id,
        "file_id": event.file_id,
        "chunks": event.chunks,
        "error": {"code": event.error_code, "message": event.error_message}
        if event.state is State.FAILED
        else None,
    }
