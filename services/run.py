"""`make run`: the whole stack on loopback until Ctrl-C."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

from services import local_chat
from services.common.paths import default_db_path
from services.launcher import Stack

# Where `make run` kept the database before it followed XDG: still used when it is there.
LEGACY_DB_PATH = Path("data/ragd.db")


def db_path() -> Path:
    """$XDG_DATA_HOME/ragd/ragd.db, unless an existing data/ragd.db of an earlier `make run`
    is here (moving it is the user's call, not a side effect of starting)."""
    return LEGACY_DB_PATH if LEGACY_DB_PATH.exists() else default_db_path()


def default_env() -> dict[str, str]:
    env = {
        "RAGD_STORE_LISTEN": "127.0.0.1:50052",
        "RAGD_EMBEDDER_LISTEN": "127.0.0.1:50051",
        "RAGD_MODEL_PATH": "models/all-MiniLM-L6-v2.gguf",
        "RAGD_HOST": "127.0.0.1",
        "RAGD_PORT": "8000",
    }
    # Anything already set in the environment wins, so every default can be overridden.
    env.update({key: value for key, value in os.environ.items() if key.startswith("RAGD_")})
    env.setdefault("RAGD_DB_PATH", str(db_path()))
    env.setdefault("RAGD_STORE_TARGET", env["RAGD_STORE_LISTEN"])
    env.setdefault("RAGD_EMBEDDER_TARGET", env["RAGD_EMBEDDER_LISTEN"])
    return env


def _interrupt(signum: int, frame: object) -> None:
    # SIGTERM behaves like Ctrl-C so `kill` also stops the children cleanly.
    raise KeyboardInterrupt


def main() -> int:
    signal.signal(signal.SIGTERM, _interrupt)
    env = default_env()
    with contextlib.ExitStack() as chat:
        if env.get("RAGD_CHAT_LOCAL", "").lower() in ("1", "true", "yes", "on"):
            # `make run-chat`: the packaged chat model as the upstream (services/local_chat.py).
            port = int(env.get("RAGD_CHAT_LOCAL_PORT", "8080"))
            print(f"starting the local chat model on 127.0.0.1:{port}", flush=True)
            env["RAGD_CHAT_BASE_URL"] = chat.enter_context(local_chat.running(port))
            env.setdefault("RAGD_CHAT_MODEL", "smollm2")
            env.setdefault("RAGD_CHAT_CONTEXT_TOKENS", str(local_chat.CONTEXT_TOKENS))
        return _run(Stack(env))


def _run(stack: Stack) -> int:
    try:
        stack.start()
        print(f"ragd is up: {stack.gateway_url}  (Ctrl-C to stop)", flush=True)
        print(f"database: {stack.env['RAGD_DB_PATH']}", flush=True)
        while all(child.alive() for child in stack.children.values()):
            time.sleep(0.5)
        dead = [c.name for c in stack.children.values() if not c.alive()]
        print(f"ragd: {', '.join(dead)} exited; stopping the rest", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nragd: stopping", flush=True)
        return 0
    finally:
        stack.stop()


if __name__ == "__main__":
    sys.exit(main())
