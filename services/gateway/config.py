"""Gateway configuration, read once from RAGD_* environment variables."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from services.common.config import ConfigError, Env
from services.common.security import TlsFiles, service_token
from services.gateway.chat.upstream import ChatSettings
from services.gateway.embedders import EmbedderSpec, parse_embedders
from services.gateway.model_aliases import NO_ALIASES, ModelAliases


@dataclass(frozen=True)
class GatewayConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    # gRPC targets: "host:port", "a:1,b:2" (several embedder replicas) or "dns:///name:port".
    embedder_target: str = "127.0.0.1:50051"
    # Several models (RAGD_EMBEDDERS, "name=target" pairs); empty: the one embedder_target.
    embedders: tuple[EmbedderSpec, ...] = ()
    # Names clients send for the served embedding models (RAGD_EMBEDDING_MODEL_ALIASES).
    embedding_model_aliases: ModelAliases = NO_ALIASES
    store_target: str = "127.0.0.1:50052"
    # Empty: no authentication. Otherwise every /v1 route needs "Authorization: Bearer <key>".
    api_keys: tuple[str, ...] = ()
    # Per-call gRPC deadlines, seconds.
    embed_timeout: float = 60.0
    store_timeout: float = 30.0
    # A search's query embedding: a hung embedder costs a search this long before it falls
    # back to lexical (a query normally embeds in ~15 ms, a few passes under ingest load).
    search_embed_timeout: float = 10.0
    # A search's calls to the store: a stalled store costs a search this long before a 503.
    search_store_timeout: float = 3.0
    max_upload_bytes: int = 32 * 1024 * 1024
    # Texts per Embed call when ingesting.
    embed_batch_size: int = 32
    # Concurrent ingest workers in this process (0: this gateway only serves requests).
    ingest_workers: int = 2
    # How long a claimed ingest job stays with its worker without a renewal.
    ingest_lease_seconds: int = 60
    # How often idle workers look for jobs attached through other gateways.
    ingest_poll_seconds: float = 1.0
    # How long a job refused for a full disk waits before it is tried again.
    ingest_full_disk_retry_seconds: int = 30
    # The public gRPC bulk-ingest API ("off": not served).
    ingest_listen: str = "127.0.0.1:50053"
    # Accepted-but-unfinished documents one ingest stream may hold before it stops reading.
    ingest_window: int = 64
    log_level: str = "INFO"
    # host:port of a second, unauthenticated /metrics endpoint (port 0: any free one); unset:
    # /metrics on the REST port only.
    metrics_listen: str | None = None
    # The audit log records search queries' text (off: who searched which store, not what).
    audit_queries: bool = False
    # openai-poll-after-ms on objects clients poll (a file's or a batch's ingest).
    poll_after_ms: int = 500
    # Ask the store for vectors of texts already embedded with this exact model before
    # embedding them while ingesting.
    embed_cache: bool = True
    # Sent to the store and the embedders on every call (RAGD_SERVICE_TOKEN[_FILE]).
    service_token: str | None = None
    # This gateway's certificate (a TLS client of the store and the embedders) and the CA
    # their certificates must chain to (RAGD_TLS_CERT/KEY/CA).
    tls: TlsFiles | None = None
    # The chat model that answers /v1/responses and /v1/chat/completions (RAGD_CHAT_*); None
    # when RAGD_CHAT_BASE_URL is unset: conversations still work, responses answer 501.
    chat: ChatSettings | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> GatewayConfig:
        env = Env(environ)
        config = cls(
            host=env.str("HOST", cls.host),
            port=env.int("PORT", cls.port, minimum=0),
            embedder_target=env.str("EMBEDDER_TARGET", cls.embedder_target),
            embedders=_embedders(env),
            embedding_model_aliases=_aliases(env, "EMBEDDING_MODEL_ALIASES"),
            store_target=env.str("STORE_TARGET", cls.store_target),
            api_keys=tuple(env.list("API_KEYS")),
            embed_timeout=env.float("EMBED_TIMEOUT", cls.embed_timeout),
            store_timeout=env.float("STORE_TIMEOUT", cls.store_timeout),
            search_embed_timeout=env.float("SEARCH_EMBED_TIMEOUT", cls.search_embed_timeout),
            search_store_timeout=env.float("SEARCH_STORE_TIMEOUT", cls.search_store_timeout),
            max_upload_bytes=env.int("MAX_UPLOAD_BYTES", cls.max_upload_bytes, minimum=1),
            embed_batch_size=env.int("EMBED_BATCH_SIZE", cls.embed_batch_size, minimum=1),
            ingest_workers=env.int("INGEST_WORKERS", cls.ingest_workers, minimum=0),
            ingest_lease_seconds=env.int(
                "INGEST_LEASE_SECONDS", cls.ingest_lease_seconds, minimum=5
            ),
            ingest_poll_seconds=env.float("INGEST_POLL_SECONDS", cls.ingest_poll_seconds),
            ingest_full_disk_retry_seconds=env.int(
                "INGEST_FULL_DISK_RETRY_SECONDS", cls.ingest_full_disk_retry_seconds, minimum=1
            ),
            ingest_listen=env.str("INGEST_LISTEN", cls.ingest_listen),
            ingest_window=env.int("INGEST_WINDOW", cls.ingest_window, minimum=1),
            log_level=env.str("LOG_LEVEL", cls.log_level),
            metrics_listen=env.optional("METRICS_LISTEN"),
            poll_after_ms=env.int("POLL_AFTER_MS", cls.poll_after_ms, minimum=1),
            audit_queries=env.bool("AUDIT_QUERIES", cls.audit_queries),
            embed_cache=env.bool("EMBED_CACHE", cls.embed_cache),
            service_token=service_token(env),
            tls=TlsFiles.from_env(env),
            chat=_chat(env),
        )
        timeouts = (
            config.embed_timeout,
            config.store_timeout,
            config.search_embed_timeout,
            config.search_store_timeout,
        )
        if min(timeouts) <= 0:
            raise ConfigError(
                "RAGD_EMBED_TIMEOUT, RAGD_STORE_TIMEOUT, RAGD_SEARCH_EMBED_TIMEOUT and"
                " RAGD_SEARCH_STORE_TIMEOUT must be positive"
            )
        return config

    @property
    def embedder_specs(self) -> tuple[EmbedderSpec, ...]:
        """The served models' targets, the default first."""
        return self.embedders or (EmbedderSpec(None, self.embedder_target),)


