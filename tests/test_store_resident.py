"""Vectors in memory (resident.py): the numpy search itself, and the store keeping it equal to
the database through every write, rollback and drop."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from services.store import resident, vector_index
from services.store.db import atomic, database_key
from services.store.records import ChunkInput
from services.store.repository import Repository
from services.store.resident import Resident, ResidentSettings, VectorStore
from services.store.vector_index import IndexSettings
from tests.store_fixtures import (
    MODEL,
    check_invariants,
    open_repository,
    unit_vectors,
    upload,
)

DIMS = 64


def exact_top(
    matrix: npt.NDArray[np.float32], ids: list[int], query: np.ndarray, k: int
) -> list[int]:
    unit = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    scores = unit @ (query / np.linalg.norm(query))
    order = sorted(range(len(ids)), key=lambda i: (-scores[i], ids[i]))
    return [ids[i] for i in order[:k]]


def clustered(rng: np.random.Generator, n: int, dims: int) -> npt.NDArray[np.float32]:
    """Vectors around a few centres, like embeddings of related texts."""
    centres = unit_vectors(rng, 16, dims)
    picks = centres[rng.integers(0, 16, size=n)]
    return (picks + 0.6 * unit_vectors(rng, n, dims)).astype(np.float32)


def test_exact_scan_ranks_like_numpy_and_skips_deleted_rows() -> None:
    rng = np.random.default_rng(1)
    matrix = clustered(rng, 500, DIMS)
    ids = list(range(10, 510))
    vectors = VectorStore(DIMS, ResidentSettings())
    vectors.append(np.asarray(ids[:300]), matrix[:300])
    vectors.append(np.asarray(ids[300:]), matrix[300:])
    query = matrix[7] + 0.1
    hits = vectors.search(query, 10)
    assert [rowid for rowid, _ in hits] == exact_top(matrix, ids, query, 10)
    # Cosine distances, best first.
    distances = [distance for _, distance in hits]
    assert distances == sorted(distances) and 0.0 <= distances[0] < 1.0
    gone = [rowid for rowid, _ in hits[:3]]
    vectors.delete(gone)
    keep = [i for i, rowid in enumerate(ids) if rowid not in gone]
    assert [rowid for rowid, _ in vectors.search(query, 10)] == exact_top(
        matrix[keep], [ids[i] for i in keep], query, 10
    )
    assert vectors.live_rows == 497


def test_sign_bit_scan_finds_the_nearest_and_exact_forces_the_scan() -> None:
    rng = np.random.default_rng(2)
    matrix = clustered(rng, 6000, DIMS)
    ids = list(range(1, 6001))
    settings = ResidentSettings(bits_min_rows=1000, min_candidates=300, oversample=30)
    vectors = VectorStore(DIMS, settings)
    vectors.append(np.asarray(ids), matrix)
    found = 0
    for query in unit_vectors(rng, 50, DIMS) + matrix[:50]:
        want = exact_top(matrix, ids, query, 10)
        found += len(set(want) & {rowid for rowid, _ in vectors.search(query, 10)})
        assert [rowid for rowid, _ in vectors.search(query, 10, exact=True)] == want
    assert found / 500 >= 0.95


@pytest.mark.parametrize("rows", [3000, 70_000])
def test_the_hamming_scan_takes_exactly_the_nearest_by_distance(rows: int) -> None:
    # 700 of 3,000 random rows: the 700th distance is shared by many rows, some left out.
    rng = np.random.default_rng(rows)
    bits = np.ascontiguousarray(resident._sign_bits(unit_vectors(rng, rows, 100), 2).T)
    query = resident._sign_bits(unit_vectors(rng, 1, 100), 2)[0]
    distance = sum(np.bitwise_count(bits[word] ^ query[word]).astype(np.int64) for word in (0, 1))
    taken = resident._hamming_nearest(bits, rows, query, 700)
    assert len(set(taken.tolist())) == 700
    assert distance[taken].max() == np.sort(distance)[699]


def test_rows_arriving_out_of_order_are_still_found_and_deleted() -> None:
    vectors = VectorStore(4, ResidentSettings())
    vectors.append(np.asarray([5, 9]), np.eye(4, dtype=np.float32)[:2])
    vectors.append(np.asarray([7]), np.eye(4, dtype=np.float32)[2:3])
    vectors.delete([9, 42])
    ids, _ = vectors.rows()
    assert ids.tolist() == [5, 7]
    assert [rowid for rowid, _ in vectors.search(np.eye(4, dtype=np.float32)[1], 3)] == [5, 7]


def test_a_load_raced_by_a_commit_is_not_kept() -> None:
    memory = Resident(ResidentSettings())
    rows = [(1, np.ones(4, dtype="<f4").tobytes())]

    def read() -> list[tuple[int, bytes]]:
        # A writer commits to the same vector store while the loader reads.
        memory.apply([resident.Change(3, rows=[(2, np.ones(4, dtype="<f4").tobytes())])])
        return rows

    loaded = memory.load(3, 4, read, expected_rows=1)
    assert loaded is not None and loaded.live_rows == 1
    assert memory.get(3) is None
    assert memory.load(3, 4, lambda: rows, expected_rows=1) is memory.get(3)


def test_a_watched_load_keeps_the_commits_its_snapshot_missed() -> None:
    """A load of 1M rows takes longer than the gap between two writes: it is kept, with the
    writes committed meanwhile, instead of being read again after every write."""
    memory = Resident(ResidentSettings())

    def row(rowid: int) -> tuple[int, bytes]:
        return rowid, np.full(4, rowid, dtype="<f4").tobytes()

    watch = memory.watch()
    # Committed after the watch began but before the snapshot: in both.
    memory.apply([resident.Change(3, rows=[row(2)])])

    def read() -> list[tuple[int, bytes]]:
        memory.apply([resident.Change(3, rows=[row(3), row(4)]), resident.Change(3, deleted=[1])])
        memory.apply([resident.Change(5, rows=[row(9)])])  # another vector store
        return [row(1), row(2)]

    loaded = memory.load(3, 4, read, expected_rows=2, watch=watch)
    memory.unwatch(watch)
    assert loaded is not None and memory.get(3) is loaded
    assert loaded.rows()[0].tolist() == [2, 3, 4]
    assert loaded.live_rows == 3
    # A writer that committed before the snapshot but reaches memory only now: its rows are
    # there already, and are not added twice.
    count = loaded.count
    memory.apply([resident.Change(3, rows=[row(4)])])
    assert (loaded.live_rows, loaded.count) == (3, count)

    # Dropped while it loaded: not kept.
    def read_dropped() -> list[tuple[int, bytes]]:
        memory.apply([resident.Change(6, dropped=True)])
        return [row(1)]

    watch = memory.watch()
    dropped = memory.load(6, 4, read_dropped, 1, watch=watch)
    memory.unwatch(watch)
    assert dropped is not None and memory.get(6) is None


def test_distances_name_the_rows_memory_lacks_even_when_it_holds_none() -> None:
    # Loaded while the vector store was empty: no rows and no room (a hybrid search's words
    # can still find chunks whose vectors are pending).
    empty = VectorStore(4, ResidentSettings())
    hits, missing = empty.distances(np.ones(4, dtype=np.float32), [3, 5])
    assert (hits, missing.tolist()) == ([], [3, 5])
    vectors = VectorStore(4, ResidentSettings())
    vectors.append(np.asarray([3, 4]), np.eye(4, dtype=np.float32)[:2])
    vectors.delete([3])
    hits, missing = vectors.distances(np.asarray([0, 1, 0, 0], dtype=np.float32), [3, 4, 9])
    assert [rowid for rowid, _ in hits] == [4] and hits[0][1] == pytest.approx(0.0, abs=1e-6)
    assert missing.tolist() == [3, 9]


def test_the_budget_keeps_the_most_recently_searched_vector_stores() -> None:
    row = np.ones(256, dtype="<f4").tobytes()
    one = VectorStore(256, ResidentSettings())
    one.append(np.arange(1000), np.ones((1000, 256), dtype=np.float32))
    # Room for about two vector stores of 1,000 rows.
    memory = Resident(ResidentSettings(budget_bytes=int(2.5 * one.nbytes)))
    for key in (1, 2, 3):
        assert memory.load(key, 256, lambda: [(i, row) for i in range(1000)], 1000) is not None
    assert sorted(memory.loaded()) == [2, 3]
    # A vector store that alone exceeds the budget is never loaded: SQLite searches it.
    assert memory.load(4, 256, lambda: [], 10_000_000) is None


def test_a_vector_store_near_the_budget_stays_in_memory_through_writes() -> None:
    """The budget counts rows, not the room the buffers keep for more: at 1M rows and the
    default budget, the first write used to double the buffers past it, and the vector
    store left memory after every write."""
    row = np.ones(DIMS, dtype="<f4").tobytes()
    memory = Resident(ResidentSettings(budget_bytes=1100 * resident.row_bytes(DIMS)))
    loaded = memory.load(1, DIMS, lambda: [(i, row) for i in range(1, 1001)], 1000)
    assert loaded is not None and memory.get(1) is loaded
    # Loaded with room for what the budget holds: no write copies the rows to grow.
    buffer = loaded._matrix
    for rowid in range(1001, 1101, 10):
        memory.apply([resident.Change(1, rows=[(rowid + i, row) for i in range(10)])])
        assert memory.get(1) is loaded
    assert loaded._matrix is buffer
    assert loaded.live_rows == 1100 and memory.nbytes == 1100 * resident.row_bytes(DIMS)
    # Past the budget it leaves memory, and searches go to SQLite.
    memory.apply([resident.Change(1, rows=[(1101, row)])])
    assert memory.get(1) is None


# The store: the copy in memory follows the database


def add_file(repo: Repository, vector_store_id: str, vectors: npt.NDArray[np.float32]) -> str:
    file = upload(repo, f"{vectors.sum()}")
    repo.add_chunks(
        vector_store_id,
        file.id,
        file.filename,
        {},
        [ChunkInput(f"chunk {i}", 3) for i in range(len(vectors))],
        vectors,
        MODEL,
    )
    return file.id


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Repository]:
    with open_repository(tmp_path / "ragd.db") as repository:
        yield repository


def in_memory(repo: Repository) -> Resident:
    found = resident.existing(database_key(repo._sqlite("resident vectors")))
    assert found is not None
    return found


def test_searches_read_memory_that_follows_every_write(repo: Repository) -> None:
    rng = np.random.default_rng(3)
    vector_store = repo.create_vector_store("c", MODEL, DIMS)
    first = unit_vectors(rng, 20, DIMS)
    add_file(repo, vector_store.id, first)
    query = first[4]
    assert not repo.get_vector_store(vector_store.id).in_memory
    assert repo.search(vector_store.id, query, k=1)[0].text == "chunk 4"
    assert repo.get_vector_store(vector_store.id).in_memory
    memory = in_memory(repo)
    assert memory.loads == 1
    # Added after the load: found without another load.
    second = unit_vectors(rng, 5, DIMS)
    added = add_file(repo, vector_store.id, second)
    assert repo.search(vector_store.id, second[2], k=1)[0].file_id == added
    # Deleted: gone from memory too.
    repo.delete_file(added)
    assert all(hit.file_id != added for hit in repo.search(vector_store.id, second[2], k=25))
    assert memory.loads == 1
    check_invariants(repo.path)
    # Every search agrees with sqlite-vec's exhaustive scan of the same database.
    off = IndexSettings(resident=ResidentSettings(budget_bytes=0))
    with open_repository(repo.path, index=off) as sqlite_only:
        for vector in unit_vectors(rng, 5, DIMS):
            hits = repo.search(vector_store.id, vector, k=7)
            scanned = sqlite_only.search(vector_store.id, vector, k=7)
            assert [hit.chunk_id for hit in hits] == [hit.chunk_id for hit in scanned]
            assert [hit.score for hit in hits] == pytest.approx([h.score for h in scanned])


def test_a_candidates_distance_comes_from_memory_and_agrees_with_sqlite(
    repo: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hybrid search scores the lexical list's candidates with vector_index.distances: from
    the resident copy, and from SQLite only for rows it lacks."""
    rng = np.random.default_rng(6)
    vector_store = repo.create_vector_store("c", MODEL, DIMS)
    add_file(repo, vector_store.id, unit_vectors(rng, 30, DIMS))
    query = unit_vectors(rng, 1, DIMS)[0]
    repo.search(vector_store.id, query, k=1)
    key, vectors = next(iter(in_memory(repo).loaded().items()))
    ids = vectors.rows()[0].tolist()
    # The hybrid search ranks as it does with memory off.
    off = IndexSettings(resident=ResidentSettings(budget_bytes=0))
    with open_repository(repo.path, index=off) as sqlite_only:
        kept = repo.search(vector_store.id, query, k=8, mode="hybrid", query_text="chunk 7")
        scanned = sqlite_only.search(
            vector_store.id, query, k=8, mode="hybrid", query_text="chunk 7"
        )
    assert [hit.chunk_id for hit in kept] == [hit.chunk_id for hit in scanned]
    assert [hit.score for hit in kept] == pytest.approx([hit.score for hit in scanned])
    blob = query.astype("<f4").tobytes()
    conn = repo._sqlite("resident vectors")
    with atomic(conn, write=False):
        stored = dict(vector_index._stored_distances(conn, key, blob, ids[:10]))
    asked: list[list[int]] = []
    read = vector_index._stored_distances

    def recorded(conn: object, key: int, query: bytes, wanted: list[int]) -> object:
        asked.append(list(wanted))
        return read(conn, key, query, wanted)  # type: ignore[arg-type]

    monkeypatch.setattr(vector_index, "_stored_distances", recorded)
    with atomic(conn, write=False):
        # 10**9 is no chunk: neither memory nor SQLite has it.
        assert dict(vector_index.distances(conn, key, blob, [*ids[:10], 10**9])) == (
            pytest.approx(stored)
        )
        assert asked == [[10**9]]
        vectors.delete([ids[0]])
        assert dict(vector_index.distances(conn, key, blob, ids[:3])) == pytest.approx(
            {chunk: stored[chunk] for chunk in ids[:3]}
        )
        assert asked[-1] == [ids[0]]
    in_memory(repo).forget()


