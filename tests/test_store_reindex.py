"""Re-indexing a vector store in the store: a hidden new index filled by ordinary jobs, kept in
step with the vector store, switched in one transaction or dropped."""

from __future__ import annotations

import numpy as np
import pytest

from services.store.errors import NoReindex, ReindexRunning, VectorStoreNotFound
from services.store.records import Chunking, EmbeddingModel
from services.store.repository import Repository
from tests.store_fixtures import (
    DIMS,
    MODEL,
    check_invariants,
    claim_one,
    finish,
    unit_vectors,
    upload,
)

NEW = EmbeddingModel("smollm2-135m", 8)

pytestmark = pytest.mark.repo(checks=[check_invariants])


def indexed(repo: Repository, vs_id: str, count: int) -> list[str]:
    ids = []
    for n in range(count):
        file = upload(repo, f"document {n}", f"d{n}.txt")
        repo.attach_file(vs_id, file.id, attributes={"n": float(n)})
        ids.append(file.id)
    while claimed := repo.claim_jobs("w0", max_jobs=10, lease_seconds=60):
        for job in claimed:
            finish(repo, job, worker="w0")
    return ids


def drain(repo: Repository, model: str = NEW.name) -> list[str]:
    """Completes every job (of `model`'s shadow, and any other) and returns their file ids."""
    done = []
    while claimed := repo.claim_jobs("w1", max_jobs=10, lease_seconds=60):
        for job in claimed:
            finish(repo, job)
            done.append(job.file_id)
    return done


def search_vector(repo: Repository, vs_id: str, dims: int) -> list[str]:
    query = unit_vectors(np.random.default_rng(1), 1, dims)[0]
    return sorted({hit.file_id for hit in repo.search(vs_id, query, k=10)})


def test_a_reindex_switches_model_in_one_step_when_every_file_is_done(
    repo: Repository, vs_id: str
) -> None:
    files = indexed(repo, vs_id, 3)
    repo.update_vector_store(vs_id, description="kept across the switch")
    started = repo.start_reindex(vs_id, NEW, max_chunk_tokens=256)
    assert started.reindex is not None and started.reindex.status == "in_progress"
    assert started.reindex.file_counts.in_progress == 3
    # Until the last file is done, the vector store is the old one, searched with the old model.
    job = claim_one(repo)
    assert (job.model, job.dimensions) == (NEW.name, NEW.dimensions)
    finish(repo, job)
    during = repo.get_vector_store(vs_id)
    assert (during.model, during.dimensions) == (MODEL, DIMS)
    assert during.reindex is not None and during.reindex.file_counts.completed == 1
    assert sorted(search_vector(repo, vs_id, DIMS)) == sorted(files)
    assert [c.id for c in repo.list_vector_stores().items] == [vs_id]
    drain(repo)
    after = repo.get_vector_store(vs_id)
    assert (after.model, after.dimensions, after.name) == (NEW.name, NEW.dimensions, "notes")
    assert after.description == "kept across the switch"
    assert after.reindex is not None and after.reindex.status == "completed"
    assert after.reindex.file_counts.completed == 3 and after.file_counts.completed == 3
    assert sorted(search_vector(repo, vs_id, NEW.dimensions)) == sorted(files)
    # Attributes came along; the old index is gone.
    listed = repo.list_vector_store_files(vs_id).items
    assert sorted(f.attributes["n"] for f in listed) == [0.0, 1.0, 2.0]
    assert [c.id for c in repo.list_vector_stores().items] == [vs_id]


def test_files_attached_detached_or_relabelled_meanwhile_follow_into_the_new_index(
    repo: Repository, vs_id: str
) -> None:
    first, second = indexed(repo, vs_id, 2)
    repo.start_reindex(vs_id, NEW)
    late = upload(repo, "a late document", "late.txt")
    repo.attach_file(vs_id, late.id)
    repo.detach_file(vs_id, first)
    repo.update_vector_store_file(vs_id, second, {"tag": "kept"})
    done = drain(repo)
    # The late file was indexed by both models; the detached one by neither.
    assert sorted(done) == sorted([second, late.id, late.id])
    after = repo.get_vector_store(vs_id)
    assert after.model == NEW.name
    files = {f.file_id: f for f in repo.list_vector_store_files(vs_id).items}
    assert sorted(files) == sorted([second, late.id])
    assert files[second].attributes == {"tag": "kept"}


def test_a_file_that_fails_anew_keeps_the_old_index_and_says_why(
    repo: Repository, vs_id: str
) -> None:
    files = indexed(repo, vs_id, 2)
    repo.start_reindex(vs_id, NEW)
    job = claim_one(repo)
    repo.fail_job(job.job_id, "w1", "invalid_file", "cannot parse it", retry_after_seconds=0)
    drain(repo)
    after = repo.get_vector_store(vs_id)
    assert (after.model, after.dimensions) == (MODEL, DIMS)
    assert after.reindex is not None and after.reindex.status == "failed"
    assert job.file_id in after.reindex.last_error and "cannot parse it" in after.reindex.last_error
    assert after.reindex.file_counts.failed == 1
    assert sorted(search_vector(repo, vs_id, DIMS)) == sorted(files)
    # A new attempt may start.
    assert repo.start_reindex(vs_id, NEW).reindex is not None


def test_cancel_drops_the_new_index_and_one_reindex_runs_at_a_time(
    repo: Repository, vs_id: str
) -> None:
    indexed(repo, vs_id, 2)
    with pytest.raises(NoReindex):
        repo.cancel_reindex(vs_id)
    repo.start_reindex(vs_id, NEW, chunking=Chunking(200, 20))
    with pytest.raises(ReindexRunning):
        repo.start_reindex(vs_id, NEW)
    job = claim_one(repo)
    assert job.chunking == Chunking(200, 20)
    cancelled = repo.cancel_reindex(vs_id)
    assert cancelled.reindex is not None and cancelled.reindex.status == "cancelled"
    assert cancelled.model == MODEL
    assert repo.claim_jobs("w1", max_jobs=10, lease_seconds=60) == []


def test_a_files_chunking_is_shortened_to_the_new_models_context(
    repo: Repository, vs_id: str
) -> None:
    file = upload(repo, "long chunks")
    repo.attach_file(vs_id, file.id, chunking=Chunking(800, 400))
    finish(repo, claim_one(repo))
    repo.start_reindex(vs_id, NEW, max_chunk_tokens=256)
    assert claim_one(repo).chunking == Chunking(256, 128)


def test_deleting_the_store_or_an_empty_store_ends_its_reindex(
    repo: Repository, vs_id: str
) -> None:
    # Nothing to index: the switch is immediate.
    empty = repo.start_reindex(vs_id, NEW)
    assert empty.model == NEW.name and empty.reindex is not None
    assert empty.reindex.status == "completed"
    other = repo.create_vector_store("other", MODEL, DIMS).id
    indexed(repo, other, 1)
    repo.start_reindex(other, NEW)
    repo.delete_vector_store(other)
    with pytest.raises(VectorStoreNotFound):
        repo.get_vector_store(other)
    assert repo.claim_jobs("w1", max_jobs=10, lease_seconds=60) == []
