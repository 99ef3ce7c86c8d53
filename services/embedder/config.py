"""The embedder's settings, read once at startup from RAGD_* environment variables.

RAGD_EMBEDDER_LISTEN        host:port to serve on (default 127.0.0.1:50051; port 0 picks one).
                            Containers set 0.0.0.0:50051.
RAGD_MODEL_PATH             the GGUF file (default models/all-MiniLM-L6-v2.gguf, made by
                            `make model`).
RAGD_MODEL_NAME             the model name reported to clients (default: the GGUF's
                            general.name).
RAGD_MODEL_POOLING          mean, cls or last: overrides the GGUF's pooling (a causal language
                            model such as SmolLM2 has none and embeds with mean).
RAGD_MODEL_MAX_TOKENS       caps the model's input limit in tokens (default: the GGUF's, which
                            for language models is far beyond RAGD_EMBEDDER_BATCH_TOKENS).
RAGD_EMBEDDER_THREADS       llama.cpp threads (default: all CPUs).
RAGD_EMBEDDER_CONTEXTS      model contexts that run (bulk) passes side by side, each with
                            RAGD_EMBEDDER_THREADS / contexts threads (default 2, at most
                            RAGD_EMBEDDER_THREADS): their threads never wait for each other
                            at a pass's barriers.
RAGD_EMBEDDER_TRUNCATE      what to do with inputs over the model's limit when the request does
                            not say: "reject" (default: like the OpenAI API, which answers 400)
                            or "truncate" (keep the first tokens, as sentence-transformers does).
RAGD_EMBEDDER_BATCH_TOKENS  most tokens per forward pass (default 512; at least the model's
                            input limit, 256 for all-MiniLM-L6-v2).
RAGD_EMBEDDER_BATCH_INPUTS  most inputs per forward pass (default 32).
RAGD_EMBEDDER_MAX_WAIT_MS   longest a queued input waits for a fuller pass (default 10).
RAGD_EMBEDDER_QUEUE_TOKENS  queued tokens beyond which Embed answers RESOURCE_EXHAUSTED
                            (default 65536, some 10-30 s of work on 2 cores).
RAGD_EMBEDDER_INTERACTIVE_THREADS  llama.cpp threads of the interactive lane, a second model
                            context for small PRIORITY_INTERACTIVE requests (search queries),
                            which then never wait behind ingest passes (default 2, at most
                            RAGD_EMBEDDER_THREADS; 0: no lane, such requests just go first in
                            the bulk queue).
RAGD_EMBEDDER_BULK_NICE     with the interactive lane, the nice value of the bulk lane's
                            threads (default 19): the CPU goes to a search's pass first.
RAGD_EMBEDDER_INTERACTIVE_TOKENS  largest request (tokens) the interactive lane takes
                            (default 4096); larger ones go first in the bulk queue.
RAGD_EMBEDDER_DRAIN_SECONDS on SIGTERM, how long to report NOT_SERVING while still serving,
                            so that health-checking clients move away first (default 1).
RAGD_EMBEDDER_MAX_CONNECTION_AGE  seconds after which clients are asked (GOAWAY) to reconnect,
                            which makes DNS-resolving clients discover new replicas (default
                            300; 0: never).
RAGD_EMBEDDER_UPSTREAM_URL  embed with an OpenAI-compatible endpoint instead of a local GGUF
                            (up to /v1, e.g. http://127.0.0.1:8080/v1); the settings below then
                            apply and RAGD_MODEL_PATH is not read:
  RAGD_EMBEDDER_UPSTREAM_MODEL       the `model` to ask for (required)
  RAGD_EMBEDDER_UPSTREAM_API_KEY[_FILE]  sent as Authorization: Bearer (never logged)
  RAGD_EMBEDDER_UPSTREAM_DIMENSIONS  the width every answer must have (default: the width of
                                     a probe at start-up)
  RAGD_EMBEDDER_UPSTREAM_MAX_TOKENS  the model's context in tokens (default 512)
  RAGD_EMBEDDER_UPSTREAM_BATCH       inputs per upstream request (default 32)
  RAGD_EMBEDDER_UPSTREAM_TIMEOUT     seconds per upstream request (default 30)
  RAGD_EMBEDDER_TOKENIZER            a tokenizer.json to count tokens with, when the upstream
                                     has no tokenize endpoint (else 3 characters a token)
RAGD_SERVICE_TOKEN[_FILE]   a token callers must send (authorization: Bearer); unset: none.
RAGD_TLS_CERT, _KEY, _CA    serve TLS with this certificate; with a CA, require client
                            certificates it signed (mutual TLS).
RAGD_LOG_LEVEL              default INFO.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from services.common.config import ConfigError, Env
from services.common.security import TlsFiles, service_token
from services.embedder.remote import UpstreamSettings

_POLICIES = ("reject", "truncate")


@dataclass(frozen=True)
class EmbedderConfig:
    listen: str = "127.0.0.1:50051"
    model_path: Path = Path("models/all-MiniLM-L6-v2.gguf")
    model_name: str | None = None
    model_pooling: str | None = None
    model_max_tokens: int | None = None
    threads: int = 2
    # On 2 cores two contexts of one thread embedded 1.15x the tokens of one of two, 1.14-1.23x
    # beside other busy processes (BENCHMARKS.md, issue 33).
    contexts: int = 2
    # The policy for requests that leave it unspecified: True truncates, False rejects.
    truncate: bool = False
    batch_tokens: int = 512
    batch_inputs: int = 32
    # Batching and back-pressure (see batcher.py).
    max_wait_ms: float = 10.0
    queue_tokens: int = 65536
    # With the short spin at barriers (model.py) two threads answered a query in ~0.7x the
    # time of one on 2 cores; without it, barriers made two slower than one.
    interactive_threads: int = 2
    interactive_tokens: int = 4096
    bulk_nice: int = 19
    # Graceful shutdown and replica discovery (see server.py).
    drain_seconds: float = 1.0
    max_connection_age: float = 300.0
    log_level: str = "INFO"
    # host:port of the Prometheus /metrics endpoint (port 0: any free one); unset: none.
    metrics_listen: str | None = None
    # Callers must send this token (RAGD_SERVICE_TOKEN[_FILE]); None: no authentication.
    service_token: str | None = None
    # Serve TLS (RAGD_TLS_CERT/KEY), requiring client certificates of RAGD_TLS_CA if set.
    tls: TlsFiles | None = None
    # Embed with an OpenAI-compatible endpoint instead of model_path.
    upstream: UpstreamSettings | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> EmbedderConfig:
        """Reads the settings; a missing model file fails here, before anything starts."""
        env = Env(environ)
        policy = env.str("EMBEDDER_TRUNCATE", "reject").lower()
        if policy not in _POLICIES:
            raise ConfigError(f"RAGD_EMBEDDER_TRUNCATE must be reject or truncate, got {policy!r}")
        threads = env.int("EMBEDDER_THREADS", os.cpu_count() or cls.threads, minimum=1)
        config = cls(
            listen=env.str("EMBEDDER_LISTEN", cls.listen),
            model_path=Path(env.str("MODEL_PATH", str(cls.model_path))),
            model_name=env.optional("MODEL_NAME"),
            model_pooling=_pooling(env),
            model_max_tokens=(
                env.int("MODEL_MAX_TOKENS", 0, minimum=1)
                if env.optional("MODEL_MAX_TOKENS")
                else None
            ),
            threads=threads,
            contexts=min(env.int("EMBEDDER_CONTEXTS", cls.contexts, minimum=1), threads),
            truncate=policy == "truncate",
            batch_tokens=env.int("EMBEDDER_BATCH_TOKENS", cls.batch_tokens, minimum=1),
            batch_inputs=env.int("EMBEDDER_BATCH_INPUTS", cls.batch_inputs, minimum=1),
            max_wait_ms=_duration(env, "EMBEDDER_MAX_WAIT_MS", cls.max_wait_ms),
            queue_tokens=env.int("EMBEDDER_QUEUE_TOKENS", cls.queue_tokens, minimum=1),
            interactive_threads=env.int(
                "EMBEDDER_INTERACTIVE_THREADS", min(cls.interactive_threads, threads), minimum=0
            ),
            interactive_tokens=env.int(
                "EMBEDDER_INTERACTIVE_TOKENS", cls.interactive_tokens, minimum=1
            ),
            bulk_nice=env.int("EMBEDDER_BULK_NICE", cls.bulk_nice, minimum=0),
            drain_seconds=_duration(env, "EMBEDDER_DRAIN_SECONDS", cls.drain_seconds),
            max_connection_age=_duration(
                env, "EMBEDDER_MAX_CONNECTION_AGE", cls.max_connection_age
            ),
            log_level=env.str("LOG_LEVEL", cls.log_level),
            metrics_listen=env.optional("METRICS_LISTEN"),
            service_token=service_token(env),
            tls=TlsFiles.from_env(env),
            upstream=_upstream(env),
        )
        if config.upstream is None and not config.model_path.is_file():
            raise ConfigError(
                f"model file {config.model_path} not found: run `make model` to create it, "
                "or set RAGD_MODEL_PATH to a GGUF embedding model"
            )
        return config


def thread_shares(threads: int, contexts: int) -> list[int]:
    """The threads of each of `contexts` model contexts sharing `threads` (at least one
    each; the first take one more of any remainder)."""
    return [max(1, threads // contexts + (i < threads % contexts)) for i in range(contexts)]


def _pooling(env: Env) -> str | None:
    pooling = env.optional("MODEL_POOLING")
    if pooling is None:
        return None
    if pooling.lower() not in ("mean", "cls", "last"):
        raise ConfigError(f"RAGD_MODEL_POOLING must be mean, cls or last, got {pooling!r}")
    return pooling.lower()


def _upstream(env: Env) -> UpstreamSettings | None:
    url = env.optional("EMBEDDER_UPSTREAM_URL")
    if not url:
        return None
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"RAGD_EMBEDDER_UPSTREAM_URL must be an http(s) URL, got {url!r}")
    model = env.optional("EMBEDDER_UPSTREAM_MODEL")
    if not model:
        raise ConfigError("RAGD_EMBEDDER_UPSTREAM_URL needs RAGD_EMBEDDER_UPSTREAM_MODEL")
    tokenizer = env.optional("EMBEDDER_TOKENIZER")
    if tokenizer and not Path(tokenizer).is_file():
        raise ConfigError(f"RAGD_EMBEDDER_TOKENIZER {tokenizer} is not a file")
    timeout = _duration(env, "EMBEDDER_UPSTREAM_TIMEOUT", UpstreamSettings.timeout)
    return UpstreamSettings(
        base_url=url,
        model=model,
        api_key=env.secret("EMBEDDER_UPSTREAM_API_KEY"),
        dimensions=env.int("EMBEDDER_UPSTREAM_DIMENSIONS", 0, minimum=0),
        max_input_tokens=env.int("EMBEDDER_UPSTREAM_MAX_TOKENS", 512, minimum=2),
        batch_inputs=env.int("EMBEDDER_UPSTREAM_BATCH", 32, minimum=1),
        timeout=timeout if timeout > 0 else UpstreamSettings.timeout,
        tokenizer_path=Path(tokenizer) if tokenizer else None,
    )


def _duration(env: Env, name: str, default: float) -> float:
    """A duration (in the variable's unit): a number, zero or more."""
    value = env.float(name, default)
    if not 0 <= value < float("inf"):
        raise ConfigError(f"RAGD_{name} must be a number, zero or more, got {value}")
    return value