def test_a_rolled_back_write_never_reaches_memory(repo: Repository) -> None:
    rng = np.random.default_rng(4)
    vector_store = repo.create_vector_store("c", MODEL, DIMS)
    add_file(repo, vector_store.id, unit_vectors(rng, 3, DIMS))
    repo.search(vector_store.id, unit_vectors(rng, 1, DIMS)[0], k=1)
    conn = repo._sqlite("resident vectors")
    with pytest.raises(RuntimeError), atomic(conn):
        vector_index.insert(conn, 1, [(99_999, unit_vectors(rng, 1, DIMS)[0].tobytes())])
        raise RuntimeError("the write fails after the vectors")
    assert 99_999 not in in_memory(repo).loaded()[1].rows()[0].tolist()
    check_invariants(repo.path)


def test_the_builder_loads_large_vector_stores_before_any_search(tmp_path: Path) -> None:
    small_inline = IndexSettings(resident=ResidentSettings(inline_rows=2))
    with open_repository(tmp_path / "ragd.db", index=small_inline) as repo:
        vector_store = repo.create_vector_store("c", MODEL, DIMS)
        vectors = unit_vectors(np.random.default_rng(8), 5, DIMS)
        add_file(repo, vector_store.id, vectors)
        # Too large to load inline: searched in SQLite until the builder loads it.
        assert repo.search(vector_store.id, vectors[3], k=1)[0].text == "chunk 3"
        assert not repo.get_vector_store(vector_store.id).in_memory
        assert repo.build_indexes()
        assert repo.get_vector_store(vector_store.id).in_memory
        assert repo.search(vector_store.id, vectors[3], k=1)[0].text == "chunk 3"
        check_invariants(repo.path)


