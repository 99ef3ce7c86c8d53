"""`make run`: the whole stack on loopback until Ctrl-C."""

from __future__ import annotations

import os
import signal
import sys
import time

from services.launcher import Stack


def default_env() -> dict[str, str]:
    env = {
        "RAGD_STORE_LISTEN": "127.0.0.1:50052",
        "RAGD_EMBEDDER_LISTEN": "127.0.0.1:50051",
        "RAGD_DB_PATH": "data/ragd.db",
        "RAGD_MODEL_PATH": "models/all-MiniLM-L6-v2.gguf",
        "RAGD_HOST": "127.0.0.1",
        "RAGD_PORT": "8000",
    }
    # Anything already set in the environment wins, so every default can be overridden.
    env.update({key: value for key, value in os.environ.items() if key.startswith("RAGD_")})
    env.setdefault("RAGD_STORE_TARGET", env["RAGD_STORE_LISTEN"])
    env.setdefault("RAGD_EMBEDDER_TARGET", env["RAGD_EMBEDDER_LISTEN"])
    return env


def _interrupt(signum: int, frame: object) -> None:
    # SIGTERM behaves like Ctrl-C so `kill` also stops the children cleanly.
    raise KeyboardInterrupt


def main() -> int:
    stack = Stack(default_env())
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        stack.start()
        print(f"ragd is up: {stack.gateway_url}  (Ctrl-C to stop)", flush=True)
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
