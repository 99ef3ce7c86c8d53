"""A chunk longer than the model's window, embedded as several windows (issue 30, item 8).

OpenAI's chunks reach 4,096 tokens where a model such as MiniLM reads 256. The gateway embeds
such a chunk as overlapping windows, each within the model's window; the store keeps window 0
as the chunk's own vector (where every vector is: vec_<key>, chunks.embedding), and windows
1.. in `chunk_windows`, keyed (chunk, window). A chunk within the window has window 0 only,
so nothing of its path changes.

A search stays one result per chunk: a chunk's distance is its best window's. Windows 1.. are
few (only long chunks have them) and searched exactly; `fold` merges them with the ordinary
k nearest, which is exact given those: a chunk of the true top k either has its best window
at 0, and then it is among the k nearest by window 0, or at 1.., and then among the k nearest
by their best window 1...
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from services.common.vectors import FloatMatrix
from services.store.errors import InvalidArgument
from services.store.sql import Connection

Hits = list[tuple[int, float]]


def starts(chunk_count: int, window_counts: Sequence[int], rows: int) -> list[int]:
    """The row of each chunk's window 0 in a matrix of `rows` vectors holding every chunk's
    windows in order (`window_counts` empty: one each). InvalidArgument when they disagree."""
    if not window_counts:
        if rows != chunk_count:
            raise InvalidArgument(
                f"expected one vector per chunk ({chunk_count}), got {rows} vectors"
            )
        return list(range(chunk_count))
    if len(window_counts) != chunk_count:
        raise InvalidArgument(
            f"window_counts has {len(window_counts)} entries for {chunk_count} chunks"
        )
    if any(count < 1 for count in window_counts):
        raise InvalidArgument("every chunk has at least one window (window_counts >= 1)")
    if sum(window_counts) != rows:
        raise InvalidArgument(
            f"window_counts add up to {sum(window_counts)} vectors, got {rows} vectors"
        )
    result: list[int] = []
    row = 0
    for count in window_counts:
        result.append(row)
        row += count
    return result


def extra_rows(
    chunk_ids: Sequence[int], window_counts: Sequence[int], vectors: FloatMatrix
) -> list[tuple[int, int, FloatMatrix]]:
    """(chunk id, window index, vector) of every window after the first."""
    if not window_counts:
        return []
    found: list[tuple[int, int, FloatMatrix]] = []
    row = 0
    for chunk_id, count in zip(chunk_ids, window_counts, strict=True):
        found.extend((chunk_id, window, vectors[row + window]) for window in range(1, count))
        row += count
    return found


def present(conn: Connection, key: int) -> bool:
    """Whether any chunk of the vector store has windows 1.. (one index probe)."""
    row = conn.execute(
        "SELECT 1 FROM chunk_windows WHERE vector_store_id = ? LIMIT 1", (key,)
    ).fetchone()
    return row is not None


def fold(
    found: Sequence[tuple[int, float]],
    windows: Sequence[tuple[int, float]],
    k: int,
    first_distances: Callable[[Sequence[int]], Sequence[tuple[int, float]]],
) -> Hits:
    """The k chunks nearest by their best window, as (chunk id, distance) ordered by
    (distance, id): `found` are the k nearest by window 0, `windows` every allowed chunk's
    best distance over its windows 1.. (the engine's window_distances), `first_distances`
    gives window 0's distance of chunks not in `found`."""
    best = dict(found)
    beyond = dict(windows)
    for chunk, distance in beyond.items():
        if chunk in best:
            best[chunk] = min(best[chunk], distance)
    nearest = sorted(beyond.items(), key=lambda hit: (hit[1], hit[0]))[:k]
    missing = [chunk for chunk, _ in nearest if chunk not in best]
    first = dict(first_distances(missing)) if missing else {}
    for chunk in missing:
        best[chunk] = min(beyond[chunk], first.get(chunk, beyond[chunk]))
    return sorted(best.items(), key=lambda hit: (hit[1], hit[0]))[:k]
