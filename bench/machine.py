"""What the numbers were measured on: CPU, memory, load, versions and thread settings."""

from __future__ import annotations

import os
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

PACKAGES = (
    "llama-cpp-python",
    "numpy",
    "apsw",
    "sqlite-vec",
    "grpcio",
    "protobuf",
    "starlette",
    "uvicorn",
    "fastapi",
    "httpx",
)
_THREAD_VARS = (
    "OMP_NUM_THREADS",
    "OMP_WAIT_POLICY",
    "GOMP_SPINCOUNT",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
)


def cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def describe(threads: int) -> dict[str, Any]:
    import apsw

    return {
        "cpu": cpu_model(),
        "cores": len(os.sched_getaffinity(0)),
        "memory_gib": round(psutil.virtual_memory().total / (1 << 30), 1),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "sqlite": apsw.sqlite_lib_version(),
        "packages": {name: _version(name) for name in PACKAGES},
        "threads": {
            "embedding_engines": threads,
            **{name: os.environ.get(name, "unset") for name in _THREAD_VARS},
        },
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def summary(machine: dict[str, Any]) -> str:
    packages, threads = machine["packages"], machine["threads"]
    return (
        f"{machine['cpu']}, {machine['cores']} cores, {machine['memory_gib']} GiB, "
        f"{machine['os']}; Python {machine['python']}, SQLite {machine['sqlite']}, "
        f"llama-cpp-python {packages['llama-cpp-python']}, sqlite-vec {packages['sqlite-vec']}, "
        f"numpy {packages['numpy']}; {threads['embedding_engines']} threads per embedding "
        f"engine, OMP_WAIT_POLICY {threads['OMP_WAIT_POLICY']}, GOMP_SPINCOUNT "
        f"{threads['GOMP_SPINCOUNT']}; load average "
        f"{machine['load_average_at_start']} at start, "
        f"{machine.get('load_average_at_end', '?')} at end"
    )
