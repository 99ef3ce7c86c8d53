"""Hybrid rankings compared offline on scenario 9's store: the same chunks, vectors and queries,
ranked by the lexical index before issue 33 (FTS5's bm25, bench/fts5.py) and after (Tantivy),
each fused with the same vector candidates by the store's fusion (search/hybrid.py), file-level
recall@1, recall@10 and MRR@10 as scenario 9 counts them. Queries are split into two halves
(even and odd) so that a setting chosen on one is checked on the other.

    RAGD_BENCH_KEEP_DATA=1 python -m bench --only quality --out DIR   # keeps DIR/<run>/quality
    python -m bench.fusion DIR/<run> [DOCUMENTS]                      # prints the table

The query vectors are embedded in this process once (cached beside the run).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import cast

import numpy as np

from bench.fts5 import Fts5
from bench.processes import MODEL_PATH
from bench.pydocs import corpus, load
from bench.quality import K, Quality
from services.common.vectors import FloatMatrix, to_bytes
from services.embedder.model import EmbeddingModel
from services.store import fulltext, vector_stores
from services.store.db import atomic, open_database
from services.store.search import hybrid, lexical, vector
from services.store.search.hits import Candidate
from services.store.vector_index import IndexSettings

CANDIDATES = hybrid.candidate_count(K)

# One query's candidates: vector (chunk, score), lexical (chunk, bm25) with the query's bm25
# ceiling, FTS5 (chunk, bm25 negated), each chunk's file number and exact cosine.
Lists = tuple[list[tuple[int, float]], list[tuple[int, float]], float, list[tuple[int, float]]]
Fuse = Callable[[Lists, dict[int, int], dict[int, float]], list[int]]


def _documents(ranked_chunks: Sequence[int], doc_of: dict[int, int]) -> list[int]:
    """The files of the first K chunks, as a REST search of K results gives them."""
    return list(dict.fromkeys(doc_of[chunk] for chunk in ranked_chunks[:K] if chunk in doc_of))


def _spread(candidates: Sequence[Candidate]) -> dict[int, float]:
    """Min-max over the list (best 1, last 0): the fusion before issue 33's."""
    if not candidates:
        return {}
    high = max(c.score for c in candidates)
    low = min(c.score for c in candidates)
    if high <= low:
        return {c.key: 1.0 for c in candidates}
    return {c.key: (c.score - low) / (high - low) for c in candidates}


def _min_max(near: Sequence[tuple[int, float]], words: Sequence[tuple[int, float]],
             doc_of: dict[int, int]) -> list[int]:  # fmt: skip
    vectors = [Candidate(c, str(doc_of[c]), s) for c, s in near if c in doc_of]
    texts = [Candidate(c, str(doc_of[c]), s) for c, s in words if c in doc_of]
    spread_near, spread_words = _spread(vectors), _spread(texts)
    own = {
        key: 0.5 * spread_near.get(key, 0.0) + 0.5 * spread_words.get(key, 0.0)
        for key in [*spread_near, *spread_words]
    }
    return [chunk for chunk, _ in hybrid.supported(own, vectors, texts, K)]


def variants() -> dict[str, Fuse]:
    found: dict[str, Fuse] = {
        "vector": lambda lists, doc_of, cos: [c for c, _ in lists[0]],
        "lexical FTS5 (before)": lambda lists, doc_of, cos: [c for c, _ in lists[3]],
        "lexical Tantivy (after)": lambda lists, doc_of, cos: [c for c, _ in lists[1]],
        "hybrid min-max, FTS5 (before)": lambda lists, doc_of, cos: _min_max(
            lists[0], lists[3], doc_of
        ),
        "hybrid min-max, Tantivy (before)": lambda lists, doc_of, cos: _min_max(
            lists[0], lists[1], doc_of
        ),
    }
    for full, named in ((1.0, "ceiling"), (hybrid.FULL_MATCH, "words once")):
        for weight in (0.3, 0.4, 0.5, 0.6, 0.7):
            found[f"hybrid evidence, full = {named}, weight {weight}"] = _evidence(weight, full)
    return found


