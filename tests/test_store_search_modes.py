"""Search modes in the store: the FTS5 index (migrations 3 and 9), lexical bm25, hybrid fusion."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.common.vectors import to_bytes
from services.pb import store_pb2 as pb
from services.store import engine, migrations, vector_stores
from services.store.db import atomic
from services.store.errors import InvalidArgument
from services.store.records import ChunkInput, SearchHit
from services.store.repository import Repository
from services.store.search import lexical as search_lexical
from services.store.search.filters import Comparison, Filter, matches
from services.store.search.hits import Candidate
from services.store.search.hybrid import (
    FILE_DECAY,
    FILE_SUPPORT,
    MIN_CANDIDATES,
    RRF_K,
    candidate_count,
    fuse,
    reciprocal_rank_fusion,
)
from services.store.search.lexical import MAX_QUERY_TERMS, fts_query
from services.store.vector_index import MAX_K
from tests.filter_strategies import Attributes, attributes_strategy, filter_strategy, pool_orderable
from tests.store_fixtures import (
    MODEL,
    FakeClock,
    check_fts_index,
    check_invariants,
    open_repository,
    running_store,
    unit_vectors,
    upload,
)

DIMS = 8
FIXTURE_V1 = Path(__file__).parent / "data" / "schema_v1.db.fixture"

pytestmark = pytest.mark.repo(checks=[check_invariants, check_fts_index])


def add_file(
    repo: Repository,
    vector_store_id: str,
    texts: list[str],
    vectors: npt.ArrayLike | None = None,
    attributes: Attributes | None = None,
    name: str = "doc.txt",
) -> str:
    """A completed file with these chunk texts (random vectors unless given); its id."""
    file = upload(repo, "\n".join(texts) + name, filename=name)
    if vectors is None:
        vectors = unit_vectors(np.random.default_rng(len(texts)), len(texts), DIMS)
    repo.add_chunks(
        vector_store_id,
        file.id,
        name,
        attributes or {},
        [ChunkInput(text, token_count=len(text.split())) for text in texts],
        vectors,
        MODEL,
    )
    return file.id


def lexical(repo: Repository, vector_store_id: str, text: str, **kwargs: object) -> list[SearchHit]:
    kwargs.setdefault("k", 10)
    return repo.search(vector_store_id, None, mode="lexical", query_text=text, **kwargs)  # type: ignore[arg-type]


def texts(hits: list[SearchHit]) -> list[str]:
    return [hit.text for hit in hits]


# Migration 3


def test_migration_3_indexes_the_chunks_of_an_existing_database(tmp_path: Path) -> None:
    path = tmp_path / "ragd.db"
    shutil.copy(FIXTURE_V1, path)
    with open_repository(path) as repo:
        assert repo.migrate() == len(migrations.MIGRATIONS)
        (vector_store,) = repo.list_vector_stores().items
        hits = lexical(repo, vector_store.id, "chunk", k=20)
        assert len(hits) == vector_store.chunk_count == 12
        only = lexical(repo, vector_store.id, "chunk 3", k=20, filter=Comparison("n", "eq", 1.0))
        assert only[0].text == "file 1 chunk 3"
        assert {hit.file_id for hit in only} == {"file-fixture1"}
    check_fts_index(path)


def test_the_index_follows_inserts_replacements_and_deletes(repo: Repository) -> None:
    vector_store = repo.create_vector_store("notes", MODEL, DIMS)
    kept = add_file(repo, vector_store.id, ["the quokka smiles", "a quiet wombat"], name="a.txt")
    gone = add_file(repo, vector_store.id, ["another quokka", "kangaroo facts"], name="b.txt")
    assert len(lexical(repo, vector_store.id, "quokka")) == 2
    # Adding a file again replaces its chunks: old words leave the index.
    vectors = unit_vectors(np.random.default_rng(0), 1, DIMS)
    repo.add_chunks(vector_store.id, kept, "a.txt", {}, [ChunkInput("platypus", 1)], vectors, MODEL)
    assert [hit.file_id for hit in lexical(repo, vector_store.id, "quokka")] == [gone]
    repo.detach_file(vector_store.id, gone)
    assert lexical(repo, vector_store.id, "quokka kangaroo") == []
    other = repo.create_vector_store("other", MODEL, DIMS)
    add_file(repo, other.id, ["platypus in another store"])
    repo.delete_vector_store(vector_store.id)
    assert texts(lexical(repo, other.id, "platypus")) == ["platypus in another store"]


# Lexical queries are always safe


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("E1234 frobnicator", '"E1234" OR "frobnicator"'),
        ('say "hi"', '"say" OR """hi"""'),
        ("x  X\ty\n", '"x" OR "y"'),
        # Function words go, unless there is nothing else.
        ("how do I decode base64?", '"decode" OR "base64?"'),
        ("to be or not to be", '"to" OR "be" OR "or" OR "not"'),
        ("nul\x00byte", '"nulbyte"'),
        ("  ", None),
    ],
)
def test_fts_query_quotes_every_word(text: str, expected: str | None) -> None:
    assert fts_query(text) == expected


def test_fts_query_keeps_at_most_max_terms_the_longest() -> None:
    words = [f"w{i:02d}" for i in range(MAX_QUERY_TERMS + 10)]
    query = fts_query(" ".join([*words[:5], "hippopotamus", *words[5:]]))
    assert query is not None and query.count(" OR ") == MAX_QUERY_TERMS - 1
    # The long word stays, in its place; of words as long as each other, the first are kept.
    assert query.startswith('"w00" OR "w01" OR "w02" OR "w03" OR "w04" OR "hippopotamus"')
    assert query.endswith('"w14"')


HOSTILE = [
    '"',
    '"unterminated',
    'a"b"c',
    "(",
    "())",
    "NEAR(a b, 2)",
    "NEAR/3",
    "a NEAR b",
    "*",
    "quo*",
    "-quokka",
    "text:quokka",
    "col:",
    "^quokka",
    "+",
    "AND",
    "OR NOT",
    "quokka AND",
    "{text}: quokka",
    "'; DROP TABLE chunks; --",
    "?",
    "\x00",
    "é",
    "\U0001f600 quokka",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_user_text_never_breaks_the_fts_query(repo: Repository, text: str) -> None:
    vector_store = repo.create_vector_store("notes", MODEL, DIMS)
    add_file(repo, vector_store.id, ["the quokka smiles", "AND OR NOT NEAR text"])
    hits = lexical(repo, vector_store.id, text)
    # Words are matched literally, operators included.
    if "quokka" in text.split():
        assert "the quokka smiles" in texts(hits)
    if text in ("AND", "OR NOT"):
        assert texts(hits) == ["AND OR NOT NEAR text"]


# Lexical ranking and scores


def test_lexical_ranks_by_bm25_with_the_best_scoring_one(repo: Repository) -> None:
    vector_store = repo.create_vector_store("notes", MODEL, DIMS)
    add_file(
        repo,
        vector_store.id,
        [
            "error E1234 in module frobnicator",
            "module frobnicator started",
            "error E9999 in module grommet",
            "nothing relevant here",
            "Café au lait: connections configured",
        ],
    )
    hits = lexical(repo, vector_store.id, "E1234 frobnicator")
    assert texts(hits) == ["error E1234 in module frobnicator", "module frobnicator started"]
    assert hits[0].score == 1.0
    assert 0.0 < hits[1].score < 1.0
    # Case, accents and English suffixes are folded: porter with remove_diacritics 2.
    assert texts(lexical(repo, vector_store.id, "CAFE connection configuring")) == [
        "Café au lait: connections configured"
    ]
    # Words are OR-ed: a chunk matching any of them counts.
    assert set(texts(lexical(repo, vector_store.id, "grommet E1234 zebra"))) == {
        "error E9999 in module grommet",
        "error E1234 in module frobnicator",
    }
    threshold = (hits[1].score + 1.0) / 2
    assert texts(
        lexical(repo, vector_store.id, "E1234 frobnicator", score_threshold=threshold)
    ) == ["error E1234 in module frobnicator"]
    assert len(lexical(repo, vector_store.id, "E1234 frobnicator", k=1)) == 1


def test_identifiers_with_punctuation_match_as_phrases(repo: Repository) -> None:
    vector_store = repo.create_vector_store("notes", MODEL, DIMS)
    add_file(
        repo, vector_store.id, ["see ticket OPS-7742 today", "ops team 7742 points", "x_y_z id"]
    )
    assert texts(lexical(repo, vector_store.id, "OPS-7742")) == ["see ticket OPS-7742 today"]
    assert texts(lexical(repo, vector_store.id, "x_y_z")) == ["x_y_z id"]


def test_lexical_searches_one_vector_store_and_touches_it(
    repo: Repository, clock: FakeClock
) -> None:
    mine = repo.create_vector_store("mine", MODEL, DIMS)
    theirs = repo.create_vector_store("theirs", MODEL, DIMS)
    add_file(repo, theirs.id, ["quokka in the other store"])
    # A file still in progress holds no chunks, so it is not searchable yet.
    repo.attach_file(mine.id, upload(repo, "quokka pending").id)
    clock.now += 60
    assert lexical(repo, mine.id, "quokka") == []
    assert repo.get_vector_store(mine.id).last_active_at == clock.now


# Hybrid


def test_rrf_sums_reciprocal_ranks() -> None:
    fused = dict(reciprocal_rank_fusion([["a", "b"], ["b", "c"]]))
    assert fused == {
        "b": pytest.approx(1 / (RRF_K + 2) + 1 / (RRF_K + 1)),
        "a": pytest.approx(1 / (RRF_K + 1)),
        "c": pytest.approx(1 / (RRF_K + 2)),
    }
    # Equal sums: the earlier list's first.
    order = [item for item, _ in reciprocal_rank_fusion([["x", "y", "z"], ["w", "z", "y"]])]
    assert order == ["y", "z", "x", "w"]


@pytest.mark.parametrize(
    ("k", "expected"), [(1, MIN_CANDIDATES), (12, MIN_CANDIDATES), (13, 52), (MAX_K, MAX_K)]
)
def test_candidate_count(k: int, expected: int) -> None:
    assert candidate_count(k) == expected


def keyword_corpus(repo: Repository) -> tuple[str, npt.NDArray[np.float32], str]:
    """A vector store where the query vector points at near-duplicates of the one chunk that
    holds the query's rare identifier; returns the vector store, the query vector, the target."""
    rng = np.random.default_rng(5)
    vector_store = repo.create_vector_store("keywords", MODEL, DIMS)
    query = unit_vectors(rng, 1, DIMS)[0]
    near = query + 0.3 * unit_vectors(rng, 6, DIMS)
    near /= np.linalg.norm(near, axis=1, keepdims=True)
    target_vector = query + 0.6 * unit_vectors(rng, 1, DIMS)
    target_vector /= np.linalg.norm(target_vector, axis=1, keepdims=True)
    for i in range(6):
        decoy = f"error E{5000 + i} in module grommet"
        add_file(repo, vector_store.id, [decoy], near[i : i + 1], {"team": "storage"}, f"{i}.txt")
    target = "error E1234 in module frobnicator"
    add_file(repo, vector_store.id, [target], target_vector, {"team": "compute"}, name="t.txt")
    # Unrelated chunks: the vector candidates span near and far, as in any real store.
    noise = unit_vectors(rng, 20, DIMS)
    add_file(repo, vector_store.id, [f"note {i}" for i in range(20)], noise, {"team": "x"}, "n.txt")
    return vector_store.id, query, target