def _aliases(env: Env, name: str) -> ModelAliases:
    try:
        return ModelAliases.parse(env.optional(name))
    except ValueError as error:
        raise ConfigError(f"RAGD_{name}: {error}") from None


def _embedders(env: Env) -> tuple[EmbedderSpec, ...]:
    raw = env.optional("EMBEDDERS")
    if not raw:
        return ()
    try:
        return tuple(parse_embedders(raw))
    except ValueError as error:
        raise ConfigError(f"RAGD_EMBEDDERS: {error}") from None


def _chat(env: Env) -> ChatSettings | None:
    base_url = env.optional("CHAT_BASE_URL")
    if base_url is None:
        return None
    if not base_url.startswith(("http://", "https://")):
        raise ConfigError(f"RAGD_CHAT_BASE_URL must be an http(s) URL, got {base_url!r}")
    defaults = ChatSettings(base_url, "")
    settings = ChatSettings(
        base_url=base_url,
        model=env.str("CHAT_MODEL", "default"),
        api_key=env.secret("CHAT_API_KEY"),
        timeout=env.float("CHAT_TIMEOUT", defaults.timeout),
        context_tokens=env.int("CHAT_CONTEXT_TOKENS", defaults.context_tokens, minimum=256),
        max_output_tokens=env.int("CHAT_MAX_OUTPUT_TOKENS", defaults.max_output_tokens, minimum=1),
        default_output_tokens=env.int(
            "CHAT_DEFAULT_OUTPUT_TOKENS", defaults.default_output_tokens, minimum=0
        ),
        tools=env.bool("CHAT_TOOLS", defaults.tools),
        aliases=_aliases(env, "CHAT_MODEL_ALIASES"),
        background_lease_seconds=env.float(
            "CHAT_BACKGROUND_LEASE_SECONDS", defaults.background_lease_seconds
        ),
    )
    if not 1 <= settings.background_lease_seconds <= 3600:
        raise ConfigError("RAGD_CHAT_BACKGROUND_LEASE_SECONDS must be 1 to 3600")
    if settings.timeout <= 0:
        raise ConfigError("RAGD_CHAT_TIMEOUT must be positive")
    if settings.max_output_tokens >= settings.context_tokens:
        raise ConfigError("RAGD_CHAT_MAX_OUTPUT_TOKENS must be less than RAGD_CHAT_CONTEXT_TOKENS")
    return settings
