"""AttachFile with an upload: the content stored and attached in one transaction, in process."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.store.errors import ModelMismatch, VectorStoreNotFound
from services.store.records import EmbeddingModel, NewFile
from tests.store_fixtures import MODEL, open_repository

CONTENT = b"the same bytes twice"


def test_an_upload_is_stored_once_per_vector_store_and_a_failed_twin_is_retried(
    tmp_path: Path,
) -> None:
    with open_repository(tmp_path / "ragd.db") as repo:
        store = repo.create_vector_store("docs", MODEL, 4)
        first = repo.attach_file(store.id, upload=NewFile("a.txt", CONTENT), attributes={"v": 1})
        assert (first.status, first.deduplicated, first.filename) == ("in_progress", False, "a.txt")
        assert repo.get_file(first.file_id).purpose == "assistants"

        # The same content again: nothing stored, the file being indexed comes back.
        again = repo.attach_file(store.id, upload=NewFile("b.txt", CONTENT))
        assert (again.file_id, again.deduplicated) == (first.file_id, True)
        assert len(repo.list_files().items) == 1

        # Once it failed, the same content re-attaches that file (no second copy).
        [job] = repo.claim_jobs("worker", 1, 60)
        repo.fail_job(job.job_id, "worker", "invalid_file", "unreadable")
        retried = repo.attach_file(store.id, upload=NewFile("c.txt", CONTENT), attributes={"v": 2})
        assert (retried.file_id, retried.status, retried.deduplicated) == (
            first.file_id,
            "in_progress",
            False,
        )
        assert retried.attributes == {"v": 2}
        assert len(repo.list_files().items) == 1

        # Another vector store stores its own copy.
        other = repo.create_vector_store("other", MODEL, 4)
        elsewhere = repo.attach_file(other.id, upload=NewFile("a.txt", CONTENT))
        assert elsewhere.file_id != first.file_id and not elsewhere.deduplicated


def test_a_refused_upload_stores_nothing(tmp_path: Path) -> None:
    with open_repository(tmp_path / "ragd.db") as repo:
        store = repo.create_vector_store("docs", MODEL, 4)
        with pytest.raises(VectorStoreNotFound):
            repo.attach_file("vs_missing", upload=NewFile("a.txt", CONTENT))
        with pytest.raises(ModelMismatch, match=f"indexed with {MODEL} \\(4 dims\\), not bge"):
            repo.attach_file(
                store.id, upload=NewFile("a.txt", CONTENT), model=EmbeddingModel("bge", 4)
            )
        assert repo.list_files().items == []
        assert repo.get_vector_store(store.id).file_count == 0