def test_hybrid_lifts_the_exact_keyword_match_above_vector_neighbours(repo: Repository) -> None:
    vector_store_id, query, target = keyword_corpus(repo)
    vector = texts(repo.search(vector_store_id, query, k=7))
    assert vector.index(target) == 6  # last: pure vector search misses the identifier
    hybrid = repo.search(vector_store_id, query, k=7, mode="hybrid", query_text="frobnicator E1234")
    assert texts(hybrid)[0] == target
    scores = [hit.score for hit in hybrid]
    assert scores == sorted(scores, reverse=True)
    assert all(0.0 < score <= 1.0 for score in scores[:2])
    # The threshold applies to those final scores.
    cut = repo.search(
        vector_store_id,
        query,
        k=7,
        mode="hybrid",
        query_text="frobnicator E1234",
        score_threshold=scores[0] * 0.99,
    )
    assert texts(cut) == [target]


def test_hybrid_scores_are_evidence_not_ranks(repo: Repository) -> None:
    vector_store_id, query, _ = keyword_corpus(repo)
    hybrid = repo.search(vector_store_id, query, k=7, mode="hybrid", query_text="frobnicator E1234")
    # A chunk the words missed keeps the score of its closeness (the decoys, found by the
    # vector list alone): min-max fusion gave the last candidate of each list 0.
    missed = [hit for hit in hybrid if hit.lexical_rank == 0 and hit.vector_rank <= 2]
    assert missed and all(hit.score > 0.2 for hit in missed)


