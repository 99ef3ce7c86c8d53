"""Splits text into overlapping chunks that fit a token budget, preferring natural boundaries.

Pure functions: token counts come from a caller-supplied `count` function (the embedder's
Tokenize RPC in the service, anything in tests). Text is cut into pieces at paragraph, then
sentence, then word boundaries until each piece fits; pieces are then packed greedily into
chunks, and each chunk after the first starts with the tail of the previous one (overlap).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

CountTokens = Callable[[Sequence[str]], list[int]]

# Each level splits what the previous one could not fit, and is re-joined with its separator.
_LEVELS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\n\s*\n"), "\n\n"),
    (re.compile(r"(?<=[.!?\u3002\uff01\uff1f])\s+"), " "),  # also CJK full stops
    (re.compile(r"\s+"), " "),
]


@dataclass(frozen=True)
class Piece:
    text: str
    tokens: int
    # What goes between this piece and the one before it when they share a chunk.
    sep: str


@dataclass(frozen=True)
class Chunk:
    text: str
    tokens: int


def split_pieces(text: str, count: CountTokens, max_tokens: int) -> list[Piece]:
    """Cuts text into pieces of at most max_tokens each, in reading order."""
    return _fit([text], "\n\n", count, max_tokens, 0)


def _fit(
    parts: list[str], sep: str, count: CountTokens, max_tokens: int, level: int
) -> list[Piece]:
    parts = [part.strip() for part in parts if part.strip()]
    if not parts:
        return []
    result: list[Piece] = []
    for part, tokens in zip(parts, count(parts), strict=True):
        if tokens <= max_tokens:
            result.append(Piece(part, tokens, sep))
            continue
        if level < len(_LEVELS):
            pattern, inner_sep = _LEVELS[level]
            pieces = _fit(pattern.split(part), inner_sep, count, max_tokens, level + 1)
        else:
            pieces = _split_chars(part, count, max_tokens)
        if pieces:
            # The first sub-piece keeps the separator that stood before the whole part.
            pieces[0] = Piece(pieces[0].text, pieces[0].tokens, sep)
        result.extend(pieces)
    return result


def _split_chars(run: str, count: CountTokens, max_tokens: int) -> list[Piece]:
    """Last resort for one unbroken run (a URL, a hash): halve it until the halves fit."""
    middle = len(run) // 2
    halves = [run[:middle], run[middle:]]
    result: list[Piece] = []
    for half, tokens in zip(halves, count(halves), strict=True):
        if tokens <= max_tokens or len(half) <= 1:
            result.append(Piece(half, tokens, ""))
        else:
            result.extend(_split_chars(half, count, max_tokens))
    return result


def pack(pieces: Sequence[Piece], max_tokens: int, overlap_tokens: int) -> list[Chunk]:
    """Greedily joins pieces into chunks of at most max_tokens (by the pieces' counts).

    Sums of per-piece counts approximate the joined text's count; callers that must never
    exceed a hard limit re-count the chunks (see `chunk_text`).
    """
    chunks: list[Chunk] = []
    current: list[Piece] = []
    size = 0
    for piece in pieces:
        if current and size + piece.tokens > max_tokens:
            chunks.append(_join(current))
            current = _tail(current, min(overlap_tokens, max_tokens - piece.tokens))
            size = sum(p.tokens for p in current)
        current.append(piece)
        size += piece.tokens
    if current:
        chunks.append(_join(current))
    return chunks


def _tail(pieces: list[Piece], budget: int) -> list[Piece]:
    """The last pieces of a chunk, at most `budget` tokens, to repeat at the next one's start."""
    tail: list[Piece] = []
    size = 0
    for piece in reversed(pieces):
        if size + piece.tokens > budget:
            break
        tail.insert(0, piece)
        size += piece.tokens
    return tail


def _join(pieces: list[Piece]) -> Chunk:
    text = pieces[0].text + "".join(p.sep + p.text for p in pieces[1:])
    return Chunk(text=text, tokens=sum(p.tokens for p in pieces))


def chunk_text(
    text: str,
    count: CountTokens,
    max_tokens: int,
    overlap_tokens: int,
    special_tokens: int = 0,
) -> list[Chunk]:
    """Chunks whose real token counts (re-counted as whole texts) never exceed max_tokens.

    `special_tokens` is what `count` adds to every text ([CLS] and [SEP] for BERT): counted
    once per chunk, not once per piece.
    """
    if max_tokens <= special_tokens:
        raise ValueError(f"max_tokens ({max_tokens}) must exceed special tokens ({special_tokens})")
    if not 0 <= overlap_tokens <= max_tokens // 2:
        raise ValueError(f"overlap_tokens must be between 0 and {max_tokens // 2}")

    def count_content(texts: Sequence[str]) -> list[int]:
        return [max(0, n - special_tokens) for n in count(texts)]

    budget = max_tokens - special_tokens
    chunks = pack(split_pieces(text, count_content, budget), budget, overlap_tokens)
    real = count([chunk.text for chunk in chunks]) if chunks else []
    result: list[Chunk] = []
    for chunk, tokens in zip(chunks, real, strict=True):
        if tokens <= max_tokens:
            result.append(Chunk(chunk.text, tokens))
        else:
            # Joining changed tokenization at a seam: re-chunk this one with a tighter budget.
            tighter = max(special_tokens + 1, max_tokens - (tokens - max_tokens) - 1)
            result.extend(chunk_text(chunk.text, count, tighter, 0, special_tokens))
    return result
