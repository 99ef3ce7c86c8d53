"""`make soak`: mixed traffic for a while, with one service killed every minute in turn.

Uploaders attach documents, searchers search, a deleter removes some of the acknowledged
files; every `--kill-every` seconds the embedder, the store or the gateway (in turn) is killed
with SIGKILL and restarted on its port. At the end the traffic stops, the ingest drains and
the stack is checked: every acknowledged file that was not deleted is completed, exactly once;
nothing else is there; PRAGMA integrity_check passes and chunks equal vectors. Error counts by
status and latency percentiles per operation go to a JSON file and BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.report import publish_section
from bench.stats import percentile
from services.launcher import Stack
from tests.harness import ROOT, started_stack, wait_ready
from tests.store_fixtures import check_invariants

WORDS = (
    "harbour tide lighthouse storm keeper ledger basalt glacier orbit comet lantern "
    "compass reef anchor beacon current estuary delta fjord lagoon monsoon"
).split()
ORDER = ("embedder", "store", "gateway")
UPLOAD_PAUSE = 1.0
# The ingest backlog at the end must shrink at least this often, or the drain gives up.
DRAIN_STALL_SECONDS = 120


@dataclass
class Tally:
    lock: threading.Lock = field(default_factory=threading.Lock)
    statuses: dict[str, Counter[str]] = field(default_factory=dict)
    latencies: dict[str, list[float]] = field(default_factory=dict)
    acknowledged: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)
    # Requests whose outcome is unknown: sent, then the connection broke or a 5xx came back
    # (the store may have committed before it died). Such an upload may exist, such a delete
    # may have happened: neither counts as lost or unexpected.
    unsure_uploads: int = 0
    unsure_deletes: set[str] = field(default_factory=set)

    def note(self, operation: str, status: str, seconds: float) -> None:
        with self.lock:
            self.statuses.setdefault(operation, Counter())[status] += 1
            if status == "200":
                self.latencies.setdefault(operation, []).append(seconds * 1000)


def _call(
    tally: Tally, operation: str, send: Callable[..., httpx.Response], *args: Any, **kwargs: Any
) -> tuple[httpx.Response | None, bool]:
    """The reply (None when there was none) and whether the outcome is unknown."""
    began = time.perf_counter()
    try:
        reply = send(*args, **kwargs)
    except (httpx.ConnectError, httpx.ConnectTimeout) as error:
        tally.note(operation, type(error).__name__, time.perf_counter() - began)
        return None, False
    except httpx.HTTPError as error:
        tally.note(operation, type(error).__name__, time.perf_counter() - began)
        return None, True
    tally.note(operation, str(reply.status_code), time.perf_counter() - began)
    return reply, reply.status_code >= 500


def _text(rng: random.Random, index: int) -> str:
    words = rng.choices(WORDS, k=rng.randint(60, 300))
    return f"Soak document {index}. " + " ".join(words)


def _uploader(stack: Stack, store_id: str, tally: Tally, stop: threading.Event, seed: int) -> None:
    rng = random.Random(seed)
    with httpx.Client(base_url=stack.gateway_url, timeout=30) as http:
        index = seed * 1_000_000
        while not stop.is_set():
            index += 1
            body = {"text": _text(rng, index), "filename": f"soak-{index}.txt"}
            reply, unsure = _call(
                tally, "upload", http.post, f"/v1/vector_stores/{store_id}/files", json=body
            )
            with tally.lock:
                if reply is not None and reply.status_code == 200:
                    tally.acknowledged.add(reply.json()["id"])
                tally.unsure_uploads += unsure
            # About what ingest sustains on 2 cores: a backlog proves nothing more.
            stop.wait(UPLOAD_PAUSE)


def _searcher(stack: Stack, store_id: str, tally: Tally, stop: threading.Event, seed: int) -> None:
    rng = random.Random(seed)
    with httpx.Client(base_url=stack.gateway_url, timeout=30) as http:
        while not stop.is_set():
            body = {
                "query": " ".join(rng.sample(WORDS, 3)),
                "mode": rng.choice(["vector", "hybrid", "lexical"]),
            }
            _call(
                tally,
                "search",
                http.post,
                f"/v1/vector_stores/{store_id}/search",
                json=body,
            )
            stop.wait(0.05)


def _deleter(stack: Stack, store_id: str, tally: Tally, stop: threading.Event) -> None:
    rng = random.Random(7)
    with httpx.Client(base_url=stack.gateway_url, timeout=30) as http:
        while not stop.wait(2.0):
            with tally.lock:
                candidates = sorted(tally.acknowledged - tally.deleted)
            if not candidates:
                continue
            file_id = rng.choice(candidates)
            reply, unsure = _call(
                tally,
                "delete",
                http.delete,
                f"/v1/vector_stores/{store_id}/files/{file_id}",
            )
            with tally.lock:
                if reply is not None and reply.status_code == 200:
                    tally.deleted.add(file_id)
                elif unsure:
                    tally.unsure_deletes.add(file_id)


def _killer(stack: Stack, every: float, stop: threading.Event, kills: list[dict[str, Any]]) -> None:
    turn = 0
    while not stop.wait(every):
        name = ORDER[turn % len(ORDER)]
        turn += 1
        began = time.monotonic()
        os.kill(stack.children[name].pid, signal.SIGKILL)
        stack.children[name].process.wait()
        stop.wait(2.0)
        stack.start_service(name)
        kills.append({"service": name, "down_seconds": round(time.monotonic() - began, 2)})


def soak(minutes: float, kill_every: float, directory: Path) -> dict[str, Any]:
    tally, kills = Tally(), list[dict[str, Any]]()
    started = time.monotonic()
    for stack in started_stack(directory, embedders=2, RAGD_INGEST_LEASE_SECONDS="10"):
        with httpx.Client(base_url=stack.gateway_url, timeout=60) as http:
            store_id = http.post("/v1/vector_stores", json={"name": "soak"}).json()["id"]
            stop = threading.Event()
            threads = [
                *(
                    threading.Thread(target=_uploader, args=(stack, store_id, tally, stop, n))
                    for n in range(2)
                ),
                *(
                    threading.Thread(target=_searcher, args=(stack, store_id, tally, stop, 100 + n))
                    for n in range(4)
                ),
                threading.Thread(target=_deleter, args=(stack, store_id, tally, stop)),
                threading.Thread(target=_killer, args=(stack, kill_every, stop, kills)),
            ]
            for thread in threads:
                thread.start()
            stop.wait(minutes * 60)
            stop.set()
            for thread in threads:
                thread.join()
            wait_ready(http, timeout=60)
            backlog, moved = -1, time.monotonic()
            while pending := http.get(f"/v1/vector_stores/{store_id}").json()["file_counts"][
                "in_progress"
            ]:
                if pending != backlog:
                    backlog, moved = pending, time.monotonic()
                elif time.monotonic() - moved > DRAIN_STALL_SECONDS:
                    break
                time.sleep(1)
            listed: dict[str, str] = {}
            after = None
            duplicates = 0
            while True:
                params: dict[str, Any] = {"limit": 100, **({"after": after} if after else {})}
                page = http.get(f"/v1/vector_stores/{store_id}/files", params=params).json()
                for item in page["data"]:
                    duplicates += item["id"] in listed
                    listed[item["id"]] = item["status"]
                if not page["has_more"]:
                    break
                after = page["last_id"]
        expected = tally.acknowledged - tally.deleted
    db = directory / "ragd.db"
    try:
        check_invariants(db)
        invariants = "ok"
    except AssertionError as error:
        invariants = f"FAILED: {error}"
    missing = sorted(expected - set(listed) - tally.unsure_deletes)
    not_completed = sorted(f for f in expected if listed.get(f) not in (None, "completed"))
    extra = sorted(set(listed) - tally.acknowledged)
    # Uploads whose answer was lost may be there: more than that many is a bug.
    unexpected = extra if len(extra) > tally.unsure_uploads else []
    return {
        "minutes": minutes,
        "seconds": round(time.monotonic() - started, 1),
        "kills": kills,
        "acknowledged": len(tally.acknowledged),
        "deleted": len(tally.deleted),
        "expected": len(expected),
        "listed": len(listed),
        "lost": missing,
        "not_completed": not_completed,
        "unexpected": unexpected,
        "unanswered_uploads": tally.unsure_uploads,
        "present_unanswered_uploads": len(extra),
        "unanswered_deletes": len(tally.unsure_deletes),
        "listed_twice": duplicates,
        "invariants": invariants,
        "statuses": {op: dict(counts) for op, counts in tally.statuses.items()},
        "latency_ms": {
            op: {f"p{q}": round(percentile(values, q), 1) for q in (50, 95, 99)}
            for op, values in tally.latencies.items()
        },
    }


def markdown(result: dict[str, Any]) -> str:
    ok = (
        not result["lost"]
        and not result["not_completed"]
        and not result["unexpected"]
        and not result["listed_twice"]
        and result["invariants"] == "ok"
    )
    lines = [
        f"## Soak ({result['minutes']:g} min, {time.strftime('%Y-%m-%d %H:%M')}): "
        + ("every acknowledged file accounted for" if ok else "**FAILED**"),
        "",
        f"`make soak`: 2 uploaders, 4 searchers, 1 deleter; {len(result['kills'])} SIGKILLs "
        f"({', '.join(k['service'] for k in result['kills'])}), each restarted on its port.",
        "",
        f"Acknowledged {result['acknowledged']}, deleted {result['deleted']}, expected "
        f"{result['expected']}, listed {result['listed']}; lost {len(result['lost'])}, not "
        f"completed {len(result['not_completed'])}, unexpected {len(result['unexpected'])}, "
        f"listed twice {result['listed_twice']}; invariants {result['invariants']}. Requests "
        f"whose answer was lost to a kill: {result['unanswered_uploads']} uploads (of which "
        f"{result['present_unanswered_uploads']} were stored: allowed), "
        f"{result['unanswered_deletes']} deletes.",
        "",
        "| operation | responses by status | p50 ms | p95 ms | p99 ms |",
        "|---|---|---|---|---|",
    ]
    for op, counts in result["statuses"].items():
        lat = result["latency_ms"].get(op, {})
        shown = ", ".join(f"{status}: {n}" for status, n in sorted(counts.items()))
        lines.append(f"| {op} | {shown} | {lat.get('p50')} | {lat.get('p95')} | {lat.get('p99')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--kill-every", type=float, default=60.0)
    parser.add_argument("--publish", action="store_true", help="update BENCHMARKS.md")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ragd-soak-") as tmp:
        result = soak(args.minutes, args.kill_every, Path(tmp))
    out = ROOT / "bench" / "results" / "soak"
    out.mkdir(parents=True, exist_ok=True)
    path = out / time.strftime("%Y%m%d-%H%M%S.json")
    path.write_text(json.dumps(result, indent=1))
    section = markdown(result)
    print(section)
    print(f"results: {path}")
    if args.publish:
        publish_section(ROOT / "BENCHMARKS.md", "soak", section)
    failed = result["lost"] or result["not_completed"] or result["unexpected"]
    return 1 if failed or result["invariants"] != "ok" or result["listed_twice"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