def test_hybrid_hits_carry_their_rank_in_each_list(repo: Repository) -> None:
    vector_store_id, query, target = keyword_corpus(repo)
    vector = texts(repo.search(vector_store_id, query, k=50))
    lexical = texts(
        repo.search(vector_store_id, None, k=50, mode="lexical", query_text="frobnicator E1234")
    )
    hybrid = repo.search(vector_store_id, query, k=7, mode="hybrid", query_text="frobnicator E1234")
    for hit in hybrid:
        assert hit.vector_rank == vector.index(hit.text) + 1
        expected = lexical.index(hit.text) + 1 if hit.text in lexical else 0
        assert hit.lexical_rank == expected
    assert hybrid[0].text == target and hybrid[0].lexical_rank == 1
    # The other modes have one list: no ranks.
    assert {(h.vector_rank, h.lexical_rank) for h in repo.search(vector_store_id, query, k=5)} == {
        (0, 0)
    }


def test_hybrid_runs_its_lexical_half_beside_its_vector_half_where_the_engine_can(
    repo: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite's Tantivy files are searched apart from the connection, so a hybrid search's
    lexical half runs in a worker thread while the caller ranks by vector; PostgreSQL's
    words are searched through the connection, after the vector half, in the caller's."""
    vector_store_id, query, target = keyword_corpus(repo)
    conn = repo._conn()
    index_type = type(engine.of(conn).fulltext.for_database(conn))
    searched_in: list[str] = []
    search = index_type.search

    def recording(self: object, *args: object) -> object:
        searched_in.append(threading.current_thread().name)
        return search(self, *args)

    monkeypatch.setattr(index_type, "search", recording)
    hybrid = repo.search(vector_store_id, query, k=7, mode="hybrid", query_text="frobnicator E1234")
    assert texts(hybrid)[0] == target
    caller = threading.current_thread().name
    if index_type.apart:
        assert len(searched_in) == 1 and searched_in[0].startswith("store-lexical")
    else:
        assert searched_in == [caller]


def test_hybrid_and_lexical_apply_the_filter_to_both_lists(repo: Repository) -> None:
    vector_store_id, query, target = keyword_corpus(repo)
    storage = Comparison("team", "eq", "storage")
    for mode in ("hybrid", "lexical"):
        hits = repo.search(
            vector_store_id, query, k=7, mode=mode, query_text="E1234 error", filter=storage
        )
        assert len(hits) == 6 and target not in texts(hits), mode
        assert hits[0].score == 1.0 if mode == "lexical" else 0.5 < hits[0].score <= 1.0


def test_a_query_without_words_falls_back_to_the_vector_ranking(repo: Repository) -> None:
    vector_store_id, query, _ = keyword_corpus(repo)
    vector = repo.search(vector_store_id, query, k=7)
    hybrid = repo.search(vector_store_id, query, k=7, mode="hybrid", query_text="?!")
    # The vector ranking, a file's later chunks further down (FILE_DECAY).
    near = repo.search(vector_store_id, query, k=candidate_count(7))
    fused = fuse(candidates(near), [], 0.0, 7)
    assert keys(hybrid) == [key for key, _ in fused]
    assert [hit.score for hit in hybrid] == pytest.approx([score for _, score in fused])
    assert hybrid[0] == dataclasses.replace(vector[0], vector_rank=1, score=hybrid[0].score)
    scores = [hit.score for hit in hybrid]
    assert scores == sorted(scores, reverse=True) and scores[1] < scores[0]


def hit(key: int, file_id: str, score: float) -> Candidate:
    return Candidate(key, file_id, score)


def candidates(hits: list[SearchHit]) -> list[Candidate]:
    return [Candidate(int(h.chunk_id.removeprefix("chunk_")), h.file_id, h.score) for h in hits]


def keys(hits: list[SearchHit]) -> list[int]:
    return [int(h.chunk_id.removeprefix("chunk_")) for h in hits]


def test_fusion_weighs_both_lists_evidence() -> None:
    # Vector scores are (1 + cos) / 2: 1 has cos .8, 5 .7, 2 .6, 3 .1, 4 0. Lexical: bm25 over
    # a ceiling of 10 (full evidence at the ceiling here): 3 = 1, 2 = .8, 1 = .2.
    vector = [hit(1, "f1", 0.9), hit(5, "f5", 0.85), hit(2, "f2", 0.8), hit(3, "f3", 0.55)]
    vector.append(hit(4, "f4", 0.5))
    lexical = [hit(3, "f3", 10.0), hit(2, "f2", 8.0), hit(1, "f1", 2.0)]
    fused = fuse(vector, lexical, 10.0, k=5, weight=0.5)
    # Halves: 2 = .3 + .4, 3 = .05 + .5, 1 = .4 + .1, 5 = .35 + 0, 4 = 0.
    assert [key for key, _ in fused] == [2, 3, 1, 5, 4]
    assert [score for _, score in fused] == pytest.approx([0.7, 0.55, 0.5, 0.35, 0.0])
    # A score is the chunk's evidence, whatever the other candidates: 2 alone scores the same.
    alone = fuse([hit(2, "f2", 0.8)], [hit(2, "f2", 8.0)], 10.0, k=1, weight=0.5)
    assert [key for key, _ in alone] == [2] and alone[0][1] == pytest.approx(0.7)


def test_fusion_ranks_by_each_lists_spread_and_scores_by_evidence() -> None:
    # Vector list (scores (1 + cos) / 2): 1 cos .6, 2 .58, 3 .4, 5 .2; chunk 4 only the words
    # found, its exact cos .55. Lexical bm25 over a ceiling of 10: 3 = .9, 4 = .5, 2 = .3.
    vector = [hit(1, "f1", 0.8), hit(2, "f2", 0.79), hit(3, "f3", 0.7), hit(5, "f5", 0.6)]
    vector.append(hit(4, "f4", 0.775))
    lexical = [hit(3, "f3", 9.0), hit(4, "f4", 5.0), hit(2, "f2", 3.0)]
    fused = fuse(vector, lexical, 10.0, k=5, weight=0.5, listed={1, 2, 3, 5})
    # Spreads (best 1, last 0 of each list; 4 has no place in the vector list): 3 = .25 + .5,
    # 1 = .5, 2 = .475 + 0, 4 = 0 + .17, 5 = 0. By evidence 4 (.275 + .25) would come second.
    assert [key for key, _ in fused] == [3, 1, 2, 4, 5]
    # Scores are evidence (3 = .2 + .45, 1 = .3), never above the one ranked before.
    assert [score for _, score in fused] == pytest.approx([0.65, 0.3, 0.3, 0.3, 0.1])
    # Spreading every candidate's cosine instead (4's .55 near the top) would lift 4.
    assert [key for key, _ in fuse(vector, lexical, 10.0, k=5, weight=0.5)][:2] == [3, 4]


def test_fusion_lets_other_files_in_before_a_files_next_chunk() -> None:
    # Three chunks of one file lead the vector list, a second file's chunk comes next.
    vector = [
        hit(1, "fa", 0.90),
        hit(2, "fa", 0.89),
        hit(3, "fa", 0.88),
        hit(4, "fb", 0.87),
        hit(5, "fz", 0.50),
    ]
    assert [key for key, _ in fuse(vector, [], 0.0, k=5)] == [1, 4, 2, 3, 5]
    # A file far ahead of the rest keeps its next chunk ahead of them.
    far = [hit(1, "fa", 0.9), hit(2, "fa", 0.9), hit(4, "fb", 0.55), hit(5, "fz", 0.5)]
    assert [key for key, _ in fuse(far, [], 0.0, k=4)][:2] == [1, 2]
    assert FILE_DECAY < 1


def test_fusion_prefers_a_chunk_whose_file_matches_elsewhere_too() -> None:
    # Own scores without words (the cosines): 1 = 1, 2 = .9, 3 = .6, 4 = 0. File "rich" also
    # holds 3, so 2 gains .3 x .6 and passes 1, which is alone in its file.
    vector = [hit(1, "lone", 1.0), hit(2, "rich", 0.95), hit(3, "rich", 0.8), hit(4, "z", 0.5)]
    assert [key for key, _ in fuse(vector, [], 0.0, k=4)] == [2, 1, 3, 4]
    assert FILE_SUPPORT > 0


# Arguments


@pytest.mark.parametrize(
    ("mode", "query", "text", "k", "message"),
    [
        ("semantic", np.ones(DIMS), "x", 1, "mode must be one of vector, lexical, hybrid"),
        ("lexical", None, "", 1, "need a non-empty query_text"),
        ("lexical", None, " \n", 1, "need a non-empty query_text"),
        ("hybrid", np.ones(DIMS), "", 1, "need a non-empty query_text"),
        ("hybrid", None, "x", 1, "hybrid search needs a query vector"),
        ("vector", None, "x", 1, "vector search needs a query vector"),
        ("lexical", None, "x", 0, "k must be"),
        ("hybrid", np.ones(DIMS), "x", MAX_K + 1, "k must be"),
    ],
)
def test_bad_mode_arguments_are_invalid(
    repo: Repository,
    mode: str,
    query: npt.NDArray[np.float64] | None,
    text: str,
    k: int,
    message: str,
) -> None:
    vector_store = repo.create_vector_store("notes", MODEL, DIMS)
    with pytest.raises(InvalidArgument, match=message):
        repo.search(vector_store.id, query, k=k, mode=mode, query_text=text)


@pytest.mark.parametrize("threshold", [-0.1, 1.5, float("nan")])
@pytest.mark.parametrize("mode", ["lexical", "hybrid"])
def test_bad_thresholds_are_invalid(repo: Repository, mode: str, threshold: float) -> None:
    vector_store = repo.create_vector_store("notes", MODEL, DIMS)
    with pytest.raises(InvalidArgument, match="score_threshold"):
        repo.search(
            vector_store.id,
            np.ones(DIMS),
            k=1,
            mode=mode,
            query_text="x",
            score_threshold=threshold,
        )


# Property: filtered lexical and hybrid results are exact

WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf")
FILES = 30


@dataclass
class Corpus:
    repo: Repository
    vector_store_id: str
    file_ids: list[str]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Corpus]:
    rng = np.random.default_rng(7)
    path = tmp_path_factory.mktemp("modes") / "ragd.db"
    with open_repository(path) as repo:
        vector_store_id = repo.create_vector_store("modes", MODEL, DIMS).id
        file_ids = []
        for index in range(FILES):
            chunks = [
                " ".join(rng.choice(WORDS, size=int(rng.integers(1, 8))))
                for _ in range(int(rng.integers(1, 6)))
            ]
            vectors = unit_vectors(rng, len(chunks), DIMS)
            file_ids.append(add_file(repo, vector_store_id, chunks, vectors, name=f"{index}.txt"))
        yield Corpus(repo, vector_store_id, file_ids)
        check_invariants(path)
        check_fts_index(path)


