"""Restore in process against real SQLite files: a file whose schema is not the one ragd's
migrations make is refused with the live database untouched, an older backup is migrated
before it replaces anything, revocations survive, and retention deletes only ragd's own
timed files, each kind counted apart, with names that never collide."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest

from services.common.vocabulary import LEXICAL
from services.store import migrations, schema_check, vector_index
from services.store.db import load_vectors
from services.store.errors import BackupUnusable, InvalidArgument
from services.store.repository import OperationsSettings, Repository
from tests.store_fixtures import (
    MODEL,
    check_invariants,
    claim_one,
    finish,
    open_repository,
    upload,
)

DIMS = 8
LATEST = len(migrations.MIGRATIONS)


def make(path: Path, keep: int = 10) -> Repository:
    # Coarse indexes from the first row, so backups carry every kind of per-store table.
    return open_repository(
        path,
        index=vector_index.IndexSettings(min_rows=1),
        operations=OperationsSettings(backup_keep=keep, backup_reserve_bytes=0),
    )


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Repository]:
    with make(tmp_path / "ragd.db") as repository:
        yield repository


def add_store(repo: Repository, name: str, chunks: int = 3) -> str:
    store = repo.create_vector_store(name, MODEL, DIMS).id
    repo.attach_file(store, upload(repo, name.encode(), f"{name}.txt").id)
    finish(repo, claim_one(repo), chunks=chunks)
    while repo.build_indexes():
        pass
    return store


def content(repo: Repository) -> str:
    """What the database holds, as a digest of its SQL dump (schema and rows)."""
    conn = apsw.Connection(str(repo.path), flags=apsw.SQLITE_OPEN_READONLY)
    load_vectors(conn)
    try:
        digest = hashlib.sha256()
        for kind, name, sql in conn.execute(
            "SELECT type, name, sql FROM sqlite_schema ORDER BY name"
        ):
            digest.update(f"{kind} {name} {sql}".encode())
            if kind == "table" and not str(sql).startswith("CREATE VIRTUAL"):
                rows = conn.execute(f'SELECT * FROM "{name}"').fetchall()
                digest.update(repr(sorted(map(repr, rows))).encode())
        return digest.hexdigest()
    finally:
        conn.close()


def edited(source: Path, target: Path, sql: str) -> None:
    """A copy of the backup `source` with `sql` run on it."""
    shutil.copyfile(source, target)
    conn = apsw.Connection(str(target))
    load_vectors(conn)
    try:
        conn.execute(sql)
    finally:
        conn.close()


# Each one a way a file with ragd's user_version can hold a schema that is not ragd's, and
# what the refusal names.
HOSTILE: dict[str, tuple[str, str]] = {
    "an extra table": ("CREATE TABLE evil (x)", "table 'evil' is not one of ragd's"),
    "an extra trigger": (
        "CREATE TRIGGER evil AFTER INSERT ON files BEGIN DELETE FROM files; END",
        "trigger 'evil' is not one of ragd's",
    ),
    "an extra view": ("CREATE VIEW evil AS SELECT 1", "view 'evil' is not one of ragd's"),
    "a missing index": ("DROP INDEX files_created", "index 'files_created' is missing"),
    "a missing table": ("DROP TABLE reindexes", "table 'reindexes' is missing"),
    "a changed index": (
        "DROP INDEX files_created; CREATE INDEX files_created ON files (filename)",
        "index 'files_created' differs",
    ),
    "a changed table": (
        "ALTER TABLE files ADD COLUMN extra TEXT",
        "table 'files' differs",
    ),
    "a missing full-text queue": ("DROP TABLE fulltext_queue", "table 'fulltext_queue' is missing"),
    "a vector table of a vector store it lacks": (
        f"CREATE VIRTUAL TABLE vec_99 USING vec0(embedding float[{DIMS}] distance_metric=cosine)",
        "table 'vec_99' is not one of ragd's",
    ),
    "a vector table of another dimension": (
        "DROP TABLE vec_1;"
        " CREATE VIRTUAL TABLE vec_1 USING vec0(embedding float[16] distance_metric=cosine)",
        "table 'vec_1' differs",
    ),
    "a coarse index without its tables": (
        "DROP TABLE vecq_1; DROP TABLE vecf_1",
        "table 'vecf_1' is missing",
    ),
    "a shadow table of no virtual table": (
        "CREATE TABLE vec_99_rowids (x)",
        "table 'vec_99_rowids' is not one of ragd's",
    ),
    "an index on a shadow table": (
        "CREATE INDEX evil ON items_fts_data (block)",
        "index 'evil' is not one of ragd's",
    ),
    # SQLite's own check reads full-text tables: this one is refused before the schema's.
    "a broken full-text table": (
        "DROP TABLE items_fts_config;"
        " CREATE TABLE items_fts_config (k PRIMARY KEY, v) WITHOUT ROWID",
        "cannot be read: invalid fts5 file format",
    ),
}


def hostile(directory: Path, case: str, backup: Path) -> Path:
    target = directory / "hostile.db"
    if case == "foreign tables":
        conn = apsw.Connection(str(target))
        conn.execute(f"CREATE TABLE vector_stores (x); PRAGMA user_version = {LATEST}")
        conn.close()
    else:
        edited(backup, target, HOSTILE[case][0])
    return target


@pytest.mark.parametrize("case", ["foreign tables", *HOSTILE])
def test_a_file_whose_schema_is_not_ragds_is_refused_and_nothing_changes(
    repo: Repository, case: str
) -> None:
    add_store(repo, "first")
    backup = repo.backup("good.db").path
    add_store(repo, "second")
    before = content(repo)
    hostile(backup.parent, case, backup)
    expected = "table 'vector_stores' differs" if case == "foreign tables" else HOSTILE[case][1]
    with pytest.raises(BackupUnusable) as refused:
        repo.restore("hostile.db")
    assert expected in str(refused.value)
    assert "hostile.db" in str(refused.value)
    assert content(repo) == before
    assert not (backup.parent / "replaced").exists()
    assert sorted(p.name for p in backup.parent.iterdir()) == ["good.db", "hostile.db"]
    # The sound backup of the same database still restores.
    repo.restore("good.db")
    assert [c.name for c in repo.list_vector_stores().items] == ["first"]
    check_invariants(repo.path)


def vector_store_row(conn: apsw.Connection, key: int, version: int) -> None:
    """A vector store with one file and chunk, written with the tables and columns of
    `version`'s schema (a vector store was a `collection` until migration 15)."""
    renamed = version >= schema_check.VECTOR_STORES_SINCE
    stores, members = (
        ("vector_stores", "vector_store_files")
        if renamed
        else (
            "collections",
            "collection_files",
        )
    )
    column = "vector_store_id" if renamed else "collection_id"
    conn.execute(
        f"INSERT INTO {stores} (id, public_id, name, model, dimensions, created_at,"
        " last_active_at, chunk_count, file_count) VALUES (?, ?, 'old', ?, ?, 1, 1, 1, 1)",
        (key, f"vs_old{key}", MODEL, DIMS),
    )
    conn.execute("INSERT INTO files (id, filename, created_at) VALUES ('file-old', 'o.txt', 1)")
    conn.execute(
        f"INSERT INTO {members} ({column}, file_id, status, chunk_count, created_at)"
        " VALUES (?, 'file-old', 'completed', 1, 1)",
        (key,),
    )
    conn.execute(
        f"INSERT INTO chunks (id, {column}, file_id, chunk_index, text, token_count)"
        " VALUES (1, ?, 'file-old', 0, 'an old chunk of text', 5)",
        (key,),
    )
    vector_index.create_tables(conn, key, DIMS)
    conn.execute(
        f"INSERT INTO {vector_index.vec_table(key)} (rowid, embedding) VALUES (1, ?)",
        (b"\x00\x00\x80\x3f" * DIMS,),
    )


