"""Numbered, forward-only schema migrations keyed by PRAGMA user_version.

Migration N (1-based) is MIGRATIONS[N - 1]; a database at user_version V has had the first V
applied. Each migration runs in its own transaction together with the user_version bump, so a
crash leaves the database at the last completed version. Never edit or reorder a released
migration: append a new one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import cast

import apsw

from services.store.db import atomic
from services.store.errors import DatabaseTooNew

log = logging.getLogger(__name__)

Migration = Callable[[apsw.Connection], None]


def _script(sql: str) -> Migration:
    def run(conn: apsw.Connection) -> None:
        conn.execute(sql)

    return run


# Vectors live in one vec0 table per collection, named vec_<collections.id> and created with
# the collection; its rowids are chunks.id. Attributes belong to a file's membership in a
# collection (OpenAI updates them per vector-store file), so filters select collection_files
# rows, then their chunks, then an exact KNN restricted to those chunk ids.
_V1_INITIAL = """
CREATE TABLE collections (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    public_id      TEXT    NOT NULL UNIQUE,
    name           TEXT    NOT NULL,
    metadata       TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(metadata)),
    model          TEXT    NOT NULL,
    dimensions     INTEGER NOT NULL CHECK (dimensions BETWEEN 1 AND 8192),
    created_at     INTEGER NOT NULL,
    last_active_at INTEGER NOT NULL,
    chunk_count    INTEGER NOT NULL DEFAULT 0,
    file_count     INTEGER NOT NULL DEFAULT 0,
    usage_bytes    INTEGER NOT NULL DEFAULT 0
) STRICT;

CREATE TABLE files (
    id         TEXT    PRIMARY KEY,
    filename   TEXT    NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;

CREATE TABLE collection_files (
    collection_id INTEGER NOT NULL REFERENCES collections (id),
    file_id       TEXT    NOT NULL REFERENCES files (id),
    status        TEXT    NOT NULL
                  CHECK (status IN ('in_progress', 'completed', 'failed', 'cancelled')),
    attributes    TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(attributes)),
    chunk_count   INTEGER NOT NULL DEFAULT 0,
    usage_bytes   INTEGER NOT NULL DEFAULT 0,
    created_at    INTEGER NOT NULL,
    PRIMARY KEY (collection_id, file_id)
) STRICT;
CREATE INDEX collection_files_file ON collection_files (file_id);

CREATE TABLE chunks (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    collection_id INTEGER NOT NULL,
    file_id       TEXT    NOT NULL,
    chunk_index   INTEGER NOT NULL,
    text          TEXT    NOT NULL,
    token_count   INTEGER NOT NULL,
    UNIQUE (collection_id, file_id, chunk_index),
    FOREIGN KEY (collection_id, file_id) REFERENCES collection_files (collection_id, file_id)
) STRICT;
"""

# Files keep their bytes (in file_contents, so listing files never reads blobs) and a content
# hash; a file in a collection records how it is chunked, why it failed, the batch that
# attached it and the content hash (identical content is indexed once per collection). Jobs
# are the durable ingest queue: at most one live (pending or leased) job per collection file;
# finished jobs stay until their file leaves the collection, so a late worker learns that its
# job is done rather than gone. Foreign keys have full indexes on the child side (SQLite
# cannot use partial indexes to check them).
_V2_FILES_AND_JOBS = """
ALTER TABLE collections ADD COLUMN expires_anchor TEXT NOT NULL DEFAULT '';
ALTER TABLE collections ADD COLUMN expires_days INTEGER NOT NULL DEFAULT 0;

ALTER TABLE files ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE files ADD COLUMN purpose TEXT NOT NULL DEFAULT 'assistants';
ALTER TABLE files ADD COLUMN sha256 TEXT NOT NULL DEFAULT '';
CREATE INDEX files_created ON files (created_at);

CREATE TABLE file_contents (
    file_id TEXT PRIMARY KEY REFERENCES files (id),
    content BLOB NOT NULL
) STRICT;

