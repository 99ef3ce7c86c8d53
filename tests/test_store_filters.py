"""Attribute filters: validation, the SQL they compile to, and filtered search being exact."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import apsw
import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from services.store.errors import InvalidArgument
from services.store.ingest import attributes_json
from services.store.postgres.connection import PostgresConnection
from services.store.records import AttributeValue, ChunkInput
from services.store.repository import Repository
from services.store.search.filters import (
    MAX_DEPTH,
    Comparison,
    Compound,
    Filter,
    compile_filter,
    matches,
)
from services.store.sql import POSTGRES
from services.store.vector_index import IndexSettings
from tests.engines import Database
from tests.filter_strategies import (
    Attributes,
    any_orderable,
    attributes_strategy,
    filter_strategy,
    pool_orderable,
)
from tests.store_fixtures import MODEL, check_invariants, open_repository, unit_vectors, upload


def eq(key: str, value: AttributeValue) -> Comparison:
    return Comparison(key, "eq", value=value)


# The reference semantics


ATTRIBUTES: Attributes = {"s": "b", "n": 2, "f": 2.5, "t": True, "e": ""}


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        (eq("s", "b"), True),
        (eq("n", 2.0), True),  # ints and floats are one number type
        (eq("t", True), True),
        (eq("t", 1), False),  # a number never equals a boolean
        (eq("n", "2"), False),  # nor a string
        (eq("e", ""), True),
        (eq("missing", "b"), False),
        (Comparison("missing", "ne", value="b"), True),
        (Comparison("s", "ne", value=2), True),
        (Comparison("n", "gt", value=1.5), True),
        (Comparison("n", "gte", value=2), True),
        (Comparison("f", "lt", value=2.5), False),
        (Comparison("s", "gt", value="a"), True),
        (Comparison("s", "lt", value="ab"), False),
        (Comparison("s", "gt", value=1), False),  # ordering never crosses types
        (Comparison("t", "gt", value=0), False),
        (Comparison("missing", "lt", value=1), False),
        (Comparison("n", "in", values=("x", 2)), True),
        (Comparison("n", "in", values=("2", True)), False),
        (Comparison("missing", "nin", values=("x",)), True),
        (Comparison("s", "nin", values=("a", "b")), False),
        (Compound("and", (eq("s", "b"), eq("n", 3))), False),
        (Compound("or", (eq("s", "b"), eq("n", 3))), True),
        (Compound("and", (Compound("or", (eq("x", 1), eq("t", True))),)), True),
    ],
)
def test_matches_reference(node: Filter, expected: bool) -> None:
    assert matches(node, ATTRIBUTES) is expected
    assert evaluate_sql(node, ATTRIBUTES) is expected


def nested(depth: int) -> Filter:
    node: Filter = eq("a", 1)
    for _ in range(depth):
        node = Compound("and", (node,))
    return node


@pytest.mark.parametrize(
    ("node", "message"),
    [
        (Compound("and", ()), "at least one nested filter"),
        (Compound("xor", (eq("a", 1),)), "'and' or 'or'"),
        (Comparison("a", "like", value="x"), "filter type must be one of"),
        (Comparison("", "eq", value="x"), "non-empty attribute name"),
        (Comparison("a", "eq"), "needs a value"),
        (Comparison("a", "gt", value=True), "not a boolean"),
        (Comparison("a", "in", values=()), "non-empty list"),
        (Comparison("a", "nin", values=(1, float("nan"))), "finite number"),
        (Comparison("a", "eq", value=float("inf")), "finite number"),
        (Comparison("a", "in", values=tuple(range(1001))), "at most 1000"),
        (nested(MAX_DEPTH + 1), f"deeper than {MAX_DEPTH}"),
    ],
)
def test_malformed_filters_are_invalid(node: Filter, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        compile_filter(node)


def test_the_deepest_allowed_filter_compiles() -> None:
    _, params = compile_filter(nested(MAX_DEPTH))
    assert params == ["a", 1]
    assert evaluate_sql(nested(MAX_DEPTH), {"a": 1}) is True


def test_keys_and_values_are_parameters_never_sql() -> None:
    hostile = "x') OR 1=1 --"
    node = Compound("or", (eq(hostile, hostile), Comparison("$.a", "in", values=(hostile, 1))))
    sql, params = compile_filter(node)
    assert hostile not in sql and "$.a" not in sql
    assert params == [hostile, hostile, "$.a", hostile, 1]
    assert evaluate_sql(node, {"other": "x"}) is False
    assert evaluate_sql(node, {hostile: hostile}) is True
    assert evaluate_sql(node, {"$.a": 1}) is True


# Property: the SQL agrees with the reference on any attributes and filter.

_SQL_CONNECTION = apsw.Connection(":memory:")


def evaluate_sql(node: Filter, attributes: Attributes) -> bool:
    sql, params = compile_filter(node)
    # The filter's placeholders come first in the statement's text, the attributes' last.
    row = _SQL_CONNECTION.execute(
        f"SELECT {sql} FROM (SELECT ? AS attributes) AS cf", (*params, attributes_json(attributes))
    ).fetchone()
    assert row is not None
    return bool(row[0])


@settings(max_examples=200, deadline=None)
@given(node=filter_strategy(any_orderable), attributes=attributes_strategy(any_orderable))
def test_compiled_sql_agrees_with_the_reference(node: Filter, attributes: Attributes) -> None:
    assert evaluate_sql(node, attributes) is matches(node, attributes)


@pytest.mark.engines("postgres")
@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(node=filter_strategy(any_orderable), attributes=attributes_strategy(any_orderable))
def test_compiled_sql_agrees_with_the_reference_on_postgres(
    database: Database, node: Filter, attributes: Attributes
) -> None:
    assert database.url is not None
    conn = PostgresConnection.connect(database.url)
    try:
        sql, params = compile_filter(node, dialect=POSTGRES)
        # PostgreSQL's text holds no NUL character: such a value is refused (the test below).
        assume(not any(isinstance(value, str) and chr(0) in value for value in params))
        assume("\\u0000" not in attributes_json(attributes))
        row = conn.execute(
            f"SELECT {sql} FROM (SELECT ? AS attributes) AS cf",
            (*params, attributes_json(attributes)),
        ).fetchone()
    finally:
        conn.close()
    assert row is not None and bool(row[0]) is matches(node, attributes)


@pytest.mark.engines("postgres")
def test_a_nul_character_is_refused_on_postgres(database: Database) -> None:
    assert database.url is not None
    conn = PostgresConnection.connect(database.url)
    try:
        with pytest.raises(InvalidArgument, match="PostgreSQL cannot store"):
            conn.execute("SELECT ?::text", ("a\x00b",))
    finally:
        conn.close()


# Property: filtered search is the exact top-k among the matching chunks.

DIMS = 8
FILES = 40


@dataclass
class Corpus:
    repo: Repository
    vector_store_id: str
    file_ids: list[str]
    # Per chunk: its public id, its file's index and its vector.
    chunk_ids: list[str]
    chunk_files: npt.NDArray[np.int64]
    vectors: npt.NDArray[np.float32]


# Exact search only; the coarse index through its post-filter (with the exact fallbacks); the
# coarse index pre-filtering every partition. The corpus is small enough that the candidates
# cover it, so each path must give the exact top-k.
INDEXES = {
    "exact": IndexSettings(coarse=False),
    # slack = PARTITIONS: each partition returns C rows, more than it holds.
    "coarse-postfilter": IndexSettings(
        min_rows=1,
        min_candidates=10,
        small_min_candidates=10,
        oversample=1,
        slack=64.0,
        exact_ids_max=0,
    ),
    "coarse-prefilter": IndexSettings(min_rows=1, max_pool=0, exact_ids_max=0),
}


@pytest.fixture(scope="module", params=list(INDEXES))
def corpus(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Corpus]:
    rng = np.random.default_rng(11)
    path = tmp_path_factory.mktemp("filters") / "ragd.db"
    index_settings: IndexSettings = INDEXES[request.param]
    with open_repository(path, index=index_settings) as repo:
        vector_store_id = repo.create_vector_store("filters", MODEL, DIMS).id
        file_ids = [upload(repo, f"doc {i}").id for i in range(FILES)]
        for file_id in file_ids:
            repo.attach_file(vector_store_id, file_id)
        chunk_ids: list[str] = []
        chunk_files: list[int] = []
        blocks = []
        for index, job in enumerate(repo.claim_jobs("w1", max_jobs=FILES, lease_seconds=600)):
            count = int(rng.integers(1, 14))
            block = unit_vectors(rng, count, DIMS)
            chunks = [f"{job.file_id} {i}" for i in range(count)]
            repo.complete_job(job.job_id, "w1", [ChunkInput(text) for text in chunks], block, MODEL)
            _, stored = repo.get_vector_store_file_chunks(vector_store_id, job.file_id)
            assert job.file_id == file_ids[index]
            chunk_ids += [chunk.chunk_id for chunk in stored]
            chunk_files += [index] * count
            blocks.append(block)
        # Files still in progress hold no chunks, whatever their attributes.
        for i in range(2):
            repo.attach_file(vector_store_id, upload(repo, f"pending {i}").id, {"a": "x"})
        while repo.build_indexes():
            pass
        expected = "coarse" if index_settings.coarse else "exact"
        assert repo.get_vector_store(vector_store_id).vector_index == expected
        yield Corpus(
            repo,
            vector_store_id,
            file_ids,
            chunk_ids,
            np.array(chunk_files),
            np.concatenate(blocks),
        )
        check_invariants(path)


@settings(max_examples=60, deadline=None)
@given(
    node=filter_strategy(pool_orderable),
    file_attributes=st.lists(attributes_strategy(pool_orderable), min_size=FILES, max_size=FILES),
    seed=st.integers(0, 2**32 - 1),
    k=st.integers(1, 400),
)
def test_filtered_search_is_the_exact_top_k_of_the_matches(
    corpus: Corpus, node: Filter, file_attributes: list[Attributes], seed: int, k: int
) -> None:
    repo = corpus.repo
    for file_id, attributes in zip(corpus.file_ids, file_attributes, strict=True):
        repo.update_vector_store_file(corpus.vector_store_id, file_id, attributes)
    query = unit_vectors(np.random.default_rng(seed), 1, DIMS)[0]
    hits = repo.search(corpus.vector_store_id, query, k=k, filter=node)

    matching_files = [matches(node, attributes) for attributes in file_attributes]
    candidates = np.flatnonzero(np.array(matching_files)[corpus.chunk_files])
    scores = (1.0 + corpus.vectors[candidates].astype(np.float64) @ query) / 2.0
    ranked = candidates[np.argsort(-scores, kind="stable")]
    expected_scores = np.sort(scores)[::-1][:k]
    score_of = dict(zip(candidates.tolist(), scores.tolist(), strict=True))
    index_of = {chunk_id: i for i, chunk_id in enumerate(corpus.chunk_ids)}

    assert len(hits) == min(k, len(candidates))
    got = [index_of[hit.chunk_id] for hit in hits]
    assert len(set(got)) == len(got)
    for hit, chunk in zip(hits, got, strict=True):
        assert chunk in score_of, f"{hit.chunk_id} does not match the filter"
        assert hit.attributes == file_attributes[corpus.chunk_files[chunk]]
        assert hit.score == pytest.approx(score_of[chunk], abs=1e-5)
    # Rank by rank the scores are the best ones: the result is the top-k up to exact ties.
    np.testing.assert_allclose([hit.score for hit in hits], expected_scores, atol=1e-5)
    gaps = np.diff(np.sort(scores)[::-1][: k + 1])
    if gaps.size == 0 or np.abs(gaps).min() > 1e-5:
        assert got == ranked[:k].tolist()
