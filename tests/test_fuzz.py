"""A short schemathesis run over /openapi.json against a stack of its own (`make fuzz` runs
the long one): no 5xx, every response matching its schema, every operation reached."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from services.gateway.app import ROUTES
from services.launcher import Stack
from tests.fuzz import ADMIN, OPEN_EXCLUDED, run_schemathesis, seed_tenants
from tests.harness import started_stack


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from started_stack(tmp_path_factory.mktemp("fuzz"), RAGD_BACKUP_KEEP="2")


def test_schemathesis_finds_no_server_error_or_schema_violation(stack: Stack) -> None:
    result = run_schemathesis(stack.gateway_url, max_examples=5, seed=1, exclude=OPEN_EXCLUDED)
    assert result.returncode == 0, result.output[-6000:]
    # Schemathesis leaves out the schema's own route, GET /openapi.json.
    every = sum(len((route.methods or set()) - {"HEAD"}) for route in ROUTES) - 1
    operations = every - len(OPEN_EXCLUDED)
    assert result.operations == operations, result.output[-3000:]
    assert result.generated > 100 and result.passed == result.generated


@pytest.fixture(scope="module")
def keyed_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from started_stack(
        tmp_path_factory.mktemp("fuzz-keys"), RAGD_BACKUP_KEEP="2", RAGD_API_KEYS=ADMIN
    )


def test_a_key_limited_to_one_vector_store_sees_nothing_else_under_fuzzing(
    keyed_stack: Stack,
) -> None:
    """The same run with a write key limited to one vector store of a stack holding another
    store, another project and others' conversations: no 5xx, and no response names them."""
    tenants = seed_tenants(keyed_stack.gateway_url)
    result = run_schemathesis(
        keyed_stack.gateway_url,
        max_examples=5,
        seed=1,
        key=tenants.limited_key,
        foreign=tenants.foreign,
    )
    assert result.returncode == 0, result.output[-6000:]
    assert result.generated > 100 and result.passed == result.generated


def test_the_leak_check_fails_on_a_foreign_id(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from tests import fuzz_hooks

    monkeypatch.setattr(fuzz_hooks, "FOREIGN", (b"vs_theirs",))
    fuzz_hooks.no_foreign_ids(None, SimpleNamespace(content=b'{"id": "vs_mine"}'), None)
    with pytest.raises(AssertionError, match="vs_theirs"):
        fuzz_hooks.no_foreign_ids(None, SimpleNamespace(content=b"\x89 vs_theirs"), None)
