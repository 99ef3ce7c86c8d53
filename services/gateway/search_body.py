"""The body of POST /v1/vector_stores/{id}/search, declared once (requests.py): OpenAI's
fields, ragd's `mode` and `exact` extensions, their limits from the shared vocabulary."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    PlainValidator,
    WithJsonSchema,
    model_validator,
)

from services.common import vocabulary as v
from services.gateway.filters import parse_filter
from services.gateway.requests import Param, RequestModel, component, fail
from services.gateway.schemas import QUERY
from services.gateway.search import Search
from services.pb import store_pb2


def _listed(value: Any) -> Any:
    """A single query is a list of one."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not value or not all(isinstance(q, str) for q in value):
        raise fail("invalid_value", "'query' must be a non-empty string or array of strings")
    return value


def _bounded(queries: list[str]) -> list[str]:
    if len(queries) > v.MAX_SEARCH_QUERIES:
        raise fail(
            "too_many_queries",
            f"'query' can hold at most {v.MAX_SEARCH_QUERIES} queries, got {len(queries)}",
        )
    for index, query in enumerate(queries):
        if not query or query.isspace():
            raise fail("invalid_value", "every 'query' must be a non-empty string")
        if len(query) > v.MAX_QUERY_CHARS:
            raise fail(
                "query_too_long",
                f"query {index} has {len(query)} characters; the limit is {v.MAX_QUERY_CHARS}",
            )
        try:
            query.encode("utf-8")
        except UnicodeEncodeError:
            # JSON can carry lone surrogates ("\ud800"), which protobuf strings cannot.
            raise fail(
                "invalid_value", "'query' is not valid Unicode text (lone surrogate)"
            ) from None
    return queries


Queries = Annotated[
    list[str],
    BeforeValidator(_listed),
    AfterValidator(_bounded),
    WithJsonSchema(
        {
            "oneOf": [
                QUERY,
                {"type": "array", "minItems": 1, "maxItems": v.MAX_SEARCH_QUERIES, "items": QUERY},
            ]
        }
    ),
]
# OpenAI's attribute filters: recursive, checked and converted by filters.py (one pass), which
# names every failure's path itself; described by the Filter component.
FilterBody = Annotated[
    store_pb2.Filter, PlainValidator(parse_filter), WithJsonSchema(component("Filter"))
]
# The hand-written checks named the numbers of ranking_options by their own names.
Weight = Annotated[float, Field(ge=0.0, le=1e6)]


class HybridSearch(RequestModel):
    """Each ranking's share of a hybrid score is its weight over their sum."""

    embedding_weight: Annotated[Weight, Param("embedding_weight")] = 1.0
    text_weight: Annotated[Weight, Param("text_weight")] = 1.0


class RankingOptions(RequestModel):
    ranker: Literal[v.RANKERS] = "auto"  # type: ignore[valid-type]
    score_threshold: Annotated[float, Field(ge=0.0, le=1.0), Param("score_threshold")] = 0.0
    hybrid_search: HybridSearch | None = None

    @model_validator(mode="after")
    def _weighed(self) -> RankingOptions:
        hybrid = self.hybrid_search
        if hybrid is not None and hybrid.embedding_weight + hybrid.text_weight <= 0:
            raise fail(
                "invalid_value",
                # {path}: where the options sit (a search's, or a file_search tool's).
                "'{path}.hybrid_search' needs a positive embedding_weight or text_weight",
            )
        return self

    def vector_weight(self) -> float | None:
        """The vector ranking's share of a hybrid search; None when not sent (the store's
        default)."""
        hybrid = self.hybrid_search
        if hybrid is None:
            return None
        return hybrid.embedding_weight / (hybrid.embedding_weight + hybrid.text_weight)


_NO_RANKING = RankingOptions()


class SearchRequest(RequestModel):
    query: Queries
    max_num_results: Annotated[int, Field(ge=1, le=v.MAX_SEARCH_RESULTS)] = 10
    filters: FilterBody | None = None
    ranking_options: RankingOptions | None = None
    rewrite_query: Annotated[
        bool, Field(description="accepted; the query is searched as given")
    ] = False
    mode: Annotated[
        Literal[v.SEARCH_MODES],  # type: ignore[valid-type]
        Field(
            description="ragd extension: vector (embedding KNN), lexical (bm25 over the chunk "
            "text, no embedder needed) or hybrid (both rankings fused, the default)"
        ),
    ] = v.DEFAULT_SEARCH_MODE
    exact: Annotated[
        bool,
        Field(
            description="ragd extension: rank by an exhaustive scan instead of the coarse index "
            "large vector stores use (exact, slower); filters are exact either way"
        ),
    ] = False

    def search(self, vector_store_id: str) -> Search:
        ranking = self.ranking_options or _NO_RANKING
        return Search(
            vector_store_id,
            self.query,
            self.max_num_results,
            self.mode,
            ranking.score_threshold,
            self.filters,
            self.exact,
            ranking.vector_weight(),
        )
