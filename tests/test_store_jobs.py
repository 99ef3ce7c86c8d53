"""The durable ingest queue: claims, leases, completion, failure and retries."""

from __future__ import annotations

import threading
from pathlib import Path

import apsw
import numpy as np
import pytest

from services.store import jobs
from services.store.db import open_database
from services.store.errors import (
    DimensionMismatch,
    InvalidArgument,
    JobNotFound,
    LeaseLost,
    ModelMismatch,
)
from services.store.records import BatchFileInput, ChunkInput, EmbeddingModel, FileCounts
from services.store.repository import Repository
from tests.store_fixtures import (
    DIMS,
    MODEL,
    FakeClock,
    check_invariants,
    claim_one,
    finish,
    open_repository,
    unit_vectors,
    upload,
)

LEASE = 60

pytestmark = pytest.mark.repo(checks=[check_invariants])


def attach_new(repo: Repository, vector_store_id: str, text: str = "hello") -> str:
    file = upload(repo, text)
    repo.attach_file(vector_store_id, file.id)
    return file.id


# Claiming


def test_claims_hand_out_each_job_once_oldest_first(repo: Repository, vs_id: str) -> None:
    file_ids = [attach_new(repo, vs_id, f"doc {i}") for i in range(5)]
    first = repo.claim_jobs("w1", max_jobs=2, lease_seconds=LEASE)
    second = repo.claim_jobs("w2", max_jobs=10, lease_seconds=LEASE)
    assert [job.file_id for job in first + second] == file_ids
    assert [job.content for job in second] == [f"doc {i}".encode() for i in range(2, 5)]
    assert repo.claim_jobs("w3", max_jobs=10, lease_seconds=LEASE) == []


def test_a_job_carries_the_api_key_its_file_was_attached_for(repo: Repository, vs_id: str) -> None:
    single = upload(repo, "one")
    repo.attach_file(vs_id, single.id, key_name="loader")
    batched = [upload(repo, f"batch {i}").id for i in range(2)]
    repo.create_file_batch(vs_id, [BatchFileInput(f) for f in batched], key_name="bulk")
    plain = attach_new(repo, vs_id, "nobody's")
    claimed = repo.claim_jobs("w1", max_jobs=10, lease_seconds=LEASE)
    assert {job.file_id: job.key_name for job in claimed} == {
        single.id: "loader",
        batched[0]: "bulk",
        batched[1]: "bulk",
        plain: "",
    }


def test_jobs_of_another_model_fail_at_claim_in_the_model_rules_words(
    repo: Repository, vs_id: str
) -> None:
    other = repo.create_vector_store("other", "bge-small", DIMS).id
    mine, theirs = attach_new(repo, vs_id, "mine"), attach_new(repo, other, "theirs")
    served = [EmbeddingModel(MODEL, DIMS)]
    claimed = repo.claim_jobs("w1", max_jobs=10, lease_seconds=LEASE, models=served)
    assert [job.file_id for job in claimed] == [mine]
    failed = repo.get_vector_store_file(other, theirs)
    assert failed.status == "failed" and failed.last_error is not None
    assert failed.last_error.code == "server_error"
    assert failed.last_error.message == (
        f"vector store '{other}' was indexed with bge-small ({DIMS} dims), not {MODEL} "
        f"({DIMS} dims); index it from a ragd whose embedder serves bge-small, or attach the "
        f"files to a vector store created with {MODEL}"
    )
    # Several served models: the message lists them.
    third = attach_new(repo, other, "again")
    two = [*served, EmbeddingModel("e5", 768)]
    assert repo.claim_jobs("w1", max_jobs=10, lease_seconds=LEASE, models=two) == []
    message = repo.get_vector_store_file(other, third).last_error
    assert message is not None and "which no embedder here serves" in message.message


