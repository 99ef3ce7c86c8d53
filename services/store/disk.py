"""The disk under the database: its free space, and whether writes fail for lack of it.

A full disk is an operator's problem with a clear fix, not an internal error: writes are
refused with StorageFull (RESOURCE_EXHAUSTED over gRPC, 507 over REST), reads go on, and the
first refusal and the recovery are logged once each, loudly, instead of once per request.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from services.store.errors import StorageFull

log = logging.getLogger(__name__)

# Free space at which refused writes are expected to succeed again: a few WAL frames, a file
# (or a quarter of a small disk).
RECOVERED_BYTES = 16 << 20
_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


@dataclass(frozen=True)
class DiskUsage:
    free_bytes: int
    total_bytes: int


def is_full_error(error: BaseException) -> bool:
    """OSError for a full disk or quota (SQLite's SQLITE_FULL is apsw.FullError)."""
    return isinstance(error, OSError) and error.errno in _FULL_ERRNOS


class DiskWatch:
    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._lock = threading.Lock()
        # A write failed for lack of space and the disk has not had room since. Read on
        # every call (a plain attribute: no lock, a stale read only delays the recovery log).
        self.full = False

    def usage(self) -> DiskUsage:
        stat = os.statvfs(self._directory)
        return DiskUsage(
            free_bytes=stat.f_bavail * stat.f_frsize, total_bytes=stat.f_blocks * stat.f_frsize
        )

    def refused(self) -> StorageFull:
        """Records that a write failed for lack of space; the error to give the caller."""
        free = self.usage().free_bytes
        with self._lock:
            first, self.full = not self.full, True
        if first:
            log.error(
                "THE DISK UNDER %s IS FULL (%d bytes free): writes are refused until space is "
                "freed; searches and reads go on",
                self._directory,
                free,
            )
        return StorageFull(
            f"the store's disk is full ({free} bytes free): nothing was written; free space "
            "on the store's volume (or run a vacuum once there is room) and retry"
        )

    def check_recovered(self) -> None:
        """After a full disk, notices (and logs) when space is back."""
        if not self.full:
            return
        usage = self.usage()
        if usage.free_bytes < min(RECOVERED_BYTES, usage.total_bytes // 4):
            return
        with self._lock:
            was, self.full = self.full, False
        if was:
            log.warning("the disk under %s has room again: writes resume", self._directory)
