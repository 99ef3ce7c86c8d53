"""The vector half at 1M chunks in memory, in this process: the store's resident search (sign
bits pick max(2,048, 40 k) candidates, float32 rescores them: resident.py) against the same
candidates rescored from smaller copies (int8 with a scale per row, float16), and against the
sign bits alone. Recall@10 against an exact float32 scan, p50 per query, and the bytes a chunk
needs in memory for each.

    python -m bench.quantized [--size 1000000] [--cache bench/results/cache]

Uses the cached real embeddings of scenario 3's snippets (bench/vectors.py; 20,000 real, the
rest mixes of two) and 100 held-out snippets as queries, as scenario 11 does.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from bench.stats import median, recall_at_k
from bench.vectors import data_set
from services.store.resident import ResidentSettings, VectorStore, _hamming_nearest, _sign_bits

K = 10
QUERIES = 100

Search = Callable[[npt.NDArray[np.float32]], list[int]]


def _top(scores: npt.NDArray[np.float32], rows: npt.NDArray[np.intp], k: int) -> list[int]:
    top = np.argpartition(-scores, k)[:k]
    return [int(rows[i]) for i in top[np.argsort(-scores[top], kind="stable")]]


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.quantized")
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--cache", type=Path, default=Path("bench/results/cache"))
    args = parser.parse_args(argv)
    [vectors_file] = sorted(args.cache.glob("snippets-*.npy"))
    cached = np.load(vectors_file)
    texts = json.loads(vectors_file.with_suffix(".json").read_text(encoding="utf-8"))
    real, held = cached[: len(cached) - QUERIES], cached[len(cached) - QUERIES :]
    data = data_set(real, texts, args.size)
    matrix = data.vectors
    queries = held / np.linalg.norm(held, axis=1, keepdims=True)
    n, dims = matrix.shape
    settings = ResidentSettings()
    candidates = max(settings.min_candidates, settings.oversample * K)
    words = (dims + 63) // 64
    bits = np.ascontiguousarray(_sign_bits(matrix, words).T)
    scale = np.abs(matrix).max(axis=1) / 127.0
    int8 = np.round(matrix / scale[:, None]).astype(np.int8)
    half = matrix.astype(np.float16)
    resident = VectorStore(dims, settings)
    resident.append(np.arange(n, dtype=np.int64), matrix)

    def exact(query: npt.NDArray[np.float32]) -> list[int]:
        return _top(matrix @ query, np.arange(n), K)

    def store(query: npt.NDArray[np.float32]) -> list[int]:
        return [row for row, _ in resident.search(query, K)]

    def candidates_of(query: npt.NDArray[np.float32]) -> npt.NDArray[np.intp]:
        return _hamming_nearest(bits, n, _sign_bits(query[None, :], words)[0], candidates)

    def from_int8(query: npt.NDArray[np.float32]) -> list[int]:
        rows = candidates_of(query)
        scores = (int8[rows].astype(np.float32) @ query) * scale[rows]
        return _top(scores, rows, K)

    def from_half(query: npt.NDArray[np.float32]) -> list[int]:
        rows = candidates_of(query)
        return _top(half[rows].astype(np.float32) @ query, rows, K)

    def bits_only(query: npt.NDArray[np.float32]) -> list[int]:
        return [int(row) for row in candidates_of(query)[:K]]

    truth = [exact(query) for query in queries]
    per_chunk = {
        "float32 (the store today)": dims * 4 + words * 8 + 8 + 1,
        "int8 + scale": dims + 4 + words * 8 + 8 + 1,
        "float16": dims * 2 + words * 8 + 8 + 1,
        "sign bits only": words * 8 + 8 + 1,
        "exact float32 scan": dims * 4 + 8,
    }
    print(f"{n} chunks ({data.real} real), {dims} dims, {candidates} candidates, k={K}")
    print("| resident copy | bytes a chunk | recall@10 | p50 ms |")
    for name, search in (
        ("float32 (the store today)", store),
        ("int8 + scale", from_int8),
        ("float16", from_half),
        ("sign bits only", bits_only),
        ("exact float32 scan", exact),
    ):
        for query in queries[:5]:
            search(query)
        found, latencies = [], []
        for query in queries:
            began = time.perf_counter()
            found.append(search(query))
            latencies.append(time.perf_counter() - began)
        recall = recall_at_k(found, truth, K)
        print(f"| {name} | {per_chunk[name]:,} | {recall:.3f} | {1000 * median(latencies):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
