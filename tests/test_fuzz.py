"""A short schemathesis run over /openapi.json against a stack of its own (`make fuzz` runs
the long one): no 5xx, every response matching its schema, every operation reached."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from services.gateway.app import ROUTES
from services.launcher import Stack
from tests.fuzz import run_schemathesis
from tests.harness import started_stack


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from started_stack(tmp_path_factory.mktemp("fuzz"), RAGD_BACKUP_KEEP="2")


def test_schemathesis_finds_no_server_error_or_schema_violation(stack: Stack) -> None:
    result = run_schemathesis(stack.gateway_url, max_examples=5, seed=1)
    assert result.returncode == 0, result.output[-6000:]
    # Schemathesis leaves out the schema's own route, GET /openapi.json.
    operations = sum(len((route.methods or set()) - {"HEAD"}) for route in ROUTES) - 1
    assert result.operations == operations, result.output[-3000:]
    assert result.generated > 100 and result.passed == result.generated
