"""Operations on the whole database: online backup, vacuum, and statistics."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import cast

import apsw

from services.store import audit, cache, migrations, schema_check, vector_index
from services.store.db import (
    DIRECTORY_MODE,
    atomic,
    create_private,
    load_vectors,
    vectors_available,
)
from services.store.errors import (
    BackupExists,
    BackupNotFound,
    BackupUnusable,
    InvalidArgument,
    StorageFull,
)
from services.store.records import (
    BackupInfo,
    BackupResult,
    DatabaseStats,
    VectorStoreStats,
)
from services.store.vector_index import vec_table

BACKUP_SUFFIX = ".db"
MAX_BACKUP_NAME = 128
MAX_BACKUP_DEPTH = 3
_PART = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_BACKUP_NAME = re.compile(rf"(?:{_PART}/){{0,{MAX_BACKUP_DEPTH}}}{_PART}\.db")
# Files ragd names itself, and deletes past RAGD_BACKUP_KEEP: backups taken without a name
# (ragd-<UTC time>.db, in the backup directory), copies of the databases restores replaced
# (replaced/replaced-...) and states fetched from the replica (replica/replica-...). Each kind
# is counted apart, and nothing else is ever deleted: a backup named by the operator is theirs.
BACKUPS, REPLACED, REPLICA = "ragd", "replaced", "replica"
_OWN_DIRECTORY = {BACKUPS: "", REPLACED: REPLACED, REPLICA: REPLICA}
_OWN_NAME = re.compile(r"(ragd|replaced|replica)-([0-9]{8}T[0-9]{6}Z)(?:-([1-9][0-9]{0,8}))?\.db")
# The working copy a restore migrates and then copies over the database.
_STAGING = ".restoring.db"
# Live jobs only (the partial index), never the finished ones that accumulate.
_LIVE_JOBS = (
    "SELECT count(*) FROM jobs INDEXED BY jobs_live WHERE state <> 'done' AND state = '{state}'"
)


def file_bytes(path: Path) -> tuple[int, int]:
    """Sizes of the database file and of its write-ahead log (0 when absent)."""
    sizes = []
    for candidate in (path, path.with_name(path.name + "-wal")):
        try:
            sizes.append(candidate.stat().st_size)
        except FileNotFoundError:
            sizes.append(0)
    return sizes[0], sizes[1]


def resolve_backup_path(backup_dir: Path, name: str) -> Path:
    """The backup file for `name`, which must stay inside backup_dir (symlinks resolved).

    Names are plain: letters, digits, '.', '_' and '-' in at most MAX_BACKUP_DEPTH folders,
    MAX_BACKUP_NAME characters in all, ending in .db (the suffix backup listings look for).
    """
    if not name:
        raise InvalidArgument("the backup path must be a non-empty file name")
    if len(name) > MAX_BACKUP_NAME or not _BACKUP_NAME.fullmatch(name):
        raise InvalidArgument(
            f"the backup name {name[:80]!r} is not allowed: name a file inside the backup "
            f"directory with up to {MAX_BACKUP_NAME} letters, digits, '.', '_' and '-', in at "
            f"most {MAX_BACKUP_DEPTH} folders separated by '/', ending in {BACKUP_SUFFIX}"
        )
    candidate = Path(name)
    if candidate.is_absolute():
        raise InvalidArgument(
            f"the backup path must be relative to the backup directory {str(backup_dir)!r}, "
            f"got the absolute path {name!r}"
        )
    root = backup_dir.resolve()
    target = (root / candidate).resolve()
    if root not in target.parents:
        raise InvalidArgument(
            f"the backup path {name!r} escapes the backup directory {str(backup_dir)!r}; "
            "use a file name inside it"
        )
    return target


def own_directory(backup_dir: Path, kind: str) -> Path:
    """Where ragd keeps the files of `kind` (BACKUPS, REPLACED or REPLICA) it names."""
    return backup_dir / _OWN_DIRECTORY[kind]


def new_own_path(backup_dir: Path, kind: str, now: float) -> Path:
    """A new name of ragd's own for a file of `kind` written at `now`: <kind>-<UTC time>.db,
    then -2, -3... after the last one of that second, so that it sorts as the newest even when
    retention deleted older ones. Called under the store's maintenance lock: no other backup
    or restore takes the name meanwhile."""
    directory = own_directory(backup_dir, kind)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    taken = [
        int(match[3] or 1)
        for path in (
            directory.glob(f"{kind}-{stamp}*{BACKUP_SUFFIX}") if directory.is_dir() else ()
        )
        if (match := _OWN_NAME.fullmatch(path.name)) and match[1] == kind and match[2] == stamp
    ]
    number = max(taken, default=0) + 1
    name = f"{kind}-{stamp}{'' if number == 1 else f'-{number}'}{BACKUP_SUFFIX}"
    return resolve_backup_path(backup_dir, str(Path(_OWN_DIRECTORY[kind]) / name))


def check_name_is_free(name: str) -> None:
    """Refuses a backup name of the form ragd gives its own files: retention would delete it."""
    if _OWN_NAME.fullmatch(Path(name).name):
        raise InvalidArgument(
            f"the backup name {name[:80]!r} has the form ragd gives its own backups and copies "
            "(<ragd|replaced|replica>-<UTC time>.db), which are deleted past RAGD_BACKUP_KEEP; "
            "choose another name, or none for a timed one"
        )


def _open_plain(path: Path) -> apsw.Connection:
    conn = apsw.Connection(str(path))
    load_vectors(conn)
    return conn


def backup(conn: apsw.Connection, *, target: Path) -> BackupResult:
    """Copies the database to `target` as one consistent snapshot while writes go on.

    The copy is made in a single backup step, i.e. inside one read transaction on the source:
    under WAL, writers are not blocked meanwhile and none of their later commits leak in. The
    file is written under a temporary name, checked, synced and only then renamed, so a
    backup file that exists is complete. It is a self-contained rollback-journal database
    (no -wal file to carry along).
    """
    if target.exists():
        raise BackupExists(f"a backup named {target.name!r} already exists at {str(target)!r}")
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    started = time.monotonic()
    try:
        # A backup holds what the database holds: owner only, like it.
        create_private(partial)
        dest = _open_plain(partial)
        try:
            with dest.backup("main", conn, "main") as step:
                step.step(-1)
            dest.execute("PRAGMA journal_mode = DELETE")
            problems = [row[0] for row in dest.execute("PRAGMA quick_check")]
        finally:
            dest.close()
        if problems != ["ok"]:
            raise RuntimeError(f"the backup failed its check: {problems[:5]}")
        with open(partial, "rb") as handle:
            os.fsync(handle.fileno())
        if target.exists():
            raise BackupExists(f"a backup named {target.name!r} was created meanwhile")
        os.replace(partial, target)
        _fsync_dir(target.parent)
    finally:
        for leftover in (partial, partial.with_name(partial.name + "-journal")):
            leftover.unlink(missing_ok=True)
    return BackupResult(
        path=target, bytes=target.stat().st_size, seconds=time.monotonic() - started
    )


def existing_backup(backup_dir: Path, name: str) -> Path:
    """The backup file `name` names inside backup_dir (BackupNotFound if there is none)."""
    path = resolve_backup_path(backup_dir, name)
    if not path.is_file():
        raise BackupNotFound(name)
    return path


def list_backups(backup_dir: Path) -> list[BackupInfo]:
    """The backups (*.db) under backup_dir, newest first; partial copies are hidden."""
    if not backup_dir.is_dir():
        return []
    root = backup_dir.resolve()
    found = []
    for path in root.rglob(f"*{BACKUP_SUFFIX}"):
        if path.is_file() and not path.name.startswith("."):
            stat = path.stat()
            found.append(BackupInfo(str(path.relative_to(root)), stat.st_size, stat.st_mtime))
    return sorted(found, key=lambda info: info.modified_at, reverse=True)


def check_backup(source: Path, latest_schema: int) -> int:
    """The backup's schema version, once it passed PRAGMA quick_check and its schema is the one
    ragd's migrations make at that version (BackupUnusable otherwise, saying why)."""
    try:
        conn = apsw.Connection(str(source), flags=apsw.SQLITE_OPEN_READONLY)
    except apsw.Error as error:
        raise BackupUnusable(f"{source.name} cannot be opened: {error}") from None
    try:
        # Nothing in the file runs while it is read: no view or trigger of its own is trusted.
        conn.execute("PRAGMA trusted_schema = OFF")
        problems = [str(row[0]) for row in conn.execute("PRAGMA quick_check")]
        if problems != ["ok"]:
            raise BackupUnusable(f"{source.name} failed its check: {'; '.join(problems[:3])}")
        version = _scalar(conn, "PRAGMA user_version")
        tables = {
            str(row[0])
            for row in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")
        }
        # The table of vector stores, by its name before migration 15 or after.
        if version < 1 or not {"vector_stores", "collections"} & tables:
            raise BackupUnusable(f"{source.name} is a SQLite database, but not one of ragd's")
        if version > latest_schema:
            raise BackupUnusable(
                f"{source.name} is at schema version {version}, newer than this store's "
                f"{latest_schema}: restore it with the ragd that made it"
            )
        wrong = schema_check.problems(conn, version, migrations.MIGRATIONS)
    except apsw.Error as error:
        raise BackupUnusable(f"{source.name} cannot be read: {error}") from None
    finally:
        conn.close()
    if wrong:
        raise BackupUnusable(
            f"{source.name} says it is at ragd's schema version {version}, but its tables are "
            f"not the ones ragd makes: {schema_check.summary(wrong)}"
        )
    return version


