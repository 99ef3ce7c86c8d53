"""Hybrid search: the vector and the lexical rankings fused into one.

Each list contributes its top candidate_count(k) chunks, under the same attribute filter.
Two things are computed per candidate, for two jobs:

- Its rank comes from each list's spread over its own candidates for this query (min-max:
  the best 1, the last 0, nothing for a chunk the list lacks), VECTOR_WEIGHT of the vector
  spread plus the rest of the lexical one. A spread adapts to the query (a short query's
  cosines all sit close together), which ranks better than absolute evidence does: MRR@10
  0.668 against 0.635-0.646 at every weight on 953 Linux man pages, 0.871 against 0.870 on
  500 docstrings (bench/fusion.py, BENCHMARKS.md).
  A chunk then gains FILE_SUPPORT times the best value of another candidate of its file, and
  each further chunk of a file counts FILE_DECAY times less than the one before it: the top
  k holds more files, while one file that matches far better than the rest still fills it.
- Its score is its own evidence, absolute, so it means the same in every query: the same
  weights of its cosine to the query (clipped at 0) and of its bm25 as a share of the most a
  chunk could score for the query's words (fulltext's ceiling: every word, saturated), 0 for
  words it lacks; never above the score of the chunk ranked before it. 0 is nothing in common
  with the query, 1 its meaning and all its words; a second result that only the vector list
  found keeps its closeness (a spread gave the last candidate 0 whatever its match), so
  score_threshold cuts by evidence.

A query without searchable words ranks by the vector list alone.

Conversation history (items.py) fuses with reciprocal_rank_fusion: its lists are short and
their ties matter more than their margins.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from services.store.search.hits import Candidate
from services.store.vector_index import MAX_K

# The vector list's share of a chunk's rank and of its score (OpenAI's hybrid_search
# weights set it per search); the lexical list has the rest. Equal shares of the two spreads
# ranked best on both of bench/fusion.py's sets.
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


def fuse(
    vector: Sequence[Candidate],
    lexical: Sequence[Candidate],
    ceiling: float,
    k: int,
    weight: float = VECTOR_WEIGHT,
    listed: Collection[int] | None = None,
) -> list[tuple[int, float]]:
    """The top k (chunk key, score) of the fused ranking, best first. `vector` holds every
    candidate with its exact vector score (score_from_distance), `listed` the keys the vector
    list found itself (None: all of them), `lexical` the lexical candidates with their bm25,
    `ceiling` the bm25 a chunk could reach for the query's words (0: no lexical ranking, the
    vector evidence stands alone)."""
    if ceiling <= 0:
        weight, lexical = 1.0, []
    # The cosine itself (the score is (1 + cos) / 2): unrelated text scores near 0, not 0.5.
    near = {c.key: max(0.0, 2.0 * c.score - 1.0) for c in vector}
    words = {c.key: min(1.0, c.score / ceiling) for c in lexical}
    own = _weighed(near, words, weight)
    # The vector list's spread is over its own candidates: one only the words found has none
    # (spreading every candidate's cosine ranked worse: MRR@10 0.652 against 0.668 on the
    # man pages).
    spread = _weighed(
        _spread({c.key: c.score for c in vector if listed is None or c.key in listed}),
        _spread({c.key: c.score for c in lexical}),
        weight,
    )
    # Ranked by the spreads with their files' support, scored by their own evidence: a score
    # says how well the chunk itself matches, never more than the one ranked before it.
    scored, cap = [], 1.0
    for key, _ in supported(spread, vector, lexical, k):
        cap = min(cap, own[key])
        scored.append((key, cap))
    return scored


def _weighed(near: dict[int, float], words: dict[int, float], weight: float) -> dict[int, float]:
    return {
        key: weight * near.get(key, 0.0) + (1.0 - weight) * words.get(key, 0.0)
        for key in [*near, *words]
    }


def _spread(values: dict[int, float]) -> dict[int, float]:
    """Min-max over the candidates: the best 1, the last 0 (all 1 when they are equal)."""
    if not values:
        return {}
    high, low = max(values.values()), min(values.values())
    if high <= low:
        return dict.fromkeys(values, 1.0)
    return {key: (value - low) / (high - low) for key, value in values.items()}


def supported(
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