def restricted(hits: list[SearchHit], keep: set[str]) -> list[str]:
    return [hit.chunk_id for hit in hits if hit.file_id in keep]


@settings(max_examples=40, deadline=None)
@given(
    node=filter_strategy(pool_orderable),
    file_attributes=st.lists(
        attributes_strategy(pool_orderable),
        min_size=FILES,
        max_size=FILES,
    ),
    words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
    seed=st.integers(0, 2**32 - 1),
    k=st.integers(1, 60),
)
def test_filtered_lexical_and_hybrid_are_exact(
    corpus: Corpus,
    node: Filter,
    file_attributes: list[Attributes],
    words: list[str],
    seed: int,
    k: int,
) -> None:
    repo, vector_store_id = corpus.repo, corpus.vector_store_id
    for file_id, attributes in zip(corpus.file_ids, file_attributes, strict=True):
        repo.update_vector_store_file(vector_store_id, file_id, attributes)
    keep = {
        file_id
        for file_id, attributes in zip(corpus.file_ids, file_attributes, strict=True)
        if matches(node, attributes)
    }
    text = " ".join(words)
    query = unit_vectors(np.random.default_rng(seed), 1, DIMS)[0]
    # bm25 and distances do not depend on the filter: the filtered ranking must be the
    # unfiltered one restricted to the matching files, cut at k after the restriction.
    every_lexical = lexical(repo, vector_store_id, text, k=MAX_K)
    every_vector = repo.search(vector_store_id, query, k=MAX_K)
    lexical_hits = lexical(repo, vector_store_id, text, k=k, filter=node)
    assert [hit.chunk_id for hit in lexical_hits] == restricted(every_lexical, keep)[:k]
    n = candidate_count(k)
    # The lexical candidates' bm25 and the query's ceiling, unfiltered; every chunk's exact
    # vector score (every_vector holds them all).
    conn = repo._conn()
    with atomic(conn, write=False):
        store_key, _ = vector_stores.lookup(conn, vector_store_id)
        bm25, ceiling = search_lexical.ranked(conn, store_key, text=text, k=MAX_K, condition=None)
    file_of = {int(h.chunk_id.removeprefix("chunk_")): h.file_id for h in every_vector}
    score_of = {int(h.chunk_id.removeprefix("chunk_")): h.score for h in every_vector}
    near = [chunk for chunk in score_of if file_of[chunk] in keep][:n]
    found = [(chunk, score) for chunk, score in bm25 if file_of[chunk] in keep][:n]
    fused = fuse(
        [Candidate(c, file_of[c], score_of[c]) for c in dict.fromkeys([*near, *dict(found)])],
        [Candidate(c, file_of[c], score) for c, score in found],
        ceiling,
        k,
        listed=set(near),
    )
    hybrid = repo.search(vector_store_id, query, k=k, mode="hybrid", query_text=text, filter=node)
    assert keys(hybrid) == [key for key, _ in fused]
    # Cosines computed by sqlite-vec in float32, from the KNN or for one chunk: equal to ~1e-7.
    assert [hit.score for hit in hybrid] == pytest.approx([s for _, s in fused], abs=1e-6)
    for hits in (lexical_hits, hybrid):
        assert all(hit.file_id in keep for hit in hits)
    if lexical_hits:
        assert lexical_hits[0].score == 1.0


