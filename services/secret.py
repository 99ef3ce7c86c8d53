"""`python -m services.secret PATH`: makes the shared service token once.

Writes a random 256-bit token to PATH (owner only) unless PATH already holds one, so every
start of a compose project keeps the token its services already share. The services read it
with RAGD_SERVICE_TOKEN_FILE=PATH.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path


def ensure_token(path: Path) -> bool:
    """True when a new token was written."""
    if path.is_file() and path.read_text(encoding="utf-8").strip():
        return False
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(partial, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(secrets.token_urlsafe(32) + "\n")
    os.replace(partial, path)
    return True


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m services.secret PATH", file=sys.stderr)
        return 2
    path = Path(argv[0])
    print(f"{'wrote a new' if ensure_token(path) else 'kept the'} service token in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
