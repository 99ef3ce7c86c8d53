"""The ports file: how a service asked to listen on port 0 tells its launcher the ports it got.

With RAGD_PORTS_FILE set, a service writes a JSON object of its bound ports there once it
serves: {"grpc": 43567} for the store or an embedder, {"http": 8123, "ingest": 50999} for the
gateway. The launcher waits for the file, so binding port 0 leaves no window in which another
process could take a port picked in advance.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from services.common.config import Env


def ports_file_from_env(environ: Mapping[str, str] | None = None) -> Path | None:
    value = Env(environ).optional("PORTS_FILE")
    return None if value is None else Path(value)


def write_ports(path: Path, ports: Mapping[str, int]) -> None:
    # Written whole under another name, then renamed: a reader polling for the file never
    # sees half of it.
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(dict(ports)), encoding="utf-8")
    os.replace(temporary, path)


def read_ports(path: Path) -> dict[str, int] | None:
    """The ports in the file, or None while it does not exist yet."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    ports = json.loads(text)
    if not isinstance(ports, dict):
        raise ValueError(f"{path} holds {text!r}, not an object of ports")
    return {str(kind): int(port) for kind, port in ports.items()}
