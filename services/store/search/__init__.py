"""Searching one vector store: vector (KNN over the embeddings), lexical (bm25 over the chunk
text) or hybrid (both rankings' evidence fused: search/hybrid.py), behind one entry point.

`run` validates the request once, reads the vector store and both rankings from one database
snapshot, applies the score threshold to the final scores and records the vector_store's use.
"""

from __future__ import annotations

import math

import numpy as np

from services.common.vectors import FloatMatrix, to_bytes
from services.common.vocabulary import HYBRID, LEXICAL, SEARCH_MODES, VECTOR
from services.store import engine, fulltext, vector_stores
from services.store.compat import check_vectors
from services.store.db import atomic, vectors_available, vectors_error
from services.store.errors import FullTextUnavailable, InvalidArgument, VectorsUnavailable
from services.store.records import SearchHit
from services.store.search import hits, hybrid, lexical, vector
from services.store.search.filters import Filter, compile_filter
from services.store.sql import Connection, dialect
from services.store.vector_index import MAX_K, IndexSettings

__all__ = ["HYBRID", "LEXICAL", "SEARCH_MODES", "VECTOR", "run"]


def _check(mode: str, query: FloatMatrix | None, text: str, k: int, threshold: float) -> None:
    if mode not in SEARCH_MODES:
        raise InvalidArgument(f"mode must be one of {', '.join(SEARCH_MODES)}, got {mode!r}")
    if not 1 <= k <= MAX_K:
        raise InvalidArgument(f"k must be 1..{MAX_K}, got {k}")
    if not (math.isfinite(threshold) and 0.0 <= threshold <= 1.0):
        raise InvalidArgument(f"score_threshold must be 0..1, got {threshold}")
    if mode != LEXICAL:
        if query is None or query.size == 0:
            raise InvalidArgument(f"{mode} search needs a query vector")
        if query.ndim != 1:
            raise InvalidArgument(f"expected one query vector, got an array of shape {query.shape}")
        check_vectors(query.reshape(1, -1), "query vector")
    if mode != VECTOR and not text.strip():
        raise InvalidArgument("lexical and hybrid search need a non-empty query_text")


def runnable_mode(mode: str, text: str) -> str:
    """The mode a search asked in `mode` runs in here: lexically (degraded, the caller sees
    it in the reply's mode) when this store has no sqlite-vec and the query has text."""
    mode = mode or VECTOR
    if mode == LEXICAL or vectors_available():
        return mode
    if not text:
        raise VectorsUnavailable(
            f"a {mode} search without query text needs the vector index, and this store runs "
            f"without sqlite-vec (lexical-only): {vectors_error()}"
        )
    return LEXICAL


def run(
    conn: Connection,
    *,
    vector_store_id: str,
    mode: str,
    query: FloatMatrix | bytes | None,
    text: str,
    k: int,
    score_threshold: float,
    model: str,
    filter: Filter | None,
    now: int,
    index: IndexSettings,
    exact: bool = False,
    vector_weight: float | None = None,
) -> list[SearchHit]:
    """The k best chunks of the vector store for `mode` (empty: vector), best first, without
    those scoring below the threshold. Lexical uses only `text`, vector only `query` (one
    L2-normalized vector; an empty `model` skips the model check), hybrid both. With a filter,
    only chunks of files whose attributes match compete. `exact` skips the coarse index.
    A query in the wire format (float32 bytes) goes to sqlite-vec as it came, checked in place.
    `vector_weight` (0..1) is the vector ranking's share of a hybrid score; None: the default.
    """
    mode = runnable_mode(mode, text)
    values = None
    if isinstance(query, bytes):
        if len(query) % 4:
            raise InvalidArgument(f"a query vector of {len(query)} bytes is not float32 values")
        values = np.frombuffer(query, dtype="<f4")
    elif query is not None:
        values = np.asarray(query, dtype=np.float32)
    _check(mode, values, text, k, score_threshold)
    if vector_weight is not None and not (math.isfinite(vector_weight) and 0 <= vector_weight <= 1):
        raise InvalidArgument(f"vector_weight must be 0..1, got {vector_weight}")
    condition = compile_filter(filter, dialect=dialect(conn)) if filter is not None else None
    blob = b""
    if values is not None and mode != LEXICAL:
        blob = query if isinstance(query, bytes) else to_bytes(values)

    def nearest(count: int) -> list[tuple[int, float]]:
        return vector.ranked(
            conn,
            key,
            vector_store,
            query=blob,
            k=count,
            model=model,
            condition=condition,
            index=index,
            exact=exact,
        )

    ranks: dict[int, tuple[int, int]] = {}
    lexical_ready = mode == VECTOR or _catch_up(conn, vector_store_id, mode)
    # One snapshot: a hybrid search's two rankings see the same chunks.
    with atomic(conn, write=False):
        key, vector_store = vector_stores.lookup(conn, vector_store_id, counted=False)
        if mode == VECTOR:
            ranked = nearest(k)
        elif mode == LEXICAL:
            matched, _ = lexical.ranked(conn, key, text=text, k=k, condition=condition)
            ranked = lexical.relative(matched)
        else:
            count = hybrid.candidate_count(k)
            words_found = (
                lexical.begin(conn, key, text=text, k=count, condition=condition)
                if lexical_ready
                else lambda: ([], 0.0)
            )
            near = nearest(count)
            words, ceiling = words_found()
            # Every candidate's exact closeness to the query, those only the words found too.
            scores = dict(near)
            missing = [chunk for chunk, _ in words if chunk not in scores]
            scores.update(vector.scores_of(conn, key, blob, missing))
            file_of = hits.files(conn, key, list(scores.keys() | dict(words).keys()))
            ranked = hybrid.fuse(
                [hits.Candidate(c, file_of[c], s) for c, s in scores.items() if c in file_of],
                [hits.Candidate(c, file_of[c], s) for c, s in words if c in file_of],
                ceiling,
                k,
                weight=hybrid.VECTOR_WEIGHT if vector_weight is None else vector_weight,
                listed={chunk for chunk, _ in near},
            )
            ranks = _ranks(near, words)
        kept = [(chunk, s) for chunk, s in ranked if s >= score_threshold]
        found = hits.load(conn, kept, ranks)
    vector_stores.touch(conn, key, vector_store, now)
    return found


def _catch_up(conn: Connection, vector_store_id: str, mode: str) -> bool:
    """Brings the vector_store's full-text index up to every write committed so far (outside
    any transaction: it writes). False while the index is rebuilt: a hybrid search goes on by
    vector alone, a lexical one is refused."""
    with atomic(conn, write=False):
        key, _ = vector_stores.lookup(conn, vector_store_id, counted=False)
    try:
        engine.of(conn).fulltext.for_database(conn).catch_up(conn, key)
    except fulltext.Unavailable as error:
        if mode == LEXICAL:
            raise FullTextUnavailable(str(error)) from None
        return False
    return True


def _ranks(
    near: list[tuple[int, float]], words: list[tuple[int, float]]
) -> dict[int, tuple[int, int]]:
    """Each candidate's 1-based (vector, lexical) rank, 0 where a list lacks it."""
    vector_rank = {chunk: rank for rank, (chunk, _) in enumerate(near, start=1)}
    lexical_rank = {chunk: rank for rank, (chunk, _) in enumerate(words, start=1)}
    return {
        chunk: (vector_rank.get(chunk, 0), lexical_rank.get(chunk, 0))
        for chunk in vector_rank.keys() | lexical_rank.keys()
    }
