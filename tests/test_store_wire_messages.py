"""Completeness of the store's record <-> message converters (wire/messages.py, rpc_*.py), in
the manner of qdrant-client's tests/conversions/test_validate_conversions.py: a record with
every field set to a distinct non-default value is converted, and every field of the message
must be set and equal to the record's field of the same name. A field added to a record or a
message and forgotten in its converter fails here."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from itertools import count
from pathlib import Path
from typing import Any, TypeVar

import pytest
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from services.pb import store_pb2 as pb
from services.store import records, replica
from services.store.wire import messages
from services.store.wire.rpc_keys import key_message, project_message
from services.store.wire.rpc_operations import _replica_message

_numbers = count(3)
T = TypeVar("T")
M = TypeVar("M", bound=Message)


def _value(hint: Any, name: str) -> Any:
    """A non-default value of the type `hint`, distinct from the other fields' values."""
    origin = typing.get_origin(hint)
    arguments = typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        # X | None: an X; AttributeValue (str | float | bool): its first kind.
        return _value(next(a for a in arguments if a is not type(None)), name)
    if origin in (list, tuple, frozenset):
        return origin([_value(arguments[0], name)])
    if origin in (dict, Mapping):
        return {f"{name}-key": _value(arguments[1], name)}
    if dataclasses.is_dataclass(hint):
        return populated(typing.cast(type, hint))
    number = next(_numbers)
    if hint is bool:
        return True
    if hint is int:
        return number
    if hint is float:
        return number + 0.5
    if hint is str:
        return f"{name}-{number}"
    if hint is bytes:
        return f"{name}-{number}".encode()
    if hint is Path:
        return Path(f"/{name}-{number}")
    raise TypeError(f"no fixture value for {name}: {hint!r}")


