"""The coarse index (services/store/vector_index.py): recall against exact search on random
and real embeddings, its background build, and its upkeep through deletes and vacuum.

The published figures at 100k real vectors come from the benchmark (`make bench`, scenario 3);
these tests hold the behaviour at sizes the default run can afford.
"""

from __future__ import annotations

import ast
import asyncio
import sysconfig
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from services.common.vectors import to_bytes
from services.common.vocabulary import BUILDING, COARSE, EXACT
from services.embedder.model import EmbeddingModel
from services.pb import store_pb2 as pb
from services.store import vector_index
from services.store.db import open_database
from services.store.records import AttributeValue, ChunkInput
from services.store.repository import Repository
from services.store.search.filters import Comparison, Filter
from services.store.vector_index import IndexSettings
from tests.store_fixtures import (
    IN_SQLITE,
    MODEL,
    RunningStore,
    check_invariants,
    open_repository,
    running_store,
    table_names,
    unit_vectors,
)

Vectors = npt.NDArray[np.float32]
DIMS = 384


def add_rows(
    repo: Repository,
    vector_store_id: str,
    vectors: Vectors,
    start: int,
    stop: int,
    attributes: dict[str, AttributeValue] | None = None,
) -> None:
    """Rows start..stop-1 as one file "file-<start>", row i with the chunk text "i"."""
    repo.add_chunks(
        vector_store_id,
        f"file-{start}",
        f"rows-{start}.txt",
        attributes or {},
        [ChunkInput(str(row)) for row in range(start, stop)],
        vectors[start:stop],
        MODEL,
    )


def load(repo: Repository, vectors: Vectors, per_file: int = 2000, name: str = "c") -> str:
    """A vector store holding `vectors` in files of `per_file` rows; returns its id."""
    vector_store_id = repo.create_vector_store(name, MODEL, int(vectors.shape[1])).id
    for start in range(0, len(vectors), per_file):
        stop = min(start + per_file, len(vectors))
        add_rows(repo, vector_store_id, vectors, start, stop, {"block": start // per_file})
    return vector_store_id


def build(repo: Repository) -> None:
    while repo.build_indexes():
        pass


def rows(
    repo: Repository,
    vector_store_id: str,
    query: Vectors,
    k: int,
    exact: bool,
    only: Filter | None = None,
) -> list[int]:
    hits = repo.search(vector_store_id, query, k, exact=exact, filter=only)
    return [int(hit.text) for hit in hits]


def recall(repo: Repository, vector_store_id: str, queries: Vectors, k: int) -> float:
    """Mean recall@k of the default search against the exact one."""
    found = [
        len(
            set(rows(repo, vector_store_id, q, k, False))
            & set(rows(repo, vector_store_id, q, k, True))
        )
        for q in queries
    ]
    return sum(found) / (k * len(queries))


def numpy_top(vectors: Vectors, query: Vectors, k: int) -> list[int]:
    scores = vectors @ query
    return [int(i) for i in np.argsort(-scores, kind="stable")[:k]]


def clustered(rng: np.random.Generator, count: int, clusters: int = 50) -> Vectors:
    """Unit vectors around random centres: structured like embeddings, unlike isotropic noise."""
    centres = rng.standard_normal((clusters, DIMS))
    points = centres[rng.integers(0, clusters, count)] + rng.standard_normal((count, DIMS))
    unit: Vectors = (points / np.linalg.norm(points, axis=1, keepdims=True)).astype(np.float32)
    return unit


@pytest.fixture(scope="module")
def random_sets(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Repository, dict[str, tuple[str, Vectors]]]]:
    """20k clustered and 20k isotropic random vectors, each a vector store with its coarse index
    built under the default settings (20k rows is above min_rows), plus 50 held-out queries."""
    rng = np.random.default_rng(7)
    path = tmp_path_factory.mktemp("coarse") / "ragd.db"
    with open_repository(path, index=IndexSettings(resident=IN_SQLITE)) as repo:
        sets = {}
        for name, data in (
            ("clustered", clustered(rng, 20_050)),
            ("isotropic", unit_vectors(rng, 20_050, DIMS)),
        ):
            sets[name] = (load(repo, data[:20_000], name=name), data)
        build(repo)
        yield repo, sets
        check_invariants(path)


def test_exact_search_is_the_numpy_top_k(
    random_sets: tuple[Repository, dict[str, tuple[str, Vectors]]],
) -> None:
    repo, sets = random_sets
    vector_store_id, data = sets["clustered"]
    for query in data[20_000:20_010]:
        assert rows(repo, vector_store_id, query, 10, True) == numpy_top(data[:20_000], query, 10)


def test_coarse_recall_on_clustered_random_vectors(
    random_sets: tuple[Repository, dict[str, tuple[str, Vectors]]],
) -> None:
    repo, sets = random_sets
    vector_store_id, data = sets["clustered"]
    assert repo.get_vector_store(vector_store_id).vector_index == COARSE
    # Measured 0.998.
    assert recall(repo, vector_store_id, data[20_000:], 10) >= 0.98


def test_coarse_hits_carry_exact_scores_even_on_isotropic_noise(
    random_sets: tuple[Repository, dict[str, tuple[str, Vectors]]],
) -> None:
    """Isotropic random vectors are the worst case for sign-bit quantization (all pairs are
    nearly orthogonal, so hamming distance barely ranks them): recall@10 is ~0.70 there, which
    is why the README advises `exact` for non-embedding data. Scores are still exact cosines."""
    repo, sets = random_sets
    vector_store_id, data = sets["isotropic"]
    query = data[20_000]
    hits = repo.search(vector_store_id, query, 10)
    expected = (1.0 + data[[int(hit.text) for hit in hits]] @ query) / 2.0
    np.testing.assert_allclose([hit.score for hit in hits], expected, atol=1e-5)
    assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)
    assert recall(repo, vector_store_id, data[20_000:20_020], 10) >= 0.5