CREATE TABLE file_batches (
    id            TEXT    PRIMARY KEY,
    collection_id INTEGER NOT NULL REFERENCES collections (id),
    created_at    INTEGER NOT NULL,
    cancelled_at  INTEGER
) STRICT;
CREATE INDEX file_batches_collection ON file_batches (collection_id);

ALTER TABLE collection_files ADD COLUMN last_error_code TEXT NOT NULL DEFAULT '';
ALTER TABLE collection_files ADD COLUMN last_error_message TEXT NOT NULL DEFAULT '';
ALTER TABLE collection_files ADD COLUMN chunking_json TEXT NOT NULL DEFAULT '';
ALTER TABLE collection_files ADD COLUMN batch_id TEXT REFERENCES file_batches (id);
ALTER TABLE collection_files ADD COLUMN sha256 TEXT NOT NULL DEFAULT '';
CREATE INDEX collection_files_status ON collection_files (collection_id, status);
CREATE INDEX collection_files_sha256 ON collection_files (collection_id, sha256);
CREATE INDEX collection_files_batch ON collection_files (batch_id);

CREATE TABLE jobs (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    collection_id    INTEGER NOT NULL,
    file_id          TEXT    NOT NULL,
    state            TEXT    NOT NULL CHECK (state IN ('pending', 'leased', 'done')),
    worker_id        TEXT    NOT NULL DEFAULT '',
    lease_expires_at INTEGER NOT NULL DEFAULT 0,
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  INTEGER NOT NULL,
    created_at       INTEGER NOT NULL,
    FOREIGN KEY (collection_id, file_id) REFERENCES collection_files (collection_id, file_id)
) STRICT;
CREATE INDEX jobs_file ON jobs (collection_id, file_id);
CREATE UNIQUE INDEX jobs_live ON jobs (collection_id, file_id) WHERE state <> 'done';
"""

# Lexical search: an external-content FTS5 index over chunks.text (the text is stored once,
# in chunks), kept in step with chunks by triggers in the same transactions, and built for the
# chunks already there. unicode61 folds case and, with remove_diacritics 2, accents (also on
# decomposed characters); porter stems English, as the default model is English, so
# "configuring replicas" finds "configure a replica". Identifiers survive: "E1234" is one token,
# and "E-1234" or "snake_case" become adjacent tokens that a quoted query matches as a phrase.
_V3_LEXICAL_INDEX = """
CREATE VIRTUAL TABLE chunks_fts USING fts5(
    text,
    content = 'chunks',
    content_rowid = 'id',
    tokenize = 'porter unicode61 remove_diacritics 2'
);

CREATE TRIGGER chunks_fts_insert AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts (rowid, text) VALUES (new.id, new.text);
END;

CREATE TRIGGER chunks_fts_delete AFTER DELETE ON chunks BEGIN
    INSERT INTO chunks_fts (chunks_fts, rowid, text) VALUES ('delete', old.id, old.text);
END;

CREATE TRIGGER chunks_fts_update AFTER UPDATE ON chunks BEGIN
    INSERT INTO chunks_fts (chunks_fts, rowid, text) VALUES ('delete', old.id, old.text);
    INSERT INTO chunks_fts (rowid, text) VALUES (new.id, new.text);
END;

INSERT INTO chunks_fts (chunks_fts) VALUES ('rebuild');
"""

# Operations. The embedding cache maps (model, sha256 of the text) to a vector; the model key
# names the exact weights, so vectors of two models never mix; last_used_at drives LRU
# eviction. Rowid tables (not WITHOUT ROWID): a 1.5 KB vector fits a table leaf page but would
# overflow an index page. The audit log records ingest and search calls; `collection_id` is
# the public id, kept as text so a deleted store's entries stay readable.
_V4_CACHE_AND_AUDIT = """
CREATE TABLE embedding_models (
    id         INTEGER PRIMARY KEY,
    model_key  TEXT    NOT NULL UNIQUE,
    dimensions INTEGER NOT NULL CHECK (dimensions BETWEEN 1 AND 8192)
) STRICT;

