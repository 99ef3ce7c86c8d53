"""VectorStores' vectors held in memory for search: numpy over a float32 matrix per vector store.

Why: sqlite-vec 0.1.9 scans its chunked tables at ~0.8 ms per 1,000 vectors (9 ms at 10k,
87 ms at 100k here), and its coarse index costs 64 KNN queries and a join. The same floats in
one numpy matrix are scanned at ~0.02 ms per 1,000 (a matrix-vector product). Large
vector stores (`bits_min_rows`) also keep one sign bit per dimension (1/32 of the floats): a
hamming scan over those picks `candidates` rows, and the floats rescore them exactly.

The database stays the only source of truth; this is a cache of it, in the one process that
opens it. A vector store is loaded on its first search (one scan of its vectors), counted
against a memory budget (the least recently searched vector stores are dropped past it) and
kept current by this process's own writes: vector_index's insert, delete and drop call
`record`, and db.atomic() calls `committed` after COMMIT (`discarded` after a rollback), so
only committed changes reach memory. The background builder's loads watch the commits made
while they read and apply them; a small vector store loaded by a search while a write to it
was in flight is used for that one search and loaded again by the next.

No apsw here: callers hand in the rows they read.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

Ids = npt.NDArray[np.int64]
# (rowid, cosine distance) best first, as vector_index's searches return them.
Hits = list[tuple[int, float]]
# A loaded vector store has room for at least a further 1/_LOAD_HEADROOM of its rows.
_LOAD_HEADROOM = 8


@dataclass(frozen=True)
class ResidentSettings:
    # Bytes of rows (row_bytes: floats, sign bits, rowid, live flag) kept in memory over all
    # vector stores; 0: off, every search goes to SQLite (vector_index.py).
    budget_bytes: int = 2 << 30
    # From this many rows a search scans sign bits first and rescores candidates: a float scan
    # costs ~1.5 ms per 100k rows of memory traffic per 384 dims, the bit scan 1/32 of it.
    bits_min_rows: int = 65_536
    # Candidates rescored with floats: max(min_candidates, oversample * k). On 100k and 1M
    # MiniLM vectors (20k real, the rest mixes of two) recall@10 against the exact scan was
    # 0.995 and 0.982 at 512 candidates, 1.000 and 0.998 at 2048, for +0.3 ms at 100k: the
    # hamming scan, not the rescoring, is the cost (1.3 ms at 100k, 12 ms at 1M).
    min_candidates: int = 2048
    oversample: int = 40
    # A vector store of at most this many chunks is loaded by the search that first needs it
    # (~8 us a row from vec0: 0.15 s); larger ones by the background builder, meanwhile
    # their searches go to SQLite.
    inline_rows: int = 20_000


@dataclass
class Change:
    key: int
    rows: Sequence[tuple[int, bytes]] = ()
    deleted: Sequence[int] = ()
    dropped: bool = False


def _word_count(dimensions: int) -> int:
    """uint64 words of a row's sign bits."""
    return (dimensions + 63) // 64


def row_bytes(dimensions: int) -> int:
    """The memory of one resident row: its floats, sign bits, rowid and live flag."""
    return 4 * dimensions + 8 * _word_count(dimensions) + 8 + 1


