"""Which files `ragd index ingest PATHS... [--glob PATTERN]` sends, and under what names."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path, PurePosixPath


@dataclass(frozen=True)
class Candidate:
    path: Path
    # The filename the server records: the path relative to the directory it was found in
    # (so search results show "python3/README.txt"), or the file's own name.
    name: str
    # Named on the command line (an unsupported type is then an error, not a skip).
    explicit: bool

    @property
    def suffix(self) -> str:
        return PurePosixPath(self.name).suffix.lower()


def matches(relative: str, patterns: Sequence[str]) -> bool:
    """No patterns match everything; a pattern matches the relative path or the file name."""
    if not patterns:
        return True
    name = relative.rsplit("/", 1)[-1]
    return any(fnmatch(relative, p) or fnmatch(name, p) for p in patterns)


def collect(paths: Sequence[Path], patterns: Sequence[str] = ()) -> Iterator[Candidate]:
    """Files named directly, then regular files under each directory (recursively, sorted,
    not following symlinked directories) that match a pattern."""
    for path in paths:
        if path.is_dir():
            yield from _walk(path, patterns)
        else:
            yield Candidate(path, path.name, explicit=True)


def _walk(root: Path, patterns: Sequence[str]) -> Iterator[Candidate]:
    for directory, subdirs, files in os.walk(root):
        subdirs.sort()
        for name in sorted(files):
            path = Path(directory, name)
            relative = path.relative_to(root).as_posix()
            if matches(relative, patterns) and path.is_file():
                yield Candidate(path, relative, explicit=False)
