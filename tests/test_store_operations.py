"""The store's operations, in process against real SQLite files: embedding cache, audit log,
stats, deletion and vacuum, online backup, readers under concurrent writers."""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path

import apsw
import numpy as np
import pytest

from services.store import audit, cache, fulltext
from services.store.db import open_database
from services.store.errors import BackupExists, InvalidArgument, ModelMismatch
from services.store.maintenance import file_bytes
from services.store.records import AuditEntry, BatchFileInput, ChunkInput, EmbeddingModel
from services.store.repository import OperationsSettings, Repository
from tests.store_fixtures import (
    MODEL,
    FakeClock,
    check_fts_index,
    check_invariants,
    finish,
    indexed_chunks,
    unit_vectors,
    upload,
)

DIMS = 8
KEY = f"{MODEL}@sha256:{'ab' * 32}"

pytestmark = pytest.mark.repo(checks=[check_invariants])


def make_repo(path: Path, clock: FakeClock | None = None, **settings: object) -> Repository:
    repository = Repository(
        path,
        clock=clock or time.time,
        operations=OperationsSettings(**settings),  # type: ignore[arg-type]
    )
    repository.migrate()
    return repository


def digest(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


def integrity(path: Path) -> list[str]:
    conn = open_database(path)
    try:
        return [str(row[0]) for row in conn.execute("PRAGMA integrity_check")]
    finally:
        conn.close()


# Embedding cache


def test_cached_vectors_come_back_for_the_same_model_only(repo: Repository) -> None:
    vectors = unit_vectors(np.random.default_rng(0), 3, DIMS)
    hashes = [digest(f"text {i}") for i in range(3)]
    stored, evicted = repo.put_cached_embeddings(KEY, DIMS, hashes[:2], vectors[:2].tobytes())
    assert (stored, evicted) == (2, 0)
    # Storing again keeps the entries as they are.
    assert repo.put_cached_embeddings(KEY, DIMS, hashes[:1], vectors[2:].tobytes()) == (0, 0)
    found = repo.get_cached_embeddings(KEY, DIMS, hashes)
    assert found[0] == vectors[0].tobytes() and found[1] == vectors[1].tobytes()
    assert found[2] is None
    other_weights = f"{MODEL}@sha256:{'cd' * 32}"
    assert repo.get_cached_embeddings(other_weights, DIMS, hashes) == [None] * 3
    with pytest.raises(InvalidArgument, match="8-dim vectors"):
        repo.get_cached_embeddings(KEY, 16, hashes)
    with pytest.raises(InvalidArgument, match="32-byte"):
        repo.get_cached_embeddings(KEY, DIMS, [b"short"])
    with pytest.raises(InvalidArgument, match="expected 2 vectors"):
        repo.put_cached_embeddings(KEY, DIMS, hashes[:2], vectors[:1].tobytes())
    counters = repo.stats().cache_counters
    assert (counters.hits, counters.misses, counters.stored) == (2, 4, 2)
    size = repo.stats().database.cache
    assert (size.entries, size.bytes, size.models) == (2, 2 * DIMS * 4, 1)


def test_the_cache_evicts_least_recently_used_in_bounded_batches(
    tmp_path: Path, clock: FakeClock
) -> None:
    with make_repo(tmp_path / "ragd.db", clock, cache_max_entries=100) as repo:
        rng = np.random.default_rng(1)
        hashes = [digest(f"t{i}") for i in range(100)]
        repo.put_cached_embeddings(KEY, DIMS, hashes, unit_vectors(rng, 100, DIMS).tobytes())
        # An hour later, the first ten are used again: they become the most recent.
        clock.now += cache.TOUCH_SECONDS + 1
        assert all(repo.get_cached_embeddings(KEY, DIMS, hashes[:10]))
        clock.now += 1
        more = [digest(f"new{i}") for i in range(5)]
        stored, evicted = repo.put_cached_embeddings(
            KEY, DIMS, more, unit_vectors(rng, 5, DIMS).tobytes()
        )
        # Over the bound by 5: evicted down to 90% of it (the slack keeps eviction rare).
        assert (stored, evicted) == (5, 15)
        survivors = repo.get_cached_embeddings(KEY, DIMS, hashes + more)
        assert all(survivors[:10]) and all(survivors[100:])
        assert sum(vector is not None for vector in survivors) == 90
        assert survivors[10:25] == [None] * 15


def test_a_zero_bound_disables_the_cache(tmp_path: Path) -> None:
    with make_repo(tmp_path / "ragd.db", cache_max_entries=0) as repo:
        vector = unit_vectors(np.random.default_rng(2), 1, DIMS)
        assert repo.put_cached_embeddings(KEY, DIMS, [digest("x")], vector.tobytes()) == (0, 0)
        assert repo.get_cached_embeddings(KEY, DIMS, [digest("x")]) == [None]


# Audit log


def entry(operation: str = "search", store: str = "vs_a", at: float = 1.7e9) -> AuditEntry:
    return AuditEntry(
        at=at, operation=operation, vector_store_id=store, k=5, latency_ms=2.5, result_count=3
    )


def test_audit_entries_are_listed_newest_first_with_filters(repo: Repository) -> None:
    entries = [entry("search", "vs_a"), entry("ingest", "vs_a"), entry("search", "vs_b")]
    assert repo.record_audit([*entries, replace_degraded(entry("search", "vs_a"))]) == 4
    page = repo.list_audit(limit=10)
    assert [item.id for item in page.items] == [4, 3, 2, 1] and not page.has_more
    assert page.items[0].degraded and not page.items[1].degraded
    assert page.items[3] == AuditEntry(**{**entries[0].__dict__, "id": 1})
    searches = repo.list_audit(limit=10, operation="search", vector_store_id="vs_a")
    assert [item.id for item in searches.items] == [4, 1]
    first = repo.list_audit(limit=2)
    assert [item.id for item in first.items] == [4, 3] and first.has_more
    rest = repo.list_audit(limit=2, before_id=first.items[-1].id)
    assert [item.id for item in rest.items] == [2, 1] and not rest.has_more
    with pytest.raises(InvalidArgument, match="operation must be one of"):
        repo.record_audit([entry("remove")])
    assert repo.stats().database.audit_entries == 4


def replace_degraded(item: AuditEntry) -> AuditEntry:
    return AuditEntry(**{**item.__dict__, "degraded": True})


def test_audit_entries_past_the_retention_are_pruned_on_write(
    tmp_path: Path, clock: FakeClock
) -> None:
    with make_repo(tmp_path / "ragd.db", clock, audit_retention_days=2) as repo:
        day = 86400
        old = [entry(at=clock.now - 3 * day), entry(at=clock.now - 2.5 * day)]
        recent = [entry(at=clock.now - day), entry(at=clock.now)]
        repo.record_audit(old + recent)
        assert [item.at for item in repo.list_audit(limit=10).items] == [
            clock.now,
            clock.now - day,
        ]
        # Pruning runs at most every few minutes, not on every write.
        repo.record_audit([entry(at=clock.now - 5 * day)])
        assert len(repo.list_audit(limit=10).items) == 3
        clock.now += audit.PRUNE_INTERVAL_SECONDS
        repo.record_audit([entry(at=clock.now)])
        assert len(repo.list_audit(limit=10).items) == 3


# Deletion, stats and vacuum


def add_file(repo: Repository, store: str, file_id: str, chunks: int, dims: int, seed: int) -> None:
    repo.add_chunks(
        store,
        file_id,
        f"{file_id}.txt",
        {},
        [ChunkInput(f"{file_id} chunk {i} " + "words " * 20, 30) for i in range(chunks)],
        unit_vectors(np.random.default_rng(seed), chunks, dims),
        MODEL,
    )


def scalar(path: Path, sql: str) -> int:
    conn = open_database(path)
    try:
        row = conn.execute(sql).fetchone()
        assert row is not None
        return int(row[0])
    finally:
        conn.close()


@pytest.mark.engines("sqlite")  # the vacuum of SQLite's file
def test_deleting_frees_rows_and_vacuum_gives_the_space_back(repo: Repository) -> None:
    dims = 384
    kept = repo.create_vector_store("kept", MODEL, dims).id
    dropped = repo.create_vector_store("dropped", MODEL, dims).id
    # 700 vectors per file: deleted files share vec0's 1024-slot chunks with kept ones.
    for number in range(4):
        add_file(repo, kept, f"file-{number}", 700, dims, seed=number)
    add_file(repo, dropped, "file-x", 1500, dims, seed=9)
    probe = unit_vectors(np.random.default_rng(0), 1, dims)[0]
    before_hits = repo.search(kept, probe, k=5)

    repo.delete_file("file-1")
    repo.detach_file(kept, "file-3")
    repo.delete_vector_store(dropped)
    key = scalar(repo.path, "SELECT id FROM vector_stores")
    assert scalar(repo.path, "SELECT count(*) FROM chunks") == 1400
    assert scalar(repo.path, f"SELECT count(*) FROM vec_{key}") == 1400
    assert scalar(repo.path, "SELECT count(*) FROM files") == 4
    # The lexical index drops the deleted chunks too, and the dropped store's index goes.
    while repo.build_indexes():
        pass
    assert scalar(repo.path, "SELECT count(*) FROM fulltext_queue") == 0
    assert len(indexed_chunks(fulltext.directory(repo.path) / str(key))) == 1400
    assert [entry.name for entry in fulltext.directory(repo.path).iterdir()] == [str(key)]
    check_fts_index(repo.path)
    (vector_store,) = repo.stats().database.vector_stores
    assert (vector_store.chunks, vector_store.vectors) == (1400, 1400)
    # vec0 keeps the deleted vectors' slots in partly used chunks until vacuum compacts them.
    assert vector_store.vector_slots == 3072

    result = repo.vacuum()
    assert result.compacted == 1
    assert result.bytes_after == sum(file_bytes(repo.path))
    deleted_vectors = (2 * 700 + 1500) * dims * 4
    assert result.bytes_before - result.bytes_after > 0.8 * deleted_vectors, result
    (vector_store,) = repo.stats().database.vector_stores
    assert (vector_store.vectors, vector_store.vector_slots) == (1400, 2048)
    survivors = [hit.chunk_id for hit in before_hits if hit.file_id in ("file-0", "file-2")]
    after_hits = [hit.chunk_id for hit in repo.search(kept, probe, k=5)]
    assert after_hits[: len(survivors)] == survivors
    assert integrity(repo.path) == ["ok"]
    # A second vacuum has nothing to compact.
    assert repo.vacuum().compacted == 0


def tables(path: Path) -> set[str]:
    conn = open_database(path)
    try:
        return {str(row[0]) for row in conn.execute("SELECT name FROM sqlite_schema")}
    finally:
        conn.close()


def test_stats_count_every_store_and_the_whole_database(repo: Repository) -> None:
    first = repo.create_vector_store("a", MODEL, DIMS).id
    second = repo.create_vector_store("b", MODEL, DIMS).id
    add_file(repo, first, "file-1", 3, DIMS, seed=1)
    add_file(repo, second, "file-2", 2, DIMS, seed=2)
    pending = upload(repo, "pending text")
    repo.attach_file(second, pending.id)
    stats = repo.stats().database
    assert [(c.id, c.files, c.chunks, c.vectors) for c in stats.vector_stores] == [
        (first, 1, 3, 3),
        (second, 2, 2, 2),
    ]
    assert (stats.chunks, stats.vectors, stats.files, stats.file_bytes) == (5, 5, 3, 12)
    assert (stats.jobs_pending, stats.jobs_leased) == (1, 0)
    assert stats.usage_bytes == sum(repo.get_vector_store(c).usage_bytes for c in (first, second))
    assert stats.db_bytes > 0 and stats.schema_version >= 4


# Online backup


def writer(
    repo: Repository, store: str, stop: threading.Event, errors: list[BaseException]
) -> None:
    """Attaches, claims and completes files (40 chunks each) until told to stop."""
    number, name = 0, threading.current_thread().name
    try:
        while not stop.is_set():
            number += 1
            file = upload(repo, f"{name} document {number} " * 50, f"doc{number}.txt")
            repo.attach_file(store, file.id)
            # A job attached while this claim waited for the write lock may be due a second
            # after the claim's clock: it is simply taken by the next claim.
            for job in repo.claim_jobs(name, max_jobs=10, lease_seconds=60):
                finish(repo, job, name, chunks=40, seed=number)
    except BaseException as error:
        errors.append(error)


def test_a_backup_taken_during_writes_is_a_consistent_snapshot(tmp_path: Path) -> None:
    with make_repo(tmp_path / "ragd.db") as repo:
        store = repo.create_vector_store("busy", MODEL, DIMS).id
        stop, errors = threading.Event(), list[BaseException]()
        thread = threading.Thread(target=writer, args=(repo, store, stop, errors))
        thread.start()
        try:
            while repo.get_vector_store(store).file_counts.completed < 5:
                time.sleep(0.01)
            result = repo.backup("during-writes.db")
            completed_after = repo.get_vector_store(store).file_counts.completed
        finally:
            stop.set()
            thread.join()
        assert not errors, errors
        assert result.path == (tmp_path / "backups" / "during-writes.db").resolve()
        assert result.bytes == result.path.stat().st_size > 0
        assert integrity(result.path) == ["ok"]
        check_invariants(result.path)
        with make_repo(result.path) as restored:
            copy = restored.get_vector_store(store)
            assert 5 <= copy.file_counts.completed <= completed_after
            assert copy.chunk_count == 40 * copy.file_counts.completed
            probe = unit_vectors(np.random.default_rng(3), 1, DIMS)[0]
            assert len(restored.search(store, probe, k=5)) == 5
        check_invariants(repo.path)


def test_backup_paths_stay_inside_the_backup_directory(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    with make_repo(tmp_path / "ragd.db", backup_dir=tmp_path / "bk") as repo:
        nested = repo.backup("nightly/one.db")
        assert nested.path == (tmp_path / "bk" / "nightly" / "one.db").resolve()
        default = repo.backup()
        assert default.path.parent == (tmp_path / "bk").resolve()
        assert default.path.name.startswith("ragd-") and default.path.suffix == ".db"
        with pytest.raises(BackupExists):
            repo.backup("nightly/one.db")
        (tmp_path / "bk" / "link").symlink_to(outside)
        for name in ("../escape.db", str(tmp_path / "abs.db"), "link/x.db", ".", "a/.."):
            with pytest.raises(InvalidArgument):
                repo.backup(name)
        assert list(outside.iterdir()) == []
        assert sorted(p.name for p in (tmp_path / "bk").rglob("*") if p.is_file()) == sorted(
            ["one.db", default.path.name]
        )


# Model identity


def test_attaching_to_a_store_of_another_model_is_refused(repo: Repository) -> None:
    store = repo.create_vector_store("other", "other-model", 384).id
    file = upload(repo)
    with pytest.raises(ModelMismatch, match=r"indexed with other-model .*, not all-MiniLM"):
        repo.attach_file(store, file.id, model=EmbeddingModel(MODEL, 384))
    with pytest.raises(ModelMismatch, match=MODEL):
        repo.create_file_batch(store, [BatchFileInput(file.id)], model=EmbeddingModel(MODEL, 384))
    assert repo.get_vector_store(store).file_count == 0
    # The store's own model is fine.
    assert repo.attach_file(store, file.id, model=EmbeddingModel("other-model", 384)).status == (
        "in_progress"
    )


def test_the_status_counts_the_models_in_use(repo: Repository) -> None:
    assert repo.status().models == []
    first = [repo.create_vector_store(f"m{n}", MODEL, DIMS).id for n in range(7)]
    other = repo.create_vector_store("other", "other-model", 576).id
    models = repo.status().models
    assert [(use.model, use.dimensions, use.vector_stores) for use in models] == [
        (MODEL, DIMS, 7),
        ("other-model", 576, 1),
    ]
    assert models[0].sample_ids == first[:5] and models[1].sample_ids == [other]
    # Judged by the store's model rule against the caller's models.
    judged = repo.status([EmbeddingModel(MODEL, DIMS)]).models
    assert [use.served for use in judged] == [True, False]


# Readers while writers run


def test_readers_are_never_refused_or_stuck_behind_writers(tmp_path: Path) -> None:
    with make_repo(tmp_path / "ragd.db") as repo:
        store = repo.create_vector_store("busy", MODEL, DIMS).id
        add_file(repo, store, "file-seed", 20, DIMS, seed=0)
        stop, errors = threading.Event(), list[BaseException]()
        # A writer may time out behind the hog and the other writer (SQLite's lock is not
        # fair: on a loaded machine one writer can lose every race for the busy timeout's
        # 5 s); that refusal is the Busy a client retries. Readers never.
        writer_errors = list[BaseException]()
        writers = [
            threading.Thread(target=writer, args=(repo, store, stop, writer_errors))
            for _ in range(2)
        ]
        hog = open_database(repo.path)
        slowest: list[float] = []

        def reader() -> None:
            probe = unit_vectors(np.random.default_rng(5), 1, DIMS)[0]
            try:
                while not stop.is_set():
                    started = time.monotonic()
                    assert repo.search(store, probe, k=5)
                    repo.get_vector_store(store)
                    repo.list_vector_store_files(store)
                    slowest.append(time.monotonic() - started)
            except BaseException as error:
                errors.append(error)

        readers = [threading.Thread(target=reader) for _ in range(2)]
        for thread in writers + readers:
            thread.start()
        try:
            for _ in range(2):
                # A long write transaction holds the write lock across a clock second: searches
                # (which also touch last_active_at) must neither wait for it nor fail.
                hog.execute("BEGIN IMMEDIATE")
                hog.execute("UPDATE vector_stores SET name = name")
                time.sleep(2.0)
                hog.execute("COMMIT")
                time.sleep(0.2)
        finally:
            stop.set()
            for thread in writers + readers:
                thread.join()
            hog.close()
        # Writers waited for the lock (within the busy timeout); readers never did.
        assert not errors, errors
        assert all(isinstance(error, apsw.BusyError) for error in writer_errors), writer_errors
        assert len(slowest) > 50
        assert max(slowest) < 1.0, max(slowest)
        check_invariants(repo.path)
