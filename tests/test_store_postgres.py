"""The store server on PostgreSQL (issue 31): the same gRPC contract over the other engine, and
what it leaves to PostgreSQL's own tooling."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from services.pb import store_pb2 as pb
from services.store.config import PostgresSettings
from services.store.errors import Unavailable
from services.store.metrics import StoreCollector
from services.store.postgres import connection
from services.store.repository import Repository
from tests.engines import Database
from tests.store_fixtures import expect_status, new_vector_store, running_store

pytestmark = pytest.mark.engines("postgres")


def test_the_store_serves_from_postgres_and_names_it(database: Database) -> None:
    async def main() -> None:
        async with running_store(database.path, postgres=_settings(database)) as store:
            created = await new_vector_store(store)
            listed = await store.stub.ListVectorStores(pb.ListVectorStoresRequest(limit=10))
            assert [found.id for found in listed.vector_stores] == [created.id]
            status = await store.stub.GetStatus(pb.GetStatusRequest())
            assert status.schema_version >= 15
            assert status.versions["engine"] == "postgres"
            assert status.versions["postgresql"].startswith("18")
            stats = await store.stub.GetStats(pb.GetStatsRequest())
            assert stats.db_bytes > 0
            # One after the other (a call starts when it is made).
            for call in (
                lambda: store.stub.Backup(pb.BackupRequest()),
                lambda: store.stub.Vacuum(pb.VacuumRequest()),
            ):
                details = await expect_status(call(), grpc.StatusCode.FAILED_PRECONDITION)
                assert "PostgreSQL's own tooling" in details
        # Nothing of the database went to the local folder.
        assert not database.path.exists()

    asyncio.run(main())


def _settings(database: Database) -> PostgresSettings:
    assert database.url is not None
    return PostgresSettings(url=database.url)


def test_a_read_that_outruns_the_statement_timeout_is_unavailable(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert database.url is not None
    monkeypatch.setattr(connection, "READ_STATEMENT_TIMEOUT_MS", 100)
    conn = connection.PostgresConnection.connect(database.url)
    try:
        with pytest.raises(Unavailable, match="statement timeout"), conn.atomic(write=False):
            conn.execute("SELECT pg_sleep(2)")
        # The connection serves the next call; writes are not cut short.
        with conn.atomic(write=True):
            assert conn.execute("SELECT 1 FROM pg_sleep(0.2)").get == 1
    finally:
        conn.close()


def test_the_connections_are_counted_for_the_metrics(database: Database) -> None:
    assert database.url is not None
    repository = Repository(database.path, postgres=PostgresSettings(url=database.url, pool_max=3))
    try:
        repository.migrate()
        opened, most = repository.database_connections() or (0, 0)
        assert 1 <= opened <= most == 3
        collector = StoreCollector()
        collector.connections = (opened, most)
        found = {metric.name: metric.samples[0].value for metric in collector.collect()}
        assert found == {"ragd_store_db_connections": opened, "ragd_store_db_connections_max": 3}
    finally:
        repository.close()
