"""Issue 30.8: what long chunks' windows cost a vector search, on each engine.

    python -m bench.windows --chunks 20000 --long 0.1 [--engines sqlite,postgres]

One vector store of `--chunks` chunks (random unit vectors of 384 dims, ten chunks a file,
written through the ingest jobs as the gateway writes them), searched through the store's
facade (Repository.search: vector mode, k 10, unfiltered and with a filter keeping 10% of the
files), p50 and p95 over `--queries` queries:

- "ordinary": every chunk has one window (today's chunks), with the window probe (this
  branch) against the same search with the probe switched off (the path before it): the
  cost for stores without long chunks.
- "long": the same chunks where a fraction `--long` has four windows (an 800-token chunk at
  MiniLM's 256), against the same store searched without folding its windows in: the cost of
  the exact scan of the windows.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from bench.engines import repository
from bench.report import publish_section
from bench.stats import median, percentile
from services.store import windows
from services.store.records import ChunkInput
from services.store.repository import Repository
from services.store.search.filters import Comparison

ROOT = Path(__file__).resolve().parent.parent
DIMS = 384
MODEL = "bench-model"
PER_FILE = 10
WINDOWS = 4


def _vectors(rng: np.random.Generator, count: int) -> np.ndarray:
    found = rng.standard_normal((count, DIMS)).astype(np.float32)
    found /= np.linalg.norm(found, axis=1, keepdims=True)
    return found


def fill(repo: Repository, name: str, chunks: int, long: float, seed: int) -> str:
    """A vector store of `chunks` chunks, a fraction `long` of them with WINDOWS windows."""
    rng = np.random.default_rng(seed)
    vs_id = repo.create_vector_store(name, MODEL, DIMS).id
    files = chunks // PER_FILE
    for number in range(files):
        file = repo.create_file(f"f{number}.txt", "assistants", f"{name} {number}".encode())
        repo.attach_file(vs_id, file.id, attributes={"n": number % 10})
    done = 0
    while done < files:
        for job in repo.claim_jobs("bench", max_jobs=100, lease_seconds=600):
            counts = [WINDOWS if rng.random() < long else 1 for _ in range(PER_FILE)]
            inputs = [ChunkInput(f"chunk {i}", 300) for i in range(PER_FILE)]
            vectors = _vectors(rng, sum(counts))
            plain = all(count == 1 for count in counts)
            repo.complete_job(job.job_id, "bench", inputs, vectors, MODEL, [] if plain else counts)
            done += 1
    return vs_id


@contextmanager
def _without_windows() -> Iterator[None]:
    """The search as it was before windows: no probe, nothing folded in."""
    original = windows.present
    windows.present = lambda conn, key: False
    try:
        yield
    finally:
        windows.present = original


def timed(search: Callable[[np.ndarray], object], queries: np.ndarray) -> tuple[float, float]:
    search(queries[0])  # loads the resident copy (SQLite) and warms the caches
    times = []
    for query in queries:
        started = time.perf_counter()
        search(query)
        times.append((time.perf_counter() - started) * 1000)
    return median(times), percentile(times, 95)


def measure(repo: Repository, vs_id: str, queries: np.ndarray) -> dict[str, tuple[float, float]]:
    tenth = Comparison("n", "eq", value=3)
    result = {}
    for label, flt in (("unfiltered", None), ("filter 10%", tenth)):

        def search(query: np.ndarray, flt: Comparison | None = flt) -> object:
            return repo.search(vs_id, query, k=10, filter=flt)

        with _without_windows():
            result[f"{label}, before"] = timed(search, queries)
        result[f"{label}, with windows"] = timed(search, queries)
    return result


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--long", type=float, default=0.1)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--engines", default="sqlite,postgres")
    parser.add_argument("--publish", action="store_true", help="update BENCHMARKS.md")
    args = parser.parse_args(argv)
    queries = _vectors(np.random.default_rng(99), args.queries)
    lines = [
        f"## Long chunks' windows in a vector search (`python -m bench.windows --chunks "
        f"{args.chunks} --long {args.long}`, {time.strftime('%Y-%m-%d %H:%M')})",
        "",
        f"One vector store of {args.chunks:,} chunks (384 dims, k 10, {args.queries} queries), "
        f'searched through the store\'s facade; "long": {args.long:.0%} of the chunks have '
        f'{WINDOWS} windows. "before" is the same store searched with the window probe off '
        "(the path before windows), in the same run.",
        "",
        "| engine | store | search | before p50 / p95 ms | with windows p50 / p95 ms | ratio p50 |",
        "|---|---|---|---:|---:|---:|",
    ]
    for engine in args.engines.split(","):
        with tempfile.TemporaryDirectory() as tmp, repository(engine, Path(tmp)) as (repo, _):
            for store, long in (("ordinary", 0.0), ("long", args.long)):
                vs_id = fill(repo, store, args.chunks, long, seed=1)
                found = measure(repo, vs_id, queries)
                for label in ("unfiltered", "filter 10%"):
                    before, after = found[f"{label}, before"], found[f"{label}, with windows"]
                    lines.append(
                        f"| {engine} | {store} | {label} | {before[0]:.2f} / {before[1]:.2f} | "
                        f"{after[0]:.2f} / {after[1]:.2f} | {after[0] / before[0]:.2f} |"
                    )
                    print(lines[-1], flush=True)
    section = "\n".join(lines)
    print(section)
    if args.publish:
        publish_section(ROOT / "BENCHMARKS.md", "windows", section)


if __name__ == "__main__":
    main()