CREATE TABLE embedding_cache (
    id           INTEGER PRIMARY KEY,
    model_id     INTEGER NOT NULL REFERENCES embedding_models (id),
    text_sha256  BLOB    NOT NULL CHECK (length(text_sha256) = 32),
    vector       BLOB    NOT NULL,
    last_used_at INTEGER NOT NULL,
    UNIQUE (model_id, text_sha256)
) STRICT;
CREATE INDEX embedding_cache_lru ON embedding_cache (last_used_at);

CREATE TABLE audit_log (
    id            INTEGER PRIMARY KEY,
    at            REAL    NOT NULL,
    operation     TEXT    NOT NULL,
    collection_id TEXT    NOT NULL DEFAULT '',
    k             INTEGER NOT NULL DEFAULT 0,
    latency_ms    REAL    NOT NULL DEFAULT 0,
    result_count  INTEGER NOT NULL DEFAULT 0,
    degraded      INTEGER NOT NULL DEFAULT 0 CHECK (degraded IN (0, 1)),
    detail        TEXT    NOT NULL DEFAULT ''
) STRICT;
CREATE INDEX audit_log_at ON audit_log (at);
CREATE INDEX audit_log_collection ON audit_log (collection_id, id);
"""

# How each collection's vectors are searched (vector_index.py): every existing collection starts
# exact; the store's background builder adds the coarse index to those large enough, so this
# step is instant whatever the database holds.
_V5_VECTOR_INDEX = """
ALTER TABLE collections ADD COLUMN vector_index TEXT NOT NULL DEFAULT 'exact'
    CHECK (vector_index IN ('exact', 'building', 'coarse'));
"""

# Conversations and responses (chat history). An item (a message, a file_search call, a
# function call or its output, reasoning...) belongs to a conversation, where `position` orders
# it, to a response, as one of its inputs or outputs in order, or to both: a turn in a
# conversation appends its response's items to it. `body` keeps the item's other OpenAI fields
# as JSON (content parts of any type, queries and results, arguments), so nothing a client sent
# is dropped; `text` is what full-text search sees, indexed by items_fts like chunks_fts.
_V6_CONVERSATIONS = """
CREATE TABLE conversations (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    public_id      TEXT    NOT NULL UNIQUE,
    created_at     INTEGER NOT NULL,
    last_active_at INTEGER NOT NULL,
    metadata       TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(metadata)),
    title          TEXT    NOT NULL DEFAULT '',
    item_count     INTEGER NOT NULL DEFAULT 0,
    next_position  INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE INDEX conversations_active ON conversations (last_active_at);

CREATE TABLE responses (
    id                   INTEGER PRIMARY KEY AUTOINCREMENT,
    public_id            TEXT    NOT NULL UNIQUE,
    conversation_id      INTEGER REFERENCES conversations (id),
    previous_response_id TEXT    NOT NULL DEFAULT '',
    created_at           REAL    NOT NULL,
    completed_at         REAL    NOT NULL DEFAULT 0,
    status               TEXT    NOT NULL
                         CHECK (status IN ('completed', 'incomplete', 'failed', 'cancelled')),
    model                TEXT    NOT NULL DEFAULT '',
    settings             TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(settings)),
    usage                TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(usage)),
    error                TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(error))
) STRICT;
CREATE INDEX responses_conversation ON responses (conversation_id);
CREATE INDEX responses_previous ON responses (previous_response_id);

CREATE TABLE items (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    public_id         TEXT    NOT NULL UNIQUE,
    conversation_id   INTEGER REFERENCES conversations (id),
    position          INTEGER,
    response_id       INTEGER REFERENCES responses (id),
    response_role     TEXT    NOT NULL DEFAULT '' CHECK (response_role IN ('', 'input', 'output')),
    response_position INTEGER NOT NULL DEFAULT 0,
    type              TEXT    NOT NULL,
    role              TEXT    NOT NULL DEFAULT '',
    status            TEXT    NOT NULL DEFAULT 'completed',
    body              TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(body)),
    text              TEXT    NOT NULL DEFAULT '',
    created_at        INTEGER NOT NULL
) STRICT;
CREATE UNIQUE INDEX items_position ON items (conversation_id, position)
    WHERE conversation_id IS NOT NULL;