def _evidence(weight: float, full: float) -> Fuse:
    def fuse(lists: Lists, doc_of: dict[int, int], cos: dict[int, float]) -> list[int]:
        near, words, ceiling, _ = lists
        vectors = [Candidate(c, str(doc_of[c]), (1.0 + cos[c]) / 2.0)
                   for c in dict(near) | dict(words) if c in doc_of]  # fmt: skip
        texts = [Candidate(c, str(doc_of[c]), s) for c, s in words if c in doc_of]
        ranked = hybrid.fuse(vectors, texts, ceiling, K, weight, full)
        return [chunk for chunk, _ in ranked]

    return fuse


def main(argv: Sequence[str]) -> int:
    run_dir = Path(argv[0])
    cache = run_dir.parent / "cache"
    every, _ = load(cache)
    # The run's --quick size is 150 documents, the default 2,000.
    pairs = corpus(every, int(argv[1]) if len(argv) > 1 else 2000)
    queries = [pair.query for pair in pairs]
    vectors_file = run_dir / "fusion-queries.npy"
    if vectors_file.exists():
        query_vectors: FloatMatrix = np.load(vectors_file)
    else:
        model = EmbeddingModel(MODEL_PATH, threads=2)
        query_vectors = model.embed(queries, truncate=True).vectors
        model.close()
        np.save(vectors_file, query_vectors)
    conn = open_database(run_dir / "quality" / "ragd.db")
    with atomic(conn, write=False):
        (public_id,) = conn.execute("SELECT public_id FROM vector_stores").fetchone() or ("",)
        key, vector_store = vector_stores.lookup(conn, str(public_id))
        file_doc = {f"{pair.key}.txt": n for n, pair in enumerate(pairs)}
        doc_of = {
            cast(int, chunk): file_doc[cast(str, name)]
            for chunk, name in conn.execute(
                "SELECT c.id, f.filename FROM chunks AS c JOIN files AS f ON f.id = c.file_id"
                " WHERE c.vector_store_id = ?",
                (key,),
            )
        }
        matrix = {
            cast(int, chunk): np.frombuffer(cast(bytes, blob), dtype=np.float32)
            for chunk, blob in conn.execute(f"SELECT rowid, embedding FROM vec_{key:d}")
        }
        texts = conn.execute(
            "SELECT id, text FROM chunks WHERE vector_store_id = ?", (key,)
        ).fetchall()
    fulltext.for_database(conn).catch_up(conn, key)
    fts5 = Fts5(run_dir / "fusion-fts5.db")
    fts5.add(cast(list[tuple[int, str]], texts))
    fuses = variants()
    ranked: dict[str, list[list[int]]] = {name: [] for name in fuses}
    for query, query_vector in zip(queries, query_vectors, strict=True):
        with atomic(conn, write=False):
            near = vector.ranked(
                conn, key, vector_store, query=to_bytes(query_vector), k=CANDIDATES, model="",
                condition=None, index=IndexSettings(), exact=True,
            )  # fmt: skip
            words, ceiling = lexical.ranked(conn, key, text=query, k=CANDIDATES, condition=None)
        before = [(chunk, -score) for chunk, score in fts5.ranked(query, CANDIDATES)]
        lists: Lists = (near, words, ceiling, before)
        cos = {
            chunk: float(matrix[chunk] @ query_vector)
            for chunk in {c for c, _ in [*near, *words, *before]}
            if chunk in matrix
        }
        for name, fuse in fuses.items():
            ranked[name].append(_documents(fuse(lists, doc_of, cos), doc_of))
    fts5.close()
    right = list(range(len(pairs)))
    print(f"{len(pairs)} queries; MRR@10 all / even / odd, recall@1, recall@10")
    for name, found in ranked.items():
        whole = Quality.of(found, right)
        even = Quality.of(found[::2], right[::2])
        odd = Quality.of(found[1::2], right[1::2])
        print(
            f"| {name} | {whole.mrr_10:.3f} | {even.mrr_10:.3f} | {odd.mrr_10:.3f}"
            f" | {whole.recall_1:.3f} | {whole.recall_10:.3f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
