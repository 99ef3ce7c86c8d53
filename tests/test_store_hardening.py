"""The store's own defences, in process: private files, bounded backups, and a full disk named
as such (a real tmpfs when the tests run as root)."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from services.pb import store_pb2 as pb
from services.store.errors import StorageFull
from services.store.repository import OperationsSettings, Repository
from tests.store_fixtures import MODEL, running_store


def make(path: Path, **settings: object) -> Repository:
    repository = Repository(path, operations=OperationsSettings(**settings))  # type: ignore[arg-type]
    repository.migrate()
    return repository


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_the_database_and_its_backups_are_owner_only(tmp_path: Path) -> None:
    with make(tmp_path / "data" / "ragd.db", backup_reserve_bytes=0) as repo:
        repo.create_vector_store("private", MODEL, 4)
        backup = repo.backup("nightly/one.db").path
        files = [repo.path, repo.path.with_name("ragd.db-wal"), repo.path.with_name("ragd.db-shm")]
        assert [mode(path) for path in files] == [0o600] * 3
        assert mode(backup) == 0o600
        for directory in (repo.path.parent, backup.parent, backup.parent.parent):
            assert mode(directory) == 0o700, directory
    # A database made before this rule is narrowed when opened.
    old = tmp_path / "old.db"
    old.touch(mode=0o644)
    os.chmod(old, 0o644)
    make(old).close()
    assert mode(old) == 0o600


def test_backups_keep_the_newest_and_leave_the_reserve(tmp_path: Path) -> None:
    backups = tmp_path / "backups"
    with make(
        tmp_path / "ragd.db", backup_dir=backups, backup_keep=2, backup_reserve_bytes=0
    ) as repo:
        named = repo.backup("mine.db").path
        timed = [repo.backup().path for _ in range(4)]
        # Only the timed backups count (tests/test_store_restore.py has the rules).
        assert sorted(p.name for p in backups.iterdir()) == sorted(
            ["mine.db", *(p.name for p in timed[2:])]
        )
        assert named.exists()
    with make(tmp_path / "ragd.db", backup_dir=backups, backup_reserve_bytes=1 << 60) as repo:
        with pytest.raises(StorageFull, match="RAGD_BACKUP_RESERVE_MB"):
            repo.backup("huge.db")
        assert not (backups / "huge.db").exists()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 12 MiB tmpfs: mounting needs root (CAP_SYS_ADMIN)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=12m", "tmpfs", str(mount)], capture_output=True
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_is_storage_full_and_writes_resume_when_space_returns(
    small_disk: Path,
) -> None:
    async def scenario() -> None:
        async with running_store(small_disk / "ragd.db") as store:
            stub = store.stub
            vector_store = await stub.CreateVectorStore(
                pb.CreateVectorStoreRequest(name="full", model=MODEL, dimensions=4)
            )
            kept = await stub.CreateFile(
                pb.CreateFileRequest(filename="kept.txt", purpose="assistants", content=b"keep")
            )
            ballast = small_disk / "ballast"
            with open(ballast, "wb") as handle:
                try:
                    while True:
                        handle.write(b"\0" * (1 << 20))
                        handle.flush()
                except OSError:
                    pass
            refused = 0
            for index in range(40):
                try:
                    await stub.CreateFile(
                        pb.CreateFileRequest(
                            filename=f"f{index}.txt",
                            purpose="assistants",
                            content=os.urandom(1 << 18),
                        )
                    )
                except grpc.aio.AioRpcError as error:
                    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error.details()
                    assert "disk is full" in (error.details() or "")
                    assert ("ragd-reason", "storage-full") in tuple(error.trailing_metadata() or ())
                    refused += 1
            assert refused > 0
            status = await stub.GetStatus(pb.GetStatusRequest())
            assert status.storage_full and status.disk_free_bytes < 1 << 20
            # Reads go on; what was acknowledged is there.
            assert (await stub.GetFile(pb.GetFileRequest(id=kept.id))).filename == "kept.txt"
            ballast.unlink()
            again = await stub.CreateFile(
                pb.CreateFileRequest(filename="later.txt", purpose="assistants", content=b"x")
            )
            assert again.id.startswith("file-")
            assert not (await stub.GetStatus(pb.GetStatusRequest())).storage_full
            assert (await stub.GetVectorStore(pb.GetVectorStoreRequest(id=vector_store.id))).name
        with make(small_disk / "ragd.db") as repo:
            problems = [row[0] for row in repo._conn().execute("PRAGMA integrity_check")]
            assert problems == ["ok"]

    asyncio.run(scenario())
