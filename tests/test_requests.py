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
from services.gateway.chat.requests import INCLUDABLES, ChatCompletionRequest, ResponseCreate
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


def refusal(model: type[RequestModel], body: dict[str, Any]) -> InvalidRequest:
    """The error `parse` refuses `body` with."""
    with pytest.raises(InvalidRequest) as refused:
        parse(model, body)
    return refused.value


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
    error = refusal(SearchRequest, body)
    assert (error.param, error.code) == (param, code)
    assert message in error.message


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
    error = refusal(VectorStoreCreate, body)
    assert (error.param, error.code) == (param, code)
    assert message in error.message


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
    error = refusal(model, body)
    assert (error.param, error.code) == (param, code)
    assert message in error.message


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
    error = refusal(model, body)
    assert (error.param, error.code) == (param, code)
    assert message in error.message


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
        parse(ResponseCreate, {"input": "x", "tools": [tool]})
    assert (refused.value.param, refused.value.code) == ("tools", "invalid_value")
    assert message in refused.value.message
    good = {"score_threshold": 0.3, "hybrid_search": {"embedding_weight": 3, "text_weight": 1}}
    body = {"input": "x", "tools": [{**tool, "ranking_options": good}]}
    (search,) = parse(ResponseCreate, body).turn("m").tools.searches
    assert (search.score_threshold, search.vector_weight) == (0.3, 0.75)


WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
SEARCH_TOOL = {"type": "file_search", "vector_store_ids": ["vs_1"]}


