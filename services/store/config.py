"""The store's settings, read once at startup from RAGD_* environment variables."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import SplitResult, quote, unquote, urlsplit

from services.common.config import ConfigError, Env
from services.common.paths import default_db_path
from services.common.security import TlsFiles, service_token
from services.store.replica import ReplicaSettings, valid_timestamp
from services.store.retention import RetentionSettings

# The database engines this build of the store opens: SQLite at db_path, or PostgreSQL at
# RAGD_DATABASE_URL. The tests read it to run the engine-aware tests on each.
SUPPORTED_ENGINES: tuple[str, ...] = ("sqlite", "postgres")
_SCHEMES = ("postgresql", "postgres")


@dataclass(frozen=True)
class PostgresSettings:
    """A PostgreSQL database (RAGD_DATABASE_URL) and the store's connection pool to it."""

    # postgresql://user:password@host:port/database?sslmode=...; libpq's URI form, with the
    # password from RAGD_DATABASE_PASSWORD[_FILE] put in. Never logged: see `display`.
    url: str = field(repr=False)
    # Connections kept open, and the most opened at once (default: one per store thread,
    # since each thread runs one database call at a time).
    pool_min: int = 1
    pool_max: int = 4
    # Seconds a call waits for a free connection (or for the server to accept one) before
    # the store answers it UNAVAILABLE.
    pool_timeout: float = 10.0

    @property
    def display(self) -> str:
        """The URL without its password, for logs and /ready."""
        parts = urlsplit(self.url)
        if parts.password is None:
            return self.url
        return _with_netloc(parts, _netloc(parts, "***"))


@dataclass(frozen=True)
class StoreConfig:
    # host:port to listen on; port 0 picks a free one.
    listen: str = "127.0.0.1:50052"
    # Unset: $XDG_DATA_HOME/ragd/ragd.db (services/common/paths.py).
    db_path: Path = field(default_factory=default_db_path)
    # Worker threads for database calls, each with its own connection.
    threads: int = 4
    log_level: str = "INFO"
    # host:port of the Prometheus /metrics endpoint (port 0: any free one); unset: none.
    metrics_listen: str | None = None
    # Seconds between refreshes of the figures /metrics shows (vector stores, chunks, bytes).
    metrics_refresh_seconds: float = 10.0
    # Where backups are written; None means `backups/` beside the database.
    backup_dir: Path | None = None
    # Backups kept (the newest; 0 keeps all), and the free space a backup must leave behind.
    backup_keep: int = 10
    backup_reserve_mb: int = 128
    # Embedding cache entries kept before the least recently used are evicted; 0 disables it.
    cache_max_entries: int = 100_000
    # Audit log entries older than this are pruned; 0 keeps them forever.
    audit_retention_days: int = 30
    # Coarse (binary-quantized) index for vector stores of at least coarse_min_rows vectors;
    # off keeps every search an exhaustive scan.
    coarse_index: bool = True
    coarse_min_rows: int = 16_384
    # Vectors kept in memory for search (resident.py), MiB over all vector stores; 0: off.
    resident_mb: int = 2048
    # Callers must send this token (RAGD_SERVICE_TOKEN[_FILE]); None: no authentication.
    service_token: str | None = None
    # Serve TLS (RAGD_TLS_CERT/KEY), requiring client certificates of RAGD_TLS_CA if set.
    tls: TlsFiles | None = None
    # sqlite-vec's loadable library (RAGD_SQLITE_VEC_PATH); empty: the sqlite-vec package's.
    # If it cannot be loaded the store serves lexical-only.
    sqlite_vec_path: str = ""
    # Continuous replication with Litestream (RAGD_REPLICA_URL; replica.py): the store then
    # leaves checkpoints to Litestream and restores a missing database from the replica.
    replica: ReplicaSettings | None = None
    # Chat history kept this many days (RAGD_CONVERSATIONS_TTL_DAYS, RAGD_RESPONSES_TTL_DAYS;
    # retention.py); 0: forever.
    retention: RetentionSettings = field(default_factory=RetentionSettings)
    # PostgreSQL instead of the SQLite file at db_path (RAGD_DATABASE_URL); None: SQLite.
    postgres: PostgresSettings | None = None

    @property
    def engine(self) -> str:
        """The database engine: "sqlite" or "postgres"."""
        return "sqlite" if self.postgres is None else "postgres"

    @classmethod
    def from_env(cls, env: Env | None = None) -> StoreConfig:
        env = env or Env()
        threads = env.int("STORE_THREADS", cls.threads, minimum=1)
        config = cls(
            listen=env.str("STORE_LISTEN", cls.listen),
            db_path=Path(env.str("DB_PATH", str(default_db_path()))),
            threads=threads,
            log_level=env.str("LOG_LEVEL", cls.log_level),
            metrics_listen=env.optional("METRICS_LISTEN"),
            metrics_refresh_seconds=env.float(
                "METRICS_REFRESH_SECONDS", cls.metrics_refresh_seconds
            ),
            backup_dir=Path(backups) if (backups := env.optional("BACKUP_DIR")) else None,
            backup_keep=env.int("BACKUP_KEEP", cls.backup_keep, minimum=0),
            backup_reserve_mb=env.int("BACKUP_RESERVE_MB", cls.backup_reserve_mb, minimum=0),
            cache_max_entries=env.int("CACHE_MAX_ENTRIES", cls.cache_max_entries, minimum=0),
            audit_retention_days=env.int(
                "AUDIT_RETENTION_DAYS", cls.audit_retention_days, minimum=0
            ),
            coarse_index=env.bool("COARSE_INDEX", cls.coarse_index),
            coarse_min_rows=env.int("COARSE_MIN_ROWS", cls.coarse_min_rows, minimum=1),
            resident_mb=env.int("STORE_RESIDENT_MB", cls.resident_mb, minimum=0),
            service_token=service_token(env),
            tls=TlsFiles.from_env(env),
            sqlite_vec_path=env.str("SQLITE_VEC_PATH", ""),
            replica=_replica(env),
            retention=RetentionSettings(
                conversations_days=_days(env, "CONVERSATIONS_TTL_DAYS"),
                responses_days=_days(env, "RESPONSES_TTL_DAYS"),
            ),
            postgres=postgres_settings(env, threads),
        )
        return config


