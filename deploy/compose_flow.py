"""The compose test's client: a real flow against a running gateway, standard library only.

    python3 compose_flow.py --url URL [--api-key KEY] flow
        readiness, the API key, models, embeddings, a new vector store, a multipart upload and a
        JSON upload (polled until completed), a search; prints the vector store id last.
    python3 compose_flow.py --url URL [--api-key KEY] search VECTOR_STORE_ID
        the flow's search again, e.g. after the store restarted.
    python3 compose_flow.py --url URL [--api-key KEY] burst COUNT
        COUNT embedding requests of 16 texts each, to see how they spread over replicas.

Exits non-zero, with the reason, at the first reply that is not what the API promises.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

CHIMERA = (
    "The chimera is a fire-breathing monster with the body of a lion, the head of a goat "
    "and a serpent for a tail."
)
TIDES = "Tides are caused by the gravity of the Moon.\n"
QUERY = "which monster has a goat head?"
POLL_SECONDS = 120.0


class FlowError(Exception):
    """A reply the flow did not expect."""


class Client:
    def __init__(self, url: str, api_key: str | None) -> None:
        self.url = url.rstrip("/")
        self.api_key = api_key

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        content_type: str | None = None,
        *,
        auth: bool = True,
    ) -> tuple[int, Any]:
        headers = {"Content-Type": content_type} if content_type else {}
        if auth and self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.url + path, data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=60) as reply:
                return reply.status, json.loads(reply.read() or b"null")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"null")

    def call(self, method: str, path: str, payload: Any = None, expect: int = 200) -> Any:
        body = None if payload is None else json.dumps(payload).encode()
        status, reply = self.request(method, path, body, "application/json" if body else None)
        if status != expect:
            raise FlowError(f"{method} {path}: HTTP {status}, expected {expect}: {reply}")
        return reply

    def upload(self, path: str, filename: str, content: bytes) -> Any:
        boundary = uuid.uuid4().hex
        body = (
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
                f'filename="{filename}"\r\nContent-Type: text/plain\r\n\r\n'
            ).encode()
            + content
            + f"\r\n--{boundary}--\r\n".encode()
        )
        status, reply = self.request(
            "POST", path, body, f"multipart/form-data; boundary={boundary}"
        )
        if status != 200:
            raise FlowError(f"POST {path} (multipart): HTTP {status}: {reply}")
        return reply


def check(condition: bool, message: str) -> None:
    if not condition:
        raise FlowError(message)


def wait_completed(client: Client, store_id: str, attached: dict[str, Any]) -> dict[str, Any]:
    """Polls a vector store file until ingestion ends; returns its last state."""
    deadline = time.monotonic() + POLL_SECONDS
    state = attached
    while state["status"] == "in_progress":
        if time.monotonic() > deadline:
            raise FlowError(f"file {state['id']} still in_progress after {POLL_SECONDS:.0f}s")
        time.sleep(0.5)
        state = client.call("GET", f"/v1/vector_stores/{store_id}/files/{state['id']}")
    check(state["status"] == "completed", f"file {state['id']} ended {state['status']}: {state}")
    return state


def search(client: Client, store_id: str) -> None:
    started = time.monotonic()
    reply = client.call(
        "POST", f"/v1/vector_stores/{store_id}/search", {"query": QUERY, "max_num_results": 2}
    )
    hits = reply["data"]
    check(bool(hits), f"search found nothing: {reply}")
    top = hits[0]
    check(top["filename"] == "chimera.txt", f"top hit is {top['filename']}, not chimera.txt")
    ranked = ", ".join(f"{hit['filename']} {hit['score']:.3f}" for hit in hits)
    print(f"search {QUERY!r}: {ranked} ({time.monotonic() - started:.2f}s)")


def flow(client: Client) -> str:
    status, ready = client.request("GET", "/ready", auth=False)
    check(status == 200, f"/ready: HTTP {status}: {ready}")
    print(f"ready: {json.dumps(ready, sort_keys=True)}")
    if client.api_key:
        status, denied = client.request("GET", "/v1/models", auth=False)
        check(status == 401, f"/v1/models without the API key: HTTP {status}, expected 401")
        print(f"without the API key: HTTP {status} {denied['error']['code']}")

    models = client.call("GET", "/v1/models")["data"]
    print(f"models: {[model['id'] for model in models]}")

    started = time.monotonic()
    texts = ["The quick brown fox", "jumps over the lazy dog"]
    vectors = [
        item["embedding"]
        for item in client.call("POST", "/v1/embeddings", {"input": texts})["data"]
    ]
    norms = [math.sqrt(sum(x * x for x in vector)) for vector in vectors]
    check(len(vectors) == 2 and all(len(v) == 384 for v in vectors), "expected 2 x 384 dims")
    check(all(abs(norm - 1) < 1e-3 for norm in norms), f"vectors not normalized: {norms}")
    print(
        f"embeddings: {len(vectors)} x {len(vectors[0])} dims, norms "
        f"{', '.join(f'{n:.4f}' for n in norms)} ({time.monotonic() - started:.2f}s)"
    )

    store = client.call(
        "POST", "/v1/vector_stores", {"name": f"compose-test-{uuid.uuid4().hex[:6]}"}
    )
    store_id = str(store["id"])
    print(f"vector store: {store_id} ({store['name']})")

    files_path = f"/v1/vector_stores/{store_id}/files"
    started = time.monotonic()
    attached = [
        client.upload(files_path, "tides.txt", TIDES.encode()),
        client.call("POST", files_path, {"filename": "chimera.txt", "text": CHIMERA}),
    ]
    for item in attached:
        first = item["status"]
        done = wait_completed(client, store_id, item)
        print(f"file {done['id']}: {first} -> {done['status']}, {done['usage_bytes']} bytes")
    print(f"ingested 2 files in {time.monotonic() - started:.2f}s")

    search(client, store_id)
    print(store_id)
    return store_id


def burst(client: Client, count: int) -> None:
    started = time.monotonic()
    for i in range(count):
        texts = [
            f"request {i}, text {j}: the quick brown fox jumps over the lazy dog" for j in range(16)
        ]
        data = client.call("POST", "/v1/embeddings", {"input": texts})["data"]
        check(len(data) == len(texts), f"{len(data)} embeddings for {len(texts)} texts")
    print(f"burst: {count} requests x 16 texts in {time.monotonic() - started:.2f}s")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the gateway, e.g. http://127.0.0.1:8000")
    parser.add_argument("--api-key", help="sent as Authorization: Bearer")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("flow")
    again = commands.add_parser("search")
    again.add_argument("store_id")
    commands.add_parser("burst").add_argument("count", type=int)
    args = parser.parse_args(argv)
    client = Client(args.url, args.api_key)
    try:
        if args.command == "flow":
            flow(client)
        elif args.command == "search":
            search(client, args.store_id)
        else:
            burst(client, args.count)
    except (FlowError, urllib.error.URLError, KeyError, ValueError) as error:
        print(f"compose flow failed: {error!r}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
