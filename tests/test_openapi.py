"""/openapi.json describes exactly the routes the gateway serves."""

from __future__ import annotations

import re

import httpx

from services.gateway.app import ROUTES


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
