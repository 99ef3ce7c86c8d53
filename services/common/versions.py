"""What each process reports of its own software (`GET /version`, `ragd --version`)."""

from __future__ import annotations

import functools
import importlib.metadata
import platform


@functools.cache
def ragd_version() -> str:
    # Cached: importlib.metadata reads the installed distributions each time (milliseconds).
    try:
        return importlib.metadata.version("ragd")
    except importlib.metadata.PackageNotFoundError:
        # Run from a source tree that was never installed.
        return "unknown"


def package_version(name: str) -> str:
    """An installed distribution's version, or "" when it is absent."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return ""


def process_versions() -> dict[str, str]:
    """ragd and the Python running it; each service adds what it links."""
    return {"ragd": ragd_version(), "python": platform.python_version()}
