"""Writes one schema fixture: `schema_fixture_rows.py DATABASE VERSION`, run by
make_schema_fixtures.py with an old commit's `services/` first on the path, so `services` here
is the code of that version.

That code's Repository migrates the empty database and writes the vector stores, their files
and chunks (vectors and full-text rows as it wrote them); then every other table gets rows,
in the columns the version has. The rows keep the store's invariants (tests/store_fixtures.py
check_invariants): counters match, an in-progress file has its live job, a shadow vector store
its re-index in progress. A table of the schema left empty stops the script: give it rows
here when a migration adds one.
"""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any

import apsw
import numpy as np
import sqlite_vec

from services.store import migrations
from services.store.records import ChunkInput
from services.store.repository import Repository

NOW = 1_700_000_000
MODEL, TARGET_MODEL, DIMS = "fixture-model", "fixture-target-model", 8
KEY_SECRET = "sk-fixture-admin"
CHUNKS = {
    "file-fixture-a": [
        "The lighthouse stands on the northern cape.",
        "Its keeper writes every passing ship into a leather logbook.",
    ],
    "file-fixture-b": [
        "Granite countertops are polished with diamond pads.",
        "Each pad has a finer grit than the one before it.",
    ],
}
# Indexed by its words only while no embedder answered (schema 8 on): vectors pending.
LEXICAL_FILE, LEXICAL_TEXT = "file-fixture-c", "Tide tables list the harbour's high and low water."


def vectors(seed: int, count: int) -> Any:
    rows = np.random.default_rng(seed).normal(size=(count, DIMS)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def message(public_id: str, role: str, text: str, kind: str) -> dict[str, Any]:
    return {
        "public_id": public_id,
        "type": "message",
        "role": role,
        "body": json.dumps({"content": [{"type": kind, "text": text}]}),
        "text": text,
        "created_at": NOW,
    }


def main(path: str, version: int) -> None:
    # That version's migrations, up to it: a commit that added two at once (3 and 4) never
    # wrote the first alone, but a crash between them leaves a database there.
    conn = apsw.Connection(path)
    assert migrations.migrate(conn, migrations.MIGRATIONS[:version]) == version
    conn.close()
    with Repository(path, clock=lambda: float(NOW)) as repo:
        main_store = repo.create_collection("fixture", MODEL, DIMS, {"made": f"v{version}"})
        target = repo.create_collection("fixture target", TARGET_MODEL, DIMS, {})
        for n, (file_id, texts) in enumerate(CHUNKS.items()):
            repo.add_chunks(
                main_store.id,
                file_id,
                f"{file_id}.txt",
                {"team": "lights" if n == 0 else "stone", "n": float(n)},
                [ChunkInput(text, 9) for text in texts],
                vectors(n, len(texts)),
                MODEL,
            )
    conn = apsw.Connection(path)
    conn.enable_load_extension(True)
    conn.load_extension(sqlite_vec.loadable_path())
    conn.execute("PRAGMA foreign_keys = ON")
    with conn:
        write_rows(conn, main_store.id, target.id)
    empty = [
        name
        for name in ordinary_tables(conn)
        if conn.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0] == 0
    ]
    if empty:
        raise SystemExit(f"schema v{version}: no rows in {', '.join(empty)}; add some here")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.execute("VACUUM")
    conn.close()


def ordinary_tables(conn: apsw.Connection) -> list[str]:
    """Tables of the schema: not virtual ones (vec0, FTS5), the tables they keep their data
    in, or SQLite's own."""
    virtual = [
        str(row[0])
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL%'"
        )
    ]
    return [
        str(row[1])
        for row in conn.execute("PRAGMA main.table_list")
        if row[2] == "table"
        and not str(row[1]).startswith("sqlite_")
        and not any(str(row[1]).startswith(name + "_") for name in virtual)
    ]


