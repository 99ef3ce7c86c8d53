"""What a search returns for its chosen chunks: their text, file and attributes.

Rankings (vector, lexical, fused) work on chunk keys and scores only; the text, filename and
attributes of the k chunks finally chosen are read once, here, inside the caller's read
transaction. A hybrid search ranks 2 x 50 candidates but reads the text of 10.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from services.store.records import SearchHit, chunk_public_id
from services.store.sql import Connection, dialect

# The chunks' text and source, by chunk key (a JSON array, bound as one parameter). Chunks
# exist only for completed files (written in the same transaction as the status); the
# status test is a second line of defence.
_DETAILS_SQL = """
SELECT c.id, c.file_id, c.chunk_index, c.text, f.filename, cf.attributes
FROM chunks AS c
JOIN vector_store_files AS cf ON cf.vector_store_id = c.vector_store_id AND cf.file_id = c.file_id
JOIN files AS f ON f.id = c.file_id
WHERE c.id IN {ids} AND cf.status = 'completed'
"""

# `+vector_store_id`: the rowids lead; with the plain term SQLite scans the vector_store's index,
# every chunk of it (~50 ms at 1M chunks), to find a hundred.
_FILES_SQL = "SELECT id, file_id FROM chunks WHERE id IN {ids} AND +vector_store_id = ?"

# chunk key, file id, chunk index, text, filename, attributes JSON
_DetailRow = tuple[int, str, int, str, str, str]


@dataclass(frozen=True)
class Candidate:
    """A chunk in a ranking: its key, its file and its score in that ranking."""

    key: int
    file_id: str
    score: float


def files(conn: Connection, vector_store: int, keys: Sequence[int]) -> dict[int, str]:
    """The file of each chunk key that exists in the vector store."""
    rows = conn.execute(
        _FILES_SQL.format(ids=dialect(conn).int_list), (json.dumps(list(keys)), vector_store)
    ).fetchall()
    return {cast(int, key): cast(str, file_id) for key, file_id in rows}


def load(
    conn: Connection,
    ranked: Sequence[tuple[int, float]],
    ranks: Mapping[int, tuple[int, int]] | None = None,
) -> list[SearchHit]:
    """SearchHits for (chunk key, score) pairs, in their order; keys of chunks that are gone
    (or whose file is not completed) are left out. `ranks`: a hybrid search's (vector,
    lexical) rank of each chunk."""
    if not ranked:
        return []
    ids = json.dumps([key for key, _ in ranked])
    details = {
        row[0]: row
        for row in cast(
            list[_DetailRow],
            conn.execute(_DETAILS_SQL.format(ids=dialect(conn).int_list), (ids,)).fetchall(),
        )
    }
    hits = []
    for key, score in ranked:
        if key not in details:
            continue
        _, file_id, chunk_index, text, filename, attributes = details[key]
        vector_rank, lexical_rank = ranks.get(key, (0, 0)) if ranks else (0, 0)
        hits.append(
            SearchHit(
                chunk_id=chunk_public_id(key),
                file_id=file_id,
                filename=filename,
                text=text,
                score=score,
                chunk_index=chunk_index,
                attributes=json.loads(attributes),
                vector_rank=vector_rank,
                lexical_rank=lexical_rank,
            )
        )
    return hits
