"""Hybrid rankings compared offline: the same chunks, vectors and queries ranked by the
lexical index before issue 33 (FTS5's bm25, bench/fts5.py) and after (Tantivy), each fused
with the same vector candidates: by min-max fusion (before issue 33), by evidence (issue 33's
first fusion, ranked by each chunk's absolute score), and by the store's search/hybrid.py now
(ranked by the lists' spreads, scored by evidence) at several vector weights; file-level
recall@1, recall@10 and MRR@10 as scenario 9 counts them. Queries are split into two halves
(even and odd) so that a setting chosen on one is checked on the other.

    python -m bench.fusion [--docs 2000] [--cache bench/results/cache] [--work DIR]

Two sets, each built in this process into a real store (a temporary folder): scenario 9's
docstrings (the summary line of each the query) and the Linux man pages (bench/mansets.py:
the NAME line the query), chunked as bench/mansets.py does and embedded here with the
stack's model (vectors cached in --work, so a second run embeds nothing).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import cast

import numpy as np

from bench import mansets
from bench.fts5 import Fts5
from bench.processes import MODEL_PATH
from bench.pydocs import corpus, load
from bench.quality import K, Quality
from services.common.vectors import FloatMatrix, to_bytes
from services.embedder.model import EmbeddingModel
from services.store import fulltext, vector_stores
from services.store.db import atomic
from services.store.records import ChunkInput
from services.store.repository import Repository
from services.store.search import hybrid, lexical, vector
from services.store.search.hits import Candidate
from services.store.vector_index import IndexSettings

CANDIDATES = hybrid.candidate_count(K)
DIMENSIONS = 384

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
             doc_of: dict[int, int], cos: dict[int, float] | None = None) -> list[int]:  # fmt: skip
    """Min-max fusion, the vector spread over the vector list's own candidates, or with `cos`
    over every candidate's exact cosine."""
    if cos is None:
        vectors = [Candidate(c, str(doc_of[c]), s) for c, s in near if c in doc_of]
    else:
        every = dict(near) | dict(words)
        vectors = [Candidate(c, str(doc_of[c]), cos[c]) for c in every if c in doc_of]
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
    found["hybrid min-max, every candidate's exact cosine"] = lambda lists, doc_of, cos: _min_max(
        lists[0], lists[1], doc_of, cos
    )
    for weight in (0.5, 0.7):
        found[f"hybrid ranked by evidence (issue 33's first), weight {weight}"] = _by_evidence(
            weight
        )
    for weight in (0.3, 0.4, 0.5, 0.6, 0.7):
        found[f"hybrid, the store's fusion, weight {weight}"] = _store(weight)
    return found


def _candidates(lists: Lists, doc_of: dict[int, int], cos: dict[int, float]
                ) -> tuple[list[Candidate], list[Candidate]]:  # fmt: skip
    near, words, _, _ = lists
    vectors = [Candidate(c, str(doc_of[c]), (1.0 + cos[c]) / 2.0)
               for c in dict(near) | dict(words) if c in doc_of]  # fmt: skip
    return vectors, [Candidate(c, str(doc_of[c]), s) for c, s in words if c in doc_of]


def _store(weight: float) -> Fuse:
    def fuse(lists: Lists, doc_of: dict[int, int], cos: dict[int, float]) -> list[int]:
        vectors, texts = _candidates(lists, doc_of, cos)
        listed = {c for c, _ in lists[0]}
        return [chunk for chunk, _ in hybrid.fuse(vectors, texts, lists[2], K, weight, listed)]

    return fuse


def _by_evidence(weight: float) -> Fuse:
    """Each chunk ranked by its own absolute evidence (the score the store reports), as the
    store ranked from issue 33's first fusion until the man-page set showed it lower."""

    def fuse(lists: Lists, doc_of: dict[int, int], cos: dict[int, float]) -> list[int]:
        vectors, texts = _candidates(lists, doc_of, cos)
        ceiling = lists[2]
        near = {c.key: max(0.0, 2.0 * c.score - 1.0) for c in vectors}
        words = {c.key: min(1.0, c.score / ceiling) for c in texts} if ceiling > 0 else {}
        own = {
            key: weight * near.get(key, 0.0) + (1.0 - weight) * words.get(key, 0.0)
            for key in [*near, *words]
        }
        return [chunk for chunk, _ in hybrid.supported(own, vectors, texts, K)]

    return fuse