def test_the_builder_never_swaps_vector_stores_that_fit_only_one_at_a_time(
    tmp_path: Path,
) -> None:
    """Two large vector stores, room for one: the builder loads one and stays idle after
    (it used to load the other in its place, and back, for ever); a search of the other
    wants it, and then it takes the place."""
    one_store = 7 * resident.row_bytes(DIMS)
    settings = IndexSettings(resident=ResidentSettings(inline_rows=2, budget_bytes=one_store))
    rng = np.random.default_rng(9)
    with open_repository(tmp_path / "ragd.db", index=settings) as repo:
        stores, vectors = [], []
        for name in ("a", "b"):
            stores.append(repo.create_vector_store(name, MODEL, DIMS))
            vectors.append(unit_vectors(rng, 5, DIMS))
            add_file(repo, stores[-1].id, vectors[-1])
        memory_loads = 0
        while repo.build_indexes():
            memory_loads += 1
            assert memory_loads <= 3, "the builder keeps loading"
        memory = in_memory(repo)
        assert memory.loads == 1
        loaded = [s for s in stores if repo.get_vector_store(s.id).in_memory]
        assert len(loaded) == 1
        other = 1 - stores.index(loaded[0])
        assert repo.search(stores[other].id, vectors[other][2], k=1)[0].text == "chunk 2"
        assert repo.build_indexes()
        assert repo.get_vector_store(stores[other].id).in_memory
        assert not repo.get_vector_store(loaded[0].id).in_memory
        assert not repo.build_indexes()
        assert memory.loads == 2


