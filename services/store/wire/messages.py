"""Conversions between the store's protobuf messages and its domain values (no gRPC here)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from google.protobuf.message import Message

from services.common.vectors import FloatMatrix, from_bytes
from services.pb import store_pb2 as pb
from services.store.errors import InvalidArgument
from services.store.records import (
    AttributeValue,
    AuditEntry,
    Chunking,
    ChunkInput,
    ClaimedJob,
    Conversation,
    EmbeddingModel,
    File,
    FileBatch,
    FileCounts,
    Item,
    NewItem,
    NewResponse,
    ResponseRecord,
    SearchHit,
    Stats,
    StoredChunk,
    StoreStatus,
    VectorStore,
    VectorStoreFile,
)
from services.store.search.filters import MAX_DEPTH, Comparison, Compound, Filter

M = TypeVar("M", bound=Message)
R = TypeVar("R")


def copied(message_type: type[M], record: object, **fields: Any) -> M:
    """A message whose fields are the record's attributes of the same names, except those
    given in `fields` (the ones named or shaped otherwise). For converters that only copy:
    tests/test_store_wire_messages.py checks that no field is left out."""
    values = {
        field.name: getattr(record, field.name)
        for field in message_type.DESCRIPTOR.fields
        if field.name not in fields and hasattr(record, field.name)
    }
    return message_type(**values, **fields)


def record_of(record_type: type[R], message: Message, **fields: Any) -> R:
    """The record whose fields are the message's fields of the same names, except those given
    in `fields`."""
    names = message.DESCRIPTOR.fields_by_name
    values = {
        field.name: getattr(message, field.name)
        for field in dataclasses.fields(record_type)  # type: ignore[arg-type]
        if field.name not in fields and field.name in names
    }
    return record_type(**values, **fields)


def decode_vectors(data: bytes, dimensions: int, count: int) -> FloatMatrix:
    try:
        return from_bytes(data, dimensions, count)
    except ValueError as error:
        raise InvalidArgument(str(error)) from None


def chunks_from_message(chunks: list[pb.ChunkInput]) -> list[ChunkInput]:
    return [ChunkInput(text=chunk.text, token_count=chunk.token_count) for chunk in chunks]


def _value(message: pb.AttributeValue) -> AttributeValue | None:
    kind = message.WhichOneof("kind")
    if kind is None:
        return None
    value: AttributeValue = getattr(message, kind)
    return value


def attributes_from_message(
    attributes: Mapping[str, pb.AttributeValue],
) -> dict[str, AttributeValue]:
    values: dict[str, AttributeValue] = {}
    for key, message in attributes.items():
        value = _value(message)
        if value is None:
            raise InvalidArgument(f"attribute {key!r} has no value")
        values[key] = value
    return values


def attribute_message(value: AttributeValue) -> pb.AttributeValue:
    if isinstance(value, bool):
        return pb.AttributeValue(bool_value=value)
    if isinstance(value, str):
        return pb.AttributeValue(string_value=value)
    return pb.AttributeValue(number_value=value)


def _attributes_message(attributes: Mapping[str, AttributeValue]) -> dict[str, pb.AttributeValue]:
    return {key: attribute_message(value) for key, value in attributes.items()}


def filter_from_message(message: pb.Filter, depth: int = 0) -> Filter:
    """The domain filter; structure is checked here only as far as conversion needs."""
    if depth > MAX_DEPTH:
        raise InvalidArgument(f"filters nest deeper than {MAX_DEPTH} levels")
    kind = message.WhichOneof("kind")
    if kind == "compound":
        nested = tuple(filter_from_message(child, depth + 1) for child in message.compound.filters)
        return Compound(op=message.compound.op, filters=nested)
    if kind == "comparison":
        comparison = message.comparison
        values: list[AttributeValue] = []
        for item in comparison.values:
            value = _value(item)
            if value is None:
                raise InvalidArgument(f"a filter value for {comparison.key!r} is empty")
            values.append(value)
        single = _value(comparison.value) if comparison.HasField("value") else None
        return Comparison(key=comparison.key, op=comparison.op, value=single, values=tuple(values))
    raise InvalidArgument("a filter is empty: set a comparison or a compound filter")


def chunking_from_message(message: pb.ChunkingStrategy, present: bool) -> Chunking | None:
    if not present:
        return None
    return Chunking(message.max_chunk_size_tokens, message.chunk_overlap_tokens)


def chunking_message(chunking: Chunking | None) -> pb.ChunkingStrategy | None:
    if chunking is None:
        return None
    return pb.ChunkingStrategy(
        max_chunk_size_tokens=chunking.max_tokens, chunk_overlap_tokens=chunking.overlap_tokens
    )


def model_from_message(message: pb.EmbeddingModel, present: bool) -> EmbeddingModel | None:
    return EmbeddingModel(message.name, message.dimensions) if present else None


def file_counts_message(counts: FileCounts) -> pb.FileCounts:
    return copied(pb.FileCounts, counts)


def vector_store_message(vector_store: VectorStore) -> pb.VectorStore:
    message = copied(
        pb.VectorStore,
        vector_store,
        file_counts=file_counts_message(vector_store.file_counts),
        reindex=None,
    )
    if (reindex := vector_store.reindex) is not None:
        message.reindex.CopyFrom(
            pb.Reindex(
                status=reindex.status,
                from_model=pb.EmbeddingModel(
                    name=reindex.from_model, dimensions=reindex.from_dimensions
                ),
                model=pb.EmbeddingModel(name=reindex.model, dimensions=reindex.dimensions),
                created_at=reindex.created_at,
                finished_at=reindex.finished_at,
                file_counts=file_counts_message(reindex.file_counts),
                last_error=reindex.last_error,
            )
        )
    return message


def hit_message(hit: SearchHit) -> pb.SearchHit:
    return copied(pb.SearchHit, hit, attributes=_attributes_message(hit.attributes))


def file_message(file: File) -> pb.File:
    return copied(pb.File, file)


def vector_store_file_message(record: VectorStoreFile) -> pb.VectorStoreFile:
    error = record.last_error
    return copied(
        pb.VectorStoreFile,
        record,
        attributes=_attributes_message(record.attributes),
        chunking=chunking_message(record.chunking),
        last_error=None if error is None else copied(pb.LastError, error),
    )


def stored_chunk_message(chunk: StoredChunk) -> pb.StoredChunk:
    return copied(pb.StoredChunk, chunk)


def batch_message(batch: FileBatch) -> pb.FileBatch:
    return copied(pb.FileBatch, batch, file_counts=file_counts_message(batch.file_counts))


def job_message(job: ClaimedJob) -> pb.Job:
    return copied(pb.Job, job, chunking=chunking_message(job.chunking))


def audit_entry_from_message(message: pb.AuditEntry) -> AuditEntry:
    return record_of(AuditEntry, message, id=0)


def audit_entry_message(entry: AuditEntry) -> pb.AuditEntry:
    return copied(pb.AuditEntry, entry)


def status_message(status: StoreStatus) -> pb.StoreStatus:
    return pb.StoreStatus(
        schema_version=status.schema_version,
        disk_free_bytes=status.disk_free_bytes,
        disk_total_bytes=status.disk_total_bytes,
        storage_full=status.storage_full,
        models=[copied(pb.ModelUse, use) for use in status.models],
        vector_index_error=status.vector_index_error,
        versions=status.versions,
    )


def stats_message(stats: Stats) -> pb.StoreStats:
    database, counters = stats.database, stats.cache_counters
    return pb.StoreStats(
        status=status_message(stats.status),
        schema_version=database.schema_version,
        db_bytes=database.db_bytes,
        wal_bytes=database.wal_bytes,
        free_bytes=database.free_bytes,
        vector_stores=len(database.vector_stores),
        files=database.files,
        file_bytes=database.file_bytes,
        chunks=database.chunks,
        vectors=database.vectors,
        usage_bytes=database.usage_bytes,
        jobs_pending=database.jobs_pending,
        jobs_leased=database.jobs_leased,
        cache=pb.CacheStats(
            entries=database.cache.entries,
            bytes=database.cache.bytes,
            max_entries=stats.cache_max_entries,
            hits=counters.hits,
            misses=counters.misses,
            hit_rate=stats.cache_hit_rate,
            stored=counters.stored,
            evicted=counters.evicted,
        ),
        audit_entries=database.audit_entries,
        per_vector_store=[copied(pb.VectorStoreStats, item) for item in database.vector_stores],
    )


def new_items_from_message(items: Sequence[pb.NewItem]) -> list[NewItem]:
    return [
        NewItem(
            type=item.type,
            body=item.body_json or "{}",
            role=item.role,
            status=item.status or "completed",
            text=item.text,
            id=item.id,
        )
        for item in items
    ]


def item_message(item: Item) -> pb.ConversationItem:
    return copied(pb.ConversationItem, item, body_json=item.body)


def conversation_message(conversation: Conversation) -> pb.Conversation:
    return copied(pb.Conversation, conversation)


def response_from_message(message: pb.RecordResponseRequest) -> NewResponse:
    return NewResponse(
        id=message.id,
        created_at=message.created_at,
        completed_at=message.completed_at,
        status=message.status,
        model=message.model,
        settings=message.settings_json or "{}",
        usage=message.usage_json or "{}",
        error=message.error_json or "{}",
        conversation_id=message.conversation_id,
        previous_response_id=message.previous_response_id,
        inputs=tuple(new_items_from_message(message.inputs)),
        outputs=tuple(new_items_from_message(message.outputs)),
        started=message.started,
    )


def response_message(record: ResponseRecord) -> pb.ResponseRecord:
    return pb.ResponseRecord(
        id=record.id,
        created_at=record.created_at,
        completed_at=record.completed_at,
        status=record.status,
        model=record.model,
        settings_json=record.settings,
        usage_json=record.usage,
        error_json=record.error,
        conversation_id=record.conversation_id,
        previous_response_id=record.previous_response_id,
        outputs=[item_message(item) for item in record.outputs],
    )
