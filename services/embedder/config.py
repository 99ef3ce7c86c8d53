"""The embedder's settings, read once at startup from RAGD_* environment variables.

RAGD_EMBEDDER_LISTEN        host:port to serve on (default 127.0.0.1:50051; port 0 picks one).
                            Containers set 0.0.0.0:50051.
RAGD_MODEL_PATH             the GGUF file (default models/all-MiniLM-L6-v2.gguf, made by
                            `make model`).
RAGD_MODEL_NAME             the model name reported to clients (default: the GGUF's
                            general.name).
RAGD_EMBEDDER_THREADS       llama.cpp threads (default: all CPUs).
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
                            which then never wait behind ingest passes (default 1; 0: no lane,
                            such requests just go first in the bulk queue).
RAGD_EMBEDDER_BULK_NICE     with the interactive lane, the nice value of the bulk lane's
                            threads (default 19): the CPU goes to a search's pass first.
RAGD_EMBEDDER_INTERACTIVE_TOKENS  largest request (tokens) the interactive lane takes
                            (default 4096); larger ones go first in the bulk queue.
RAGD_EMBEDDER_DRAIN_SECONDS on SIGTERM, how long to report NOT_SERVING while still serving,
                            so that health-checking clients move away first (default 1).
RAGD_EMBEDDER_MAX_CONNECTION_AGE  seconds after which clients are asked (GOAWAY) to reconnect,
                            which makes DNS-resolving clients discover new replicas (default
                            300; 0: never).
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

_POLICIES = ("reject", "truncate")


@dataclass(frozen=True)
class EmbedderConfig:
    listen: str = "127.0.0.1:50051"
    model_path: Path = Path("models/all-MiniLM-L6-v2.gguf")
    model_name: str | None = None
    threads: int = 2
    # The policy for requests that leave it unspecified: True truncates, False rejects.
    truncate: bool = False
    batch_tokens: int = 512
    batch_inputs: int = 32
    # Batching and back-pressure (see batcher.py).
    max_wait_ms: float = 10.0
    queue_tokens: int = 65536
    interactive_threads: int = 1
    interactive_tokens: int = 4096
    bulk_nice: int = 19
    # Graceful shutdown and replica discovery (see server.py).
    drain_seconds: float = 1.0
    max_connection_age: float = 300.0
    log_level: str = "INFO"
    # Callers must send this token (RAGD_SERVICE_TOKEN[_FILE]); None: no authentication.
    service_token: str | None = None
    # Serve TLS (RAGD_TLS_CERT/KEY), requiring client certificates of RAGD_TLS_CA if set.
    tls: TlsFiles | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> EmbedderConfig:
        """Reads the settings; a missing model file fails here, before anything starts."""
        env = Env(environ)
        policy = env.str("EMBEDDER_TRUNCATE", "reject").lower()
        if policy not in _POLICIES:
            raise ConfigError(f"RAGD_EMBEDDER_TRUNCATE must be reject or truncate, got {policy!r}")
        config = cls(
            listen=env.str("EMBEDDER_LISTEN", cls.listen),
            model_path=Path(env.str("MODEL_PATH", str(cls.model_path))),
            model_name=env.optional("MODEL_NAME"),
            threads=env.int("EMBEDDER_THREADS", os.cpu_count() or cls.threads, minimum=1),
            truncate=policy == "truncate",
            batch_tokens=env.int("EMBEDDER_BATCH_TOKENS", cls.batch_tokens, minimum=1),
            batch_inputs=env.int("EMBEDDER_BATCH_INPUTS", cls.batch_inputs, minimum=1),
            max_wait_ms=_duration(env, "EMBEDDER_MAX_WAIT_MS", cls.max_wait_ms),
            queue_tokens=env.int("EMBEDDER_QUEUE_TOKENS", cls.queue_tokens, minimum=1),
            interactive_threads=env.int(
                "EMBEDDER_INTERACTIVE_THREADS", cls.interactive_threads, minimum=0
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
            service_token=service_token(env),
            tls=TlsFiles.from_env(env),
        )
        if not config.model_path.is_file():
            raise ConfigError(
                f"model file {config.model_path} not found: run `make model` to create it, "
                "or set RAGD_MODEL_PATH to a GGUF embedding model"
            )
        return config


def _duration(env: Env, name: str, default: float) -> float:
    """A duration (in the variable's unit): a number, zero or more."""
    value = env.float(name, default)
    if not 0 <= value < float("inf"):
        raise ConfigError(f"RAGD_{name} must be a number, zero or more, got {value}")
    return value
