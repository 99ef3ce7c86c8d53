"""Store search at N real vectors, exact scan vs coarse index, through the store's own API.

Usage: .venv/bin/python docs/design/coarse-index/measure_store.py VECTORS.npy QUERIES.npy [N]
(float32 unit vectors, one per row; the research set was /work/notes/real_100k.npy and
real_queries.npy). Loads N vectors into a fresh database with AddChunks-sized files, lets the
coarse index build, then times 100 queries each way in one process and prints p50/p95 and
recall@10 of the index against the scan.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from services.store.records import ChunkInput
from services.store.repository import Repository


def main() -> None:
    vectors = np.load(sys.argv[1]).astype(np.float32)
    queries = np.load(sys.argv[2]).astype(np.float32)[:100]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else len(vectors)
    with tempfile.TemporaryDirectory() as tmp, Repository(Path(tmp) / "m.db") as repo:
        repo.migrate()
        collection = repo.create_collection("measure", "m", int(vectors.shape[1]))
        began = time.perf_counter()
        for start in range(0, n, 1000):
            stop = min(start + 1000, n)
            chunks = [ChunkInput(str(i)) for i in range(start, stop)]
            repo.add_chunks(collection.id, f"f{start}", "f", {}, chunks, vectors[start:stop], "m")
        loaded = time.perf_counter()
        while repo.build_indexes(5.0):
            pass
        built = time.perf_counter()
        print(f"{n} vectors: load {loaded - began:.1f} s, index build {built - loaded:.1f} s")
        results = {}
        for exact in (True, False):
            latencies, found = [], []
            for query in queries:
                t = time.perf_counter()
                hits = repo.search(collection.id, query, 10, exact=exact)
                latencies.append(1000 * (time.perf_counter() - t))
                found.append({hit.text for hit in hits})
            results[exact] = found
            name = "exact scan" if exact else "coarse index"
            p50, p95 = np.percentile(latencies, [50, 95])
            print(f"{name:12s} p50 {p50:6.1f} ms  p95 {p95:6.1f} ms")
        hits = [len(a & b) for a, b in zip(results[False], results[True], strict=True)]
        print(f"recall@10 of the coarse index against the scan: {sum(hits) / (10 * len(hits)):.4f}")


if __name__ == "__main__":
    main()
