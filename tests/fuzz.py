"""Schemathesis over the gateway's own /openapi.json: every operation, with stateful links.

`make fuzz` runs it against a fresh stack (a few minutes); tests/test_fuzz.py runs a short
smoke of it against the test session's stack. Passing means no 5xx and every response
matching its schema.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

CHECKS = "not_a_server_error,response_schema_conformance"
CONFIG = Path(__file__).with_name("fuzz.toml")
# The bootstrap admin key of a fuzzed stack behind keys.
ADMIN = "fuzz-admin-key"
# Left out of runs against an open API: the first key made there puts every route behind
# keys (the bootstrap rule), and the rest of the run would fuzz 401s. Runs behind keys fuzz it.
OPEN_EXCLUDED = ("post_create_key",)


@dataclass(frozen=True)
class FuzzResult:
    returncode: int
    generated: int
    passed: int
    operations: int
    output: str


def run_schemathesis(
    base_url: str,
    max_examples: int,
    seed: int | None = None,
    key: str | None = None,
    foreign: Sequence[str] = (),
    exclude: Sequence[str] = (),
) -> FuzzResult:
    """Runs every phase (examples, coverage, fuzzing, stateful) with one worker: hypothesis
    describes its lambdas with ast.parse, which is not thread-safe on CPython 3.11. With `key`,
    every request carries it; `foreign`: ids no response may contain (fuzz_hooks.py); `exclude`:
    operation ids left out."""
    st = Path(sys.executable).with_name("st")
    command = [
        str(st) if st.exists() else (shutil.which("st") or "st"),
        "--config-file",
        str(CONFIG),
        "run",
        f"{base_url}/openapi.json",
        "--checks",
        CHECKS + ",no_foreign_ids",
        "--max-examples",
        str(max_examples),
        "--workers",
        "1",
        "--no-color",
    ]
    if seed is not None:
        command += ["--seed", str(seed)]
    if key:
        command += ["--header", f"Authorization: Bearer {key}"]
    for operation_id in exclude:
        command += ["--exclude-operation-id", operation_id]
    env = {
        **os.environ,
        "SCHEMATHESIS_HOOKS": "tests.fuzz_hooks",
        "RAGD_FUZZ_FOREIGN_IDS": ",".join(foreign),
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(Path(__file__).parent.parent), os.environ.get("PYTHONPATH")])
        ),
    }
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600, env=env)
    output = done.stdout + done.stderr
    counts = re.search(r"(\d+) generated, (\d+) passed", output)
    operations = re.search(r"Tested: (\d+)", output)
    return FuzzResult(
        returncode=done.returncode,
        generated=int(counts.group(1)) if counts else 0,
        passed=int(counts.group(2)) if counts else 0,
        operations=int(operations.group(1)) if operations else 0,
        output=output,
    )


@dataclass(frozen=True)
class Tenants:
    """What a stack behind keys holds for a fuzz run: a key of the default project limited to
    one vector store, and the ids it must never see."""

    limited_key: str
    foreign: tuple[str, ...]


def seed_tenants(base_url: str) -> Tenants:
    """Two projects with vector stores, files and conversations; a write key limited to the
    default project's store "mine"."""

    def ok(response: httpx.Response) -> Any:
        assert response.status_code == 200, response.text
        return response.json()

    def fill(http: httpx.Client, name: str) -> list[str]:
        file_id = ok(
            http.post(
                "/v1/files",
                files={"file": (f"{name}.txt", f"{name} holds its own words".encode())},
                data={"purpose": "assistants"},
            )
        )["id"]
        store = ok(http.post("/v1/vector_stores", json={"name": name, "file_ids": [file_id]}))
        items = [{"role": "user", "content": f"a conversation about {name}"}]
        conversation = ok(http.post("/v1/conversations", json={"items": items}))["id"]
        return [store["id"], file_id, conversation]

    headers = {"Authorization": f"Bearer {ADMIN}"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=60) as admin:
        mine = fill(admin, "mine")
        theirs = fill(admin, "theirs")
        ok(admin.post("/admin/projects", json={"name": "other"}))
        team_key = ok(
            admin.post(
                "/admin/keys", json={"name": "other-w", "scope": "write", "project": "other"}
            )
        )["key"]
        limited = ok(
            admin.post(
                "/admin/keys",
                json={"name": "limited-w", "scope": "write", "vector_stores": [mine[0]]},
            )
        )["key"]
    with httpx.Client(
        base_url=base_url, headers={"Authorization": f"Bearer {team_key}"}, timeout=60
    ) as team:
        other = fill(team, "other")
    # The admin's conversation is in its project but not the limited key's own.
    time.sleep(0.6)  # the keys' state reaches the gateway's cache
    return Tenants(limited, tuple([*theirs, mine[2], *other]))


def main(argv: list[str]) -> int:
    from tests.harness import started_stack

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max-examples", type=int, default=200)
    parser.add_argument("--seed", type=int)
    args = parser.parse_args(argv)
    results: list[tuple[str, FuzzResult]] = []
    with tempfile.TemporaryDirectory(prefix="ragd-fuzz-") as tmp:
        for stack in started_stack(Path(tmp) / "open", RAGD_BACKUP_KEEP="3"):
            open_run = run_schemathesis(
                stack.gateway_url, args.max_examples, args.seed, exclude=OPEN_EXCLUDED
            )
            results.append(("open API", open_run))
        for stack in started_stack(Path(tmp) / "keys", RAGD_BACKUP_KEEP="3", RAGD_API_KEYS=ADMIN):
            tenants = seed_tenants(stack.gateway_url)
            # The limited key first: the admin's run may restore backups and revoke keys.
            results.append(
                (
                    "key limited to one vector store",
                    run_schemathesis(
                        stack.gateway_url,
                        args.max_examples,
                        args.seed,
                        key=tenants.limited_key,
                        foreign=tenants.foreign,
                    ),
                )
            )
            results.append(
                (
                    "admin key",
                    run_schemathesis(stack.gateway_url, args.max_examples, args.seed, key=ADMIN),
                )
            )
    for name, result in results:
        summary = result.output[result.output.rfind("SUMMARY") :]
        print(f"== {name}\n{summary or result.output[-4000:]}")
    for name, result in results:
        print(
            f"fuzz ({name}): {result.generated} cases over {result.operations} operations, "
            f"{result.passed} passed, exit {result.returncode}"
        )
    return max(result.returncode for _, result in results)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
