"""The store's domain values: plain dataclasses, independent of SQL and gRPC."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

# OpenAI allows string, number and boolean attribute values.
AttributeValue = str | float | bool
Attributes = Mapping[str, AttributeValue]

T = TypeVar("T")


@dataclass(frozen=True)
class Collection:
    id: str
    name: str
    created_at: int
    last_active_at: int
    metadata: dict[str, str]
    model: str
    dimensions: int
    chunk_count: int
    file_count: int
    usage_bytes: int


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T]
    has_more: bool


@dataclass(frozen=True)
class ChunkInput:
    text: str
    token_count: int = 0


@dataclass(frozen=True)
class AddChunksResult:
    file_id: str
    chunk_count: int
    usage_bytes: int


@dataclass(frozen=True)
class SearchHit:
    chunk_id: str
    file_id: str
    filename: str
    text: str
    # 1 - cosine_distance / 2, in [0, 1]: see search.score_from_distance.
    score: float
    chunk_index: int
    attributes: dict[str, AttributeValue] = field(default_factory=dict)
