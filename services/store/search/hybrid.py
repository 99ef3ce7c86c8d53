"""Hybrid search: the vector and the lexical rankings fused into one.

Each list contributes its top candidate_count(k) chunks, under the same attribute filter.
Their scores live on unrelated scales (cosine, bm25), so each list's are first mapped onto
[0, 1] by min-max over its own candidates (best 1, last 0), and a chunk's fused score is
VECTOR_WEIGHT times its vector part plus the rest times its lexical part (0 for a list it is
not in). A chunk then gains FILE_SUPPORT times the best fused score of another candidate of
its file, and each further chunk of a file already ranked counts FILE_DECAY times less than
the one before it: the top k holds more files, while one file that matches far better than
the rest still fills it.

Measured on the docstring benchmark (bench/quality.py, 2,000 documents, file-level hits),
against reciprocal rank fusion (RRF, k = 60), which this replaced: MRR@10 0.688 -> 0.717,
recall@1 0.555 -> 0.594, recall@10 0.909 -> 0.933 (the min-max fusion gave +0.013 MRR@10,
the decay +0.016 recall@10, the support +0.014 MRR@10). RRF's constant and list weights moved
it by less than 0.005; the weight here is flat between 0.45 and 0.55, the support between 0.3
and 0.5, each tuned on one half of the queries and the same on the other; a weight by query
length gained nothing.

Fused scores mean nothing across queries, so the reported scores are the fused ones divided
by the best (order kept) times the best vector score among the candidates: the top hit scores
as close as anything in the store came to the query's meaning, and score_threshold keeps what
it keeps in vector mode, an unrelated query's hits included (they score low, not 1). Without
vector candidates (no vectors yet: lexical-only operation) the top hit scores 1.

Conversation history (items.py) fuses with reciprocal_rank_fusion: its lists are short and
their ties matter more than their margins.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.store.search.hits import Candidate
from services.store.vector_index import MAX_K

# The vector list's share of a fused score; the lexical list has the rest.
VECTOR_WEIGHT = 0.5
# A chunk gains this share of the best fused score of another candidate of its file: a file
# that matches the query in several places is more likely the one asked about.
FILE_SUPPORT = 0.3
# Each further chunk of a file counts this much less than the file's chunk before it.
FILE_DECAY = 0.5
# Reciprocal rank fusion's constant (Cormack, Clarke and Buettcher, 2009): it damps the
# weight of the very first ranks.
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


def _spread(candidates: Sequence[Candidate]) -> dict[int, float]:
    """Each candidate's score mapped onto [0, 1] over the list (min-max): best 1, last 0."""
    if not candidates:
        return {}
    high = max(c.score for c in candidates)
    low = min(c.score for c in candidates)
    if high <= low:
        return {c.key: 1.0 for c in candidates}
    return {c.key: (c.score - low) / (high - low) for c in candidates}


def fuse(
    vector: Sequence[Candidate], lexical: Sequence[Candidate], k: int
) -> list[tuple[int, float]]:
    """The top k (chunk key, score) of the fused ranking, best first, scaled so the best
    scores the best vector score."""
    near = _spread(vector)
    words = _spread(lexical)
    own = {
        key: VECTOR_WEIGHT * near.get(key, 0.0) + (1.0 - VECTOR_WEIGHT) * words.get(key, 0.0)
        for key in [*near, *words]
    }
    fused = _supported(own, vector, lexical, k)
    if not fused:
        return []
    best = fused[0][1]
    scale = max((c.score for c in vector), default=1.0)
    return [(key, (min(1.0, value / best) if best > 0 else 1.0) * scale) for key, value in fused]


def fuse_evidence(
    vector: Sequence[Candidate],
    lexical: Sequence[Candidate],
    ceiling: float,
    k: int,
    weight: float = VECTOR_WEIGHT,
) -> list[tuple[int, float]]:
    """Fusion on absolute evidence: `vector` holds every candidate with its cosine, `lexical`
    the lexical candidates with their bm25, `ceiling` the bm25 a chunk could reach at most."""
    near = {c.key: max(0.0, min(1.0, c.score)) for c in vector}
    words = {c.key: min(1.0, c.score / ceiling) if ceiling > 0 else 0.0 for c in lexical}
    own = {
        key: weight * near.get(key, 0.0) + (1.0 - weight) * words.get(key, 0.0)
        for key in [*near, *words]
    }
    fused = _supported(own, vector, lexical, k)
    return [(key, min(1.0, value / (1.0 + FILE_SUPPORT))) for key, value in fused]


def _supported(
    own: dict[int, float], vector: Sequence[Candidate], lexical: Sequence[Candidate], k: int
) -> list[tuple[int, float]]:
    """The top k of `own` scores after each chunk gains FILE_SUPPORT times the best other
    candidate of its file and each further chunk of a file counts FILE_DECAY times less."""
    file_of = {c.key: c.file_id for c in lexical}
    file_of.update((c.key, c.file_id) for c in vector)
    # The best two fused scores of each file's candidates: a chunk's support is the best of
    # its file's other chunks.
    top: dict[str, list[float]] = {}
    for key, value in own.items():
        pair = top.setdefault(file_of[key], [])
        pair.append(value)
        pair.sort(reverse=True)
        del pair[2:]
    fused = {}
    for key, value in own.items():
        first, second = [*top[file_of[key]], 0.0][:2]
        fused[key] = value + FILE_SUPPORT * (second if value == first else first)
    # Ties: a chunk both lists found, then the better vector rank, then the better lexical
    # rank (dicts keep list order).
    near = [c.key for c in vector]
    in_near = set(near)
    in_words = {c.key for c in lexical}
    order = list(dict.fromkeys([*near, *(c.key for c in lexical if c.key not in in_near)]))
    found = {key: (key in in_near) + (key in in_words) for key in order}
    ranked = sorted(order, key=lambda key: (-fused[key], -found[key]))
    seen: dict[str, int] = {}
    for key in ranked:
        file_id = file_of[key]
        fused[key] *= FILE_DECAY ** seen.get(file_id, 0)
        seen[file_id] = seen.get(file_id, 0) + 1
    ranked = sorted(ranked, key=lambda key: (-fused[key], -found[key]))[:k]
    return [(key, fused[key]) for key in ranked]