@contextmanager
def staged(source: Path, directory: Path, page_size: int) -> Iterator[apsw.Connection]:
    """A private working copy of the checked backup `source`, in `directory`, with
    `page_size` (a database in WAL mode only takes a copy of its own page size); removed on
    exit.

    The restore migrates this copy and carries the live database's revocations into it, so
    the copy over the live database is one step whatever the backup's version: a migration
    that fails leaves the live database as it was."""
    path = directory / _STAGING
    for leftover in (path, path.with_name(path.name + "-journal")):
        leftover.unlink(missing_ok=True)
    try:
        create_private(path)
        conn = _open_plain(path)
        try:
            backup_conn = apsw.Connection(str(source), flags=apsw.SQLITE_OPEN_READONLY)
            try:
                with conn.backup("main", backup_conn, "main") as step:
                    step.step(-1)
            finally:
                backup_conn.close()
            conn.execute("PRAGMA journal_mode = DELETE")
            conn.execute("PRAGMA foreign_keys = ON")
            if _scalar(conn, "PRAGMA page_size") != page_size:
                conn.execute(f"PRAGMA page_size = {page_size:d}")
                conn.execute("VACUUM")
            yield conn
        finally:
            conn.close()
    finally:
        for leftover in (path, path.with_name(path.name + "-journal")):
            leftover.unlink(missing_ok=True)