def populated(cls: type[T]) -> T:
    """An instance of the dataclass `cls` with every field non-default."""
    hints = typing.get_type_hints(cls, vars(records) | vars(replica))
    fields = {f.name: _value(hints[f.name], f.name) for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return cls(**fields)


def _unset(message: Message, path: str = "") -> list[str]:
    """The fields of `message` (and of its messages, recursively) left at their default."""
    missing = []
    oneofs_set = {o.name for o in message.DESCRIPTOR.oneofs if message.WhichOneof(o.name)}
    for field in message.DESCRIPTOR.fields:
        name = f"{path}{field.name}"
        value = getattr(message, field.name)
        oneof = field.containing_oneof
        if (
            oneof is not None
            and oneof.name in oneofs_set
            and message.WhichOneof(oneof.name) != field.name
        ):
            continue
        if field.is_repeated:
            if not len(value):
                missing.append(name)
            elif field.message_type is not None and not field.message_type.GetOptions().map_entry:
                missing += _unset(value[0], f"{name}[0].")
        elif field.message_type is not None:
            if not message.HasField(field.name):
                missing.append(name)
            else:
                missing += _unset(value, f"{name}.")
        elif value == field.default_value:
            missing.append(name)
    return missing


def _differing(inputs: list[Any], message: Message, renamed: Mapping[str, str]) -> list[str]:
    """The message's scalar fields whose value differs from the field of the same name (or of
    the name `renamed` gives) of the first record that has one."""
    wrong = []
    for field in message.DESCRIPTOR.fields:
        name = renamed.get(field.name, field.name)
        record = next((item for item in inputs if hasattr(item, name)), None)
        if field.message_type is not None or record is None:
            continue
        expected, got = getattr(record, name), getattr(message, field.name)
        if field.is_repeated:
            expected, got = list(expected), list(got)
        if field.type in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
            matches = got == pytest.approx(expected)
        else:
            matches = got == expected
        if not matches:
            wrong.append(f"{field.name}: {got!r} != {expected!r}")
    return wrong


# Message fields a converter leaves to its caller on purpose.
SET_ELSEWHERE = {
    # GetStats adds it when a replica is configured (rpc_operations.py).
    "stats_message": ["replica"],
}

# (converter, record types, message fields named otherwise in the record)
TO_MESSAGE: list[tuple[Callable[..., Message | None], tuple[type, ...], dict[str, str]]] = [
    (messages.file_counts_message, (records.FileCounts,), {}),
    (messages.vector_store_message, (records.VectorStore,), {}),
    (messages.hit_message, (records.SearchHit,), {}),
    (messages.file_message, (records.File,), {}),
    (messages.vector_store_file_message, (records.VectorStoreFile,), {}),
    (messages.stored_chunk_message, (records.StoredChunk,), {}),
    (messages.batch_message, (records.FileBatch,), {}),
    (messages.job_message, (records.ClaimedJob,), {}),
    (messages.audit_entry_message, (records.AuditEntry,), {}),
    (messages.status_message, (records.StoreStatus,), {}),
    (messages.stats_message, (records.Stats,), {}),
    (messages.item_message, (records.Item,), {"body_json": "body"}),
    (messages.conversation_message, (records.Conversation,), {}),
    (
        messages.response_message,
        (records.ResponseRecord,),
        {"settings_json": "settings", "usage_json": "usage", "error_json": "error"},
    ),
    (key_message, (records.ApiKey,), {}),
    (project_message, (records.Project,), {}),
    (_replica_message, (replica.ReplicaStatus, replica.ReplicaSettings), {}),
    (
        messages.chunking_message,
        (records.Chunking,),
        {"max_chunk_size_tokens": "max_tokens", "chunk_overlap_tokens": "overlap_tokens"},
    ),
]


@pytest.mark.parametrize(
    ("convert", "kinds", "renamed"), TO_MESSAGE, ids=[c[0].__name__ for c in TO_MESSAGE]
)
def test_record_to_message_sets_every_field(
    convert: Callable[..., Message | None], kinds: tuple[type, ...], renamed: dict[str, str]
) -> None:
    inputs: list[Any] = [populated(kind) for kind in kinds]
    message = convert(*inputs)
    assert message is not None
    assert _unset(message) == SET_ELSEWHERE.get(convert.__name__, [])
    assert _differing(inputs, message, renamed) == []


def populated_message(cls: type[M]) -> M:
    """A message of type `cls` with every field set (one field of each oneof)."""
    message = cls()
    for field in cls.DESCRIPTOR.fields:
        oneof = field.containing_oneof
        if oneof is not None and message.WhichOneof(oneof.name):
            continue
        value = getattr(message, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            item = field.message_type.fields_by_name["value"]
            entry = f"{field.name}-key"
            if item.message_type is not None:
                value[entry].CopyFrom(populated_message(value[entry].__class__))
            else:
                value[entry] = _scalar(item, field.name)
        elif field.is_repeated and field.message_type is not None:
            value.add().CopyFrom(populated_message(type(value.add())))
            del value[1:]
        elif field.is_repeated:
            value.append(_scalar(field, field.name))
        elif field.message_type is not None:
            value.CopyFrom(populated_message(type(value)))
        else:
            setattr(message, field.name, _scalar(field, field.name))
    return message


def _scalar(field: Any, name: str) -> Any:
    if field.type == FieldDescriptor.TYPE_BOOL:
        return True
    if field.type in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
        return next(_numbers) + 0.5
    if field.type == FieldDescriptor.TYPE_STRING:
        return f"{name}-{next(_numbers)}"
    if field.type == FieldDescriptor.TYPE_BYTES:
        return f"{name}-{next(_numbers)}".encode()
    return next(_numbers)


def _defaulted(record: Any) -> list[str]:
    """The record's fields (and its records', recursively) left empty or at zero."""
    missing = []
    for field in dataclasses.fields(record):
        value = getattr(record, field.name)
        if dataclasses.is_dataclass(value):
            missing += [f"{field.name}.{name}" for name in _defaulted(value)]
        elif isinstance(value, tuple | list) and value and dataclasses.is_dataclass(value[0]):
            missing += [f"{field.name}[0].{name}" for name in _defaulted(value[0])]
        elif value in (None, 0, "", False, (), [], {}, "{}"):
            missing.append(field.name)
    return missing


# (converter, message type, record fields it leaves to its caller, fields named otherwise)
FROM_MESSAGE: list[tuple[Callable[[Any], Any], type[Message], list[str], dict[str, str]]] = [
    # The audit log numbers its entries.
    (messages.audit_entry_from_message, pb.AuditEntry, ["id"], {}),
    (
        messages.response_from_message,
        pb.RecordResponseRequest,
        [],
        {"settings_json": "settings", "usage_json": "usage", "error_json": "error"},
    ),
    (
        lambda message: messages.chunking_from_message(message, True),
        pb.ChunkingStrategy,
        [],
        {"max_chunk_size_tokens": "max_tokens", "chunk_overlap_tokens": "overlap_tokens"},
    ),
    (lambda message: messages.model_from_message(message, True), pb.EmbeddingModel, [], {}),
]


@pytest.mark.parametrize(
    ("convert", "kind", "left", "renamed"),
    FROM_MESSAGE,
    ids=[c[1].__name__ for c in FROM_MESSAGE],
)
def test_message_to_record_reads_every_field(
    convert: Callable[[Any], Any], kind: type[Message], left: list[str], renamed: dict[str, str]
) -> None:
    message = populated_message(kind)
    record = convert(message)
    assert _defaulted(record) == left
    wrong = _differing([record], message, renamed)
    assert [item for item in wrong if item.split(":")[0] not in left] == []


def test_new_items_read_every_field() -> None:
    message = populated_message(pb.NewItem)
    [item] = messages.new_items_from_message([message])
    assert _defaulted(item) == []
    assert _differing([item], message, {"body_json": "body"}) == []