def write_rows(conn: apsw.Connection, main_public: str, target_public: str) -> None:
    columns = {
        table: [str(row[1]) for row in conn.execute(f'PRAGMA table_info("{table}")')]
        for table in ordinary_tables(conn)
    }

    def insert(table: str, **values: Any) -> int:
        if table not in columns:
            return 0
        kept = {name: value for name, value in values.items() if name in columns[table]}
        names = ", ".join(kept)
        marks = ", ".join("?" for _ in kept)
        conn.execute(f"INSERT INTO {table} ({names}) VALUES ({marks})", tuple(kept.values()))
        return int(conn.last_insert_rowid())

    def update(table: str, where: str, params: tuple[Any, ...], **values: Any) -> None:
        kept = {name: value for name, value in values.items() if name in columns[table]}
        if kept:
            sets = ", ".join(f"{name} = ?" for name in kept)
            conn.execute(f"UPDATE {table} SET {sets} WHERE {where}", (*kept.values(), *params))

    def key(public_id: str) -> int:
        return int(
            conn.execute("SELECT id FROM collections WHERE public_id = ?", (public_id,)).fetchone()[
                0
            ]
        )

    main, target = key(main_public), key(target_public)
    update("collections", "id = ?", (main,), max_input_tokens=256)
    update("collections", "id = ?", (target,), max_input_tokens=256, shadow_of=main)
    content = LEXICAL_TEXT.encode()
    sha = hashlib.sha256(content).hexdigest()
    insert(
        "files",
        id=LEXICAL_FILE,
        filename="tides.txt",
        created_at=NOW,
        bytes=len(content),
        purpose="assistants",
        sha256=sha,
    )
    for (file_id,) in conn.execute("SELECT id FROM files").fetchall():
        if "file_contents" in columns:
            text = " ".join(CHUNKS.get(file_id, [LEXICAL_TEXT])).encode()
            conn.execute(
                "INSERT OR IGNORE INTO file_contents (file_id, content) VALUES (?, ?)",
                (file_id, text),
            )
    insert("file_batches", id="vsfb_fixture1", collection_id=target, created_at=NOW)
    if "jobs" in columns:
        # The re-index's copy of a file, waiting for a worker (no jobs before schema 2: a file
        # could not be in progress then).
        insert(
            "collection_files",
            collection_id=target,
            file_id=LEXICAL_FILE,
            status="in_progress",
            attributes='{"team": "tides"}',
            created_at=NOW,
            chunking_json='{"type": "static", "max_chunk_size_tokens": 100}',
            batch_id="vsfb_fixture1",
            sha256=sha,
        )
        conn.execute("UPDATE collections SET file_count = file_count + 1 WHERE id = ?", (target,))
        insert(
            "jobs",
            collection_id=target,
            file_id=LEXICAL_FILE,
            state="pending",
            next_attempt_at=NOW,
            created_at=NOW,
            key_name="fixture-admin",
        )
        insert(
            "jobs",
            collection_id=main,
            file_id="file-fixture-a",
            state="done",
            worker_id="worker-1",
            lease_expires_at=NOW + 60,
            attempts=1,
            next_attempt_at=NOW,
            created_at=NOW,
            key_name="fixture-admin",
        )
    if "vectors_pending" in columns["collection_files"]:
        insert(
            "collection_files",
            collection_id=main,
            file_id=LEXICAL_FILE,
            status="completed",
            attributes='{"team": "tides"}',
            chunk_count=1,
            usage_bytes=len(content),
            created_at=NOW,
            sha256=sha,
            vectors_pending=1,
        )
        chunk = insert(
            "chunks",
            collection_id=main,
            file_id=LEXICAL_FILE,
            chunk_index=0,
            text=LEXICAL_TEXT,
            token_count=11,
        )
        # Before schema 9 a trigger indexed it; from 9 on the code writes the full-text row.
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (f"fts_{main}",)).fetchone():
            conn.execute(
                f"INSERT INTO fts_{main} (rowid, text) VALUES (?, ?)", (chunk, LEXICAL_TEXT)
            )
        conn.execute(
            "UPDATE collections SET chunk_count = chunk_count + 1, file_count = file_count + 1,"
            " usage_bytes = usage_bytes + ? WHERE id = ?",
            (len(content), main),
        )
        insert(
            "jobs",
            collection_id=main,
            file_id=LEXICAL_FILE,
            state="pending",
            next_attempt_at=NOW,
            created_at=NOW,
            key_name="fixture-admin",
        )
    model = insert("embedding_models", model_key=f"{MODEL}:sha256-fixture", dimensions=DIMS)
    for n, text in enumerate(CHUNKS["file-fixture-a"]):
        insert(
            "embedding_cache",
            model_id=model,
            text_sha256=hashlib.sha256(text.encode()).digest(),
            vector=vectors(0, 2)[n].astype("<f4").tobytes(),
            last_used_at=NOW,
        )
    audit = {"at": NOW + 0.5, "latency_ms": 12.5, "key_name": "fixture-admin"}
    insert(
        "audit_log",
        operation="search",
        collection_id=main_public,
        k=5,
        result_count=2,
        degraded=1,
        detail="lexical",
        **audit,
    )
    insert(
        "audit_log",
        operation="ingest",
        collection_id=main_public,
        detail="file-fixture-a",
        embedded_tokens=18,
        error_code="",
        **audit,
    )
    conversation = insert(
        "conversations",
        public_id="conv_" + "f1" * 24,
        created_at=NOW,
        last_active_at=NOW + 5,
        metadata=json.dumps({"ragd_index": main_public}),
        title="Where is the lighthouse?",
        item_count=2,
        next_position=2,
    )
    first = insert(
        "responses",
        public_id="resp_fixture0001",
        conversation_id=conversation,
        created_at=NOW + 1.25,
        completed_at=NOW + 2.5,
        status="completed",
        model="fixture-chat",
        settings='{"store": true, "instructions": "Answer briefly."}',
        usage='{"input_tokens": 12, "output_tokens": 9}',
    )
    second = insert(
        "responses",
        public_id="resp_fixture0002",
        previous_response_id="resp_fixture0001",
        created_at=NOW + 3.0,
        completed_at=NOW + 4.0,
        status="incomplete",
        model="fixture-chat",
        error='{"reason": "max_output_tokens"}',
    )
    asked = insert(
        "items",
        **message("msg_" + "a1" * 16, "user", "Where is the lighthouse?", "input_text"),
        conversation_id=conversation,
        position=0,
        response_id=first,
        response_role="input",
        response_position=0,
    )
    insert(
        "items",
        **message(
            "msg_" + "a2" * 16, "assistant", "It stands on the northern cape.", "output_text"
        ),
        conversation_id=conversation,
        position=1,
        response_id=first,
        response_role="output",
        response_position=0,
    )
    insert(
        "items",
        **message("msg_" + "a3" * 16, "user", "Who keeps the logbook?", "input_text"),
        response_id=second,
        response_role="input",
        response_position=0,
    )
    insert(
        "items",
        **message("msg_" + "a4" * 16, "assistant", "The keeper of the", "output_text"),
        status="incomplete",
        response_id=second,
        response_role="output",
        response_position=0,
    )
    insert(
        "item_vectors",
        item_id=asked,
        model=MODEL,
        vector=vectors(9, 1)[0].astype("<f4").tobytes(),
    )
    insert(
        "reindexes",
        collection_id=main,
        shadow_id=target,
        status="in_progress",
        from_model=MODEL,
        from_dimensions=DIMS,
        model=TARGET_MODEL,
        dimensions=DIMS,
        chunking_json='{"type": "static", "max_chunk_size_tokens": 100}',
        max_chunk_tokens=100,
        created_at=NOW,
        files_total=3,
        files_completed=2,
    )
    admin = insert(
        "api_keys",
        name="fixture-admin",
        digest=hashlib.sha256(KEY_SECRET.encode()).digest(),
        scope="admin",
        vector_stores=json.dumps([main_public]),
        requests_per_minute=60,
        tokens_per_day=100_000,
        created_at=NOW,
        last_used_at=NOW + 5,
        requests=3,
        searches=1,
        embedded_tokens=42,
        bytes_stored=len(content),
    )
    insert(
        "api_keys",
        name="fixture-revoked",
        digest=hashlib.sha256(b"sk-fixture-revoked").digest(),
        scope="read",
        created_at=NOW,
        revoked_at=NOW + 5,
    )
    insert("api_key_days", key_id=admin, day=NOW // 86400, requests=3, embedded_tokens=42)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