CREATE INDEX items_response ON items (response_id, response_role, response_position);

CREATE VIRTUAL TABLE items_fts USING fts5(
    text,
    content = 'items',
    content_rowid = 'id',
    tokenize = 'porter unicode61 remove_diacritics 2'
);

CREATE TRIGGER items_fts_insert AFTER INSERT ON items BEGIN
    INSERT INTO items_fts (rowid, text) VALUES (new.id, new.text);
END;

CREATE TRIGGER items_fts_delete AFTER DELETE ON items BEGIN
    INSERT INTO items_fts (items_fts, rowid, text) VALUES ('delete', old.id, old.text);
END;

CREATE TRIGGER items_fts_update AFTER UPDATE OF text ON items BEGIN
    INSERT INTO items_fts (items_fts, rowid, text) VALUES ('delete', old.id, old.text);
    INSERT INTO items_fts (rowid, text) VALUES (new.id, new.text);
END;

-- Embeddings of conversation items' text, for search by meaning, one per item and model
-- (little-endian float32). Gateways fill them in the background: the items without one for
-- the embedder's model are the queue, so nothing is lost when a gateway stops mid-way.
CREATE TABLE item_vectors (
    item_id INTEGER NOT NULL REFERENCES items (id) ON DELETE CASCADE,
    model   TEXT    NOT NULL,
    vector  BLOB    NOT NULL,
    PRIMARY KEY (item_id, model)
) STRICT, WITHOUT ROWID;
CREATE INDEX item_vectors_model ON item_vectors (model);

CREATE TRIGGER items_vectors_update AFTER UPDATE OF text ON items BEGIN
    DELETE FROM item_vectors WHERE item_id = new.id;
END;
"""

# Re-indexing (reindex.py): a collection's new index is built in a hidden collection (its
# `shadow_of` names the one it will replace) by ordinary ingest jobs; when its last file is
# done, one transaction gives it the public identity and drops the old one. `reindexes`
# records each re-index of a collection: its target, progress when it ended, and why it failed.
_V7_REINDEX = """
ALTER TABLE collections ADD COLUMN shadow_of INTEGER REFERENCES collections (id);
CREATE INDEX collections_shadow ON collections (shadow_of);

CREATE TABLE reindexes (
    id               INTEGER PRIMARY KEY,
    collection_id    INTEGER NOT NULL REFERENCES collections (id),
    shadow_id        INTEGER REFERENCES collections (id),
    status           TEXT    NOT NULL
                     CHECK (status IN ('in_progress', 'completed', 'failed', 'cancelled')),
    from_model       TEXT    NOT NULL,
    from_dimensions  INTEGER NOT NULL,
    model            TEXT    NOT NULL,
    dimensions       INTEGER NOT NULL,
    chunking_json    TEXT    NOT NULL DEFAULT '',
    max_chunk_tokens INTEGER NOT NULL DEFAULT 0,
    created_at       INTEGER NOT NULL,
    finished_at      INTEGER NOT NULL DEFAULT 0,
    files_total      INTEGER NOT NULL DEFAULT 0,
    files_completed  INTEGER NOT NULL DEFAULT 0,
    files_failed     INTEGER NOT NULL DEFAULT 0,
    last_error       TEXT    NOT NULL DEFAULT ''
) STRICT;
CREATE INDEX reindexes_collection ON reindexes (collection_id, id);
CREATE INDEX reindexes_shadow ON reindexes (shadow_id);
"""

# Lexical-only operation: a file indexed while no embedder of its model answered (or without
# sqlite-vec) has its chunks and full-text rows but no vectors yet (`vectors_pending`); its job
# waits to fill them. A collection records its model's context, so that chunking can be
# resolved while that model's embedders are away.
_V8_LEXICAL_ONLY = """
ALTER TABLE collection_files ADD COLUMN vectors_pending INTEGER NOT NULL DEFAULT 0;
CREATE INDEX collection_files_vectors_pending ON collection_files (collection_id)
    WHERE vectors_pending = 1;