def restore(conn: apsw.Connection, *, source: apsw.Connection) -> None:
    """Copies a staged backup over the database in one step of the backup API: one write
    transaction on `conn`, so every other connection sees the old database or the restored
    one, never a mix, and a crash meanwhile leaves the old one. Writers wait for it (up to the
    busy timeout); readers keep their snapshot until they start another."""
    with conn.backup("main", source, "main") as step:
        step.step(-1)


def make_directories(root: Path, directory: Path) -> None:
    """Creates `directory` inside `root`, and `root`, owner only (backups are private)."""
    root.mkdir(mode=DIRECTORY_MODE, parents=True, exist_ok=True)
    current = root.resolve()
    for part in directory.relative_to(current).parts:
        current = current / part
        current.mkdir(mode=DIRECTORY_MODE, exist_ok=True)


def check_room(conn: apsw.Connection, directory: Path, reserve: int) -> None:
    """Raises StorageFull unless a copy of the database leaves `reserve` bytes free where it
    goes (the database's own disk may be that one, and must keep room for its writes)."""
    needed = _scalar(conn, "PRAGMA page_count") * _scalar(conn, "PRAGMA page_size")
    stat = os.statvfs(directory)
    free = stat.f_bavail * stat.f_frsize
    if free - needed < reserve:
        raise StorageFull(
            f"a backup needs about {needed} bytes and {str(directory)!r} has {free} free; the "
            f"store keeps {reserve} bytes in reserve (RAGD_BACKUP_RESERVE_MB): free space or "
            "delete old backups"
        )