def test_a_dropped_vector_store_leaves_memory(repo: Repository) -> None:
    rng = np.random.default_rng(5)
    vector_store = repo.create_vector_store("c", MODEL, DIMS)
    add_file(repo, vector_store.id, unit_vectors(rng, 3, DIMS))
    repo.search(vector_store.id, unit_vectors(rng, 1, DIMS)[0], k=1)
    assert list(in_memory(repo).loaded()) == [1]
    repo.delete_vector_store(vector_store.id)
    assert in_memory(repo).loaded() == {}


def test_a_database_made_anew_at_the_same_path_is_not_confused(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    path = tmp_path / "ragd.db"
    for round_ in range(2):
        with open_repository(path) as repo:
            vector_store = repo.create_vector_store("c", MODEL, DIMS)
            vectors = unit_vectors(rng, 4, DIMS)
            file_id = add_file(repo, vector_store.id, vectors)
            assert repo.search(vector_store.id, vectors[1], k=1)[0].file_id == file_id, round_
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)


def test_memory_off_searches_sqlite(tmp_path: Path) -> None:
    off = IndexSettings(resident=ResidentSettings(budget_bytes=0))
    with open_repository(tmp_path / "ragd.db", index=off) as repo:
        vector_store = repo.create_vector_store("c", MODEL, DIMS)
        vectors = unit_vectors(np.random.default_rng(7), 4, DIMS)
        add_file(repo, vector_store.id, vectors)
        assert repo.search(vector_store.id, vectors[2], k=1)[0].text == "chunk 2"
        assert resident.existing(database_key(repo._sqlite("resident vectors"))) is None