@pytest.mark.parametrize("version", [1, 4, 8, LATEST - 1])
def test_an_older_backup_is_checked_and_migrated_before_it_replaces_anything(
    repo: Repository, version: int
) -> None:
    old = repo.backup_dir / "old.db"
    old.parent.mkdir()
    conn = apsw.Connection(str(old))
    load_vectors(conn)
    for step in migrations.MIGRATIONS[:version]:
        with conn:
            step(conn)
    with conn:
        vector_store_row(conn, 1, version)
        if schema_check.FULLTEXT_PER_STORE_SINCE <= version < schema_check.FULLTEXT_OUTSIDE_SINCE:
            migrations.v9_fulltext_table(conn, 1)
            conn.execute("INSERT INTO fts_1 (rowid, text) VALUES (1, 'an old chunk of text')")
        conn.execute(f"PRAGMA user_version = {version:d}")
    conn.close()
    add_store(repo, "current")

    result = repo.restore("old.db")
    assert (result.restored_schema_version, result.schema_version) == (version, LATEST)
    assert [c.name for c in repo.list_vector_stores().items] == ["old"]
    # Both indexes serve it: the vectors, and the full text migration 9 built (or kept).
    [by_vector] = repo.search("vs_old1", [1.0] * DIMS, k=5, model=MODEL)
    [by_text] = repo.search("vs_old1", None, k=5, mode=LEXICAL, query_text="old chunks")
    assert by_vector.file_id == by_text.file_id == "file-old"
    check_invariants(repo.path)
    # What the store made of it is a schema ragd's check accepts in turn.
    copy = repo.backup("again.db").path
    repo.restore(copy.name)


def test_revocations_survive_a_restore(repo: Repository) -> None:
    _, kept = repo.create_api_key("kept", "read")
    _, revoked = repo.create_api_key("revoked", "write")
    repo.backup("before.db")
    repo.revoke_api_key("revoked")
    _, later = repo.create_api_key("later", "read")
    [then] = [k.revoked_at for k in repo.list_api_keys(revoked=True) if k.name == "revoked"]

    repo.restore("before.db")
    assert repo.authenticate_api_key(kept) is not None
    # Revoked after the backup: still revoked, at the time it was.
    assert repo.authenticate_api_key(revoked) is None
    [now] = [k.revoked_at for k in repo.list_api_keys(revoked=True) if k.name == "revoked"]
    assert now == then > 0
    # Made after the backup: gone with everything else the backup did not hold.
    assert repo.authenticate_api_key(later) is None
    assert sorted(k.name for k in repo.list_api_keys(revoked=True)) == ["kept", "revoked"]


