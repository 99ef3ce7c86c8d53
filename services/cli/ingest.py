"""`ragd index ingest`: files streamed through the gRPC ingest API, with a progress bar."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from services.cli.walk import Candidate
from services.client.ingest import Document, IngestClient, ServerInfo, State, Summary
from services.client.ingest import Progress as Event


@dataclass(frozen=True)
class Failure:
    path: str
    code: str
    message: str


@dataclass
class Outcome:
    vector_store_id: str
    # Files sent to the server (found, of a supported type, small enough, readable).
    sent: int = 0
    completed: int = 0
    unchanged: int = 0
    chunks: int = 0
    seconds: float = 0.0
    failures: list[Failure] = field(default_factory=list)
    # Files found in directories whose type the server does not read: suffix -> count.
    skipped: Counter[str] = field(default_factory=Counter)

    @property
    def rate(self) -> float:
        return self.chunks / self.seconds if self.seconds > 0 else 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "vector_store_id": self.vector_store_id,
            "files": self.sent,
            "completed": self.completed,
            "unchanged": self.unchanged,
            "failed": len(self.failures),
            "skipped": sum(self.skipped.values()),
            "chunks": self.chunks,
            "seconds": round(self.seconds, 3),
            "chunks_per_second": round(self.rate, 1),
            "failures": [vars(f) for f in self.failures],
            "skipped_types": dict(self.skipped),
        }


def triage(candidates: Sequence[Candidate], info: ServerInfo, outcome: Outcome) -> list[Candidate]:
    """The candidates worth sending; the rest are recorded as skipped or failed."""
    keep = []
    for candidate in candidates:
        if candidate.suffix not in info.supported_suffixes:
            if candidate.explicit:
                supported = ", ".join(sorted(s for s in info.supported_suffixes if s))
                outcome.failures.append(
                    Failure(
                        str(candidate.path),
                        "unsupported_file",
                        f"files of type '{candidate.suffix}' are not supported ({supported})",
                    )
                )
            else:
                outcome.skipped[candidate.suffix or "(none)"] += 1
            continue
        try:
            size = candidate.path.stat().st_size
        except OSError as error:
            outcome.failures.append(Failure(str(candidate.path), "unreadable", str(error)))
            continue
        if size > info.max_document_bytes:
            outcome.failures.append(
                Failure(
                    str(candidate.path),
                    "file_too_large",
                    f"{size} bytes; the server takes at most {info.max_document_bytes}",
                )
            )
            continue
        keep.append(candidate)
    return keep


def _documents(candidates: Sequence[Candidate], unreadable: list[Failure]) -> Iterator[Document]:
    # Runs on gRPC's sending thread, one file at a time, as fast as the server takes them.
    for candidate in candidates:
        try:
            data = candidate.path.read_bytes()
        except OSError as error:
            unreadable.append(Failure(str(candidate.path), "unreadable", str(error)))
            continue
        yield Document(filename=candidate.name, data=data, ref=str(candidate.path))


def run(
    client: IngestClient,
    vector_store_id: str,
    candidates: Sequence[Candidate],
    console: Console,
    *,
    show_progress: bool = True,
) -> Outcome:
    info = client.info()
    outcome = Outcome(vector_store_id)
    to_send = triage(candidates, info, outcome)
    unreadable: list[Failure] = []
    progress = Progress(
        SpinnerColumn(),
        TextColumn("[bold]ingest"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("files"),
        TextColumn("{task.fields[chunks]} chunks"),
        TextColumn("{task.fields[rate]:.1f} chunks/s"),
        TimeElapsedColumn(),
        console=console,
        disable=not show_progress,
    )
    started = time.monotonic()
    summary: Summary | None = None
    ended = 0
    with progress:
        task = progress.add_task("ingest", total=len(to_send), chunks=0, rate=0.0)
        for event in client.ingest(_documents(to_send, unreadable), vector_store=vector_store_id):
            if isinstance(event, Summary):
                summary = event
                continue
            _record(event, outcome)
            ended += event.final
            elapsed = time.monotonic() - started
            progress.update(
                task,
                completed=ended + len(unreadable),
                chunks=outcome.chunks,
                rate=outcome.chunks / elapsed if elapsed > 0 else 0.0,
            )
    outcome.failures += unreadable
    outcome.sent = summary.documents if summary else 0
    outcome.seconds = time.monotonic() - started
    return outcome


def _record(event: Event, outcome: Outcome) -> None:
    if event.state is State.COMPLETED:
        outcome.completed += 1
        outcome.chunks += event.chunks
    elif event.state is State.UNCHANGED:
        outcome.unchanged += 1
    elif event.state is State.FAILED:
        outcome.failures.append(Failure(event.ref, event.error_code, event.error_message))
