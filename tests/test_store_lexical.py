"""Lexical-only operation in the store: files indexed by text while their model's embedders are
away (vectors pending), then filled in by the same durable job."""

from __future__ import annotations

import numpy as np
import pytest

from services.store.errors import LeaseLost
from services.store.records import ChunkInput, EmbeddingModel
from services.store.repository import Repository
from tests.store_fixtures import DIMS, MODEL, check_invariants, unit_vectors, upload

LEASE = 60
SERVED = [EmbeddingModel(MODEL, DIMS)]

pytestmark = pytest.mark.repo(checks=[check_invariants])


def attach(repo: Repository, vs_id: str, text: str) -> str:
    file = upload(repo, text)
    repo.attach_file(vs_id, file.id)
    return file.id


def lexical_pass(repo: Repository, worker: str = "w1") -> str:
    """Claims one job as a worker none of whose embedders answers and indexes it by text."""
    [job] = repo.claim_jobs(worker, max_jobs=1, lease_seconds=LEASE, lexical=True)
    assert job.lexical
    chunks = [ChunkInput(job.content.decode(), token_count=5)]
    record = repo.complete_job(job.job_id, worker, chunks, None, "")
    assert (record.status, record.vectors_pending, record.chunk_count) == ("completed", True, 1)
    return job.file_id


def test_a_file_is_searchable_by_text_then_gets_its_vectors(repo: Repository, vs_id: str) -> None:
    file_id = attach(repo, vs_id, "the lighthouse keeper logs passing ships")
    # A worker whose embedders answer would take the job for a full pass; one that knows the
    # model is away gets a lexical pass.
    assert lexical_pass(repo) == file_id
    vector_store = repo.get_vector_store(vs_id)
    assert vector_store.file_counts.completed == 1 and vector_store.file_counts.vectors_pending == 1
    assert vector_store.chunk_count == 1
    hits = repo.search(vs_id, None, k=5, mode="lexical", query_text="lighthouse")
    assert [hit.file_id for hit in hits] == [file_id]
    assert repo.search(vs_id, unit_vectors(np.random.default_rng(0), 1, DIMS)[0], k=5) == []
    # While no embedder answers, the job is not handed out again: there is nothing to do.
    assert repo.claim_jobs("w1", max_jobs=5, lease_seconds=LEASE, lexical=True) == []
    waiting = repo.claim_jobs("w1", 5, LEASE, models=SERVED, waiting=[MODEL], lexical=True)
    assert waiting == []

    # The model answers again: the same job fills the vectors in, replacing the chunks.
    [job] = repo.claim_jobs("w2", max_jobs=5, lease_seconds=LEASE, models=SERVED, lexical=True)
    assert (job.file_id, job.lexical) == (file_id, False)
    chunks = [ChunkInput("the lighthouse keeper", 4), ChunkInput("logs passing ships", 4)]
    vectors = unit_vectors(np.random.default_rng(1), 2, DIMS)
    record = repo.complete_job(job.job_id, "w2", chunks, vectors, MODEL)
    assert (record.status, record.vectors_pending, record.chunk_count) == ("completed", False, 2)
    vector_store = repo.get_vector_store(vs_id)
    assert vector_store.file_counts.vectors_pending == 0 and vector_store.chunk_count == 2
    found = repo.search(vs_id, vectors[1], k=5)
    assert found[0].text == "logs passing ships"
    assert repo.claim_jobs("w1", max_jobs=5, lease_seconds=LEASE, models=SERVED) == []


def test_only_files_not_yet_searchable_get_a_lexical_pass(repo: Repository, vs_id: str) -> None:
    lexical_pass_of = attach(repo, vs_id, "first")
    lexical_pass(repo)
    [job] = repo.claim_jobs("w1", max_jobs=1, lease_seconds=LEASE, models=SERVED)
    # A lexical completion of a job that fills vectors would undo them: refused.
    with pytest.raises(LeaseLost):
        repo.complete_job(job.job_id, "w1", [ChunkInput("first", 1)], None, "")
    assert job.file_id == lexical_pass_of


def test_a_reindex_shadow_waits_instead_of_a_lexical_pass(repo: Repository, vs_id: str) -> None:
    file_id = attach(repo, vs_id, "a file")
    [job] = repo.claim_jobs("w1", max_jobs=1, lease_seconds=LEASE, models=SERVED)
    vectors = unit_vectors(np.random.default_rng(2), 1, DIMS)
    repo.complete_job(job.job_id, "w1", [ChunkInput("a file", 2)], vectors, MODEL)
    repo.start_reindex(vs_id, EmbeddingModel("other-model", 4), None, 256)
    # Nobody searches the new index before it is complete: its jobs wait for their model.
    assert (
        repo.claim_jobs("w1", 5, LEASE, models=SERVED, waiting=["other-model"], lexical=True) == []
    )
    [shadow_job] = repo.claim_jobs("w1", 5, LEASE, models=[EmbeddingModel("other-model", 4)])
    assert (shadow_job.file_id, shadow_job.lexical) == (file_id, False)


def test_a_fill_that_gives_up_keeps_the_text_index(repo: Repository, vs_id: str) -> None:
    attach(repo, vs_id, "stays searchable")
    file_id = lexical_pass(repo)
    [job] = repo.claim_jobs("w1", max_jobs=1, lease_seconds=LEASE, models=SERVED)
    record = repo.fail_job(job.job_id, "w1", "server_error", "the model rejected it")
    assert (record.status, record.vectors_pending, record.chunk_count) == ("completed", True, 1)
    hits = repo.search(vs_id, None, k=5, mode="lexical", query_text="searchable")
    assert [hit.file_id for hit in hits] == [file_id]