def own(directory: Path, prefix: str) -> list[str]:
    """Timed files of one kind (their names start with the year)."""
    return sorted(p.name for p in directory.glob(f"{prefix}-2*.db"))


def test_retention_counts_only_ragds_own_timed_files_each_kind_apart(tmp_path: Path) -> None:
    backups = tmp_path / "backups"
    with make(tmp_path / "ragd.db", keep=2) as repo:
        add_store(repo, "kept")
        # The operator's own files, and backups named by them: never counted nor deleted.
        backups.mkdir(mode=0o700)
        (backups / "notes.txt").write_text("mine")
        (backups / "ragd-mine.db").write_bytes(b"mine")
        named = [repo.backup(name).path for name in ("nightly/one.db", "two.db")]
        # Four timed backups in (most likely) one second: unique names, the newest two kept.
        timed = [repo.backup().path for _ in range(4)]
        assert len({p.name for p in timed}) == 4
        assert own(backups, "ragd") == sorted(p.name for p in timed[2:])
        # Three restores: their copies of the replaced database are kept apart, two of them.
        replaced = [repo.restore("two.db").replaced for _ in range(3)]
        assert len({p.name for p in replaced}) == 3
        assert {p.parent for p in replaced} == {(backups / "replaced").resolve()}
        assert own(backups / "replaced", "replaced") == sorted(p.name for p in replaced[1:])
        # Still two timed backups after another, and every other file untouched.
        repo.backup()
        assert len(own(backups, "ragd")) == 2
        assert all(p.exists() for p in named)
        assert (backups / "notes.txt").read_text() == "mine"
        assert (backups / "ragd-mine.db").read_bytes() == b"mine"
        # A name of the form ragd gives its own files is refused: retention would delete it.
        for name in ("ragd-20260101T000000Z.db", "x/replaced-20260101T000000Z-2.db"):
            with pytest.raises(InvalidArgument, match="RAGD_BACKUP_KEEP"):
                repo.backup(name)
        # A replaced copy restores like a backup (it undoes the restore).
        repo.restore(f"replaced/{replaced[-1].name}")


@pytest.mark.parametrize("page_size", [1024, 16384])
def test_a_backup_of_another_page_size_restores(repo: Repository, page_size: int) -> None:
    add_store(repo, "resized")
    copy = repo.backup("copy.db").path
    conn = apsw.Connection(str(copy))
    load_vectors(conn)
    conn.execute(f"PRAGMA page_size = {page_size:d}; VACUUM")
    conn.close()
    add_store(repo, "later")
    repo.restore("copy.db")
    assert [c.name for c in repo.list_vector_stores().items] == ["resized"]
    check_invariants(repo.path)


def test_a_restore_does_not_leave_its_working_copy(repo: Repository) -> None:
    add_store(repo, "one")
    repo.backup("one.db")
    repo.restore("one.db")
    assert [p for p in repo.backup_dir.rglob(".*")] == []


_WITHOUT_SQLITE_VEC = """
import sys
from pathlib import Path

from services.store.db import use_sqlite_vec
from services.store.errors import BackupUnusable
from services.store.repository import OperationsSettings, Repository

use_sqlite_vec("/nonexistent/vec0.so")
settings = OperationsSettings(backup_dir=Path(sys.argv[2]), backup_reserve_bytes=0)
with Repository(sys.argv[1], operations=settings) as repo:
    repo.migrate()
    assert not repo.vectors
    try:
        repo.restore("hostile.db")
    except BackupUnusable as error:
        print(error)
    repo.restore("good.db")
    print([c.name for c in repo.list_vector_stores().items])
"""


def test_a_store_without_sqlite_vec_restores_a_backup_with_vector_tables(
    repo: Repository, tmp_path: Path
) -> None:
    """Such a store cannot make vector tables to compare with: those of the backup's vector
    stores are taken as they are, and only those."""
    add_store(repo, "vectors")
    backup = repo.backup("good.db").path
    edited(
        backup,
        backup.with_name("hostile.db"),
        "CREATE TABLE vecf_99 (id INTEGER PRIMARY KEY, embedding BLOB NOT NULL) STRICT",
    )
    ran = subprocess.run(
        [sys.executable, "-c", _WITHOUT_SQLITE_VEC, str(tmp_path / "novec.db"), str(backup.parent)],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ | {"PYTHONPATH": str(Path(__file__).parents[1])},
    )
    assert ran.returncode == 0, ran.stderr
    refusal, restored = ran.stdout.splitlines()
    assert "table 'vecf_99' is not one of ragd's" in refusal
    assert restored == "['vectors']"
