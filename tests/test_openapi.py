"""/openapi.json describes exactly the routes the gateway serves."""

from __future__ import annotations

import re

import httpx
import pytest
from starlette.routing import Route

from services.common.vocabulary import MAX_BATCH_FILES, MAX_SEARCH_RESULTS, SEARCH_MODES
from services.gateway.app import ROUTES
from services.gateway.openapi import build_spec


def served() -> set[tuple[str, str]]:
    pairs = set()
    for route in ROUTES:
        for method in route.methods or ():
            if method != "HEAD":
                pairs.add((route.path, method.lower()))
    return pairs


def test_every_route_is_described_and_nothing_else(client: httpx.Client) -> None:
    spec = client.get("/openapi.json").json()
    described = {(path, method) for path, ops in spec["paths"].items() for method in ops}
    assert described == served()


def test_every_schema_reference_resolves(client: httpx.Client) -> None:
    spec = client.get("/openapi.json").json()
    text = str(spec)
    for name in re.findall(r"#/components/schemas/(\w+)", text):
        assert name in spec["components"]["schemas"], name


def test_every_route_has_an_operation_and_its_path_parameters() -> None:
    spec = build_spec(ROUTES)
    for path, operations in spec["paths"].items():
        names = set(re.findall(r"{(\w+)}", path))
        for operation in operations.values():
            declared = {p["name"] for p in operation.get("parameters", []) if p["in"] == "path"}
            assert declared == names, (path, declared)
    unknown = Route("/v1/unknown", lambda request: None, methods=["GET"])
    with pytest.raises(LookupError, match="GET /v1/unknown has no @operation"):
        build_spec([*ROUTES, unknown])


def test_limits_come_from_the_shared_vocabulary() -> None:
    schemas = build_spec(ROUTES)["components"]["schemas"]
    search = schemas["SearchRequest"]["properties"]
    assert search["max_num_results"]["maximum"] == MAX_SEARCH_RESULTS
    assert search["mode"]["enum"] == list(SEARCH_MODES)
    batch = schemas["FileBatchCreate"]["properties"]
    # file_ids may be null (absent): the array is the first choice.
    assert batch["file_ids"]["anyOf"][0]["maxItems"] == MAX_BATCH_FILES
