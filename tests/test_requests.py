"""Request bodies declared once (services/gateway/requests.py): each model keeps the error
contract the hand-written checks had (a 400's param and code, a message naming the field) and
gives the JSON Schema /openapi.json embeds. In process, no server."""

from __future__ import annotations

from typing import Any

import pytest

from services.common.vocabulary import MAX_SEARCH_QUERIES, MAX_SEARCH_RESULTS, SEARCH_MODES
from services.gateway.admin_bodies import (
    ApiKeyRequest,
    BackupRequest,
    ProjectRequest,
    RestoreRequest,
)
from services.gateway.app import ROUTES
from services.gateway.chat.tools import parse as parse_tools
from services.gateway.conversation_bodies import (
    ConversationCreate,
    ConversationUpdate,
    HistorySearchRequest,
    ItemsCreate,
)
from services.gateway.errors import InvalidRequest
from services.gateway.ingest import ChunkingStrategyBody
from services.gateway.openapi import build_spec
from services.gateway.requests import RequestModel, parse
from services.gateway.routes import files as files_route
from services.gateway.routes.embeddings import EmbeddingRequest
from services.gateway.routes.files import FileUpload
from services.gateway.search_body import SearchRequest
from services.gateway.uploads import Upload
from services.gateway.vector_store_bodies import VectorStoreCreate, VectorStoreUpdate


