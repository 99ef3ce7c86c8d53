"""The `ragd` command-line tool against the real stack: a directory tree in, counts, search,
idempotent re-runs, failures reported, exit codes, an unreachable stack."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner, Result

from services.cli.main import Exit, _filters, cli
from services.launcher import Stack
from tests.harness import ROOT, free_port

PASSAGE = (
    "The chimera is a fire-breathing monster with the body of a lion, the head of a goat "
    "and a serpent for a tail."
)


def ragd(stack: Stack, *args: str) -> Result:
    options = ["--url", stack.gateway_url, "--ingest-target", stack.ingest_target]
    return CliRunner().invoke(cli, [*options, *args], catch_exceptions=False)


def as_json(result: Result) -> Any:
    return json.loads(result.stdout)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def make_tree(root: Path) -> dict[str, int]:
    """A mixed tree: 6 readable documents, 1 that fails (not UTF-8), 1 unsupported type."""
    files: dict[str, bytes] = {
        "notes/chimera.txt": PASSAGE.encode(),
        "notes/tides.md": b"# Tides\n\nTides are caused by the gravity of the Moon and the Sun.\n",
        "web/page.html": b"<html><body><h1>Volcanoes</h1><p>Magma rises to the surface.</p>"
        b"<script>var ignored = 1;</script></body></html>",
        "data/birds.csv": b"bird,colour\nrobin,red\ncrow,black\n",
        "data/config.json": b'{"service": "lighthouse", "beam_range_km": 40}',
        "deep/a/b/c/story.rst": ("Once upon a time a river changed its course. " * 60).encode(),
        "bad/latin1.txt": b"caf\xe9 au lait, mais pas en UTF-8",
        "bin/blob.bin": b"\x00\x01\x02\x03",
    }
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return {"readable": 6, "failing": 1, "unsupported": 1}


def test_ingest_a_tree_then_stats_search_and_an_idempotent_rerun(
    stack: Stack, tmp_path: Path
) -> None:
    tree = tmp_path / "tree"
    expected = make_tree(tree)
    name = unique("cli-tree")
    created = ragd(stack, "index", "create", "-n", name)
    assert created.exit_code == 0, created.output
    assert "vs_" in created.stdout

    first = ragd(stack, "index", "ingest", "-n", name, str(tree), "--json")
    assert first.exit_code == Exit.PARTIAL, first.output
    report = as_json(first)
    assert report["files"] == expected["readable"] + expected["failing"]
    assert (report["completed"], report["unchanged"]) == (expected["readable"], 0)
    assert report["skipped"] == expected["unsupported"] and report["skipped_types"] == {".bin": 1}
    [failure] = report["failures"]
    assert failure["path"].endswith("bad/latin1.txt") and failure["code"] == "invalid_file"
    assert report["chunks"] >= expected["readable"]

    stats = ragd(stack, "index", "stats", "-n", name, "--json")
    assert stats.exit_code == 0, stats.output
    store = as_json(stats)
    assert store["file_counts"]["completed"] == report["completed"]
    assert store["file_counts"]["failed"] == 1
    assert store["file_counts"]["total"] == report["files"]
    assert store["chunk_count"] == report["chunks"]

    found = ragd(stack, "search", "-n", name, "-q", "which monster has a goat's head?", "-k", "3")
    assert found.exit_code == 0, found.output
    assert "notes/chimera.txt" in found.stdout.splitlines()[0]
    assert "fire-breathing monster" in found.stdout
    hits = as_json(ragd(stack, "search", "-n", name, "-q", "goat-headed monster", "--json"))
    assert hits["data"][0]["filename"] == "notes/chimera.txt"

    # Again, as a person would see it: nothing new, the broken file reported again.
    again = ragd(stack, "index", "ingest", "-n", name, str(tree), "--quiet")
    assert again.exit_code == Exit.PARTIAL, again.output
    lines = {line.split()[0]: line.split() for line in again.stdout.splitlines() if line.strip()}
    assert lines["completed"][1] == "0" and lines["unchanged"][1] == str(expected["readable"])
    assert lines["failed"][1] == "1" and "latin1.txt" in again.stdout
    after = as_json(ragd(stack, "index", "stats", "-n", name, "--json"))
    assert after["file_counts"] == store["file_counts"]
    assert after["chunk_count"] == store["chunk_count"]

    dropped = ragd(stack, "index", "drop", "-n", name)
    assert dropped.exit_code == 0, dropped.output


def test_glob_selects_files_under_directories(stack: Stack, tmp_path: Path) -> None:
    make_tree(tmp_path / "tree")
    name = unique("cli-glob")
    assert ragd(stack, "index", "create", "-n", name).exit_code == 0
    result = ragd(
        stack, "index", "ingest", "-n", name, str(tmp_path / "tree"), "--glob", "*.md",
        "--glob", "data/*", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = as_json(result)
    assert (report["files"], report["completed"], report["failures"]) == (3, 3, [])
    nothing = ragd(stack, "index", "ingest", "-n", name, str(tmp_path / "tree"), "--glob", "*.x")
    assert nothing.exit_code == Exit.FAILED
    assert "no files to ingest" in nothing.stderr
    assert ragd(stack, "index", "drop", "-n", name).exit_code == 0


def test_names_missing_and_taken(stack: Stack, tmp_path: Path) -> None:
    name = unique("cli-names")
    missing = ragd(stack, "index", "stats", "-n", name)
    assert missing.exit_code == Exit.NOT_FOUND
    assert f"ragd index create -n {name}" in missing.stderr
    (tmp_path / "a.txt").write_text("hello")
    ingest = ragd(stack, "index", "ingest", "-n", name, str(tmp_path / "a.txt"))
    assert ingest.exit_code == Exit.NOT_FOUND and "index create" in ingest.stderr

    assert ragd(stack, "index", "create", "-n", name).exit_code == 0
    taken = ragd(stack, "index", "create", "-n", name)
    assert taken.exit_code == Exit.CONFLICT and "already exists" in taken.stderr
    listed = as_json(ragd(stack, "index", "list", "--json"))
    [entry] = [store for store in listed if store["name"] == name]
    shown = ragd(stack, "index", "stats", "-n", entry["id"])
    assert shown.exit_code == 0 and "search index  exact" in shown.stdout, shown.stdout
    table = ragd(stack, "index", "list")
    assert entry["id"] in table.stdout  # ids are never shortened

    # A second store with the same name (made over REST): the name is now ambiguous.
    with httpx.Client(base_url=stack.gateway_url, timeout=60) as http:
        twin = http.post("/v1/vector_stores", json={"name": name}).json()["id"]
    ambiguous = ragd(stack, "search", "-n", name, "-q", "hello")
    assert ambiguous.exit_code == Exit.CONFLICT
    assert entry["id"] in ambiguous.stderr and twin in ambiguous.stderr
    for store_id in (entry["id"], twin):
        assert ragd(stack, "index", "drop", "-n", store_id).exit_code == 0
    assert ragd(stack, "index", "stats", "-n", name).exit_code == Exit.NOT_FOUND


def wait_completed(http: httpx.Client, store_id: str, total: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        counts = http.get(f"/v1/vector_stores/{store_id}").json()["file_counts"]
        if counts["completed"] == total:
            return
        time.sleep(0.2)
    raise AssertionError(f"files of {store_id} not completed: {counts}")


def test_search_filters_modes_and_json(stack: Stack) -> None:
    name = unique("cli-search")
    store_id = as_json(ragd(stack, "index", "create", "-n", name, "--json"))["id"]
    with httpx.Client(base_url=stack.gateway_url, timeout=30) as http:
        for lang, text in [("en", "The harbour freezes in winter."), ("fr", "Le port gèle.")]:
            reply = http.post(
                f"/v1/vector_stores/{store_id}/files",
                json={"text": text, "filename": f"{lang}.txt", "attributes": {"lang": lang}},
            )
            assert reply.status_code == 200, reply.text
        wait_completed(http, store_id, 2)
    result = ragd(stack, "search", "-n", name, "-q", "harbour in winter", "--filter", "lang=fr",
                  "--json")  # fmt: skip
    assert result.exit_code == 0, result.output
    hits = as_json(result)["data"]
    assert [hit["filename"] for hit in hits] == ["fr.txt"]
    readable = ragd(stack, "search", "-n", name, "-q", "harbour", "--filter", "lang=en")
    assert "en.txt" in readable.stdout and "lang='en'" in readable.stdout
    for mode in ("vector", "lexical", "hybrid"):
        reply = as_json(ragd(stack, "search", "-n", name, "-q", "harbour", "--mode", mode,
                             "--json"))  # fmt: skip
        # Servers without search modes ignore the field and report none.
        assert reply.get("mode", mode) == mode
    assert ragd(stack, "index", "drop", "-n", name).exit_code == 0


def test_filter_values_are_read_as_json_when_they_can_be() -> None:
    assert _filters(("year=2024",)) == {"type": "eq", "key": "year", "value": 2024}
    assert _filters(("draft=true", 'code="7"', "lang=en")) == {
        "type": "and",
        "filters": [
            {"type": "eq", "key": "draft", "value": True},
            {"type": "eq", "key": "code", "value": "7"},
            {"type": "eq", "key": "lang", "value": "en"},
        ],
    }
    assert _filters(()) is None


# Backups and vacuum are SQLite's; on PostgreSQL its own tooling owns them.
@pytest.mark.engines("sqlite")
def test_database_backup_and_vacuum(stack: Stack) -> None:
    vacuum = ragd(stack, "db", "vacuum", "--json")
    if vacuum.exit_code != 0 and "no admin routes" in vacuum.stderr:
        pytest.skip("this gateway has no /admin routes yet")
    assert vacuum.exit_code == 0, vacuum.output
    assert {"bytes_before", "bytes_after"} <= as_json(vacuum).keys()
    name = unique("cli-backup") + ".db"
    backup = ragd(stack, "db", "backup", name)
    if backup.exit_code != 0 and "backup" in backup.stderr and "director" in backup.stderr:
        pytest.skip(f"the store has no backup directory: {backup.stderr}")
    assert backup.exit_code == 0, backup.output
    assert name in backup.stdout


def test_unreachable_stack_has_its_own_exit_code() -> None:
    # The installed entry point, as a script would run it.
    nowhere = f"http://127.0.0.1:{free_port()}"
    result = subprocess.run(
        [sys.executable, "-m", "services.cli", "--url", nowhere, "index", "list"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert result.returncode == Exit.UNREACHABLE, result.stderr
    assert "cannot reach the ragd gateway" in result.stderr and "Traceback" not in result.stderr


def test_unreachable_ingest_api(stack: Stack, tmp_path: Path) -> None:
    name = unique("cli-grpc")
    assert ragd(stack, "index", "create", "-n", name).exit_code == 0
    (tmp_path / "a.txt").write_text("hello")
    result = CliRunner().invoke(
        cli,
        ["--url", stack.gateway_url, "--ingest-target", f"127.0.0.1:{free_port()}",
         "index", "ingest", "-n", name, str(tmp_path)],
    )  # fmt: skip
    assert result.exit_code == Exit.UNREACHABLE, result.output
    assert "RAGD_INGEST_LISTEN" in result.stderr
    assert ragd(stack, "index", "drop", "-n", name).exit_code == 0