def _embedded(model: EmbeddingModel, texts: Sequence[str], path: Path) -> FloatMatrix:
    if path.exists():
        cached: FloatMatrix = np.load(path)
        if len(cached) == len(texts):
            return cached
    vectors: list[FloatMatrix] = []
    for start in range(0, len(texts), 64):
        vectors.append(model.embed(texts[start : start + 64], truncate=True).vectors)
        print(f"  embedded {start + 64} of {len(texts)}", file=sys.stderr, end="\r")
    matrix = np.concatenate(vectors)
    np.save(path, matrix)
    return matrix


def compare(
    name: str, docs: Sequence[str], queries: Sequence[str], work: Path, model: EmbeddingModel
) -> None:
    parts = [mansets.chunks(text) for text in docs]
    texts = [part for chunked in parts for part in chunked]
    chunk_vectors = _embedded(model, texts, work / f"{name}-chunks.npy")
    query_vectors = _embedded(model, list(queries), work / f"{name}-queries.npy")
    with tempfile.TemporaryDirectory(dir=work) as folder:
        repo = Repository(Path(folder) / "ragd.db")
        repo.migrate()
        public_id = repo.create_vector_store(name, "all-MiniLM-L6-v2", DIMENSIONS).id
        at = 0
        for number, chunked in enumerate(parts):
            repo.add_chunks(
                public_id,
                f"file-{number:06d}",
                f"{number}.txt",
                {},
                [ChunkInput(part, 0) for part in chunked],
                chunk_vectors[at : at + len(chunked)],
                "all-MiniLM-L6-v2",
            )
            at += len(chunked)
        conn = repo._sqlite("the fusion benchmark")
        with atomic(conn, write=False):
            key, vector_store = vector_stores.lookup(conn, public_id)
            rows = conn.execute(
                "SELECT id, file_id, text FROM chunks WHERE vector_store_id = ? ORDER BY id",
                (key,),
            ).fetchall()
        doc_of = {cast(int, c): int(str(f).removeprefix("file-")) for c, f, _ in rows}
        matrix = dict(zip((cast(int, c) for c, _, _ in rows), chunk_vectors, strict=True))
        fulltext.for_database(conn).catch_up(conn, key)
        fts5 = Fts5(Path(folder) / "fts5.db")
        fts5.add((cast(int, c), cast(str, t)) for c, _, t in rows)
        fuses = variants()
        ranked: dict[str, list[list[int]]] = {variant: [] for variant in fuses}
        for query, query_vector in zip(queries, query_vectors, strict=True):
            with atomic(conn, write=False):
                near = vector.ranked(
                    conn, key, vector_store, query=to_bytes(query_vector), k=CANDIDATES,
                    model="", condition=None, index=IndexSettings(), exact=True,
                )  # fmt: skip
                words, ceiling = lexical.ranked(conn, key, text=query, k=CANDIDATES, condition=None)
            before = [(chunk, -score) for chunk, score in fts5.ranked(query, CANDIDATES)]
            lists: Lists = (near, words, ceiling, before)
            cos = {
                chunk: float(matrix[chunk] @ query_vector)
                for chunk in {c for c, _ in [*near, *words, *before]}
                if chunk in matrix
            }
            for variant, fuse in fuses.items():
                ranked[variant].append(_documents(fuse(lists, doc_of, cos), doc_of))
        fts5.close()
        repo.close()
    right = list(range(len(docs)))
    print(f"\n{name}: {len(docs)} documents, {len(texts)} chunks, {len(queries)} queries;")
    print("| ranking | MRR@10 all / even / odd | recall@1 | recall@10 |")
    print("| --- | --- | ---: | ---: |")
    for variant, found in ranked.items():
        whole = Quality.of(found, right)
        even = Quality.of(found[::2], right[::2])
        odd = Quality.of(found[1::2], right[1::2])
        print(
            f"| {variant} | {whole.mrr_10:.3f} / {even.mrr_10:.3f} / {odd.mrr_10:.3f}"
            f" | {whole.recall_1:.3f} | {whole.recall_10:.3f} |"
        )


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fusion")
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--cache", type=Path, default=Path("bench/results/cache"))
    parser.add_argument("--work", type=Path, default=Path("bench/results/fusion"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sets", default="docstrings,man-pages")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    model = EmbeddingModel(MODEL_PATH, threads=args.threads)
    sets = args.sets.split(",")
    if "docstrings" in sets:
        every, _ = load(args.cache)
        docstrings = corpus(every, args.docs)
        texts, queries = [p.text for p in docstrings], [p.query for p in docstrings]
        compare(f"docstrings-{args.docs}", texts, queries, args.work, model)
    if "man-pages" in sets:
        pages = mansets.pairs(args.docs)
        texts, queries = [d for _, _, d in pages], [q for _, q, _ in pages]
        compare(f"man-pages-{args.docs}", texts, queries, args.work, model)
    model.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