class VectorStore:
    """One vector_store's vectors: rows are appended into buffers that grow by doubling, and
    a search works on a consistent prefix of them (`count` is published last)."""

    def __init__(
        self, dimensions: int, settings: ResidentSettings, owner: str = "", capacity: int = 0
    ) -> None:
        self.dimensions = dimensions
        self.owner = owner
        self._settings = settings
        self._lock = threading.Lock()
        self._ids: Ids = np.empty(capacity, dtype=np.int64)
        self._matrix = np.empty((capacity, dimensions), dtype=np.float32)
        self._live = np.zeros(capacity, dtype=bool)
        # Sign bits, one row of uint64 words per dimension word (column-major: each word of
        # every row is contiguous, which is what the scan reads).
        self._bits = np.empty((self._words, capacity), dtype=np.uint64)
        self.count = 0
        self.dead = 0
        # Rowids arrive in increasing order (chunk ids are AUTOINCREMENT): lookups bisect.
        self._sorted = True

    @property
    def _words(self) -> int:
        return _word_count(self.dimensions)

    @property
    def live_rows(self) -> int:
        return self.count - self.dead

    @property
    def nbytes(self) -> int:
        """The memory its rows take. The buffers' room beyond them is address space that no
        page backs until rows fill it, so it is not counted: counting it, the first write
        after loading 1M rows doubled the buffers past the 2 GiB budget, dropped the vector
        store and sent every search to SQLite until the next load, which the next write
        dropped again (BENCHMARKS.md, issue 33)."""
        return self.count * row_bytes(self.dimensions)

    def append(self, ids: Ids, vectors: npt.NDArray[np.float32]) -> None:
        if len(ids) == 0:
            return
        with self._lock:
            start, end = self.count, self.count + len(ids)
            if end > len(self._ids):
                self._grow(max(end, 2 * len(self._ids), 1024))
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            self._matrix[start:end] = vectors / np.maximum(norms, np.float32(1e-12))
            self._ids[start:end] = ids
            self._live[start:end] = True
            self._bits[:, start:end] = _sign_bits(self._matrix[start:end], self._words).T
            if self._sorted and (
                np.any(np.diff(ids) <= 0) or (start > 0 and ids[0] <= self._ids[start - 1])
            ):
                self._sorted = False
            self.count = end

    def _grow(self, capacity: int) -> None:
        ids = np.empty(capacity, dtype=np.int64)
        matrix = np.empty((capacity, self.dimensions), dtype=np.float32)
        live = np.zeros(capacity, dtype=bool)
        bits = np.empty((self._words, capacity), dtype=np.uint64)
        n = self.count
        ids[:n], matrix[:n], live[:n], bits[:, :n] = (
            self._ids[:n],
            self._matrix[:n],
            self._live[:n],
            self._bits[:, :n],
        )
        # Searches holding the old buffers keep them alive until they finish.
        self._ids, self._matrix, self._live, self._bits = ids, matrix, live, bits

    def sort(self) -> None:
        """Puts the rows in rowid order (after a load that read them in another), so that
        deletions bisect. Not for a vector store searches already use."""
        with self._lock:
            n = self.count
            if self._sorted or n == 0:
                return
            order = np.argsort(self._ids[:n], kind="stable")
            self._ids[:n] = self._ids[:n][order]
            self._matrix[:n] = self._matrix[:n][order]
            self._live[:n] = self._live[:n][order]
            self._bits[:, :n] = self._bits[:, :n][:, order]
            self._sorted = True

    def delete(self, ids: Iterable[int]) -> None:
        with self._lock:
            positions, held = self._find(np.fromiter(ids, dtype=np.int64))
            positions = positions[held]
            alive = positions[self._live[positions]]
            self._live[alive] = False
            self.dead += len(alive)

    def _find(self, wanted: Ids) -> tuple[Ids, npt.NDArray[np.bool_]]:
        n = self.count
        return _positions(self._ids[:n], self._sorted, wanted)

    def change(self, change: Change) -> None:
        """Applies a committed change's deletions and its rows that it does not hold already
        (a change may reach it twice: see Resident.apply and Watch)."""
        if change.deleted:
            self.delete(change.deleted)
        if not change.rows:
            return
        ids = np.fromiter((r[0] for r in change.rows), dtype=np.int64)
        matrix = np.frombuffer(b"".join(r[1] for r in change.rows), dtype="<f4").reshape(
            len(ids), self.dimensions
        )
        fresh = ~self._find(ids)[1]
        self.append(ids[fresh], matrix[fresh])

    def replay(self, changes: Sequence[Change]) -> bool:
        """Applies changes that may overlap what it was loaded with; False if one dropped
        the vector store."""
        for change in changes:
            if change.dropped:
                return False
            self.change(change)
        return True

    def rows(self) -> tuple[Ids, npt.NDArray[np.float32]]:
        """The live rowids and their (unit) vectors, in rowid order."""
        n = self.count
        live = self._live[:n]
        ids, matrix = self._ids[:n][live], self._matrix[:n][live]
        order = np.argsort(ids, kind="stable")
        return ids[order], matrix[order]

    def distances(self, query: npt.NDArray[np.float32], wanted: Sequence[int]) -> tuple[Hits, Ids]:
        """The cosine distance of `query` to each wanted row it holds live, and the rowids it
        does not (the caller looks them up in the database)."""
        # The count first: a row it covers is in the buffers read after it (see append).
        n = self.count
        in_order, ids, matrix, live = self._sorted, self._ids, self._matrix, self._live
        asked = np.asarray(wanted, dtype=np.int64)
        if n == 0:
            return [], asked
        positions, held = _positions(ids[:n], in_order, asked)
        held &= live[positions]
        rows = positions[held]
        query = query / max(float(np.linalg.norm(query)), 1e-12)
        scores = matrix[rows] @ query
        hits = [(int(i), 1.0 - float(s)) for i, s in zip(ids[rows], scores, strict=True)]
        return hits, asked[~held]

    def search(self, query: npt.NDArray[np.float32], k: int, exact: bool = False) -> Hits:
        """The k nearest live rows by cosine distance, best first (ties by rowid)."""
        n = self.count
        ids, matrix, live, bits = self._ids, self._matrix, self._live, self._bits
        if n == 0:
            return []
        norm = float(np.linalg.norm(query))
        query = query / max(norm, 1e-12)
        settings = self._settings
        candidates = max(settings.min_candidates, settings.oversample * k)
        if exact or n < settings.bits_min_rows or candidates >= n // 4:
            rows = np.arange(n)
            scores = matrix[:n] @ query
        else:
            rows = _hamming_nearest(bits, n, _sign_bits(query[None, :], self._words)[0], candidates)
            scores = matrix[rows] @ query
        scores = np.where(live[rows], scores, -np.inf)
        take = min(k, len(rows))
        top = np.argpartition(-scores, take - 1)[:take] if take < len(rows) else np.arange(take)
        found = [(int(ids[rows[i]]), 1.0 - float(scores[i])) for i in top if scores[i] > -np.inf]
        return sorted(found, key=lambda hit: (hit[1], hit[0]))


