"""Service-to-service authentication: the shared service token on the store and the embedder
(real stack), mutual TLS with certificates from deploy/make-certs.sh (real store in process),
and the token read from a file."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common.config import ConfigError, Env
from services.common.security import TlsFiles
from services.gateway import errors
from services.gateway.clients import open_channel, store_stub
from services.launcher import Stack
from services.pb import embedder_pb2, embedder_pb2_grpc, store_pb2, store_pb2_grpc
from services.secret import ensure_token
from services.store.config import StoreConfig
from services.store.wire.server import create_server
from tests.harness import ROOT, started_stack

TOKEN = "a-long-random-service-token"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from started_stack(tmp_path_factory.mktemp("secured"), RAGD_SERVICE_TOKEN=TOKEN)


Metadata = tuple[tuple[str, str], ...]


def _code(
    rpc: Callable[..., object], request: object, metadata: Metadata = ()
) -> tuple[grpc.StatusCode, str]:
    try:
        rpc(request, timeout=5, metadata=metadata)
    except grpc.RpcError as error:
        return error.code(), error.details() or ""
    return grpc.StatusCode.OK, ""


def test_the_stack_works_and_its_internal_ports_refuse_calls_without_the_token(
    secured: Stack,
) -> None:
    with httpx.Client(base_url=secured.gateway_url, timeout=60) as api:
        store_id = api.post("/v1/vector_stores", json={"name": "private"}).json()["id"]
        attach = {"text": "Basalt forms when lava cools quickly.", "filename": "rock.txt"}
        assert api.post(f"/v1/vector_stores/{store_id}/files", json=attach).status_code == 200
        deadline = time.monotonic() + 60
        while api.get(f"/v1/vector_stores/{store_id}").json()["file_counts"]["completed"] < 1:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        found = api.post(f"/v1/vector_stores/{store_id}/search", json={"query": "lava"}).json()
        assert found["data"] and not found["degraded"]

    wrong = (("authorization", "Bearer not-the-token"),)
    right = (("authorization", f"Bearer {TOKEN}"),)
    with grpc.insecure_channel(secured.store_target) as channel:
        store = store_pb2_grpc.StoreStub(channel)
        calls: list[tuple[Callable[..., object], object]] = [
            (store.ListVectorStores, store_pb2.ListVectorStoresRequest()),
            (store.DeleteVectorStore, store_pb2.DeleteVectorStoreRequest(id=store_id)),
            (store.Backup, store_pb2.BackupRequest(name="stolen.db")),
        ]
        for rpc, request in calls:
            code, details = _code(rpc, request)
            assert (code, details.split(":")[0]) == (
                grpc.StatusCode.UNAUTHENTICATED,
                "missing service token",
            )
            assert _code(rpc, request, wrong) == (
                grpc.StatusCode.UNAUTHENTICATED,
                "invalid service token",
            )
        listed = store.ListVectorStores(store_pb2.ListVectorStoresRequest(), metadata=right)
        assert store_id in [c.id for c in listed.vector_stores]
        # Probes need no token: they learn only SERVING or not.
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    with grpc.insecure_channel(secured.embedders["embedder"]) as channel:
        embedder = embedder_pb2_grpc.EmbedderStub(channel)
        request = embedder_pb2.EmbedRequest(texts=[b"free embeddings?"])
        assert _code(embedder.Embed, request)[0] == grpc.StatusCode.UNAUTHENTICATED
        assert embedder.Embed(request, timeout=5, metadata=right).dimensions == 384


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("certs")
    subprocess.run([str(ROOT / "deploy" / "make-certs.sh"), str(directory)], check=True)
    return directory


def _tls(certs: Path, service: str, ca: bool = True) -> TlsFiles:
    return TlsFiles(
        cert=(certs / f"{service}.pem").read_bytes(),
        key=(certs / f"{service}.key").read_bytes(),
        ca=(certs / "ca.pem").read_bytes() if ca else None,
    )


def test_mutual_tls_admits_only_clients_with_a_certificate_of_the_ca(
    tmp_path: Path, certs: Path
) -> None:
    async def scenario() -> None:
        config = StoreConfig(
            listen="127.0.0.1:0",
            db_path=tmp_path / "ragd.db",
            threads=2,
            tls=_tls(certs, "store"),
            service_token=TOKEN,
        )
        server, port = await create_server(config)
        target = f"127.0.0.1:{port}"
        try:
            gateway = open_channel(target, "store", 5.0, TOKEN, _tls(certs, "gateway"))
            async with gateway:
                created = await store_stub(gateway).CreateVectorStore(
                    store_pb2.CreateVectorStoreRequest(name="tls", model="m", dimensions=4)
                )
                assert created.id.startswith("vs_")
            # The right certificate but no token: still refused.
            async with open_channel(target, "store", 5.0, None, _tls(certs, "gateway")) as bare:
                with pytest.raises(errors.Unauthenticated, match="missing service token"):
                    await store_stub(bare).ListVectorStores(store_pb2.ListVectorStoresRequest())
            # No client certificate, or no TLS at all: the handshake fails.
            ca_only = grpc.ssl_channel_credentials(
                root_certificates=(certs / "ca.pem").read_bytes()
            )
            for channel in (
                grpc.aio.secure_channel(target, ca_only),
                grpc.aio.insecure_channel(target),
            ):
                async with channel:
                    with pytest.raises(grpc.aio.AioRpcError) as refused:
                        await store_pb2_grpc.StoreStub(channel).ListVectorStores(
                            store_pb2.ListVectorStoresRequest(),
                            metadata=(("authorization", f"Bearer {TOKEN}"),),
                            timeout=5,
                        )
                    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        finally:
            await server.stop(None)

    asyncio.run(scenario())


def test_the_token_can_come_from_a_file(tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text(f"{TOKEN}\n")
    assert Env({"RAGD_SERVICE_TOKEN_FILE": str(secret)}).secret("SERVICE_TOKEN") == TOKEN
    assert Env({}).secret("SERVICE_TOKEN") is None
    with pytest.raises(ConfigError, match="not both"):
        Env({"RAGD_SERVICE_TOKEN": "a", "RAGD_SERVICE_TOKEN_FILE": str(secret)}).secret(
            "SERVICE_TOKEN"
        )
    with pytest.raises(ConfigError, match="No such file"):
        Env({"RAGD_SERVICE_TOKEN_FILE": str(tmp_path / "missing")}).secret("SERVICE_TOKEN")


def test_the_compose_token_is_made_once_and_private(tmp_path: Path) -> None:
    path = tmp_path / "run" / "service-token"
    assert ensure_token(path)
    token = path.read_text().strip()
    assert len(token) >= 40 and path.stat().st_mode & 0o777 == 0o600
    assert not ensure_token(path) and path.read_text().strip() == token