ALTER TABLE collections ADD COLUMN max_input_tokens INTEGER NOT NULL DEFAULT 0;
"""


def v9_fulltext_table(conn: apsw.Connection, key: int) -> None:
    """A vector store's full-text table as schema versions 9 to 13 made it (schema_check.py
    compares older backups with it)."""
    conn.execute(
        f"CREATE VIRTUAL TABLE fts_{key:d} USING fts5(text, content = '',"
        " contentless_delete = 1, tokenize = 'porter unicode61 remove_diacritics 2')"
    )


# One full-text table per collection, fts_<key> (services/store/fulltext.py says why),
# contentless with deletes by rowid, filled from the chunks; the shared chunks_fts and its
# triggers go. The DDL is written out here, not taken from fulltext.py, so that this
# migration stays what it was whatever fulltext.py becomes.
def _v9_fulltext_per_collection(conn: apsw.Connection) -> None:
    conn.execute(
        "DROP TRIGGER chunks_fts_insert; DROP TRIGGER chunks_fts_delete;"
        " DROP TRIGGER chunks_fts_update; DROP TABLE chunks_fts;"
    )
    keys = [int(row[0]) for row in conn.execute("SELECT id FROM collections ORDER BY id")]
    for key in keys:
        v9_fulltext_table(conn, key)
        conn.execute(
            f"INSERT INTO fts_{key:d} (rowid, text)"
            " SELECT id, text FROM chunks WHERE collection_id = ? ORDER BY id",
            (key,),
        )


# API keys as records (services/store/keys.py): only a key's sha256 is kept, never the key;
# usage counters since creation, and per UTC day for daily token limits. Audit entries name
# the key, the tokens embedded and a failed request's error code.
_V10_API_KEYS = """
CREATE TABLE api_keys (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    name            TEXT    NOT NULL UNIQUE,
    digest          BLOB    NOT NULL UNIQUE,
    scope           TEXT    NOT NULL CHECK (scope IN ('admin', 'write', 'read')),
    -- JSON list of vector store ids; empty: every vector store.
    vector_stores   TEXT    NOT NULL DEFAULT '[]',
    requests_per_minute INTEGER NOT NULL DEFAULT 0,
    tokens_per_day  INTEGER NOT NULL DEFAULT 0,
    created_at      INTEGER NOT NULL,
    last_used_at    INTEGER NOT NULL DEFAULT 0,
    revoked_at      INTEGER NOT NULL DEFAULT 0,
    requests        INTEGER NOT NULL DEFAULT 0,
    searches        INTEGER NOT NULL DEFAULT 0,
    embedded_tokens INTEGER NOT NULL DEFAULT 0,
    bytes_stored    INTEGER NOT NULL DEFAULT 0
) STRICT;
ALTER TABLE audit_log ADD COLUMN key_name TEXT NOT NULL DEFAULT '';
ALTER TABLE audit_log ADD COLUMN embedded_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE audit_log ADD COLUMN error_code TEXT NOT NULL DEFAULT '';
CREATE INDEX audit_log_key ON audit_log (key_name, id);
CREATE TABLE api_key_days (
    key_id          INTEGER NOT NULL REFERENCES api_keys (id) ON DELETE CASCADE,
    -- Days since the Unix epoch, UTC.
    day             INTEGER NOT NULL,
    requests        INTEGER NOT NULL DEFAULT 0,
    embedded_tokens INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (key_id, day)
) STRICT, WITHOUT ROWID;
"""

# The API key an ingest job was queued for: its chunks' tokens count against that key's usage
# and daily limit when a worker (on any gateway) embeds them.
_V11_JOB_KEYS = """
ALTER TABLE jobs ADD COLUMN key_name TEXT NOT NULL DEFAULT '';
"""

# Ownership (access.py): projects, the project of every vector store, file, conversation,
# response and key, and the key that made a file, conversation or response. Everything made
# before goes to the default project (id 1), which always exists. No REFERENCES on the new
# columns: SQLite refuses to add one with a non-NULL default while foreign keys are on.
_V12_PROJECTS = """
CREATE TABLE projects (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    public_id  TEXT    NOT NULL UNIQUE,
    name       TEXT    NOT NULL UNIQUE,
    created_at INTEGER NOT NULL
) STRICT;
INSERT INTO projects (id, public_id, name, created_at) VALUES (1, 'proj_default', 'default', 0);