def _positions(ids: Ids, in_order: bool, wanted: Ids) -> tuple[Ids, npt.NDArray[np.bool_]]:
    """The position in `ids` of each wanted rowid, and whether it is there at all (where it
    is not, the position is any)."""
    n = len(ids)
    if n == 0:
        return np.zeros(len(wanted), dtype=np.int64), np.zeros(len(wanted), dtype=bool)
    order = None if in_order else np.argsort(ids, kind="stable")
    positions = np.minimum(np.searchsorted(ids, wanted, sorter=order), n - 1)
    if order is not None:
        positions = order[positions]
    return positions, ids[positions] == wanted


# Rows read per slice while loading a vector store.
_LOAD_SLICE = 16_384


def _matrix(blobs: Sequence[bytes], dimensions: int) -> npt.NDArray[np.float32]:
    return np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), dimensions)


def _sign_bits(vectors: npt.NDArray[np.float32], words: int) -> npt.NDArray[np.uint64]:
    """One bit per dimension (set where the component is positive), as uint64 words a row."""
    packed = np.packbits(vectors > 0, axis=1)
    padded = np.zeros((len(vectors), words * 8), dtype=np.uint8)
    padded[:, : packed.shape[1]] = packed
    return padded.view(np.uint64)


def _hamming_nearest(
    bits: npt.NDArray[np.uint64], n: int, query: npt.NDArray[np.uint64], count: int
) -> npt.NDArray[np.intp]:
    """Positions of `count` rows nearest to `query` in hamming distance, in position order
    (ties at the last distance taken broken by position)."""
    distance = np.bitwise_count(bits[0, :n] ^ query[0]).astype(np.uint16)
    for word in range(1, len(query)):
        distance += np.bitwise_count(bits[word, :n] ^ query[word])
    # Distances are small integers: the count-th smallest comes from a histogram in one pass
    # (~2 ms at 1M rows), where argpartition's selection took longer than the scan itself
    # (~12 ms against ~8).
    histogram = np.bincount(distance, minlength=64 * len(query) + 1)
    cut = int(np.searchsorted(np.cumsum(histogram), count))
    closer = np.flatnonzero(distance < cut)
    tied = np.flatnonzero(distance == cut)[: count - len(closer)]
    return np.concatenate([closer, tied])


