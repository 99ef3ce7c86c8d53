"""The chunks' full-text indexes (fulltext.py): derived from the database, caught up by every
search, applied idempotently after a crash, rebuilt when lost; and the vacuum (vacuum.py)
that gives space back in slices."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import apsw
import numpy as np
import pytest

from services.store import fulltext, vacuum
from services.store.db import open_database
from services.store.errors import FullTextUnavailable
from services.store.records import ChunkInput
from services.store.repository import Repository
from tests.store_fixtures import (
    DIMS,
    MODEL,
    check_fts_index,
    check_invariants,
    indexed_chunks,
    open_repository,
    unit_vectors,
)

# The SQLite engine's Tantivy indexes beside the file; PostgreSQL's full text is a column of
# its table (tests/test_pg_fulltext.py).
pytestmark = [
    pytest.mark.repo(checks=[check_invariants, check_fts_index]),
    pytest.mark.engines("sqlite"),
]

TEXTS = {
    "file-a": ["the lighthouse keeper logs passing ships", "fog horns at night"],
    "file-b": ["a bakery sells bread at dawn", "the oven heats before five"],
    "file-c": ["satellites orbit the earth", "a ground station tracks the orbit"],
}


def add(repo: Repository, vs_id: str, file_id: str, seed: int = 0) -> None:
    texts = TEXTS[file_id]
    repo.add_chunks(
        vs_id,
        file_id,
        f"{file_id}.txt",
        {"name": file_id},
        [ChunkInput(text, 5) for text in texts],
        unit_vectors(np.random.default_rng(seed), len(texts), DIMS),
        MODEL,
    )


def lexical(repo: Repository, vs_id: str, text: str) -> list[str]:
    """The files of the hits, best first, each once."""
    hits = repo.search(vs_id, None, k=5, mode="lexical", query_text=text)
    return list(dict.fromkeys(hit.file_id for hit in hits))


def queued(repo: Repository) -> int:
    conn = open_database(repo.path)
    try:
        row = conn.execute("SELECT count(*) FROM fulltext_queue").fetchone()
        assert row is not None
        return int(row[0])
    finally:
        conn.close()


def forget_process(repo: Repository) -> None:
    """What a new process knows of the indexes: nothing but their folders."""
    fulltext._registry.clear()


def test_a_search_sees_every_write_committed_before_it(repo: Repository, vs_id: str) -> None:
    add(repo, vs_id, "file-a")
    add(repo, vs_id, "file-c", seed=1)
    # No background loop ran: the search applies what its vector store has queued.
    assert queued(repo) > 0
    assert lexical(repo, vs_id, "orbit") == ["file-c"]
    assert queued(repo) == 0
    repo.detach_file(vs_id, "file-c")
    assert lexical(repo, vs_id, "orbit") == []
    assert lexical(repo, vs_id, "ships lighthouse") == ["file-a"]


def test_a_search_never_waits_for_the_write_lock(repo: Repository, vs_id: str) -> None:
    add(repo, vs_id, "file-a")
    hog = open_database(repo.path)
    try:
        hog.execute("BEGIN IMMEDIATE")
        began = time.monotonic()
        # The index catches up; the queue rows stay until the lock is free.
        assert lexical(repo, vs_id, "lighthouse") == ["file-a"]
        assert lexical(repo, vs_id, "fog") == ["file-a"]
        assert time.monotonic() - began < 2.0  # the busy timeout is 5 s
        hog.execute("COMMIT")
    finally:
        hog.close()
    assert queued(repo) == 2
    while repo.build_indexes():
        pass
    assert queued(repo) == 0
    assert lexical(repo, vs_id, "lighthouse") == ["file-a"]


def test_rows_applied_again_after_a_crash_change_nothing(repo: Repository, vs_id: str) -> None:
    add(repo, vs_id, "file-a")
    add(repo, vs_id, "file-b", seed=1)
    assert lexical(repo, vs_id, "bread") == ["file-b"]
    # A crash after the index committed and before the queue rows were deleted leaves them
    # queued: applying them again neither doubles nor loses a chunk.
    conn = open_database(repo.path)
    try:
        conn.execute(
            "INSERT INTO fulltext_queue (vector_store_id, chunk_id)"
            " SELECT vector_store_id, id FROM chunks"
            " UNION ALL SELECT vector_store_id, 999 FROM chunks"
        )
    finally:
        conn.close()
    hits = repo.search(vs_id, None, k=10, mode="lexical", query_text="bread oven fog ships")
    assert sorted(hit.file_id for hit in hits) == ["file-a", "file-a", "file-b", "file-b"]
    assert queued(repo) == 0


def test_a_lost_index_is_rebuilt_from_the_chunks(repo: Repository, vs_id: str) -> None:
    for number, file_id in enumerate(TEXTS):
        add(repo, vs_id, file_id, seed=number)
    before = repo.search(vs_id, None, k=5, mode="lexical", query_text="orbit bread")
    forget_process(repo)
    shutil.rmtree(fulltext.directory(repo.path))
    assert repo.search(vs_id, None, k=5, mode="lexical", query_text="orbit bread") == before


def test_an_index_of_another_database_is_not_used(repo: Repository, vs_id: str) -> None:
    add(repo, vs_id, "file-a")
    assert lexical(repo, vs_id, "lighthouse") == ["file-a"]
    key = repo.stats().database.vector_stores[0]
    folder = fulltext.directory(repo.path)
    # Its generation no longer matches the database's record: rebuilt, not trusted.
    (folder / "1" / "ragd-generation").write_text("0123456789abcdef")
    forget_process(repo)
    add(repo, vs_id, "file-b", seed=1)
    assert lexical(repo, vs_id, "lighthouse bread") == ["file-a", "file-b"]
    assert key.chunks == 2


def test_a_large_index_being_rebuilt_leaves_hybrid_to_vectors(
    repo: Repository, vs_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for number, file_id in enumerate(TEXTS):
        add(repo, vs_id, file_id, seed=number)
    probe = unit_vectors(np.random.default_rng(0), 1, DIMS)[0]
    assert lexical(repo, vs_id, "orbit") == ["file-c"]
    forget_process(repo)
    shutil.rmtree(fulltext.directory(repo.path))
    monkeypatch.setattr(fulltext, "INLINE_ROWS", 1)
    with pytest.raises(FullTextUnavailable, match="being rebuilt"):
        lexical(repo, vs_id, "orbit")
    hits = repo.search(vs_id, probe, k=3, mode="hybrid", query_text="orbit")
    assert len(hits) == 3 and all(hit.lexical_rank == 0 for hit in hits)
    while repo.build_indexes():
        pass
    assert lexical(repo, vs_id, "orbit") == ["file-c"]


def test_a_deleted_store_takes_its_index_along(repo: Repository) -> None:
    kept = repo.create_vector_store("kept", MODEL, DIMS).id
    gone = repo.create_vector_store("gone", MODEL, DIMS).id
    add(repo, kept, "file-a")
    add(repo, gone, "file-b", seed=1)
    assert lexical(repo, gone, "bread") == ["file-b"]
    repo.delete_vector_store(gone)
    while repo.build_indexes():
        pass
    folder = fulltext.directory(repo.path)
    assert sorted(entry.name for entry in folder.iterdir()) == ["1"]
    assert len(indexed_chunks(folder / "1")) == 2


def test_a_filter_limits_the_lexical_candidates(repo: Repository, vs_id: str) -> None:
    from services.store.search.filters import Comparison

    for number, file_id in enumerate(TEXTS):
        add(repo, vs_id, file_id, seed=number)
    hits = repo.search(
        vs_id,
        None,
        k=5,
        mode="lexical",
        query_text="the orbit bread",
        filter=Comparison("name", "in", values=("file-b", "file-c")),
    )
    assert {hit.file_id for hit in hits} == {"file-b", "file-c"}
    hits = repo.search(
        vs_id,
        None,
        k=5,
        mode="lexical",
        query_text="orbit",
        filter=Comparison("name", "eq", value="file-a"),
    )
    assert hits == []


def test_words_most_chunks_hold_are_left_out_unless_nothing_else_is_asked(
    repo: Repository, vs_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As in a vector store of millions of chunks, where such words are left out.
    monkeypatch.setattr(fulltext, "COMMON_MIN_CHUNKS", 0)
    texts = ["station alpha", "station beta", "station gamma", "station delta", "harbour lights"]
    repo.add_chunks(
        vs_id,
        "file-s",
        "s.txt",
        {},
        [ChunkInput(text, 2) for text in texts],
        unit_vectors(np.random.default_rng(3), len(texts), DIMS),
        MODEL,
    )

    def asked(text: str) -> list[str]:
        hits = repo.search(vs_id, None, k=10, mode="lexical", query_text=text)
        return [hit.text for hit in hits]

    # "station" is in 4 of 5 chunks: searched only when it is all the query asks.
    assert asked("harbour station") == ["harbour lights"]
    assert sorted(asked("station")) == sorted(texts[:4])
    # A phrase counts by its rarest term: "harbour" is rare, so the phrase is searched.
    assert asked("harbour-lights station") == ["harbour lights"]
    monkeypatch.setattr(fulltext, "COMMON_MIN_CHUNKS", 50_000)
    assert asked("harbour station")[0] == "harbour lights"
    assert len(asked("harbour station")) == 5


def free_pages(path: Path) -> tuple[int, int]:
    conn = open_database(path)
    try:
        mode = conn.execute("PRAGMA auto_vacuum").fetchone()
        free = conn.execute("PRAGMA freelist_count").fetchone()
        assert mode is not None and free is not None
        return int(mode[0]), int(free[0])
    finally:
        conn.close()


def test_vacuum_gives_free_pages_back_in_slices(
    repo: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = repo.create_vector_store("big", MODEL, DIMS).id
    for number in range(8):
        repo.add_chunks(
            store,
            f"file-{number}",
            f"{number}.txt",
            {},
            [ChunkInput(f"chunk {i} " + "filler words " * 200, 300) for i in range(50)],
            unit_vectors(np.random.default_rng(number), 50, DIMS),
            MODEL,
        )
    repo.delete_vector_store(store)
    mode, free = free_pages(repo.path)
    assert mode == vacuum.INCREMENTAL and free > 40
    slices = []
    real = vacuum.atomic  # type: ignore[attr-defined]

    def counted(conn: apsw.Connection, **kwargs: bool):  # type: ignore[no-untyped-def]
        slices.append(1)
        return real(conn, **kwargs)

    monkeypatch.setattr(vacuum, "STEP_PAGES", 16)
    monkeypatch.setattr(vacuum, "MIN_STEP_PAGES", 16)
    monkeypatch.setattr(vacuum, "atomic", counted)
    result = repo.vacuum()
    assert free_pages(repo.path) == (vacuum.INCREMENTAL, 0)
    assert result.bytes_after < result.bytes_before
    assert len(slices) >= free // 16


def test_a_slow_vacuum_slice_makes_the_next_smaller() -> None:
    """A write waits behind a whole slice: slices that take long shrink, quick ones grow back
    to STEP_PAGES, never beyond."""
    slow, quick = 2 * vacuum.SLICE_SECONDS, vacuum.SLICE_SECONDS / 10
    assert vacuum.next_step(vacuum.STEP_PAGES, slow) == vacuum.STEP_PAGES // 2
    assert vacuum.next_step(vacuum.MIN_STEP_PAGES, slow) == vacuum.MIN_STEP_PAGES
    assert vacuum.next_step(vacuum.STEP_PAGES // 2, quick) == vacuum.STEP_PAGES
    assert vacuum.next_step(vacuum.STEP_PAGES, quick) == vacuum.STEP_PAGES
    assert vacuum.next_step(64, vacuum.SLICE_SECONDS / 2) == 64


def test_the_first_vacuum_of_an_older_database_switches_it(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = apsw.Connection(str(path))
    conn.execute("CREATE TABLE made_before (x)")  # auto_vacuum is fixed from the first table
    conn.close()
    repo = open_repository(path)
    try:
        assert free_pages(path)[0] == 0
        repo.vacuum()
        assert free_pages(path) == (vacuum.INCREMENTAL, 0)
    finally:
        repo.close()