def _days(env: Env, name: str) -> float:
    days = env.float(name, 0.0)
    if not (0 <= days < 1e6):
        raise ConfigError(f"RAGD_{name} must be 0 (keep forever) or a number of days, got {days}")
    return days


def _replica(env: Env) -> ReplicaSettings | None:
    url = env.optional("REPLICA_URL")
    if not url:
        return None
    interval = env.float("REPLICA_SYNC_INTERVAL", ReplicaSettings.sync_interval)
    if interval <= 0:
        raise ConfigError(f"RAGD_REPLICA_SYNC_INTERVAL must be above 0 seconds, got {interval}")
    timestamp = env.str("REPLICA_RESTORE_TIMESTAMP", "")
    if timestamp and not valid_timestamp(timestamp):
        raise ConfigError(
            "RAGD_REPLICA_RESTORE_TIMESTAMP must be an RFC 3339 time such as "
            f"2026-01-31T12:00:00Z, got {timestamp!r}"
        )
    return ReplicaSettings(
        url=url,
        sync_interval=interval,
        litestream=env.str("LITESTREAM", ReplicaSettings.litestream),
        restore_timestamp=timestamp,
        metrics_listen=env.optional("REPLICA_METRICS_LISTEN"),
    )


def postgres_settings(env: Env, threads: int = StoreConfig.threads) -> PostgresSettings | None:
    """RAGD_DATABASE_URL[_FILE] with the password from RAGD_DATABASE_PASSWORD[_FILE] when the
    URL has none, and the pool's settings (RAGD_DATABASE_POOL_MIN/MAX/TIMEOUT); None when no
    URL is set. Either value may be a file's content (a mounted secret), as
    RAGD_SERVICE_TOKEN_FILE is read."""
    url = env.secret("DATABASE_URL")
    password = env.secret("DATABASE_PASSWORD")
    if url is None:
        if password is not None:
            raise ConfigError("RAGD_DATABASE_PASSWORD is set but RAGD_DATABASE_URL is not")
        return None
    parts = urlsplit(url)
    if parts.scheme not in _SCHEMES:
        # Not echoed: a malformed URL may still hold a password.
        raise ConfigError(
            "RAGD_DATABASE_URL must be a PostgreSQL URL, postgresql://user@host:5432/database "
            f"(scheme {' or '.join(_SCHEMES)}), got the scheme {parts.scheme!r}"
        )
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        raise ConfigError("RAGD_DATABASE_URL has a port that is not a number") from None
    if not parts.path.strip("/") and "dbname=" not in parts.query:
        raise ConfigError(
            "RAGD_DATABASE_URL names no database: postgresql://user@host:5432/DATABASE"
        )
    if password is not None:
        if parts.password is not None:
            raise ConfigError(
                "the database password is given twice: in RAGD_DATABASE_URL and in "
                "RAGD_DATABASE_PASSWORD[_FILE]; keep one"
            )
        if parts.username is None:
            raise ConfigError(
                "RAGD_DATABASE_PASSWORD needs a user in RAGD_DATABASE_URL "
                "(postgresql://USER@host/database)"
            )
        url = _with_netloc(parts, _netloc(parts, quote(password, safe="")))
    pool_min = env.int("DATABASE_POOL_MIN", PostgresSettings.pool_min, minimum=0)
    pool_max = env.int("DATABASE_POOL_MAX", max(threads, pool_min, 1), minimum=1)
    if pool_max < pool_min:
        raise ConfigError(
            f"RAGD_DATABASE_POOL_MAX ({pool_max}) must be at least RAGD_DATABASE_POOL_MIN "
            f"({pool_min})"
        )
    pool_timeout = env.float("DATABASE_POOL_TIMEOUT", PostgresSettings.pool_timeout)
    if pool_timeout <= 0:
        raise ConfigError(f"RAGD_DATABASE_POOL_TIMEOUT must be above 0 seconds, got {pool_timeout}")
    return PostgresSettings(
        url=url, pool_min=pool_min, pool_max=pool_max, pool_timeout=pool_timeout
    )


def _netloc(parts: SplitResult, password: str) -> str:
    """The URL's user@host:port with `password` (already quoted) as the password."""
    user = quote(unquote(parts.username or ""), safe="")
    host = parts.netloc.rpartition("@")[2]
    return f"{user}:{password}@{host}"


def _with_netloc(parts: SplitResult, netloc: str) -> str:
    return parts._replace(netloc=netloc).geturl()
