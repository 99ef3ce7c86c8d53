"""FindCollectionFile: the file a re-sent document's content maps to, in process."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from services.store.errors import CollectionNotFound
from tests.store_fixtures import MODEL, open_repository


def test_finds_the_live_file_first_then_a_failed_one(tmp_path: Path) -> None:
    repo = open_repository(tmp_path / "ragd.db")
    try:
        store = repo.create_collection("docs", MODEL, 4)
        content = b"the same bytes twice"
        sha256 = hashlib.sha256(content).hexdigest()
        assert repo.find_collection_file(store.id, sha256) is None

        first = repo.create_file("a.txt", "assistants", content)
        repo.attach_file(store.id, first.id)
        [job] = repo.claim_jobs("worker", 1, 60)
        repo.fail_job(job.job_id, "worker", "invalid_file", "unreadable")
        found = repo.find_collection_file(store.id, sha256)
        assert found is not None and (found.file_id, found.status) == (first.id, "failed")

        # A failed twin does not deduplicate: the new file is indexed and is found from now on.
        second = repo.create_file("b.txt", "assistants", content)
        assert not repo.attach_file(store.id, second.id).deduplicated
        found = repo.find_collection_file(store.id, sha256)
        assert found is not None and (found.file_id, found.status) == (second.id, "in_progress")

        other = repo.create_collection("other", MODEL, 4)
        assert repo.find_collection_file(other.id, sha256) is None
        with pytest.raises(CollectionNotFound):
            repo.find_collection_file("vs_missing", sha256)
    finally:
        repo.close()
