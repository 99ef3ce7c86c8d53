"""Following a re-index from the terminal: a progress bar over the new index's files."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from services.client.rest import RestClient, VectorStore

POLL_SECONDS = 0.5


def wait(
    rest: RestClient, store: VectorStore, console: Console, show_progress: bool = True
) -> dict[str, Any]:
    """Polls the store until its re-index ends; returns the re-index as the server shows it."""
    progress = Progress(
        TextColumn("[bold]reindex"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("files"),
        TimeElapsedColumn(),
        console=console,
        disable=not show_progress,
    )
    state: dict[str, Any] = store.raw.get("reindex") or {}
    with progress:
        task = progress.add_task("reindex", total=None)
        while state.get("status") == "in_progress":
            counts = state.get("file_counts") or {}
            done = counts.get("completed", 0) + counts.get("failed", 0)
            progress.update(task, total=counts.get("total") or None, completed=done)
            time.sleep(POLL_SECONDS)
            state = rest.get_vector_store(store.id).raw.get("reindex") or {}
        counts = state.get("file_counts") or {}
        progress.update(task, total=counts.get("total", 0), completed=counts.get("total", 0))
    return state