def test_concurrent_claimers_never_share_a_job(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "ragd.db"
    workers, per_claim, count = 4, 3, 60
    with open_repository(path, clock) as repo:
        vs_id = repo.create_vector_store("notes", MODEL, DIMS).id
        expected = {attach_new(repo, vs_id, f"doc {i}") for i in range(count)}
        claimed: dict[str, list[str]] = {f"w{n}": [] for n in range(workers)}
        # Every round, all workers claim at the same moment, each on its own connection.
        rounds = threading.Barrier(workers)

        def claimer(worker: str) -> None:
            for _ in range(count // (workers * per_claim) + 1):
                rounds.wait()
                batch = repo.claim_jobs(worker, max_jobs=per_claim, lease_seconds=LEASE)
                claimed[worker].extend(job.file_id for job in batch)

        threads = [threading.Thread(target=claimer, args=(worker,)) for worker in claimed]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        everything = [file_id for mine in claimed.values() for file_id in mine]
        assert sorted(everything) == sorted(expected)
        assert all(claimed.values()), claimed
        check_invariants(path)


def test_a_claim_is_bounded_by_content_size(
    repo: Repository, vs_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobs, "MAX_CLAIM_BYTES", 10)
    for text in ("12345678", "abcdefgh", "xy"):
        attach_new(repo, vs_id, text)
    assert [job.content for job in repo.claim_jobs("w1", 5, LEASE)] == [b"12345678"]
    # One job always fits, however large; the next two fit together.
    assert [job.content for job in repo.claim_jobs("w1", 5, LEASE)] == [b"abcdefgh", b"xy"]


@pytest.mark.parametrize(
    ("worker", "max_jobs", "lease", "message"),
    [
        ("", 1, LEASE, "worker_id"),
        ("w1", 0, LEASE, "max_jobs"),
        ("w1", 101, LEASE, "max_jobs"),
        ("w1", 1, 0, "lease_seconds"),
        ("w1", 1, 3601, "lease_seconds"),
    ],
)
def test_claim_checks_its_arguments(
    repo: Repository, vs_id: str, worker: str, max_jobs: int, lease: int, message: str
) -> None:
    attach_new(repo, vs_id)
    with pytest.raises(InvalidArgument, match=message):
        repo.claim_jobs(worker, max_jobs, lease)
    assert claim_one(repo).attempt == 1


# Completing


def test_complete_writes_chunks_vectors_and_status_together(
    repo: Repository, vs_id: str, clock: FakeClock
) -> None:
    file_id = attach_new(repo, vs_id)
    job = claim_one(repo)
    assert repo.search(vs_id, np.ones(DIMS), k=10) == []
    clock.now += 30
    chunks = [ChunkInput("first", 1), ChunkInput("second", 1)]
    vectors = unit_vectors(np.random.default_rng(1), 2, DIMS)
    done = repo.complete_job(job.job_id, "w1", chunks, vectors, MODEL)
    usage = len("first") + len("second") + 2 * 4 * DIMS
    assert (done.file_id, done.status, done.chunk_count, done.usage_bytes) == (
        file_id,
        "completed",
        2,
        usage,
    )
    vector_store = repo.get_vector_store(vs_id)
    assert (vector_store.chunk_count, vector_store.usage_bytes) == (2, usage)
    assert vector_store.file_counts == FileCounts(completed=1)
    assert vector_store.last_active_at == clock.now
    top = repo.search(vs_id, vectors[1], k=1)[0]
    assert (top.file_id, top.text, top.chunk_index) == (file_id, "second", 1)
    with pytest.raises(LeaseLost, match="already finished"):
        repo.complete_job(job.job_id, "w1", chunks, vectors, MODEL)
    with pytest.raises(LeaseLost, match="already finished"):
        repo.renew_job(job.job_id, "w1", LEASE)


def test_an_empty_document_completes_with_no_chunks(repo: Repository, vs_id: str) -> None:
    attach_new(repo, vs_id, "")
    done = repo.complete_job(claim_one(repo).job_id, "w1", [], np.zeros((0, DIMS)), MODEL)
    assert (done.status, done.chunk_count, done.usage_bytes) == ("completed", 0, 0)


@pytest.mark.parametrize(
    ("dims", "model", "error"),
    [(DIMS * 2, MODEL, DimensionMismatch), (DIMS, "bge-base", ModelMismatch)],
)
def test_complete_refuses_vectors_the_vector_store_cannot_hold(
    repo: Repository, vs_id: str, dims: int, model: str, error: type[Exception]
) -> None:
    attach_new(repo, vs_id)
    job = claim_one(repo)
    vectors = unit_vectors(np.random.default_rng(1), 1, dims)
    with pytest.raises(error, match="index it from a ragd whose embedder serves"):
        repo.complete_job(job.job_id, "w1", [ChunkInput("a")], vectors, model)
    # Nothing written; the worker still holds the job and can record the failure.
    failed = repo.fail_job(job.job_id, "w1", "server_error", "wrong embedder")
    assert (failed.status, failed.chunk_count) == ("failed", 0)


def test_complete_checks_chunks_against_vectors(repo: Repository, vs_id: str) -> None:
    attach_new(repo, vs_id)
    job = claim_one(repo)
    with pytest.raises(InvalidArgument, match="one vector per chunk"):
        repo.complete_job(job.job_id, "w1", [ChunkInput("a")], np.ones((2, DIMS)), MODEL)
    with pytest.raises(InvalidArgument, match="all zeros"):
        repo.complete_job(job.job_id, "w1", [ChunkInput("a")], np.zeros((1, DIMS)), MODEL)
    assert finish(repo, job).status == "completed"


@pytest.mark.engines("sqlite")  # the failure is injected with a SQLite trigger
def test_a_failing_complete_writes_nothing(repo: Repository, vs_id: str) -> None:
    attach_new(repo, vs_id)
    job = claim_one(repo)
    conn = open_database(repo.path)
    try:
        # Fails the last statement of complete, after the chunks and vectors are written.
        conn.execute(
            "CREATE TRIGGER fail_done BEFORE UPDATE OF state ON jobs WHEN NEW.state = 'done' "
            "BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
        )
        with pytest.raises(apsw.ConstraintError, match="injected failure"):
            finish(repo, job, chunks=3)
        conn.execute("DROP TRIGGER fail_done")
    finally:
        conn.close()
    assert repo.get_vector_store_file(vs_id, job.file_id).status == "in_progress"
    assert repo.get_vector_store(vs_id).chunk_count == 0
    check_invariants(repo.path)
    assert finish(repo, job, chunks=3).chunk_count == 3


# Leases


def test_an_expired_lease_is_reclaimed_and_the_first_worker_refused(
    repo: Repository, vs_id: str, clock: FakeClock
) -> None:
    attach_new(repo, vs_id)
    slow = claim_one(repo, worker="w1", lease_seconds=LEASE)
    clock.now += LEASE - 1
    assert repo.claim_jobs("w2", 1, LEASE) == []  # still leased
    clock.now += 1
    fresh = claim_one(repo, worker="w2")
    assert (fresh.job_id, fresh.attempt) == (slow.job_id, 2)
    with pytest.raises(LeaseLost, match="leased to another worker"):
        finish(repo, slow, worker="w1")
    with pytest.raises(LeaseLost):
        repo.renew_job(slow.job_id, "w1", LEASE)
    with pytest.raises(LeaseLost):
        repo.fail_job(slow.job_id, "w1", "server_error", "late")
    assert finish(repo, fresh, worker="w2").status == "completed"


def test_renewing_keeps_the_job(repo: Repository, vs_id: str, clock: FakeClock) -> None:
    attach_new(repo, vs_id)
    job = claim_one(repo)
    clock.now += LEASE - 10
    assert repo.renew_job(job.job_id, "w1", LEASE) == clock.now + LEASE
    clock.now += LEASE - 10
    assert repo.claim_jobs("w2", 1, LEASE) == []
    assert finish(repo, job).status == "completed"


def test_an_expired_lease_nobody_reclaimed_still_completes(
    repo: Repository, vs_id: str, clock: FakeClock
) -> None:
    attach_new(repo, vs_id)
    job = claim_one(repo)
    clock.now += 10 * LEASE
    assert finish(repo, job).status == "completed"


def test_unknown_jobs_are_not_found(repo: Repository) -> None:
    with pytest.raises(JobNotFound, match="no ingest job 99"):
        repo.renew_job(99, "w1", LEASE)
    with pytest.raises(JobNotFound):
        repo.complete_job(99, "w1", [], np.zeros((0, DIMS)), MODEL)
    with pytest.raises(JobNotFound):
        repo.fail_job(99, "w1", "server_error", "x")


@pytest.mark.parametrize("removal", ["detach", "delete_file", "delete_vector_store"])
def test_a_job_removed_while_leased_writes_nothing(
    repo: Repository, vs_id: str, removal: str
) -> None:
    file_id = attach_new(repo, vs_id)
    job = claim_one(repo)
    if removal == "detach":
        repo.detach_file(vs_id, file_id)
    elif removal == "delete_file":
        repo.delete_file(file_id)
    else:
        repo.delete_vector_store(vs_id)
    with pytest.raises(JobNotFound):
        repo.renew_job(job.job_id, "w1", LEASE)
    with pytest.raises(JobNotFound):
        finish(repo, job)
    with pytest.raises(JobNotFound):
        repo.fail_job(job.job_id, "w1", "server_error", "x")


# Failing and retrying


def test_a_transient_failure_is_retried_after_the_delay(
    repo: Repository, vs_id: str, clock: FakeClock
) -> None:
    file_id = attach_new(repo, vs_id)
    job = claim_one(repo)
    retrying = repo.fail_job(job.job_id, "w1", "server_error", "embedder down", 30)
    assert (retrying.status, retrying.last_error) == ("in_progress", None)
    with pytest.raises(LeaseLost, match="waits for another attempt"):
        finish(repo, job)
    clock.now += 29
    assert repo.claim_jobs("w2", 1, LEASE) == []
    clock.now += 1
    again = claim_one(repo, worker="w2")
    assert (again.job_id, again.file_id, again.attempt) == (job.job_id, file_id, 2)
    assert finish(repo, again, worker="w2").status == "completed"


def test_retries_stop_after_the_attempt_limit(tmp_path: Path, clock: FakeClock) -> None:
    with open_repository(tmp_path / "ragd.db", clock, max_attempts=3) as repo:
        vs_id = repo.create_vector_store("notes", MODEL, DIMS).id
        attach_new(repo, vs_id)
        for attempt in (1, 2, 3):
            job = claim_one(repo)
            assert job.attempt == attempt
            record = repo.fail_job(job.job_id, "w1", "server_error", f"timeout {attempt}", 1)
            clock.now += 1
        assert record.status == "failed"
        assert record.last_error is not None
        assert (record.last_error.code, record.last_error.message) == ("server_error", "timeout 3")
        assert repo.claim_jobs("w1", 1, LEASE) == []
        check_invariants(repo.path)


def test_a_job_whose_workers_keep_dying_fails(tmp_path: Path, clock: FakeClock) -> None:
    with open_repository(tmp_path / "ragd.db", clock, max_attempts=2) as repo:
        vs_id = repo.create_vector_store("notes", MODEL, DIMS).id
        file_id = attach_new(repo, vs_id)
        for attempt in (1, 2):
            assert claim_one(repo, worker=f"w{attempt}").attempt == attempt
            clock.now += LEASE  # the worker died: its lease runs out
        later = attach_new(repo, vs_id, "other")
        assert [job.file_id for job in repo.claim_jobs("w3", 5, LEASE)] == [later]
        record = repo.get_vector_store_file(vs_id, file_id)
        assert record.status == "failed" and record.last_error is not None
        assert record.last_error.code == "server_error"
        assert "abandoned 2 times" in record.last_error.message
        check_invariants(repo.path)


def test_a_permanent_failure_records_the_error(repo: Repository, vs_id: str) -> None:
    attach_new(repo, vs_id)
    job = claim_one(repo)
    failed = repo.fail_job(job.job_id, "w1", "unsupported_file", "x" * 5000)
    assert failed.status == "failed" and failed.last_error is not None
    assert failed.last_error.code == "unsupported_file"
    assert len(failed.last_error.message) == jobs.MAX_ERROR_MESSAGE
    assert repo.get_vector_store(vs_id).file_counts == FileCounts(failed=1)
    with pytest.raises(LeaseLost, match="already finished"):
        repo.fail_job(job.job_id, "w1", "unsupported_file", "again")


@pytest.mark.parametrize(
    ("code", "retry_after", "message"),
    [("oops", 0, "error code"), ("server_error", -1, "retry_after_seconds")],
)
def test_fail_checks_its_arguments(
    repo: Repository, vs_id: str, code: str, retry_after: int, message: str
) -> None:
    attach_new(repo, vs_id)
    job = claim_one(repo)
    with pytest.raises(InvalidArgument, match=message):
        repo.fail_job(job.job_id, "w1", code, "m", retry_after)
    assert finish(repo, job).status == "completed"