def prune_backups(backup_dir: Path, kind: str, keep: int) -> list[Path]:
    """Deletes all but the `keep` newest files of `kind` ragd named itself (see BACKUPS);
    returns them. Files of other names, the operator's own backups, are never counted."""
    if keep <= 0:
        return []
    directory = own_directory(backup_dir, kind)
    if not directory.is_dir():
        return []
    found = []
    for path in directory.iterdir():
        match = _OWN_NAME.fullmatch(path.name)
        if match and match[1] == kind and path.is_file() and not path.is_symlink():
            found.append(((match[2], int(match[3] or 1)), path))
    found.sort(reverse=True)
    old = [path for _, path in found[keep:]]
    for path in old:
        path.unlink(missing_ok=True)
    return old


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _scalar(conn: apsw.Connection, sql: str) -> int:
    row = conn.execute(sql).fetchone()
    return int(row[0] or 0) if row is not None else 0


def stats(conn: apsw.Connection, *, path: Path) -> DatabaseStats:
    """Global and per vector store figures, from one consistent snapshot."""
    with atomic(conn, write=False):
        page_size = _scalar(conn, "PRAGMA page_size")
        rows = cast(
            list[tuple[int, str, str, str, int, int, int, int]],
            conn.execute(
                "SELECT id, public_id, name, model, dimensions, file_count, chunk_count,"
                " usage_bytes FROM vector_stores ORDER BY id"
            ).fetchall(),
        )
        vector_stores = []
        for key, public_id, name, model, dims, files, chunks, usage in rows:
            found = vector_index.vector_slots(conn, key)
            if not vectors_available():
                # Counted from sqlite-vec's plain shadow tables where they are readable.
                vectors, slots = (found.live, found.slots) if found else (0, 0)
            elif found is None:
                vectors = slots = _scalar(conn, f"SELECT count(*) FROM {vec_table(key)}")
            else:
                vectors, slots = found.live, found.slots
            vector_stores.append(
                VectorStoreStats(
                    id=public_id,
                    name=name,
                    model=model,
                    dimensions=dims,
                    files=files,
                    chunks=chunks,
                    vectors=vectors,
                    vector_slots=slots,
                    usage_bytes=usage,
                )
            )
        result = DatabaseStats(
            schema_version=_scalar(conn, "PRAGMA user_version"),
            db_bytes=0,
            wal_bytes=0,
            free_bytes=page_size * _scalar(conn, "PRAGMA freelist_count"),
            vector_stores=vector_stores,
            files=_scalar(conn, "SELECT count(*) FROM files"),
            file_bytes=_scalar(conn, "SELECT sum(bytes) FROM files"),
            chunks=sum(c.chunks for c in vector_stores),
            vectors=sum(c.vectors for c in vector_stores),
            usage_bytes=sum(c.usage_bytes for c in vector_stores),
            jobs_pending=_scalar(conn, _LIVE_JOBS.format(state="pending")),
            jobs_leased=_scalar(conn, _LIVE_JOBS.format(state="leased")),
            cache=cache.size(conn),
            audit_entries=audit.count(conn),
        )
    db, wal = file_bytes(path)
    return replace(result, db_bytes=db, wal_bytes=wal)