@pytest.mark.parametrize(
    ("body", "param", "code", "message"),
    [
        ({}, "query", "missing_required_parameter", "'query' is required"),
        ({"query": 5}, "query", "invalid_value", "'query' must be a non-empty string or array"),
        ({"query": ["a", " "]}, "query", "invalid_value", "every 'query' must be a non-empty"),
        ({"query": ["q"] * (MAX_SEARCH_QUERIES + 1)}, "query", "too_many_queries", "at most 20"),
        ({"query": "x" * 5000}, "query", "query_too_long", "query 0 has 5000 characters"),
        ({"query": "\ud800"}, "query", "invalid_value", "lone surrogate"),
        (
            {"query": "x", "max_num_results": 51},
            "max_num_results",
            "invalid_value",
            "'max_num_results' must be between 1 and 50, got 51",
        ),
        ({"query": "x", "max_num_results": 5.0}, "max_num_results", "invalid_type", "integer"),
        ({"query": "x", "max_num_results": True}, "max_num_results", "invalid_type", "integer"),
        ({"query": "x", "max_num_results": "5"}, "max_num_results", "invalid_type", "integer"),
        ({"query": "x", "mode": "semantic"}, "mode", "invalid_value", "got 'semantic'"),
        ({"query": "x", "exact": 1}, "exact", "invalid_type", "'exact' must be a boolean"),
        ({"query": "x", "rewrite_query": "y"}, "rewrite_query", "invalid_type", "boolean"),
        ({"query": "x", "ranking_options": []}, "ranking_options", "invalid_type", "an object"),
        (
            {"query": "x", "ranking_options": {"ranker": "magic"}},
            "ranking_options",
            "invalid_value",
            "'ranking_options.ranker' must be one of auto, default-2024-11-15, none",
        ),
        (
            {"query": "x", "ranking_options": {"score_threshold": 2}},
            "score_threshold",
            "invalid_value",
            "'ranking_options.score_threshold' must be between 0 and 1, got 2",
        ),
        (
            {"query": "x", "ranking_options": {"hybrid_search": {"text_weight": -1}}},
            "text_weight",
            "invalid_value",
            "'ranking_options.hybrid_search.text_weight' must be between 0",
        ),
        (
            {
                "query": "x",
                "ranking_options": {"hybrid_search": {"embedding_weight": 0, "text_weight": 0}},
            },
            "ranking_options",
            "invalid_value",
            "needs a positive embedding_weight or text_weight",
        ),
        ({"query": "x", "filters": 5}, "filters", "invalid_value", "'filters' must be an object"),
        (
            {"query": "x", "filters": {"type": "or", "filters": [{"type": "eq", "key": ""}]}},
            "filters",
            "invalid_value",
            "'filters.filters[0].key' must be a non-empty string",
        ),
    ],
)
def test_a_bad_search_body_names_its_field_as_before(
    body: dict[str, Any], param: str, code: str, message: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse(SearchRequest, body)
    assert (refused.value.param, refused.value.code) == (param, code)
    assert message in refused.value.message


def test_nulls_read_as_absent_and_a_good_body_becomes_a_search() -> None:
    body = {"query": "x", "max_num_results": None, "ranking_options": {"ranker": None}}
    assert parse(SearchRequest, body).search("vs_1").k == 10
    asked = parse(
        SearchRequest,
        {
            "query": ["a", "b"],
            "max_num_results": 3,
            "mode": "lexical",
            "exact": True,
            "ranking_options": {
                "score_threshold": 0.5,
                "hybrid_search": {"embedding_weight": 3, "text_weight": 1},
            },
            "filters": {"type": "in", "key": "lang", "value": ["en", "fr"]},
            "unknown": "ignored, as OpenAI's unknown members are",
        },
    ).search("vs_1")
    assert (asked.vector_store_id, list(asked.queries), asked.k, asked.mode) == (
        "vs_1",
        ["a", "b"],
        3,
        "lexical",
    )
    assert (asked.exact, asked.score_threshold, asked.vector_weight) == (True, 0.5, 0.75)
    assert asked.filter is not None and list(asked.filter.comparison.values) != []


def test_the_openapi_document_embeds_the_models_schema() -> None:
    schemas = build_spec(ROUTES)["components"]["schemas"]
    search = schemas["SearchRequest"]
    assert search["required"] == ["query"]
    properties = search["properties"]
    assert properties["max_num_results"]["maximum"] == MAX_SEARCH_RESULTS
    assert properties["mode"]["enum"] == list(SEARCH_MODES)
    assert properties["filters"]["anyOf"][0] == {"$ref": "#/components/schemas/Filter"}
    ranking = schemas["RankingOptions"]["properties"]
    assert ranking["score_threshold"] == {"default": 0.0, "maximum": 1.0, "minimum": 0.0,
                                          "type": "number"}  # fmt: skip
    assert "HybridSearch" in schemas


@pytest.mark.parametrize(
    ("body", "param", "code", "message"),
    [
        ({"name": 5}, "name", "invalid_type", "'name' must be a string"),
        ({"name": "n" * 257}, "name", "string_too_long", "'name' is longer than 256"),
        ({"metadata": "nope"}, "metadata", "invalid_type", "'metadata' must be an object"),
        (
            {"metadata": {f"k{i}": "v" for i in range(17)}},
            "metadata",
            "invalid_value",
            "'metadata' can have at most 16 keys",
        ),
        ({"metadata": {"k": 1}}, "metadata", "invalid_type", "'metadata.k' must be a string"),
        ({"metadata": {"\ud800": "v"}}, "metadata", "invalid_value", "lone surrogate"),
        ({"file_ids": "file-1"}, "file_ids", "invalid_type", "'file_ids' must be an array"),
        (
            {"expires_after": {"anchor": "created_at", "days": 1}},
            "expires_after",
            "invalid_value",
            "'expires_after.anchor' must be one of last_active_at, got 'created_at'",
        ),
        (
            {"expires_after": {"anchor": "last_active_at", "days": 0}},
            "expires_after",
            "invalid_value",
            "'expires_after.days' must be between 1 and 365, got 0",
        ),
        (
            {"chunking_strategy": {"type": "fancy"}},
            "chunking_strategy",
            "invalid_value",
            "'chunking_strategy.type' must be one of auto, static, got 'fancy'",
        ),
        (
            {"chunking_strategy": {"type": "static"}},
            "chunking_strategy",
            "invalid_value",
            "'chunking_strategy.static' must be an object",
        ),
        (
            {
                "chunking_strategy": {
                    "type": "static",
                    "static": {"max_chunk_size_tokens": 200, "chunk_overlap_tokens": 150},
                }
            },
            "chunking_strategy",
            "invalid_value",
            "'chunking_strategy.static.chunk_overlap_tokens' must be an integer from 0 to half",
        ),
    ],
)
def test_a_bad_vector_store_body_names_its_field(
    body: dict[str, Any], param: str, code: str, message: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse(VectorStoreCreate, body)
    assert (refused.value.param, refused.value.code) == (param, code)
    assert message in refused.value.message


def test_an_update_tells_null_from_absent() -> None:
    asked = parse(VectorStoreUpdate, {"name": None, "metadata": {"a": "b"}})
    assert asked.model_fields_set == {"name", "metadata"}
    assert asked.name is None and asked.metadata == {"a": "b"}


def test_a_nested_body_is_named_where_it_sits() -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse(
            ChunkingStrategyBody, {"type": "static", "static": 3}, at="files[2].chunking_strategy"
        )
    assert refused.value.param == "files[2].chunking_strategy"
    assert refused.value.message == "'files[2].chunking_strategy.static' must be an object"


def _upload(**fields: str) -> dict[str, Any]:
    return files_route._form(Upload("a.txt", b"x", dict(fields)))


def test_an_upload_form_reads_the_sdks_expires_after_fields() -> None:
    asked = parse(
        FileUpload,
        _upload(
            purpose="assistants",
            **{"expires_after[anchor]": "created_at", "expires_after[seconds]": "3600"},
        ),
    )
    assert (
        asked.purpose == "assistants"
        and asked.expires_after is not None
        and asked.expires_after.seconds == 3600
    )
    as_json = _upload(purpose="batch", expires_after='{"anchor": "created_at", "seconds": 7200}')
    assert parse(FileUpload, as_json).expires_after.seconds == 7200  # type: ignore[union-attr]
    assert parse(FileUpload, _upload(purpose="user_data")).expires_after is None


@pytest.mark.parametrize(
    ("fields", "param", "message"),
    [
        ({}, "purpose", "'purpose' is required"),
        ({"purpose": "anything"}, "purpose", "must be one of assistants, batch"),
        (
            {"purpose": "assistants", "expires_after[seconds]": "60"},
            "expires_after",
            "'expires_after.anchor' is required",
        ),
        (
            {
                "purpose": "assistants",
                "expires_after[anchor]": "created_at",
                "expires_after[seconds]": "9" * 40,
            },
            "expires_after",
            "'expires_after.seconds' must be an integer",
        ),
        (
            {"purpose": "assistants", "expires_after": '{"anchor": "created_at", "seconds": 60}'},
            "expires_after",
            "'expires_after.seconds' must be between 3600 and 2592000, got 60",
        ),
    ],
)
def test_a_bad_upload_form_names_its_field(
    fields: dict[str, str], param: str, message: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse(FileUpload, _upload(**fields))
    assert refused.value.param == param
    assert message in refused.value.message


@pytest.mark.parametrize(
    ("body", "code", "message"),
    [
        ({}, "missing_required_parameter", "'input' is required"),
        ({"input": None}, "missing_required_parameter", "'input' is required"),
        ({"input": 5}, "invalid_type", "'input' must be a string or an array of strings"),
        ({"input": []}, "invalid_value", "'input' must not be empty"),
        ({"input": ["ok", ""]}, "invalid_value", "'input[1]' is an empty string"),
        ({"input": ["ok", None]}, "invalid_type", "'input[1]' must be a string"),
        ({"input": [[1, 2]]}, "unsupported_input", "token-id inputs are not supported"),
        ({"input": ["x"] * 2049}, "invalid_value", "'input' can have at most 2048 items"),
    ],
)
def test_a_bad_embedding_body_names_its_input(
    body: dict[str, Any], code: str, message: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse(EmbeddingRequest, body)
    assert (refused.value.param, refused.value.code) == ("input", code)
    assert message in refused.value.message


def test_an_embedding_body_reads_its_options() -> None:
    asked = parse(EmbeddingRequest, {"input": "x", "truncate": None, "encoding_format": "base64"})
    assert (asked.input, asked.truncate, asked.encoding_format) == (["x"], False, "base64")
    with pytest.raises(InvalidRequest) as refused:
        parse(EmbeddingRequest, {"input": "x", "encoding_format": "int8"})
    assert refused.value.param == "encoding_format"


@pytest.mark.parametrize(
    ("model", "body", "param", "code", "message"),
    [
        (ConversationCreate, {"items": "hi"}, "items", "invalid_value", "'items' must be an array"),
        (ConversationCreate, {"items": [{}] * 21}, "items", "invalid_value", "at most 20 items"),
        (ConversationCreate, {"title": "x" * 201}, "title", "string_too_long", "'title' is longer"),
        (ConversationCreate, {"metadata": {"a": 1}}, "metadata", "invalid_type", "'metadata.a'"),
        (
            ConversationCreate,
            {"items": [{"role": "robot", "content": "hi"}]},
            "items",
            "invalid_value",
            "'items[0].role' must be one of",
        ),
        (ConversationUpdate, {}, "metadata", "invalid_value", "send 'metadata' (or 'title')"),
        (ItemsCreate, {}, "items", "missing_required_parameter", "'items' is required"),
        (ItemsCreate, {"items": []}, "items", "invalid_value", "non-empty array of items"),
        (HistorySearchRequest, {}, "query", "missing_required_parameter", "'query' is required"),
        (HistorySearchRequest, {"query": " "}, "query", "invalid_value", "must not be empty"),
        (HistorySearchRequest, {"query": "x" * 5000}, "query", "string_too_long", "longer than"),
        (
            HistorySearchRequest,
            {"query": "x", "max_num_results": 101},
            "max_num_results",
            "invalid_value",
            "between 1 and 100, got 101",
        ),
        (HistorySearchRequest, {"query": "x", "mode": "fuzzy"}, "mode", "invalid_value", "one of"),
    ],
)
def test_a_bad_conversation_body_names_its_field(
    model: type[RequestModel], body: dict[str, Any], param: str, code: str, message: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse(model, body)
    assert (refused.value.param, refused.value.code) == (param, code)
    assert message in refused.value.message


def test_conversation_bodies_read_their_items_and_tell_null_from_absent() -> None:
    assert parse(ConversationCreate, {"items": [], "title": None}).items == []
    created = parse(ConversationCreate, {"items": [{"role": "user", "content": "hi"}]})
    assert [(item.type, item.role) for item in created.items] == [("message", "user")]
    cleared = parse(ConversationUpdate, {"title": None})
    assert cleared.model_fields_set == {"title"} and cleared.title is None
    assert parse(HistorySearchRequest, {"query": "x", "mode": None}).mode == "hybrid"
    schemas = build_spec(ROUTES)["components"]["schemas"]
    assert "title" in schemas["ConversationUpdate"]["properties"]
    assert schemas["ItemsCreate"]["required"] == ["items"]
    assert schemas["HistorySearchRequest"]["properties"]["max_num_results"]["maximum"] == 100


@pytest.mark.parametrize(
    ("model", "body", "param", "code", "message"),
    [
        (ApiKeyRequest, {"name": "x"}, "scope", "missing_required_parameter", "'scope' is"),
        (ApiKeyRequest, {"name": "x", "scope": "root"}, "scope", "invalid_value", "one of read"),
        (ApiKeyRequest, {"name": "x" * 65, "scope": "read"}, "name", "string_too_long", "64"),
        (
            ApiKeyRequest,
            {"name": "x", "scope": "read", "vector_stores": "vs_1"},
            "vector_stores",
            "invalid_type",
            "must be an array",
        ),
        (
            ApiKeyRequest,
            {"name": "x", "scope": "read", "requests_per_minute": -1},
            "requests_per_minute",
            "invalid_value",
            "between 0 and",
        ),
        (
            ApiKeyRequest,
            {"name": "x", "scope": "read", "project_conversations": 1},
            "project_conversations",
            "invalid_type",
            "a boolean",
        ),
        (ProjectRequest, {}, "name", "missing_required_parameter", "'name' is required"),
        (BackupRequest, {"path": "\ud800"}, "path", "invalid_value", "lone surrogate"),
        (RestoreRequest, {}, "path", "invalid_value", "or set 'from_replica'"),
        (RestoreRequest, {"path": "a.db", "from_replica": True}, "path", "invalid_value", "or"),
        (
            RestoreRequest,
            {"path": "a.db", "timestamp": "2026-01-01T00:00:00Z"},
            "timestamp",
            "invalid_value",
            "applies to a restore from the replica",
        ),
    ],
)
def test_a_bad_operator_body_names_its_field(
    model: type[RequestModel], body: dict[str, Any], param: str, code: str, message: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse(model, body)
    assert (refused.value.param, refused.value.code) == (param, code)
    assert message in refused.value.message


def test_operator_bodies_read_their_defaults() -> None:
    key = parse(ApiKeyRequest, {"name": "k", "scope": "read", "vector_stores": None})
    assert (key.vector_stores, key.requests_per_minute, key.project) == ([], 0, "")
    assert parse(BackupRequest, {}).path == ""
    assert parse(RestoreRequest, {"from_replica": True}).timestamp == ""
    schemas = build_spec(ROUTES)["components"]["schemas"]
    assert schemas["ApiKeyRequest"]["required"] == ["name", "scope"]
    assert schemas["RestoreRequest"]["properties"]["from_replica"]["type"] == "boolean"


@pytest.mark.parametrize(
    ("ranking", "message"),
    [
        ({"ranker": "magic"}, "'tools[0].ranking_options.ranker' must be one of"),
        ({"score_threshold": 2}, "'tools[0].ranking_options.score_threshold' must be between"),
        (
            {"hybrid_search": {"embedding_weight": 0, "text_weight": 0}},
            "'tools[0].ranking_options.hybrid_search' needs a positive",
        ),
    ],
)
def test_a_file_search_tool_reads_its_ranking_options_as_a_search_does(
    ranking: dict[str, Any], message: str
) -> None:
    tool = {"type": "file_search", "vector_store_ids": ["vs_1"], "ranking_options": ranking}
    with pytest.raises(InvalidRequest) as refused:
        parse_tools([tool], None, None, None, True)
    assert (refused.value.param, refused.value.code) == ("tools", "invalid_value")
    assert message in refused.value.message
    good = {"score_threshold": 0.3, "hybrid_search": {"embedding_weight": 3, "text_weight": 1}}
    (search,) = parse_tools([{**tool, "ranking_options": good}], None, None, None, True).searches
    assert (search.score_threshold, search.vector_weight) == (0.3, 0.75)
