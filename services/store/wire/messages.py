"""Conversions between the store's protobuf messages and its domain values (no gRPC here)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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
    return pb.FileCounts(
        in_progress=counts.in_progress,
        completed=counts.completed,
        failed=counts.failed,
        cancelled=counts.cancelled,
        total=counts.total,
        vectors_pending=counts.vectors_pending,
    )


def vector_store_message(vector_store: VectorStore) -> pb.VectorStore:
    message = pb.VectorStore(
        id=vector_store.id,
        name=vector_store.name,
        created_at=vector_store.created_at,
        last_active_at=vector_store.last_active_at,
        metadata=vector_store.metadata,
        model=vector_store.model,
        dimensions=vector_store.dimensions,
        chunk_count=vector_store.chunk_count,
        file_count=vector_store.file_count,
        usage_bytes=vector_store.usage_bytes,
        file_counts=file_counts_message(vector_store.file_counts),
        expires_anchor=vector_store.expires_anchor,
        expires_days=vector_store.expires_days,
        expires_at=vector_store.expires_at,
        vector_index=vector_store.vector_index,
        max_input_tokens=vector_store.max_input_tokens,
        in_memory=vector_store.in_memory,
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
    return pb.SearchHit(
        chunk_id=hit.chunk_id,
        file_id=hit.file_id,
        filename=hit.filename,
        text=hit.text,
        score=hit.score,
        attributes=_attributes_message(hit.attributes),
        chunk_index=hit.chunk_index,
        vector_rank=hit.vector_rank,
        lexical_rank=hit.lexical_rank,
    )


def file_message(file: File) -> pb.File:
    return pb.File(
        id=file.id,
        filename=file.filename,
        bytes=file.bytes,
        created_at=file.created_at,
        purpose=file.purpose,
        sha256=file.sha256,
    )


def vector_store_file_message(record: VectorStoreFile) -> pb.VectorStoreFile:
    message = pb.VectorStoreFile(
        file_id=record.file_id,
        vector_store_id=record.vector_store_id,
        status=record.status,
        usage_bytes=record.usage_bytes,
        created_at=record.created_at,
        attributes=_attributes_message(record.attributes),
        chunking=chunking_message(record.chunking),
        chunk_count=record.chunk_count,
        filename=record.filename,
        batch_id=record.batch_id,
        deduplicated=record.deduplicated,
        vectors_pending=record.vectors_pending,
    )
    if record.last_error is not None:
        message.last_error.CopyFrom(
            pb.LastError(code=record.last_error.code, message=record.last_error.message)
        )
    return message


def stored_chunk_message(chunk: StoredChunk) -> pb.StoredChunk:
    return pb.StoredChunk(
        chunk_id=chunk.chunk_id,
        chunk_index=chunk.chunk_index,
        text=chunk.text,
        token_count=chunk.token_count,
    )


def batch_message(batch: FileBatch) -> pb.FileBatch:
    return pb.FileBatch(
        id=batch.id,
        vector_store_id=batch.vector_store_id,
        created_at=batch.created_at,
        status=batch.status,
        file_counts=file_counts_message(batch.file_counts),
    )


def job_message(job: ClaimedJob) -> pb.Job:
    return pb.Job(
        job_id=job.job_id,
        vector_store_id=job.vector_store_id,
        file_id=job.file_id,
        filename=job.filename,
        content=job.content,
        chunking=chunking_message(job.chunking),
        model=job.model,
        dimensions=job.dimensions,
        attempt=job.attempt,
        lexical=job.lexical,
        key_name=job.key_name,
    )


def audit_entry_from_message(message: pb.AuditEntry) -> AuditEntry:
    return AuditEntry(
        at=message.at,
        operation=message.operation,
        vector_store_id=message.vector_store_id,
        k=message.k,
        latency_ms=message.latency_ms,
        result_count=message.result_count,
        degraded=message.degraded,
        detail=message.detail,
        key_name=message.key_name,
        embedded_tokens=message.embedded_tokens,
        error_code=message.error_code,
        project=message.project,
    )


def audit_entry_message(entry: AuditEntry) -> pb.AuditEntry:
    return pb.AuditEntry(
        id=entry.id,
        at=entry.at,
        operation=entry.operation,
        vector_store_id=entry.vector_store_id,
        k=entry.k,
        latency_ms=entry.latency_ms,
        result_count=entry.result_count,
        degraded=entry.degraded,
        detail=entry.detail,
        key_name=entry.key_name,
        embedded_tokens=entry.embedded_tokens,
        error_code=entry.error_code,
        project=entry.project,
    )


def status_message(status: StoreStatus) -> pb.StoreStatus:
    return pb.StoreStatus(
        schema_version=status.schema_version,
        disk_free_bytes=status.disk_free_bytes,
        disk_total_bytes=status.disk_total_bytes,
        storage_full=status.storage_full,
        models=[
            pb.ModelUse(
                model=use.model,
                dimensions=use.dimensions,
                vector_stores=use.vector_stores,
                sample_ids=use.sample_ids,
                served=use.served,
            )
            for use in status.models
        ],
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
        per_vector_store=[
            pb.VectorStoreStats(
                id=item.id,
                name=item.name,
                model=item.model,
                dimensions=item.dimensions,
                files=item.files,
                chunks=item.chunks,
                vectors=item.vectors,
                vector_slots=item.vector_slots,
                usage_bytes=item.usage_bytes,
            )
            for item in database.vector_stores
        ],
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
    return pb.ConversationItem(
        id=item.id,
        type=item.type,
        role=item.role,
        status=item.status,
        body_json=item.body,
        text=item.text,
        created_at=item.created_at,
        conversation_id=item.conversation_id,
        response_id=item.response_id,
        position=item.position,
    )


def conversation_message(conversation: Conversation) -> pb.Conversation:
    return pb.Conversation(
        id=conversation.id,
        created_at=conversation.created_at,
        last_active_at=conversation.last_active_at,
        metadata=conversation.metadata,
        title=conversation.title,
        item_count=conversation.item_count,
        turn_count=conversation.turn_count,
    )


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