ALTER TABLE collections ADD COLUMN project_id INTEGER NOT NULL DEFAULT 1;
CREATE INDEX collections_project ON collections (project_id, created_at);
ALTER TABLE files ADD COLUMN project_id INTEGER NOT NULL DEFAULT 1;
ALTER TABLE files ADD COLUMN created_by TEXT NOT NULL DEFAULT '';
CREATE INDEX files_project ON files (project_id, created_at);
ALTER TABLE conversations ADD COLUMN project_id INTEGER NOT NULL DEFAULT 1;
ALTER TABLE conversations ADD COLUMN created_by TEXT NOT NULL DEFAULT '';
CREATE INDEX conversations_project ON conversations (project_id, last_active_at);
ALTER TABLE responses ADD COLUMN project_id INTEGER NOT NULL DEFAULT 1;
ALTER TABLE responses ADD COLUMN created_by TEXT NOT NULL DEFAULT '';
ALTER TABLE api_keys ADD COLUMN project_id INTEGER NOT NULL DEFAULT 1;
ALTER TABLE api_keys ADD COLUMN project_conversations INTEGER NOT NULL DEFAULT 0
    CHECK (project_conversations IN (0, 1));
ALTER TABLE audit_log ADD COLUMN project TEXT NOT NULL DEFAULT '';
"""


# Background responses under way (services/store/responses.py): the response is recorded
# whole when its turn ends; until then this row stands for it (GET shows it queued or in
# progress) and holds its input, under a lease the gateway running it renews. A lease that
# runs out (that gateway died) ends the response as failed.
_V13_BACKGROUND_RESPONSES = """
CREATE TABLE pending_responses (
    public_id            TEXT    PRIMARY KEY,
    created_at           REAL    NOT NULL,
    status               TEXT    NOT NULL CHECK (status IN ('queued', 'in_progress')),
    model                TEXT    NOT NULL DEFAULT '',
    settings             TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(settings)),
    conversation_id      TEXT    NOT NULL DEFAULT '',
    previous_response_id TEXT    NOT NULL DEFAULT '',
    inputs               TEXT    NOT NULL DEFAULT '[]' CHECK (json_valid(inputs)),
    lease_expires_at     REAL    NOT NULL,
    -- Its owner (access.py), as the response's will be.
    project_id           INTEGER NOT NULL DEFAULT 1,
    created_by           TEXT    NOT NULL DEFAULT ''
) STRICT;
CREATE INDEX pending_responses_lease ON pending_responses (lease_expires_at);
"""


# Chunk full text moves from FTS5 to Tantivy indexes beside the database (fulltext.py says
# why): the FTS5 tables go, and every collection's index is built from its chunks on first use
# (no fulltext_indexes row). `fulltext_queue` holds the chunks written since their index last
# caught up, in the writes' own transactions.
def _v14_fulltext_outside(conn: apsw.Connection) -> None:
    keys = conn.execute("SELECT id FROM collections").fetchall()
    for (key,) in keys:
        conn.execute(f"DROP TABLE IF EXISTS fts_{int(cast(int, key)):d}")
    conn.execute(
        "CREATE TABLE fulltext_queue (seq INTEGER PRIMARY KEY AUTOINCREMENT,"
        " collection_id INTEGER NOT NULL, chunk_id INTEGER NOT NULL)"
    )
    conn.execute("CREATE INDEX fulltext_queue_collection ON fulltext_queue (collection_id, seq)")
    conn.execute(
        "CREATE TABLE fulltext_indexes (collection_id INTEGER PRIMARY KEY,"
        " generation TEXT NOT NULL)"
    )


# One name per concept: what users call a vector store is one in the schema too (it was a
# "collection"). Renames only rewrite the schema, not the rows; foreign keys follow. The
# indexes keep their names (renaming one rebuilds it).
_V15_VECTOR_STORES = """
ALTER TABLE collections RENAME TO vector_stores;
ALTER TABLE collection_files RENAME TO vector_store_files;
ALTER TABLE vector_store_files RENAME COLUMN collection_id TO vector_store_id;
ALTER TABLE chunks RENAME COLUMN collection_id TO vector_store_id;
ALTER TABLE file_batches RENAME COLUMN collection_id TO vector_store_id;
ALTER TABLE jobs RENAME COLUMN collection_id TO vector_store_id;
ALTER TABLE audit_log RENAME COLUMN collection_id TO vector_store_id;
ALTER TABLE reindexes RENAME COLUMN collection_id TO vector_store_id;
ALTER TABLE fulltext_queue RENAME COLUMN collection_id TO vector_store_id;
ALTER TABLE fulltext_indexes RENAME COLUMN collection_id TO vector_store_id;
"""


# OpenAI fields that were ignored: a vector store's description, and a file's expiry
# (expires_after on upload; 0 keeps it until deleted). The sweep finds files due by the index.
_V16_DESCRIPTION_AND_FILE_EXPIRY = """
ALTER TABLE vector_stores ADD COLUMN description TEXT NOT NULL DEFAULT '';
ALTER TABLE files ADD COLUMN expires_at INTEGER NOT NULL DEFAULT 0;
CREATE INDEX files_expiry ON files (expires_at) WHERE expires_at > 0;
"""


# A chunk longer than the model's window is embedded as several windows (issue 30): window 0
# stays the chunk's own vector in vec_<key>; windows 1.. live here, searched exactly and
# folded into their chunk by its best window. Deleting a chunk deletes its windows.
_V17_CHUNK_WINDOWS = """
CREATE TABLE chunk_windows (
    chunk_id        INTEGER NOT NULL REFERENCES chunks (id) ON DELETE CASCADE,
    window_index    INTEGER NOT NULL CHECK (window_index > 0),
    vector_store_id INTEGER NOT NULL,
    embedding       BLOB    NOT NULL,
    PRIMARY KEY (chunk_id, window_index)
) STRICT;
CREATE INDEX chunk_windows_store ON chunk_windows (vector_store_id, chunk_id);
"""


MIGRATIONS: list[Migration] = [
    _script(_V1_INITIAL),
    _script(_V2_FILES_AND_JOBS),
    _script(_V3_LEXICAL_INDEX),
    _script(_V4_CACHE_AND_AUDIT),
    _script(_V5_VECTOR_INDEX),
    _script(_V6_CONVERSATIONS),
    _script(_V7_REINDEX),
    _script(_V8_LEXICAL_ONLY),
    _v9_fulltext_per_collection,
    _script(_V10_API_KEYS),
    _script(_V11_JOB_KEYS),
    _script(_V12_PROJECTS),
    _script(_V13_BACKGROUND_RESPONSES),
    _v14_fulltext_outside,
    _script(_V15_VECTOR_STORES),
    _script(_V16_DESCRIPTION_AND_FILE_EXPIRY),
    _script(_V17_CHUNK_WINDOWS),
]


def schema_version(conn: apsw.Connection) -> int:
    row = conn.execute("PRAGMA user_version").fetchone()
    return int(row[0]) if row is not None else 0


def migrate(conn: apsw.Connection, migrations: list[Migration] | None = None) -> int:
    """Applies pending migrations, each in its own transaction; returns the schema version."""
    steps = MIGRATIONS if migrations is None else migrations
    latest = len(steps)
    while True:
        with atomic(conn):
            # Read inside the write transaction: another process cannot migrate meanwhile.
            version = schema_version(conn)
            if version > latest:
                raise DatabaseTooNew(
                    f"the database is at schema version {version} but this build knows only "
                    f"up to {latest}; run a newer ragd or restore a backup made by this version"
                )
            if version == latest:
                return version
            steps[version](conn)
            conn.execute(f"PRAGMA user_version = {version + 1:d}")
        log.info("migrated the database to schema version %d", version + 1)
