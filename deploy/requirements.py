"""Prints the dependencies plus one extra, one a line: `requirements.py PYPROJECT EXTRA`.

The image build installs a service's dependencies from pyproject.toml alone, before the source
is copied in, so that editing the code does not rebuild llama-cpp-python (minutes of compiling).
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path


def requirements(pyproject: Path, extra: str) -> list[str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    extras: dict[str, list[str]] = project["optional-dependencies"]
    if extra not in extras:
        raise SystemExit(f"no extra {extra!r} in {pyproject}; known: {', '.join(extras)}")
    return [*project["dependencies"], *extras[extra]]


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: requirements.py PYPROJECT EXTRA", file=sys.stderr)
        return 2
    print("\n".join(requirements(Path(argv[0]), argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