@pytest.mark.parametrize(
    ("body", "param", "code", "message"),
    [
        ({}, "input", "missing_required_parameter", "'input' is required"),
        ({"input": None}, "input", "missing_required_parameter", "'input' is required"),
        ({"input": []}, "input", "invalid_value", "non-empty array of items"),
        ({"input": "x", "model": 5}, "model", "invalid_type", "'model' must be a string"),
        ({"input": "x", "model": "m" * 257}, "model", "string_too_long", "256 characters"),
        ({"input": "x", "store": "yes"}, "store", "invalid_type", "'store' must be a boolean"),
        ({"input": "x", "temperature": 3}, "temperature", "invalid_value", "between 0 and 2"),
        ({"input": "x", "top_p": "1"}, "top_p", "invalid_type", "'top_p' must be a number"),
        ({"input": "x", "max_output_tokens": 8}, "max_output_tokens", "invalid_value", "16"),
        ({"input": "x", "top_logprobs": 21}, "top_logprobs", "invalid_value", "between 0 and 20"),
        ({"input": "x", "truncation": "some"}, "truncation", "invalid_value", "auto, disabled"),
        ({"input": "x", "include": ["nonsense"]}, "include", "invalid_value", "'include[0]'"),
        ({"input": "x", "metadata": {"k": 1}}, "metadata", "invalid_type", "'metadata.k'"),
        ({"input": "x", "user": "\ud800"}, "user", "invalid_value", "lone surrogate"),
        ({"input": "x", "conversation": 5}, "conversation", "invalid_value", "or {'id': ...}"),
        ({"input": "x", "conversation": {"id": ""}}, "conversation", "invalid_value", "empty"),
        (
            {"input": "x", "conversation": "c", "previous_response_id": "r"},
            "conversation",
            "invalid_value",
            "not both",
        ),
        ({"input": "x", "conversation": "c", "store": False}, "store", "invalid_value", "stored"),
        ({"input": "x", "background": True, "store": False}, "background", "invalid_value", ""),
        ({"input": "x", "prompt": {"id": "p"}}, "prompt", "invalid_value", "no prompt templates"),
        ({"input": "x", "text": []}, "text", "invalid_type", "'text' must be an object"),
        (
            {"input": "x", "text": {"format": {"type": "yaml"}}},
            "text.format",
            "invalid_value",
            "'text.format.type' must be one of text, json_object, json_schema",
        ),
        (
            {
                "input": "x",
                "text": {"format": {"type": "json_schema", "name": "a b", "schema": {}}},
            },
            "text.format.name",
            "invalid_value",
            "'text.format.name' must be 1-64 letters",
        ),
        (
            {"input": "x", "text": {"format": {"type": "json_schema", "name": "a"}}},
            "text.format.schema",
            "missing_required_parameter",
            "'text.format.schema' is required",
        ),
        (
            {
                "input": "x",
                "text": {"format": {"type": "json_schema", "name": "a", "schema": {}, "strict": 1}},
            },
            "text.format.strict",
            "invalid_type",
            "'text.format.strict' must be a boolean",
        ),
        ({"input": "x", "text": {"verbosity": "loud"}}, "text.verbosity", "invalid_value", "low"),
        ({"input": "x", "reasoning": {"effort": "max"}}, "reasoning.effort", "invalid_value", ""),
        ({"input": "x", "reasoning": {"summary": 1}}, "reasoning.summary", "invalid_value", ""),
        ({"input": "x", "tools": {}}, "tools", "invalid_type", "'tools' must be an array"),
        ({"input": "x", "tools": [5]}, "tools", "invalid_type", "'tools[0]' must be an object"),
        (
            {"input": "x", "tools": [{"type": "web_search"}]},
            "tools",
            "unsupported_tool",
            "'tools[0]': ragd runs file_search itself and passes function tools to the model; "
            "it has no 'web_search' tool",
        ),
        (
            {"input": "x", "tools": [SEARCH_TOOL, {**WEATHER, "name": "has space"}]},
            "tools",
            "invalid_value",
            "'tools[1].name' must be 1-64 letters",
        ),
        (
            {"input": "x", "tools": [{**WEATHER, "parameters": "x"}]},
            "tools",
            "invalid_type",
            "'tools[0].parameters' must be an object",
        ),
        (
            {"input": "x", "tools": [{**SEARCH_TOOL, "vector_store_ids": ["a", "b", "c"]}]},
            "tools",
            "invalid_value",
            "'tools[0].vector_store_ids' can have at most 2 items",
        ),
        (
            {"input": "x", "tools": [{**SEARCH_TOOL, "max_num_results": 0}]},
            "tools",
            "invalid_value",
            "'tools[0].max_num_results' must be between 1 and",
        ),
        ({"input": "x", "tools": [WEATHER, WEATHER]}, "tools", "invalid_value", "twice"),
        (
            {"input": "x", "tools": [SEARCH_TOOL, {**WEATHER, "name": "file_search"}]},
            "tools",
            "invalid_value",
            "may not be named 'file_search'",
        ),
        (
            {"input": "x", "tool_choice": "sometimes"},
            "tool_choice",
            "invalid_value",
            "'tool_choice' must be one of auto, none, required, {'type': 'function'",
        ),
        (
            {"input": "x", "tool_choice": {"type": "file_search"}},
            "tool_choice",
            "invalid_value",
            "asks for file_search, which 'tools' lacks",
        ),
        (
            {"input": "x", "tools": [WEATHER], "tool_choice": {"type": "function", "name": "f"}},
            "tool_choice",
            "invalid_value",
            "names the function 'f', which 'tools' lacks",
        ),
        (
            {
                "input": "x",
                "tools": [WEATHER],
                "tool_choice": {"type": "allowed_tools", "tools": [{"type": "file_search"}]},
            },
            "tool_choice",
            "invalid_value",
            "'tool_choice.tools' lists",
        ),
        (
            {"input": "x", "tool_choice": {"type": "allowed_tools", "mode": "x", "tools": []}},
            "tool_choice",
            "invalid_value",
            "'tool_choice.mode' must be one of auto, required",
        ),
        ({"input": "x", "parallel_tool_calls": "y"}, "parallel_tool_calls", "invalid_type", ""),
        ({"input": "x", "max_tool_calls": 0}, "max_tool_calls", "invalid_value", "between 1"),
    ],
)
def test_a_bad_response_body_names_its_field(
    body: dict[str, Any], param: str, code: str, message: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse(ResponseCreate, body).turn("m")
    assert (refused.value.param, refused.value.code) == (param, code), refused.value.message
    assert message in refused.value.message


def test_function_tools_need_an_upstream_that_calls_tools() -> None:
    asked = parse(ResponseCreate, {"input": "x", "tools": [SEARCH_TOOL, WEATHER]})
    with pytest.raises(InvalidRequest) as refused:
        asked.turn("m", can_call=False)
    assert (refused.value.param, refused.value.code) == ("tools", "unsupported_tool")
    assert "'tools[1]'" in refused.value.message


def test_a_response_body_reads_as_a_turn() -> None:
    sent = {**WEATHER, "x-unknown": 1}
    schema = {"type": "json_schema", "name": "a", "schema": {"type": "object"}}
    turn = parse(
        ResponseCreate,
        {
            "input": "hello",
            "model": "",
            "conversation": {"id": "conv_1"},
            "tools": [SEARCH_TOOL, sent],
            "tool_choice": {"type": "function", "name": "get_weather"},
            "include": ["message.output_text.logprobs"],
            "text": {"format": schema, "verbosity": "low"},
            "reasoning": {"generate_summary": "auto"},
            "temperature": 1,
            "unknown": "ignored",
        },
    ).turn("default")
    assert (turn.model, turn.conversation_id, turn.top_logprobs) == ("default", "conv_1", 0)
    assert turn.inputs[0].text == "hello" and turn.temperature == 1.0
    # The tools are echoed as sent, unknown members and all.
    assert turn.tools.echo == [SEARCH_TOOL, sent]
    assert (turn.tools.choice.mode, turn.tools.choice.name) == ("required", "get_weather")
    assert turn.text == {"format": {**schema, "strict": False}, "verbosity": "low"}
    assert turn.reasoning == {"effort": None, "summary": "auto"}
    plain = parse(ResponseCreate, {"input": "x", "text": None, "stream": None}).turn("m")
    assert plain.text == {"format": {"type": "text"}} and plain.tools.choice.raw == "auto"


@pytest.mark.parametrize(
    ("body", "code", "message"),
    [
        ({}, "missing_required_parameter", "'messages' is required"),
        ({"messages": []}, "invalid_value", "'messages' must not be empty"),
        ({"messages": [{"content": "x"}]}, "missing_required_parameter", "'messages[0].role'"),
        ({"messages": [{"role": 5}]}, "invalid_type", "'messages[0].role' must be a string"),
    ],
)
def test_a_bad_chat_completion_body_names_its_field(
    body: dict[str, Any], code: str, message: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse(ChatCompletionRequest, body)
    assert (refused.value.param, refused.value.code) == ("messages", code)
    assert message in refused.value.message
    with pytest.raises(InvalidRequest) as refused:
        parse(ChatCompletionRequest, {"messages": [{"role": "user"}], "stream": "yes"})
    assert (refused.value.param, refused.value.code) == ("stream", "invalid_type")


def test_the_chat_bodies_schemas_are_the_models() -> None:
    schemas = build_spec(ROUTES)["components"]["schemas"]
    response = schemas["ResponseCreate"]
    assert response["required"] == ["input"]
    assert response["properties"]["include"]["items"]["enum"] == list(INCLUDABLES)
    assert response["not"] == {"required": ["conversation", "previous_response_id"]}
    tool = response["properties"]["tools"]["items"]["oneOf"]
    assert tool == [
        {"$ref": "#/components/schemas/FileSearchTool"},
        {"$ref": "#/components/schemas/FunctionTool"},
    ]
    assert schemas["FileSearchTool"]["properties"]["ranking_options"]["$ref"].endswith(
        "/RankingOptions"
    )
    assert schemas["SchemaFormat"]["required"] == ["type", "name", "schema"]
    chat = schemas["ChatCompletionRequest"]
    assert chat["required"] == ["messages"] and "X-Ragd-Conversation" in chat["description"]
