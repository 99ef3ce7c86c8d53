"""A chunk longer than the model's window, stored as several windows' vectors and searched as
one chunk (issue 30, item 8; services/store/windows.py), on each engine."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pytest

from services.store import windows
from services.store.errors import InvalidArgument
from services.store.records import ChunkInput, EmbeddingModel, VectorStoreFile
from services.store.repository import Repository
from services.store.search.filters import Comparison
from tests.store_fixtures import DIMS, MODEL, check_invariants, claim_one, unit_vectors, upload

pytestmark = pytest.mark.repo(checks=[check_invariants])

Vectors = npt.NDArray[np.float32]


def complete(
    repo: Repository,
    vs_id: str,
    name: str,
    counts: Sequence[int],
    vectors: Vectors,
    attributes: dict[str, str | float | bool] | None = None,
) -> VectorStoreFile:
    """A file of len(counts) chunks whose chunk i has counts[i] windows, in `vectors`."""
    file = upload(repo, name, filename=f"{name}.txt")
    repo.attach_file(vs_id, file.id, attributes=attributes)
    job = claim_one(repo)
    chunks = [ChunkInput(f"{name} chunk {i}", token_count=300 * n) for i, n in enumerate(counts)]
    return repo.complete_job(job.job_id, "w1", chunks, vectors, MODEL, counts)


def window_rows(repo: Repository) -> int:
    return int(repo._conn().execute("SELECT count(*) FROM chunk_windows").get)


def test_a_chunk_is_found_by_any_window_and_returned_once(repo: Repository, vs_id: str) -> None:
    vectors = unit_vectors(np.random.default_rng(3), 6, DIMS)
    # long.txt: chunk 0 has three windows (rows 0-2), chunk 1 one (row 3); short.txt one chunk.
    long = complete(repo, vs_id, "long", [3, 1], vectors[:4], {"kind": "long"})
    complete(repo, vs_id, "short", [1], vectors[4:5], {"kind": "short"})
    assert (long.chunk_count, window_rows(repo)) == (2, 2)
    assert repo.get_vector_store(vs_id).chunk_count == 3
    for exact in (False, True):
        # The query is the last window of chunk 0: the chunk comes first, once, with that
        # window's score (1.0), not its first window's.
        hits = repo.search(vs_id, vectors[2], k=10, exact=exact)
        assert (hits[0].file_id, hits[0].chunk_index) == (long.file_id, 0)
        assert len(hits) == 3 and len({hit.chunk_id for hit in hits}) == 3
        assert hits[0].score == pytest.approx(1.0, abs=1e-5)
        assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)
    # k = 1 and a threshold between the first window's score and the last's.
    first_score = 1 - (1 - float(vectors[0] @ vectors[2])) / 2
    [top] = repo.search(vs_id, vectors[2], k=1, score_threshold=max(first_score, 0.9))
    assert (top.file_id, top.chunk_index) == (long.file_id, 0)
    # Filters keep a window's chunk out with its file, or in.
    short = Comparison("kind", "eq", value="short")
    only_short = repo.search(vs_id, vectors[2], k=10, filter=short)
    assert only_short and long.file_id not in {hit.file_id for hit in only_short}
    only_long = repo.search(vs_id, vectors[2], k=10, filter=Comparison("kind", "eq", value="long"))
    assert (only_long[0].chunk_index, round(only_long[0].score, 4)) == (0, 1.0)
    # Hybrid: the vector half scores the chunk by its best window too.
    hybrid = repo.search(vs_id, vectors[2], k=10, mode="hybrid", query_text="short")
    assert len({hit.chunk_id for hit in hybrid}) == len(hybrid)
    [mine] = [hit for hit in hybrid if (hit.file_id, hit.chunk_index) == (long.file_id, 0)]
    assert mine.vector_rank == 1


def test_search_is_exact_over_the_best_window(repo: Repository, vs_id: str) -> None:
    """Against a brute force over every window, folded by chunk."""
    rng = np.random.default_rng(7)
    counts = [int(n) for n in rng.integers(1, 4, size=40)]
    vectors = unit_vectors(rng, sum(counts), DIMS)
    done = complete(repo, vs_id, "many", counts, vectors)
    owner = np.repeat(np.arange(len(counts)), counts)
    for query in unit_vectors(rng, 5, DIMS):
        best = np.full(len(counts), -2.0)
        np.maximum.at(best, owner, vectors @ query)
        for k in (1, 5, 20):
            hits = repo.search(vs_id, query, k=k)
            assert all(hit.file_id == done.file_id for hit in hits)
            expected = sorted(range(len(counts)), key=lambda i: (-best[i], i))[:k]
            assert [hit.chunk_index for hit in hits] == expected
            assert [hit.score for hit in hits] == pytest.approx(
                [(1 + best[i]) / 2 for i in expected], abs=1e-5
            )


def test_windows_go_with_their_chunks(repo: Repository, vs_id: str) -> None:
    vectors = unit_vectors(np.random.default_rng(5), 9, DIMS)
    a = complete(repo, vs_id, "a", [2, 2], vectors[:4])
    b = complete(repo, vs_id, "b", [3], vectors[4:7])
    assert window_rows(repo) == 4
    repo.detach_file(vs_id, a.file_id)
    assert window_rows(repo) == 2
    repo.delete_file(b.file_id)
    assert window_rows(repo) == 0
    complete(repo, vs_id, "c", [2], vectors[7:9])
    assert window_rows(repo) == 1
    repo.delete_vector_store(vs_id)
    assert window_rows(repo) == 0


def test_vectors_filled_in_after_a_lexical_pass_replace_the_windows(
    repo: Repository, vs_id: str
) -> None:
    file = upload(repo, "text first")
    repo.attach_file(vs_id, file.id)
    [job] = repo.claim_jobs("w1", max_jobs=1, lease_seconds=60, lexical=True)
    repo.complete_job(job.job_id, "w1", [ChunkInput("text first", 900)], None, "")
    assert window_rows(repo) == 0
    served = [EmbeddingModel(MODEL, DIMS)]
    [job] = repo.claim_jobs("w2", max_jobs=1, lease_seconds=60, models=served, lexical=True)
    vectors = unit_vectors(np.random.default_rng(2), 4, DIMS)
    done = repo.complete_job(job.job_id, "w2", [ChunkInput("text first", 900)], vectors, MODEL, [4])
    assert (done.status, done.vectors_pending, window_rows(repo)) == ("completed", False, 3)
    assert repo.search(vs_id, vectors[3], k=3)[0].score == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize(
    ("counts", "rows", "message"),
    [
        ([2], 3, "add up to 2 vectors"),
        ([1, 1], 1, "2 entries for 1 chunks"),
        ([0], 0, "at least one window"),
        ([], 2, "one vector per chunk"),
    ],
)
def test_window_counts_must_match_the_vectors(
    repo: Repository, vs_id: str, counts: list[int], rows: int, message: str
) -> None:
    file = upload(repo, "x")
    repo.attach_file(vs_id, file.id)
    job = claim_one(repo)
    vectors = unit_vectors(np.random.default_rng(1), max(rows, 1), DIMS)[:rows]
    with pytest.raises(InvalidArgument, match=message):
        repo.complete_job(job.job_id, "w1", [ChunkInput("x", 1)], vectors, MODEL, counts)
    assert window_rows(repo) == 0


def test_fold_keeps_each_chunk_once_at_its_best_window() -> None:
    asked: list[list[int]] = []

    def first(ids: Sequence[int]) -> list[tuple[int, float]]:
        asked.append(list(ids))
        return [(chunk, 0.9) for chunk in ids]

    # Chunk 1's window beats its window 0; chunk 7 is found only by a window, and its window
    # 0 is asked for; chunk 8's window is beyond k.
    found = [(1, 0.5), (2, 0.6)]
    extra = [(1, 0.1), (7, 0.3), (8, 0.95)]
    assert windows.fold(found, extra, 3, first) == [(1, 0.1), (7, 0.3), (2, 0.6)]
    assert asked == [[7, 8]]
    assert windows.fold(found, [], 2, first) == found
    assert windows.fold([], [(4, 0.2)], 5, lambda ids: []) == [(4, 0.2)]