@dataclass
class _Pending:
    changes: list[Change] = field(default_factory=list)


@dataclass(eq=False)
class Watch:
    """The changes committed since it began (Resident.watch), for a load that reads a
    snapshot taken after it: what the load misses is here, and what it has is replayed
    harmlessly (deleting twice is nothing; a rowid it holds is not added again)."""

    generation: int
    changes: list[Change] = field(default_factory=list)


class Resident:
    """The resident vector stores of one database, by vector store key."""

    def __init__(self, settings: ResidentSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._vector_stores: OrderedDict[int, VectorStore] = OrderedDict()
        # Bumped by every committed change to a key: a load that saw another value is stale.
        self._versions: dict[int, int] = {}
        self._wanted: set[int] = set()
        # Bumped by forget(): a load begun before it is of a database that is gone.
        self._generation = 0
        self._watches: list[Watch] = []
        self.loads = 0

    def version(self, key: int) -> int:
        return self._versions.get(key, 0)

    def wanted(self, key: int) -> None:
        """A search needed this vector store: the next warm-up loads it first."""
        with self._lock:
            self._wanted.add(key)

    def take_wanted(self) -> set[int]:
        with self._lock:
            wanted, self._wanted = self._wanted, set()
            return wanted

    def watch(self) -> Watch:
        """Begins keeping every committed change for a load whose snapshot is yet to be
        taken; end it with unwatch."""
        with self._lock:
            watch = Watch(self._generation)
            self._watches.append(watch)
            return watch

    def unwatch(self, watch: Watch) -> None:
        with self._lock:
            if watch in self._watches:
                self._watches.remove(watch)

    def fits(self, dimensions: int, rows: int, evicting: bool = True) -> bool:
        """Whether a vector store of this shape fits the budget: alone (the least recently
        searched are dropped for it), or with `evicting` False beside those loaded now."""
        needed = rows * row_bytes(dimensions) + (0 if evicting else self.nbytes)
        return needed <= self.settings.budget_bytes

    def get(self, key: int) -> VectorStore | None:
        with self._lock:
            found = self._vector_stores.get(key)
            if found is not None:
                self._vector_stores.move_to_end(key)
            return found

    def load(
        self,
        key: int,
        dimensions: int,
        rows: Callable[[], Iterable[tuple[int, bytes]]],
        expected_rows: int,
        owner: str = "",
        watch: Watch | None = None,
    ) -> VectorStore | None:
        """Reads a vector store with `rows()` (inside the caller's read transaction) and keeps
        it if it fits the budget; None if it cannot fit. With a `watch` begun before that
        transaction, the changes committed since are applied to it; without one, a load that
        a commit raced serves only its own snapshot. A load of a million rows takes longer
        than the gap between two writes: discarded, it was read again and again, and the
        vector store never came into memory while writes went on (BENCHMARKS.md, issue 33)."""
        if not self.fits(dimensions, expected_rows):
            return None
        version, generation = self.version(key), self._generation
        # Room for the writes to come, up to twice the rows or what the budget holds: growing
        # copies every row in a write's commit (5 s at 1.15M rows), and room no row fills is
        # address space, not memory.
        capacity = max(
            expected_rows + expected_rows // _LOAD_HEADROOM,
            min(2 * expected_rows, self.settings.budget_bytes // row_bytes(dimensions)),
        )
        loaded = VectorStore(dimensions, self.settings, owner, capacity=capacity)
        # In slices, so that a million rows never sit in memory twice as Python bytes.
        ids: list[int] = []
        blobs: list[bytes] = []
        for rowid, blob in rows():
            ids.append(rowid)
            blobs.append(blob)
            if len(ids) == _LOAD_SLICE:
                loaded.append(np.asarray(ids, dtype=np.int64), _matrix(blobs, dimensions))
                ids, blobs = [], []
        loaded.append(np.asarray(ids, dtype=np.int64), _matrix(blobs, dimensions))
        loaded.sort()
        self.loads += 1
        with self._lock:
            if watch is not None:
                if watch.generation != self._generation or not loaded.replay(
                    [change for change in watch.changes if change.key == key]
                ):
                    return loaded
                # Rows written and deleted before the snapshot came back in order of commit:
                # in rowid order, deletions and fresh-row checks bisect.
                loaded.sort()
            elif self.version(key) != version or self._generation != generation:
                return loaded  # a commit raced the load: good for this snapshot only
            self._vector_stores[key] = loaded
            self._vector_stores.move_to_end(key)
            self._evict(keep=key)
        return loaded

    def _evict(self, keep: int) -> None:
        total = sum(c.nbytes for c in self._vector_stores.values())
        for key in list(self._vector_stores):
            if total <= self.settings.budget_bytes:
                break
            if key != keep:
                total -= self._vector_stores.pop(key).nbytes

    def apply(self, changes: Sequence[Change]) -> None:
        with self._lock:
            for watch in self._watches:
                watch.changes.extend(changes)
            for change in changes:
                self._versions[change.key] = self.version(change.key) + 1
                found = self._vector_stores.get(change.key)
                if found is None:
                    continue
                if change.dropped:
                    del self._vector_stores[change.key]
                    continue
                # Fresh rows only: a writer that committed before a load's snapshot may
                # reach here after the load was kept, with rows the load read already.
                found.change(change)
            self._evict(keep=-1)

    def loaded(self) -> dict[int, VectorStore]:
        """The vector stores in memory now, by key."""
        with self._lock:
            return dict(self._vector_stores)

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(c.nbytes for c in self._vector_stores.values())

    def forget(self) -> None:
        """Drops every vector store: the database's content was replaced (a restore)."""
        with self._lock:
            self._vector_stores.clear()
            self._versions = {key: value + 1 for key, value in self._versions.items()}
            self._generation += 1


# ----------------------------------------------------------------- one registry per database

_registry_lock = threading.Lock()
_registry: dict[str, Resident] = {}
# Changes written in a connection's open transaction, applied when it commits.
_pending: weakref.WeakKeyDictionary[object, _Pending] = weakref.WeakKeyDictionary()


def for_database(filename: str, settings: ResidentSettings) -> Resident | None:
    """The resident vectors of the database file (shared by every connection to it in this
    process); None when off."""
    if not filename or settings.budget_bytes <= 0:
        return None
    with _registry_lock:
        found = _registry.get(filename)
        if found is None:
            found = _registry[filename] = Resident(settings)
        return found


def existing(filename: str) -> Resident | None:
    """The database's resident vectors if any search made them."""
    with _registry_lock:
        return _registry.get(filename)


def record(conn: object, change: Change) -> None:
    """Notes a change the connection's transaction makes (vector_index's writes)."""
    _pending.setdefault(conn, _Pending()).changes.append(change)


def committed(conn: object, filename: str) -> None:
    """The connection's transaction committed: its changes reach the database's resident
    vector stores (if any are loaded)."""
    pending = _pending.pop(conn, None)
    if pending is None or not pending.changes:
        return
    with _registry_lock:
        resident = _registry.get(filename)
    if resident is not None:
        resident.apply(pending.changes)


def discarded(conn: object) -> None:
    _pending.pop(conn, None)
