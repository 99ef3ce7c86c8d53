"""The caller a gateway vouches for on its store calls, as gRPC metadata: the API key's project,
its name and its limits. The store reaches only that project's objects for the call
(services/store/access.py); a call without it is the gateway's own (ingest workers, the
history indexer) and reaches everything. Written and read here only, so both sides agree.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

PROJECT = "ragd-project"
KEY = "ragd-key"
VECTOR_STORES = "ragd-vector-stores"
PROJECT_CONVERSATIONS = "ragd-project-conversations"


@dataclass(frozen=True)
class Caller:
    project: str
    key: str = ""
    # Empty: every vector store of the project.
    vector_stores: frozenset[str] = frozenset()
    project_conversations: bool = False


def to_metadata(caller: Caller) -> tuple[tuple[str, str], ...]:
    # Ids and key names are ASCII letters, digits, '_', '-' and '.': safe as metadata values.
    return (
        (PROJECT, caller.project),
        (KEY, caller.key),
        (VECTOR_STORES, ",".join(sorted(caller.vector_stores))),
        (PROJECT_CONVERSATIONS, "1" if caller.project_conversations else ""),
    )


def from_metadata(pairs: Iterable[tuple[str, str | bytes]]) -> Caller | None:
    """The caller named in a call's metadata, or None for the gateway's own calls."""
    found: dict[str, str] = {}
    for key, value in pairs:
        if key in (PROJECT, KEY, VECTOR_STORES, PROJECT_CONVERSATIONS):
            found[key] = value if isinstance(value, str) else value.decode("ascii", "replace")
    if not found.get(PROJECT):
        return None
    stores = found.get(VECTOR_STORES, "")
    return Caller(
        project=found[PROJECT],
        key=found.get(KEY, ""),
        vector_stores=frozenset(filter(None, stores.split(","))),
        project_conversations=found.get(PROJECT_CONVERSATIONS) == "1",
    )
