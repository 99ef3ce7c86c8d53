"""Every property the OpenAPI document promises is produced by its renderer (objects.py,
objects_admin.py, objects_chat.py) from a fully populated store message.

A renderer that drops a field, or a schema that names one no renderer writes, fails here
rather than in a client. Plain Python: no server.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

import numpy as np
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from services.common.vocabulary import HYBRID
from services.gateway import objects, objects_admin, objects_chat
from services.gateway.app import ROUTES
from services.gateway.clients import Embedded
from services.gateway.operations import operation_of
from services.gateway.schemas import SCHEMAS, Schema
from services.gateway.schemas_chat import CHAT_SCHEMAS
from services.pb import store_pb2

ALL = {**SCHEMAS, **CHAT_SCHEMAS}
# Answers not rendered from a store message: errors.py's error, /health, /version and /ready
# (health.py builds them from probes), and the upstream's chat completion passed through.
NOT_RENDERED = {"Error", "Health", "Version", "Readiness", "ChatCompletion"}

_SCALARS: dict[int, Any] = {
    FieldDescriptor.CPPTYPE_STRING: "x",
    FieldDescriptor.CPPTYPE_INT32: 3,
    FieldDescriptor.CPPTYPE_INT64: 3,
    FieldDescriptor.CPPTYPE_UINT32: 3,
    FieldDescriptor.CPPTYPE_UINT64: 3,
    FieldDescriptor.CPPTYPE_DOUBLE: 1.5,
    FieldDescriptor.CPPTYPE_FLOAT: 1.5,
    FieldDescriptor.CPPTYPE_BOOL: True,
    FieldDescriptor.CPPTYPE_ENUM: 1,
}


M = TypeVar("M", bound=Message)


def full(message: M, depth: int = 0) -> M:
    """`message` with every field set: scalars non-default, one entry in each repeated field
    and map, every sub-message populated (one member of each oneof, the last)."""
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        sub = field.message_type
        if sub is not None and sub.GetOptions().map_entry:
            entry = sub.fields_by_name["value"]
            if entry.message_type is None:
                value["k"] = _SCALARS[entry.cpp_type]
            else:
                full(value["k"], depth + 1)
        elif field.is_repeated:
            if sub is not None:
                if depth < 4:
                    full(value.add(), depth + 1)
            else:
                value.append(_SCALARS[field.cpp_type])
        elif sub is not None:
            if depth < 4:
                full(value, depth + 1)
        else:
            setattr(message, field.name, _SCALARS[field.cpp_type])
    return message


def missing(schema: Schema, examples: list[Any], where: str) -> list[str]:
    """The properties of `schema` that no example has (following $refs, unions and arrays)."""
    if "$ref" in schema:
        schema = ALL[schema["$ref"].rsplit("/", 1)[1]]
    gaps: list[str] = []
    for branch in schema.get("anyOf", []) + schema.get("oneOf", []):
        gaps += missing(branch, examples, where)
    dicts = [example for example in examples if isinstance(example, dict)]
    if dicts:
        for name, inner in schema.get("properties", {}).items():
            values = [example[name] for example in dicts if name in example]
            if values:
                gaps += missing(inner, values, f"{where}.{name}")
            else:
                gaps.append(f"{where}.{name}")
    lists = [example for example in examples if isinstance(example, list)]
    if lists and "items" in schema:
        gaps += missing(schema["items"], [x for items in lists for x in items], f"{where}[]")
    return gaps


def stored_item(kind: str, body: dict[str, Any]) -> store_pb2.ConversationItem:
    item = full(store_pb2.ConversationItem())
    item.type, item.body_json = kind, json.dumps(body)
    return item


# The bodies are the items as OpenAI sent them (kept opaque by the store).
ITEMS = [
    stored_item("message", {"content": [{"type": "output_text", "text": "hi"}]}),
    stored_item(
        "file_search_call",
        {
            "queries": ["q"],
            "results": [
                {"file_id": "f", "filename": "a", "score": 1.0, "text": "t", "attributes": {}}
            ],
        },
    ),
    stored_item("function_call", {"call_id": "c", "name": "n", "arguments": "{}"}),
    stored_item("function_call_output", {"call_id": "c", "output": "o"}),
]


def response_record(reason: str = "max_output_tokens") -> store_pb2.ResponseRecord:
    record = full(store_pb2.ResponseRecord())
    record.status = "incomplete"
    record.settings_json = json.dumps({"instructions": "i", "background": True})
    record.usage_json = json.dumps({"input_tokens": 1, "output_tokens": 1, "total_tokens": 2})
    record.error_json = json.dumps({"reason": reason})
    del record.outputs[:]
    record.outputs.extend(ITEMS)
    return record


def history_hit(item: store_pb2.ConversationItem) -> store_pb2.HistoryHit:
    hit = full(store_pb2.HistoryHit())
    hit.item.CopyFrom(item)
    return hit


def rendered() -> dict[str, list[Any]]:
    """Each response schema with its renderer's output (several examples for a union)."""
    file = objects.file(full(store_pb2.File()))
    store = objects.vector_store(full(store_pb2.VectorStore()))
    store_file = objects.vector_store_file(full(store_pb2.VectorStoreFile()))
    key = objects_admin.api_key(full(store_pb2.ApiKey()), secret="s", revoked=True)
    project = objects_admin.project(full(store_pb2.Project()))
    conversation = objects_chat.conversation(full(store_pb2.Conversation()))
    items = [objects_chat.item(item) for item in ITEMS]
    embedded = Embedded(np.ones((1, 2), "<f4").tobytes(), 2, [1], [True], "m")
    return {
        "EmbeddingList": [objects.embedding_list(embedded, "m", "float", True)],
        "ModelList": [objects.model_list(["m"], 1)],
        "Model": [objects.model("m", 1)],
        "File": [file],
        "FileList": [objects.page([file], True)],
        "Deleted": [objects.deleted("x", "file")],
        "VectorStore": [store],
        "VectorStoreList": [objects.page([store], True)],
        "Reindex": [objects.reindex(full(store_pb2.Reindex()))],
        "VectorStoreFile": [store_file],
        "VectorStoreFileList": [objects.page([store_file], True)],
        "VectorStoreFileContent": [objects.file_content([full(store_pb2.StoredChunk())])],
        "FileBatch": [objects.file_batch(full(store_pb2.FileBatch()))],
        "SearchPage": [objects.search_page(["q"], [full(store_pb2.SearchHit())], HYBRID, True)],
        "ApiKey": [key],
        "ApiKeyList": [objects_admin.unpaged([key])],
        "Project": [project],
        "ProjectList": [objects_admin.unpaged([project])],
        "BackupResult": [objects_admin.backup(full(store_pb2.BackupResponse()))],
        "RestoreResult": [objects_admin.restore(full(store_pb2.RestoreResponse()))],
        "BackupList": [
            objects_admin.unpaged([objects_admin.backup_file(full(store_pb2.BackupInfo()))])
        ],
        "VacuumResult": [objects_admin.vacuum(full(store_pb2.VacuumResponse()))],
        "Stats": [objects_admin.stats(full(store_pb2.StoreStats()), True)],
        "AuditList": [objects_admin.audit_page([full(store_pb2.AuditEntry())], True)],
        "Conversation": [conversation],
        "ConversationList": [objects.page([conversation], True)],
        "ConversationDeleted": [objects_chat.deleted("x", "conversation.deleted")],
        "Item": items,
        "ItemList": [objects.page(items, True)],
        "HistorySearchPage": [
            objects_chat.history_page("q", [history_hit(i) for i in ITEMS], HYBRID, True)
        ],
        "Response": [
            objects_chat.stored_response(response_record(), ["x"]),
            objects_chat.stored_response(response_record("client_disconnected"), ["x"]),
        ],
        "ResponseDeleted": [objects_chat.deleted("x", "response.deleted")],
    }


