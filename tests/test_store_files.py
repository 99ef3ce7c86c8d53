"""The store's files, files in vector stores and file batches, against real SQLite files."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from services.store import migrations, vector_stores
from services.store.db import atomic, open_database
from services.store.errors import (
    BatchNotFound,
    FileNotFound,
    InvalidArgument,
    JobNotFound,
    VectorStoreFileNotFound,
    VectorStoreNotFound,
)
from services.store.records import BatchFileInput, Chunking, ChunkInput, FileCounts
from services.store.repository import Repository
from services.store.search.filters import Comparison
from services.store.vector_index import IndexSettings
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

FIXTURE_V1 = Path(__file__).parent / "data" / "schema_v1.db.fixture"

pytestmark = pytest.mark.repo(checks=[check_invariants])


def statuses(repo: Repository, vector_store_id: str, **kwargs: object) -> dict[str, str]:
    page = repo.list_vector_store_files(vector_store_id, limit=100, **kwargs)  # type: ignore[arg-type]
    return {item.file_id: item.status for item in page.items}


# Migrations


def test_a_schema_v1_database_is_migrated_and_still_searchable(tmp_path: Path) -> None:
    path = tmp_path / "ragd.db"
    shutil.copy(FIXTURE_V1, path)
    conn = open_database(path)
    try:
        assert migrations.schema_version(conn) == 1
        vectors = {
            int(rowid): np.frombuffer(blob, dtype="<f4")
            for rowid, blob in conn.execute("SELECT rowid, embedding FROM vec_1")
        }
    finally:
        conn.close()
    with open_repository(path) as repo:
        assert repo.migrate() == len(migrations.MIGRATIONS)
        (vector_store,) = repo.list_vector_stores().items
        assert (vector_store.name, vector_store.metadata) == ("fixture", {"made": "v1"})
        assert (vector_store.chunk_count, vector_store.file_count) == (12, 3)
        assert vector_store.file_counts == FileCounts(completed=3)
        assert (vector_store.expires_anchor, vector_store.expires_at) == ("", 0)
        assert vector_store.vector_index == "exact"
        for rowid, vector in vectors.items():
            top = repo.search(vector_store.id, vector, k=1)[0]
            assert top.chunk_id == f"chunk_{rowid}"
            assert top.score == pytest.approx(1.0, abs=1e-5)
        hits = repo.search(
            vector_store.id, vectors[1], k=20, filter=Comparison("n", "eq", value=1.0)
        )
        assert [hit.file_id for hit in hits] == ["file-fixture1"] * 4
        old_file = repo.get_file("file-fixture0")
        assert (old_file.filename, old_file.purpose, old_file.bytes) == (
            "doc0.txt",
            "assistants",
            0,
        )
        assert repo.get_file_content("file-fixture0")[1] == b""
        _, chunks = repo.get_vector_store_file_chunks(vector_store.id, "file-fixture2")
        assert [chunk.text for chunk in chunks] == [f"file 2 chunk {i}" for i in range(4)]
        # The new machinery works on the old data.
        new = upload(repo, "new document")
        repo.attach_file(vector_store.id, new.id)
        finish(repo, claim_one(repo), chunks=1)
        assert repo.get_vector_store(vector_store.id).file_counts == FileCounts(completed=4)
        repo.delete_file("file-fixture0")
        assert repo.get_vector_store(vector_store.id).chunk_count == 9
        check_invariants(path)
    # An old vector store gets a coarse index like any other once it is large enough.
    with open_repository(path, index=IndexSettings(min_rows=1)) as repo:
        while repo.build_indexes():
            pass
        assert repo.get_vector_store(vector_store.id).vector_index == "coarse"
        hits = repo.search(
            vector_store.id, vectors[1], k=20, filter=Comparison("n", "eq", value=1.0)
        )
        assert [hit.file_id for hit in hits] == ["file-fixture1"] * 4
        for vector in vectors.values():
            coarse, exact = (
                repo.search(vector_store.id, vector, 5, exact=e) for e in (False, True)
            )
            assert [hit.chunk_id for hit in coarse] == [hit.chunk_id for hit in exact]
    check_invariants(path)


# Files


def test_create_get_and_read_a_file(repo: Repository, clock: FakeClock) -> None:
    content = "héllo\n".encode()
    created = repo.create_file("notes.md", "user_data", content)
    assert created.id.startswith("file-") and len(created.id) == 29
    assert (created.filename, created.purpose, created.bytes) == ("notes.md", "user_data", 7)
    assert created.sha256 == hashlib.sha256(content).hexdigest()
    assert created.created_at == clock.now
    assert repo.get_file(created.id) == created
    assert repo.get_file_content(created.id) == (created, content)


@pytest.mark.parametrize(("filename", "purpose"), [("", "assistants"), ("a.txt", "")])
def test_create_file_needs_a_name_and_a_purpose(
    repo: Repository, filename: str, purpose: str
) -> None:
    with pytest.raises(InvalidArgument):
        repo.create_file(filename, purpose, b"x")
    assert repo.list_files().items == []


def test_list_files_pages_filters_by_purpose_and_orders(repo: Repository, clock: FakeClock) -> None:
    ids = []
    for i in range(5):
        ids.append(repo.create_file(f"{i}.txt", "batch" if i % 2 else "assistants", b"x").id)
        clock.now += i % 2  # pairs share a second: the insertion order breaks the tie

    def listed(**kwargs: object) -> tuple[list[str], bool]:
        page = repo.list_files(**kwargs)  # type: ignore[arg-type]
        return [file.id for file in page.items], page.has_more

    assert listed() == (ids[::-1], False)
    assert listed(order="asc", limit=2) == (ids[:2], True)
    assert listed(order="asc", limit=2, after=ids[1]) == (ids[2:4], True)
    assert listed(limit=3, after=ids[2]) == ([ids[1], ids[0]], False)
    assert listed(purpose="batch") == ([ids[3], ids[1]], False)
    assert listed(purpose="assistants", order="asc") == ([ids[0], ids[2], ids[4]], False)
    with pytest.raises(InvalidArgument, match="after cursor 'file-gone'"):
        repo.list_files(after="file-gone")
    with pytest.raises(InvalidArgument, match="limit"):
        repo.list_files(limit=10_001)


def test_unknown_files_are_not_found(repo: Repository, vs_id: str) -> None:
    calls: list[Callable[[], object]] = [
        lambda: repo.get_file("file-nope"),
        lambda: repo.get_file_content("file-nope"),
        lambda: repo.delete_file("file-nope"),
        lambda: repo.attach_file(vs_id, "file-nope"),
    ]
    for call in calls:
        with pytest.raises(FileNotFound, match="no file with id 'file-nope'"):
            call()


def test_delete_file_removes_it_from_every_vector_store(repo: Repository) -> None:
    first = repo.create_vector_store("a", MODEL, DIMS).id
    second = repo.create_vector_store("b", MODEL, DIMS).id
    doomed, kept = upload(repo, "doomed"), upload(repo, "kept")
    repo.attach_file(first, doomed.id)
    repo.attach_file(first, kept.id)
    repo.attach_file(second, doomed.id)
    finish(repo, claim_one(repo), chunks=3)  # doomed in `first`
    finish(repo, claim_one(repo), chunks=2)  # kept in `first`; doomed stays pending in `second`
    repo.delete_file(doomed.id)
    with pytest.raises(FileNotFound):
        repo.get_file(doomed.id)
    assert statuses(repo, first) == {kept.id: "completed"}
    assert statuses(repo, second) == {}
    after = repo.get_vector_store(first)
    assert (after.chunk_count, after.file_count) == (2, 1)
    hits = repo.search(first, np.ones(DIMS), k=10)
    assert {hit.file_id for hit in hits} == {kept.id}
    assert repo.claim_jobs("w1", max_jobs=10, lease_seconds=60) == []


def test_a_vector_store_keeps_its_description(repo: Repository) -> None:
    made = repo.create_vector_store("a", MODEL, DIMS, description="release notes, 2024")
    assert made.description == "release notes, 2024"
    assert repo.get_vector_store(made.id).description == "release notes, 2024"
    # Updating other fields leaves it; None leaves it; "" clears it.
    assert repo.update_vector_store(made.id, name="b").description == "release notes, 2024"
    assert repo.update_vector_store(made.id, description="v2").description == "v2"
    assert [s.description for s in repo.list_vector_stores().items] == ["v2"]
    assert repo.update_vector_store(made.id, description="").description == ""


# Attaching


def test_attach_records_the_file_and_a_job(repo: Repository, vs_id: str, clock: FakeClock) -> None:
    file = upload(repo, "some text", filename="doc.txt")
    clock.now += 5
    chunking = Chunking(max_tokens=100, overlap_tokens=20)
    attached = repo.attach_file(vs_id, file.id, {"lang": "en", "year": 2024}, chunking)
    assert (attached.file_id, attached.vector_store_id, attached.status) == (
        file.id,
        vs_id,
        "in_progress",
    )
    assert (attached.filename, attached.created_at, attached.chunking) == (
        "doc.txt",
        clock.now,
        chunking,
    )
    assert attached.attributes == {"lang": "en", "year": 2024}
    assert (attached.last_error, attached.deduplicated, attached.batch_id) == (None, False, "")
    assert repo.get_vector_store_file(vs_id, file.id) == attached
    vector_store = repo.get_vector_store(vs_id)
    assert vector_store.file_counts == FileCounts(in_progress=1)
    assert (vector_store.file_count, vector_store.chunk_count, vector_store.last_active_at) == (
        1,
        0,
        clock.now,
    )
    job = claim_one(repo)
    assert (job.vector_store_id, job.file_id, job.filename, job.content) == (
        vs_id,
        file.id,
        "doc.txt",
        b"some text",
    )
    assert (job.chunking, job.model, job.dimensions, job.attempt) == (chunking, MODEL, DIMS, 1)


def test_attach_checks_its_arguments(repo: Repository, vs_id: str) -> None:
    file = upload(repo)
    with pytest.raises(VectorStoreNotFound):
        repo.attach_file("vs_nope", file.id)
    with pytest.raises(InvalidArgument, match=r"max_chunk_size_tokens must be 100\.\.4096"):
        repo.attach_file(vs_id, file.id, chunking=Chunking(50, 0))
    with pytest.raises(InvalidArgument, match=r"chunk_overlap_tokens must be 0\.\.100"):
        repo.attach_file(vs_id, file.id, chunking=Chunking(200, 101))
    with pytest.raises(InvalidArgument, match="attribute 'n'"):
        repo.attach_file(vs_id, file.id, {"n": float("nan")})
    assert statuses(repo, vs_id) == {}


def test_attaching_the_same_file_again_is_deduplicated(repo: Repository, vs_id: str) -> None:
    file = upload(repo)
    first = repo.attach_file(vs_id, file.id, {"v": 1})
    again = repo.attach_file(vs_id, file.id, {"v": 2})
    assert again == replace(first, deduplicated=True)
    job = claim_one(repo)
    assert repo.claim_jobs("w2", max_jobs=5, lease_seconds=60) == []  # no second job
    completed = finish(repo, job)
    assert repo.attach_file(vs_id, file.id, {"v": 3}) == replace(completed, deduplicated=True)
    assert repo.get_vector_store(vs_id).file_counts == FileCounts(completed=1)


@pytest.mark.parametrize("ending", ["failed", "cancelled"])
def test_a_failed_or_cancelled_file_is_attached_again(
    repo: Repository, vs_id: str, clock: FakeClock, ending: str
) -> None:
    file = upload(repo)
    if ending == "failed":
        repo.attach_file(vs_id, file.id, {"v": 1})
        failed = repo.fail_job(claim_one(repo).job_id, "w1", "invalid_file", "no text")
        assert failed.last_error is not None and failed.last_error.code == "invalid_file"
    else:
        batch = repo.create_file_batch(vs_id, [BatchFileInput(file.id, {"v": 1})])
        repo.cancel_file_batch(vs_id, batch.id)
    assert statuses(repo, vs_id) == {file.id: ending}
    # Identical content in a failed or cancelled file does not count as indexed.
    twin = upload(repo)
    assert not repo.attach_file(vs_id, twin.id).deduplicated
    repo.detach_file(vs_id, twin.id)
    clock.now += 10
    again = repo.attach_file(vs_id, file.id, {"v": 2}, Chunking(256, 64))
    assert (again.status, again.last_error, again.deduplicated) == ("in_progress", None, False)
    assert (again.attributes, again.chunking, again.batch_id) == (
        {"v": 2},
        Chunking(256, 64),
        "",
    )
    assert again.created_at == clock.now
    job = claim_one(repo)
    assert (job.file_id, job.attempt) == (file.id, 1)
    assert finish(repo, job).status == "completed"


def test_a_named_file_is_attached_even_when_another_holds_its_content(
    repo: Repository, vs_id: str
) -> None:
    # OpenAI's SDKs poll the file they attached: a twin must not answer for it.
    failed, first, second = upload(repo), upload(repo), upload(repo)
    repo.attach_file(vs_id, failed.id)
    repo.fail_job(claim_one(repo).job_id, "w1", "server_error", "embedder down")
    assert not repo.attach_file(vs_id, first.id, {"copy": 1}).deduplicated
    named = repo.attach_file(vs_id, second.id, {"copy": 2})
    assert (named.file_id, named.attributes, named.deduplicated) == (second.id, {"copy": 2}, False)
    again = repo.attach_file(vs_id, failed.id)
    assert (again.file_id, again.status, again.deduplicated) == (failed.id, "in_progress", False)
    assert statuses(repo, vs_id) == dict.fromkeys((failed.id, first.id, second.id), "in_progress")
    assert repo.get_vector_store(vs_id).file_counts.in_progress == 3


# Files in a vector store


def test_list_vector_store_files_pages_and_filters(
    repo: Repository, vs_id: str, clock: FakeClock
) -> None:
    ids = []
    for i in range(5):
        ids.append(repo.attach_file(vs_id, upload(repo, f"doc {i}").id).file_id)
        clock.now += 1
    finish(repo, claim_one(repo))  # ids[0]
    repo.fail_job(claim_one(repo).job_id, "w1", "unsupported_file", "binary")  # ids[1]

    def listed(**kwargs: object) -> tuple[list[str], bool]:
        page = repo.list_vector_store_files(vs_id, **kwargs)  # type: ignore[arg-type]
        return [item.file_id for item in page.items], page.has_more

    assert listed() == (ids[::-1], False)
    assert listed(order="asc", limit=2) == (ids[:2], True)
    assert listed(order="asc", limit=2, after=ids[1]) == (ids[2:4], True)
    assert listed(limit=2, before=ids[0]) == ([ids[2], ids[1]], True)
    assert listed(status="in_progress") == (ids[:1:-1], False)
    assert listed(status="completed") == ([ids[0]], False)
    failed = repo.list_vector_store_files(vs_id, status="failed").items[0]
    assert failed.last_error is not None
    assert (failed.last_error.code, failed.last_error.message) == ("unsupported_file", "binary")
    with pytest.raises(InvalidArgument, match="status must be one of"):
        repo.list_vector_store_files(vs_id, status="done")
    with pytest.raises(InvalidArgument, match="before cursor"):
        repo.list_vector_store_files(vs_id, before="file-elsewhere")
    with pytest.raises(BatchNotFound, match="vsfb_nope"):
        repo.list_vector_store_files(vs_id, batch_id="vsfb_nope")
    with pytest.raises(
        VectorStoreFileNotFound, match=f"file 'file-nope' is not in vector store '{vs_id}'"
    ):
        repo.get_vector_store_file(vs_id, "file-nope")


def test_updating_attributes_keeps_chunks_and_changes_filters(repo: Repository, vs_id: str) -> None:
    file = upload(repo)
    repo.attach_file(vs_id, file.id, {"team": "a"})
    finish(repo, claim_one(repo), chunks=3)
    _, before = repo.get_vector_store_file_chunks(vs_id, file.id)
    only_b = Comparison("team", "eq", value="b")
    assert repo.search(vs_id, np.ones(DIMS), k=10, filter=only_b) == []
    updated = repo.update_vector_store_file(vs_id, file.id, {"team": "b", "n": 1.5})
    assert (updated.attributes, updated.status, updated.chunk_count) == (
        {"team": "b", "n": 1.5},
        "completed",
        3,
    )
    hits = repo.search(vs_id, np.ones(DIMS), k=10, filter=only_b)
    assert len(hits) == 3 and hits[0].attributes == {"team": "b", "n": 1.5}
    assert repo.get_vector_store_file_chunks(vs_id, file.id)[1] == before
    with pytest.raises(VectorStoreFileNotFound):
        repo.update_vector_store_file(vs_id, "file-nope", {})


def test_chunks_of_a_file_in_order_only_once_completed(repo: Repository, vs_id: str) -> None:
    file = upload(repo)
    repo.attach_file(vs_id, file.id)
    record, chunks = repo.get_vector_store_file_chunks(vs_id, file.id)
    assert (record.status, chunks) == ("in_progress", [])
    finish(repo, claim_one(repo), chunks=4)
    record, chunks = repo.get_vector_store_file_chunks(vs_id, file.id)
    assert record.chunk_count == 4
    assert [(c.chunk_index, c.text, c.token_count) for c in chunks] == [
        (i, f"{file.id} chunk {i}", 3) for i in range(4)
    ]
    hit_ids = {hit.chunk_id for hit in repo.search(vs_id, np.ones(DIMS), k=10)}
    assert hit_ids == {chunk.chunk_id for chunk in chunks}


def test_detach_removes_chunks_vectors_and_job(repo: Repository, vs_id: str) -> None:
    done, pending = upload(repo, "done"), upload(repo, "pending")
    repo.attach_file(vs_id, done.id)
    repo.attach_file(vs_id, pending.id)
    finish(repo, claim_one(repo), chunks=3)
    repo.detach_file(vs_id, done.id)
    repo.detach_file(vs_id, pending.id)
    assert statuses(repo, vs_id) == {}
    vector_store = repo.get_vector_store(vs_id)
    assert (vector_store.chunk_count, vector_store.file_count, vector_store.usage_bytes) == (
        0,
        0,
        0,
    )
    assert repo.search(vs_id, np.ones(DIMS), k=10) == []
    assert repo.claim_jobs("w1", 10, 60) == []
    with pytest.raises(VectorStoreFileNotFound):
        repo.detach_file(vs_id, done.id)
    assert repo.get_file(done.id).id == done.id  # the file itself stays


# VectorStores


def test_file_counts_and_totals_follow_statuses(repo: Repository, vs_id: str) -> None:
    files = [upload(repo, f"doc {i}").id for i in range(4)]
    for file_id in files:
        repo.attach_file(vs_id, file_id)
    completed = finish(repo, claim_one(repo), chunks=2)
    repo.fail_job(claim_one(repo).job_id, "w1", "invalid_file", "empty")
    vector_store = repo.get_vector_store(vs_id)
    assert vector_store.file_counts == FileCounts(in_progress=2, completed=1, failed=1)
    assert vector_store.file_counts.total == vector_store.file_count == 4
    assert (vector_store.chunk_count, vector_store.usage_bytes) == (2, completed.usage_bytes)
    assert repo.list_vector_stores().items[0] == vector_store


def test_expiry_and_updates(repo: Repository, clock: FakeClock) -> None:
    created = repo.create_vector_store(
        "x", MODEL, DIMS, expires_anchor="last_active_at", expires_days=7
    )
    assert (created.expires_anchor, created.expires_days) == ("last_active_at", 7)
    assert created.expires_at == clock.now + 7 * 86400
    assert repo.get_vector_store(created.id) == created
    clock.now += 100
    repo.search(created.id, np.ones(DIMS), k=1)  # activity moves the expiry
    assert repo.get_vector_store(created.id).expires_at == clock.now + 7 * 86400
    renamed = repo.update_vector_store(created.id, name="y", metadata={"k": "v"})
    assert (renamed.name, renamed.metadata, renamed.expires_days) == ("y", {"k": "v"}, 7)
    never = repo.update_vector_store(created.id, expires=("", 0))
    assert (never.name, never.expires_anchor, never.expires_at) == ("y", "", 0)
    assert repo.update_vector_store(created.id) == never
    with pytest.raises(VectorStoreNotFound):
        repo.update_vector_store("vs_nope", name="z")


@pytest.mark.parametrize(
    ("anchor", "days", "message"),
    [("created_at", 1, "anchor"), ("last_active_at", 366, "days"), ("", 3, "needs the anchor")],
)
def test_bad_expiry_is_rejected(repo: Repository, anchor: str, days: int, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        repo.create_vector_store("x", MODEL, DIMS, expires_anchor=anchor, expires_days=days)
    vector_store = repo.create_vector_store("x", MODEL, DIMS)
    with pytest.raises(InvalidArgument, match=message):
        repo.update_vector_store(vector_store.id, expires=(anchor, days))


def test_delete_vector_store_removes_files_jobs_and_batches(repo: Repository, vs_id: str) -> None:
    kept = repo.create_vector_store("kept", MODEL, DIMS).id
    files = [upload(repo, f"doc {i}").id for i in range(3)]
    batch = repo.create_file_batch(vs_id, [BatchFileInput(file_id) for file_id in files])
    repo.attach_file(kept, files[0])
    finish(repo, claim_one(repo))
    repo.delete_vector_store(vs_id)
    assert repo.claim_jobs("w1", 10, 60)[0].vector_store_id == kept
    conn = repo._conn()
    assert conn.execute("SELECT count(*) FROM file_batches").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM jobs").fetchone() == (1,)
    assert [repo.get_file(file_id).id for file_id in files] == files
    with pytest.raises(VectorStoreNotFound):
        repo.get_file_batch(vs_id, batch.id)


# Batches


def test_a_batch_attaches_files_and_reports_progress(repo: Repository, vs_id: str) -> None:
    single = upload(repo, "attached alone")
    repo.attach_file(vs_id, single.id)
    files = [upload(repo, f"doc {i}").id for i in range(3)]
    batch = repo.create_file_batch(
        vs_id,
        [BatchFileInput(files[0], {"n": 0}, Chunking(256, 64)), BatchFileInput(single.id)]
        + [BatchFileInput(file_id) for file_id in files[1:]],
    )
    assert batch.id.startswith("vsfb_") and len(batch.id) == 29
    assert (batch.vector_store_id, batch.status) == (vs_id, "in_progress")
    assert batch.file_counts == FileCounts(in_progress=3)  # `single` was deduplicated
    members = repo.list_vector_store_files(vs_id, batch_id=batch.id).items
    assert {item.file_id for item in members} == set(files)
    assert all(item.batch_id == batch.id for item in members)
    assert repo.get_vector_store_file(vs_id, single.id).batch_id == ""
    assert repo.get_vector_store_file(vs_id, files[0]).attributes == {"n": 0}
    jobs = repo.claim_jobs("w1", max_jobs=10, lease_seconds=60)
    assert [job.file_id for job in jobs] == [single.id, *files]  # oldest first
    for job in jobs[:3]:
        finish(repo, job)
    repo.fail_job(jobs[3].job_id, "w1", "invalid_file", "empty")
    done = repo.get_file_batch(vs_id, batch.id)
    assert (done.status, done.file_counts) == ("completed", FileCounts(completed=2, failed=1))
    assert (
        repo.list_vector_store_files(vs_id, batch_id=batch.id, status="failed").items[0].file_id
        == files[2]
    )


def test_a_batch_with_a_missing_file_writes_nothing(repo: Repository, vs_id: str) -> None:
    present = upload(repo)
    items = [BatchFileInput(present.id), BatchFileInput("file-gone1"), BatchFileInput("file-gone2")]
    with pytest.raises(FileNotFound, match="file-gone1"):
        repo.create_file_batch(vs_id, items)
    assert statuses(repo, vs_id) == {}
    assert repo.claim_jobs("w1", 10, 60) == []


@pytest.mark.parametrize("count", [0, 2001])
def test_a_batch_holds_1_to_2000_files(repo: Repository, vs_id: str, count: int) -> None:
    with pytest.raises(InvalidArgument, match=r"1\.\.2000 files"):
        repo.create_file_batch(vs_id, [BatchFileInput("file-x")] * count)


def test_cancel_a_batch(repo: Repository, vs_id: str) -> None:
    files = [upload(repo, f"doc {i}").id for i in range(3)]
    batch = repo.create_file_batch(vs_id, [BatchFileInput(file_id) for file_id in files])
    finish(repo, claim_one(repo))
    held = claim_one(repo, worker="w2")
    cancelled = repo.cancel_file_batch(vs_id, batch.id)
    assert (cancelled.status, cancelled.file_counts) == (
        "cancelled",
        FileCounts(completed=1, cancelled=2),
    )
    assert repo.get_file_batch(vs_id, batch.id) == cancelled
    assert repo.cancel_file_batch(vs_id, batch.id) == cancelled
    assert statuses(repo, vs_id) == {
        files[0]: "completed",
        files[1]: "cancelled",
        files[2]: "cancelled",
    }
    assert repo.claim_jobs("w1", 10, 60) == []
    with pytest.raises(JobNotFound):
        finish(repo, held, worker="w2")
    assert repo.get_vector_store(vs_id).chunk_count == 2


def test_cancelling_a_finished_batch_changes_nothing(repo: Repository, vs_id: str) -> None:
    batch = repo.create_file_batch(vs_id, [BatchFileInput(upload(repo).id)])
    finish(repo, claim_one(repo))
    assert repo.cancel_file_batch(vs_id, batch.id).status == "completed"


def test_batches_belong_to_their_vector_store(repo: Repository, vs_id: str) -> None:
    batch = repo.create_file_batch(vs_id, [BatchFileInput(upload(repo).id)])
    other = repo.create_vector_store("other", MODEL, DIMS).id
    for call in (repo.get_file_batch, repo.cancel_file_batch):
        with pytest.raises(BatchNotFound, match=batch.id):
            call(other, batch.id)
    with pytest.raises(BatchNotFound):
        repo.get_file_batch(vs_id, "vsfb_nope")


# AddChunks, the direct path, next to the jobs


def test_add_chunks_over_an_attached_file_completes_it_and_drops_its_job(
    repo: Repository, vs_id: str
) -> None:
    file = upload(repo)
    repo.attach_file(vs_id, file.id)
    vectors = unit_vectors(np.random.default_rng(3), 2, DIMS)
    repo.add_chunks(
        vs_id, file.id, "a.txt", {"k": 1}, [ChunkInput("a"), ChunkInput("b")], vectors, MODEL
    )
    assert statuses(repo, vs_id) == {file.id: "completed"}
    assert repo.claim_jobs("w1", 10, 60) == []
    assert repo.get_vector_store(vs_id).file_count == 1


@pytest.mark.engines("sqlite")
def test_a_lookup_without_file_counts_is_the_record_less_its_counts(
    repo: Repository, vs_id: str
) -> None:
    """Searches and writes look a vector store up without counting its files (every file's
    row of the vector store): the rest of the record is the same."""
    file = upload(repo)
    repo.attach_file(vs_id, file.id)
    finish(repo, claim_one(repo))
    conn = repo._sqlite("lookup")
    with atomic(conn, write=False):
        key, counted = vector_stores.lookup(conn, vs_id)
        same, uncounted = vector_stores.lookup(conn, vs_id, counted=False)
    assert counted.file_counts == FileCounts(completed=1)
    assert (same, uncounted) == (key, replace(counted, file_counts=FileCounts()))
