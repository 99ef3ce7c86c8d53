"""Schemathesis checks of ours, loaded with SCHEMATHESIS_HOOKS=tests.fuzz_hooks (tests/fuzz.py).

no_foreign_ids: with a key limited to some objects, no response may name an object the key
must not reach (RAGD_FUZZ_FOREIGN_IDS, comma-separated: other projects' and other vector
stores' ids), whatever the fuzzer sends.
"""

from __future__ import annotations

import os
from typing import Any

import schemathesis

FOREIGN = tuple(
    found.encode() for found in os.environ.get("RAGD_FUZZ_FOREIGN_IDS", "").split(",") if found
)


@schemathesis.check
def no_foreign_ids(ctx: Any, response: Any, case: Any) -> None:
    # The bytes: a file's content need not be text.
    body = bytes(response.content or b"")
    leaked = [found.decode() for found in FOREIGN if found in body]
    if leaked:
        raise AssertionError(f"the response names objects out of the key's reach: {leaked}")