def test_every_response_schema_has_a_rendered_case() -> None:
    answered = set()
    for route in ROUTES:
        spec = operation_of(getattr(route, "endpoint", None))  # type: ignore[arg-type]
        if spec is not None:
            answered |= {spec.response, *spec.other.values()} - {None}
    assert answered - NOT_RENDERED <= set(rendered()), answered - NOT_RENDERED - set(rendered())


def test_every_schema_property_is_rendered() -> None:
    gaps = [
        gap for name, examples in rendered().items() for gap in missing(ALL[name], examples, name)
    ]
    assert gaps == []


def test_a_response_without_counted_tokens_has_no_usage() -> None:
    """Issue 30.7: usage null, not zeros, when the upstream reported none; a record written
    before cache_write_tokens existed still has every count ResponseUsage requires."""
    record = response_record()
    record.usage_json = json.dumps({"input_tokens": 0, "output_tokens": 0, "total_tokens": 0})
    assert objects_chat.stored_response(record, [])["usage"] is None
    record.usage_json = json.dumps(
        {
            "input_tokens": 3,
            "input_tokens_details": {"cached_tokens": 1},
            "output_tokens": 2,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 5,
        }
    )
    usage = objects_chat.stored_response(record, [])["usage"]
    assert usage["input_tokens_details"] == {"cached_tokens": 1, "cache_write_tokens": 0}