# Over gRPC


def test_search_modes_over_grpc(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_store(tmp_path / "ragd.db") as store:
            vector_store = await store.stub.CreateVectorStore(
                pb.CreateVectorStoreRequest(name="n", model=MODEL, dimensions=DIMS)
            )
            with Repository(tmp_path / "ragd.db") as repo:
                add_file(repo, vector_store.id, ["the quokka smiles", "a quiet wombat"])
            vector = to_bytes(np.ones(DIMS, dtype=np.float32) / np.sqrt(DIMS))
            lexical_reply = await store.stub.Search(
                pb.SearchRequest(
                    vector_store_id=vector_store.id, k=5, mode="lexical", query_text="quokka"
                )
            )
            assert lexical_reply.mode == "lexical"
            assert [hit.text for hit in lexical_reply.hits] == ["the quokka smiles"]
            assert lexical_reply.hits[0].score == 1.0
            for mode, expected in (("", "vector"), ("vector", "vector"), ("hybrid", "hybrid")):
                request = pb.SearchRequest(
                    vector_store_id=vector_store.id,
                    k=5,
                    mode=mode,
                    query_text="wombat",
                    query_vector=vector,
                    dimensions=DIMS,
                    model=MODEL,
                )
                reply = await store.stub.Search(request)
                assert reply.mode == expected and len(reply.hits) == 2
            for bad in (
                pb.SearchRequest(
                    vector_store_id=vector_store.id, k=5, mode="fuzzy", query_text="x"
                ),
                pb.SearchRequest(vector_store_id=vector_store.id, k=5, mode="lexical"),
                pb.SearchRequest(
                    vector_store_id=vector_store.id, k=5, mode="hybrid", query_text="x"
                ),
            ):
                with pytest.raises(grpc.aio.AioRpcError) as error:
                    await store.stub.Search(bad)
                assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await store.stub.Search(
                    pb.SearchRequest(vector_store_id="vs_nope", k=5, mode="lexical", query_text="x")
                )
            assert error.value.code() == grpc.StatusCode.NOT_FOUND

    asyncio.run(scenario())


def test_a_long_query_keeps_its_longest_words(repo: Repository) -> None:
    vector_store = repo.create_vector_store("long", MODEL, DIMS)
    common = [f"w{i}" for i in range(MAX_QUERY_TERMS)]
    texts = [" ".join(common) + f" filler{i}" for i in range(5)] + [" ".join(common) + " zebrafish"]
    add_file(repo, vector_store.id, texts)
    hits = lexical(repo, vector_store.id, " ".join([*common, "zebrafish"]), k=1)
    assert hits[0].text.endswith("zebrafish")
