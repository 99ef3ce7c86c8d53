"""Benchmark sizes: the default run (~40 minutes on 2 cores), --quick (~4 minutes), overrides."""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from bench.processes import ROOT

SCENARIOS = (
    "embedding", "ingest", "search", "footprint", "gateway", "contention", "chat", "reindex",
    "quality", "observability", "limits", "postgres",
)  # fmt: skip
# Run only when named (--only): long, and about capacity rather than against a baseline.
OPTIONAL = ("limits", "postgres")
DEFAULT_SCENARIOS = tuple(name for name in SCENARIOS if name not in OPTIONAL)
RESULTS_DIR = ROOT / "bench" / "results"


@dataclass(frozen=True)
class BenchConfig:
    scenarios: tuple[str, ...] = DEFAULT_SCENARIOS
    # Threads for every embedding engine: the stack's embedder, in-process, llama_cpp.server.
    threads: int = 2
    # Repeats of each throughput measurement (alternatives interleaved); medians are reported.
    repeats: int = 3
    # Scenario 1: snippets per pass, texts per batched request, concurrent client counts.
    embed_texts: int = 256
    embed_batch: int = 32
    embed_clients: tuple[int, ...] = (1, 8)
    # Texts per request in the concurrent-client runs (a query-embedding load).
    embed_request_texts: int = 1
    # Scenario 2: man pages of ingest_min_chars..ingest_max_chars characters, uploaded by
    # ingest_uploaders concurrent clients.
    ingest_docs: int = 500
    ingest_min_chars: int = 500
    ingest_max_chars: int = 2000
    ingest_uploaders: int = 4
    # Documents re-ingested to find out whether an embedding cache makes re-ingest faster.
    warm_probe_docs: int = 40
    # Scenario 3: vector store sizes, queries per measurement, client counts, k.
    search_sizes: tuple[int, ...] = (10_000, 100_000)
    search_queries: int = 100
    search_clients: tuple[int, ...] = (1, 4)
    k: int = 10
    # Real embeddings available to the search data sets; larger sets are filled with mixes.
    real_vectors: int = 20_000
    load_batch: int = 2_000
    # Scenario 8: files (one man-page paragraph each) re-indexed to a second model, and how
    # long the idle stack is searched first for the baseline latencies.
    reindex_files: int = 2_000
    reindex_idle_seconds: float = 30.0
    # Scenario 9: query/document pairs of docstrings (bench/pydocs.py; at most 2,000).
    quality_docs: int = 2_000
    # Scenarios 11 and 12: store sizes (chunks of 384 dimensions), each on a fresh stack.
    limits_sizes: tuple[int, ...] = (100_000,)
    out_dir: Path = RESULTS_DIR
    cache_dir: Path = RESULTS_DIR / "cache"
    # Update BENCHMARKS.md and bench/latest.png with this run.
    publish: bool = False
    # Record py-spy profiles of the services during these scenarios.
    profile: tuple[str, ...] = ()
    label: str = "default"


QUICK = BenchConfig(
    repeats=1,
    embed_texts=64,
    embed_request_texts=1,
    ingest_docs=24,
    warm_probe_docs=8,
    search_sizes=(5_000,),
    search_queries=30,
    real_vectors=2_000,
    load_batch=1_000,
    reindex_files=60,
    reindex_idle_seconds=5.0,
    quality_docs=150,
    limits_sizes=(5_000,),
    label="quick",
)


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(part.replace("_", "")) for part in text.split(",") if part)


def parse(argv: Sequence[str] | None = None) -> BenchConfig:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="ragd benchmarks: ratios against in-process and alternative baselines.",
    )
    parser.add_argument("--quick", action="store_true", help="smoke-sized run (1-2 minutes)")
    parser.add_argument("--only", help=f"comma-separated scenarios out of {','.join(SCENARIOS)}")
    parser.add_argument("--repeats", type=int)
    parser.add_argument("--threads", type=int)
    parser.add_argument("--embed-texts", type=int)
    parser.add_argument("--docs", type=int, help="documents to ingest (scenario 2)")
    parser.add_argument("--search-sizes", type=_ints, help="e.g. 10000,100000")
    parser.add_argument("--large", action="store_true", help="also search 1,000,000 vectors")
    parser.add_argument("--limits-sizes", type=_ints, help="scenario 11, e.g. 100000,1000000")
    parser.add_argument("--queries", type=int)
    parser.add_argument("--reindex-files", type=int, help="files to re-index (scenario 8)")
    parser.add_argument("--real-vectors", type=int, help="real embeddings to compute and cache")
    parser.add_argument("--out", type=Path, help=f"results root (default {RESULTS_DIR})")
    parser.add_argument(
        "--publish", action="store_true", help="write the table and chart into BENCHMARKS.md"
    )
    parser.add_argument("--profile", help="scenarios to profile with py-spy, e.g. ingest,search")
    args = parser.parse_args(argv)

    config = QUICK if args.quick else BenchConfig()
    changes: dict[str, object] = {}
    if args.only:
        unknown = set(args.only.split(",")) - set(SCENARIOS)
        if unknown:
            parser.error(f"unknown scenarios {sorted(unknown)}; choose from {SCENARIOS}")
        changes["scenarios"] = tuple(s for s in SCENARIOS if s in args.only.split(","))
    for name, field in (
        ("repeats", "repeats"),
        ("threads", "threads"),
        ("embed_texts", "embed_texts"),
        ("docs", "ingest_docs"),
        ("search_sizes", "search_sizes"),
        ("queries", "search_queries"),
        ("real_vectors", "real_vectors"),
        ("reindex_files", "reindex_files"),
        ("limits_sizes", "limits_sizes"),
    ):
        value = getattr(args, name)
        if value is not None:
            changes[field] = value
    if args.large:
        sizes = changes.get("search_sizes", config.search_sizes)
        assert isinstance(sizes, tuple)
        changes["search_sizes"] = (*sizes, 1_000_000)
    if args.out is not None:
        changes["out_dir"] = args.out
        changes["cache_dir"] = args.out / "cache"
    if args.profile:
        changes["profile"] = tuple(args.profile.split(","))
    changes["publish"] = bool(args.publish)
    return replace(config, **changes)  # type: ignore[arg-type]


def run_dir(config: BenchConfig) -> Path:
    return config.out_dir / time.strftime(f"%Y%m%d-%H%M%S-{config.label}")