def test_filtered_coarse_search_stays_inside_the_filter_with_high_recall(
    random_sets: tuple[Repository, dict[str, tuple[str, Vectors]]],
) -> None:
    """Filters too broad for the exact path (exact_ids_max lowered to 1,000 here): 50% of the
    rows goes through the post-filter, 10% through pre-filtered partitions (its pool would
    exceed max_pool), and with max_pool 0 both are pre-filtered."""
    repo, sets = random_sets
    vector_store_id, data = sets["clustered"]
    default = repo.index
    try:
        for settings in (
            replace(default, exact_ids_max=1000),
            replace(default, exact_ids_max=1000, max_pool=0),
        ):
            repo.index = settings
            for blocks in ((0, 1, 2, 3, 4), (7,)):
                only = Comparison("block", "in", values=blocks)
                allowed = [row for row in range(20_000) if row // 2000 in blocks]
                found = 0
                for query in data[20_000:20_020]:
                    got = rows(repo, vector_store_id, query, 10, False, only)
                    assert len(got) == 10 and set(got) <= set(allowed)
                    truth = [allowed[i] for i in numpy_top(data[allowed], query, 10)]
                    found += len(set(got) & set(truth))
                assert found / 200 >= 0.95, (settings, blocks, found)
    finally:
        repo.index = default


def stdlib_docstrings(limit: int) -> list[str]:
    """First paragraphs of the standard library's docstrings: real prose on any machine."""
    root = Path(sysconfig.get_paths()["stdlib"])
    seen: set[str] = set()
    for path in sorted(root.glob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                doc = ast.get_docstring(node)
                text = " ".join((doc or "").split("\n\n")[0].split())
                if 40 <= len(text) <= 400 and text not in seen:
                    seen.add(text)
                    if len(seen) == limit:
                        return list(seen)
    return list(seen)


def test_coarse_recall_on_real_embeddings(
    embedding_model: EmbeddingModel,
    tmp_path: Path,
) -> None:
    """~2,400 real MiniLM vectors. The default candidate count would cover a third of so small
    a set, so the candidates are cut to the same few percent of the rows as at 100k."""
    texts = stdlib_docstrings(2500)
    assert len(texts) >= 2000
    vectors = embedding_model.embed(texts, truncate=True).vectors.astype(np.float32)
    data, queries = vectors[:-100], vectors[-100:]
    # Each partition returns k rows: 192 candidates (8% of the rows) for k = 3, 64 (2.6%)
    # for k = 1.
    tight = IndexSettings(
        min_rows=1, min_candidates=1, small_min_candidates=1, oversample=1, resident=IN_SQLITE
    )
    with open_repository(tmp_path / "ragd.db", index=tight) as repo:
        vector_store_id = load(repo, data, per_file=500)
        build(repo)
        assert repo.get_vector_store(vector_store_id).vector_index == COARSE
        # Measured 1.0 and 0.95.
        assert recall(repo, vector_store_id, queries, 3) >= 0.98
        assert recall(repo, vector_store_id, queries, 1) >= 0.9
    check_invariants(tmp_path / "ragd.db")


def test_the_index_is_built_in_steps_while_writes_continue(tmp_path: Path) -> None:
    settings = IndexSettings(min_rows=100, build_batch=30, resident=IN_SQLITE)
    rng = np.random.default_rng(3)
    data = clustered(rng, 400)
    path = tmp_path / "ragd.db"
    with open_repository(path, index=settings) as repo:
        vector_store_id = load(repo, data[:90], per_file=30)
        assert not repo.build_indexes()
        assert repo.get_vector_store(vector_store_id).vector_index == EXACT
        add_rows(repo, vector_store_id, data, 90, 150, {"file": "late"})
        # One step of at most build_batch rows: the index is half built.
        assert repo.build_indexes(budget_seconds=0.0)
        assert repo.get_vector_store(vector_store_id).vector_index == BUILDING
        check_invariants(path)
        # Searches stay exact while the copy is partial, filtered ones included.
        only = Comparison("file", "eq", value="late")
        for query in data[:3]:
            assert rows(repo, vector_store_id, query, 10, False) == numpy_top(data[:150], query, 10)
            assert rows(repo, vector_store_id, query, 5, False, only) == [
                90 + i for i in numpy_top(data[90:150], query, 5)
            ]
        # Writes during the build go to both copies; deleted rows leave both.
        add_rows(repo, vector_store_id, data, 150, 400)
        repo.detach_file(vector_store_id, "file-30")
        check_invariants(path)
        build(repo)
        assert repo.get_vector_store(vector_store_id).vector_index == COARSE
        check_invariants(path)
        alive = [i for i in range(400) if not 30 <= i < 60]
        for query in data[:5]:
            # 400 rows in 64 partitions: the candidates cover them, so the result is exact.
            expected = [alive[i] for i in numpy_top(data[alive], query, 10)]
            assert rows(repo, vector_store_id, query, 10, False) == expected
        repo.delete_vector_store(vector_store_id)
        check_invariants(path)
    assert not {name for name in table_names(path) if name.startswith(("vec_", "vecf_", "vecq_"))}


def test_vacuum_repacks_the_coarse_tables(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    data = clustered(rng, 3000)
    path = tmp_path / "ragd.db"
    with open_repository(path, index=IndexSettings(min_rows=1, resident=IN_SQLITE)) as repo:
        vector_store_id = load(repo, data, per_file=100)
        build(repo)
        # Three files in four go: every chunk of both tables keeps a few live rows.
        for start in range(0, 3000, 100):
            if start % 400:
                repo.detach_file(vector_store_id, f"file-{start}")
        assert repo.vacuum().compacted == 1
        check_invariants(path)
        conn = open_database(path)
        try:
            assert vector_index.repack_coarse(conn, 1) is False  # nothing left to repack
        finally:
            conn.close()
        assert repo.get_vector_store(vector_store_id).vector_index == COARSE
        # Query i is row i of a kept file: it finds itself first.
        for row in (0, 50, 400, 2850):
            assert rows(repo, vector_store_id, data[row], 5, False)[0] == row
        # Vacuum lists the vector stores before compacting each: one deleted meanwhile is skipped.
        repo.delete_vector_store(vector_store_id)
        conn = open_database(path)
        try:
            assert vector_index.repack_coarse(conn, 1) is False
        finally:
            conn.close()


def test_distances_of_chosen_chunks_are_exact_in_either_table(tmp_path: Path) -> None:
    """Hybrid search's evidence for the chunks only the words found: each id's exact cosine
    distance, from vec0 before the coarse index exists and from its float table after;
    unknown ids left out."""
    rng = np.random.default_rng(11)
    data = unit_vectors(rng, 201, 16)
    path = tmp_path / "d.db"
    wanted = [3, 150, 7, 10_000, 3]
    expected = {
        i: pytest.approx(1.0 - float(data[i - 1] @ data[200]), abs=1e-5) for i in wanted[:3]
    }
    with open_repository(path, index=IndexSettings(min_rows=10, resident=IN_SQLITE)) as repo:
        load(repo, data[:200], per_file=50)
        for built in (False, True):
            if built:
                build(repo)
            conn = open_database(path)
            try:
                assert vector_index.kind(conn, 1) == (COARSE if built else EXACT)
                found = vector_index.distances(conn, 1, to_bytes(data[200]), wanted)
            finally:
                conn.close()
            assert dict(found) == expected


def test_small_odd_or_disabled_vector_stores_stay_exact(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    with open_repository(
        tmp_path / "a.db", index=IndexSettings(min_rows=10, resident=IN_SQLITE)
    ) as repo:
        # Sign bits are packed 8 to a byte: a dimension not a multiple of 8 has no coarse table.
        odd = load(repo, unit_vectors(rng, 50, 12), name="odd")
        small = load(repo, unit_vectors(rng, 5, 16), name="small")
        build(repo)
        assert repo.get_vector_store(odd).vector_index == EXACT
        assert repo.get_vector_store(small).vector_index == EXACT
    with open_repository(
        tmp_path / "b.db", index=IndexSettings(coarse=False, min_rows=1, resident=IN_SQLITE)
    ) as repo:
        off = load(repo, unit_vectors(rng, 50, 16), name="off")
        assert not repo.build_indexes()
        assert repo.get_vector_store(off).vector_index == EXACT


def test_the_store_server_builds_indexes_in_the_background(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    data = clustered(rng, 600)

    async def scenario(store: RunningStore) -> None:
        vector_store = await store.stub.CreateVectorStore(
            pb.CreateVectorStoreRequest(name="bg", model=MODEL, dimensions=DIMS)
        )
        assert vector_store.vector_index == EXACT
        await store.stub.AddChunks(
            pb.AddChunksRequest(
                vector_store_id=vector_store.id,
                file_id="file-bg",
                filename="bg.txt",
                chunks=[pb.ChunkInput(text=str(i)) for i in range(600)],
                vectors=to_bytes(data),
                dimensions=DIMS,
                model=MODEL,
            )
        )
        for _ in range(200):
            found = await store.stub.GetVectorStore(pb.GetVectorStoreRequest(id=vector_store.id))
            if found.vector_index == COARSE:
                break
            await asyncio.sleep(0.05)
        assert found.vector_index == COARSE
        for exact in (False, True):
            reply = await store.stub.Search(
                pb.SearchRequest(
                    vector_store_id=vector_store.id,
                    query_vector=to_bytes(data[7]),
                    dimensions=DIMS,
                    k=3,
                    model=MODEL,
                    exact=exact,
                )
            )
            assert reply.hits[0].text == "7"

    async def main() -> None:
        async with running_store(tmp_path / "ragd.db", coarse_min_rows=100, resident_mb=0) as store:
            await scenario(store)

    asyncio.run(main())
    check_invariants(tmp_path / "ragd.db")
