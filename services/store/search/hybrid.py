"""Hybrid search: reciprocal rank fusion of the vector and the lexical rankings.

RRF (Cormack, Clarke and Buettcher, 2009) scores a chunk sum(1 / (RRF_K + rank)) over the
lists it appears in, ranks starting at 1. It needs no calibration between cosine scores and
bm25, which live on unrelated scales, and a chunk near the top of either list stays near the
top of the fusion. Each list contributes its top candidate_count(k) chunks, under the same
attribute filter.

RRF scores mean nothing across queries, so the reported scores are the fused ones divided by
the best (order kept) times the best vector score among the candidates: the top hit scores as
close as anything in the store came to the query's meaning, and score_threshold keeps what it
keeps in vector mode, an unrelated query's hits included (they score low, not 1). Without
vector candidates (no vectors yet: lexical-only operation) the top hit scores 1.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from services.store.records import SearchHit
from services.store.vector_index import MAX_K

# The constant of the original paper; it damps the weight of the very first ranks.
RRF_K = 60
# Each list offers at least this many candidates, and CANDIDATE_FACTOR * k for larger k: a
# chunk ranked just below k in both lists can beat one ranked first in only one.
MIN_CANDIDATES = 50
CANDIDATE_FACTOR = 4


def candidate_count(k: int) -> int:
    return min(MAX_K, max(MIN_CANDIDATES, CANDIDATE_FACTOR * k))


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[str]], rrf_k: int = RRF_K
) -> list[tuple[str, float]]:
    """Ids with their fused scores, best first; ties go to the id with the better single rank,
    then to the earlier list."""
    scores: dict[str, float] = {}
    best_rank: dict[str, int] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (rrf_k + rank)
            best_rank[item] = min(best_rank.get(item, rank), rank)
    # sorted() is stable, so equal keys keep their first-seen order.
    return sorted(scores.items(), key=lambda pair: (-pair[1], best_rank[pair[0]]))


def fuse(
    vector_hits: Sequence[SearchHit],
    lexical_hits: Sequence[SearchHit],
    k: int,
) -> list[SearchHit]:
    """The top k of the fused ranking, scaled so the best scores the best vector score."""
    by_id = {hit.chunk_id: hit for hit in lexical_hits}
    by_id.update((hit.chunk_id, hit) for hit in vector_hits)
    fused = reciprocal_rank_fusion(
        [[hit.chunk_id for hit in vector_hits], [hit.chunk_id for hit in lexical_hits]]
    )
    if not fused:
        return []
    best = fused[0][1]
    scale = max((hit.score for hit in vector_hits), default=1.0)
    return [
        dataclasses.replace(by_id[chunk_id], score=min(1.0, value / best) * scale)
        for chunk_id, value in fused[:k]
    ]