def test_the_builder_keeps_a_load_that_writes_raced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file added while the background builder reads a vector store into memory: the copy
    is kept (one load, not one per write) and holds the file's chunks."""
    settings = IndexSettings(resident=ResidentSettings(inline_rows=2))
    rng = np.random.default_rng(13)
    with open_repository(tmp_path / "ragd.db", index=settings) as repo:
        vector_store = repo.create_vector_store("a", MODEL, DIMS)
        add_file(repo, vector_store.id, unit_vectors(rng, 5, DIMS))
        later = unit_vectors(rng, 3, DIMS)
        added: list[str] = []
        reads = vector_index._all_vectors

        def racing(conn: object, key: int) -> Iterator[tuple[int, bytes]]:
            rows = reads(conn, key)  # type: ignore[arg-type]
            yield next(rows)
            writer = threading.Thread(
                target=lambda: added.append(add_file(repo, vector_store.id, later))
            )
            writer.start()
            writer.join()
            yield from rows

        monkeypatch.setattr(vector_index, "_all_vectors", racing)
        assert repo.build_indexes()
        monkeypatch.undo()
        assert added and in_memory(repo).loads == 1
        assert repo.get_vector_store(vector_store.id).in_memory
        assert in_memory(repo).get(1) is not None
        assert in_memory(repo).get(1).live_rows == 8  # type: ignore[union-attr]
        found = repo.search(vector_store.id, later[1], k=1)[0]
        assert (found.file_id, found.text) == (added[0], "chunk 1")
        check_invariants(repo.path)
