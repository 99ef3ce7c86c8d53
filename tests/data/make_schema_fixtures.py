"""Builds tests/data/schema_v<N>.db.gz: a small database per released schema version N, written
by the code of that version, with rows in every table its schema has.

    PYTHONPATH=. .venv/bin/python tests/data/make_schema_fixtures.py [N ...]

Without arguments it builds the versions that have no fixture yet, up to the last migration
committed. For each version it takes the last commit whose code wrote that version (the
parent of the commit that added migration N + 1, or HEAD for the newest), extracts that
commit's `services/` into a temporary directory and runs schema_fixture_rows.py in a child
Python with that tree on its path: the old code's own Repository migrates an empty database
and writes the vector stores and their chunks (vectors, full-text rows), and the script adds
rows to every other table. tests/test_migrations.py migrates each fixture to the current
schema and checks every row. Never regenerate a fixture once committed: its point is to be
old.
"""

from __future__ import annotations

import ast
import gzip
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
MIGRATIONS = "services/store/migrations.py"


def fixture(version: int) -> Path:
    return HERE / f"schema_v{version}.db.gz"


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout


def migration_count(source: str) -> int:
    """len(MIGRATIONS) of a migrations.py, read without importing it."""
    for node in ast.parse(source).body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        if isinstance(target, ast.Name) and target.id == "MIGRATIONS":
            assert isinstance(node.value, ast.List), "MIGRATIONS is no longer a list literal"
            return len(node.value.elts)
    raise LookupError(f"no MIGRATIONS in {MIGRATIONS}")


def commits_by_version() -> dict[int, str]:
    """Schema version -> the last commit whose code wrote it: the parent of the commit that
    added the next migration (HEAD for the newest). A version added together with the next
    one (3 and 4 came in one commit) is that commit's, migrated to it alone."""
    history = _git("log", "--reverse", "--format=%H", "HEAD", "--", MIGRATIONS).split()
    counts = [
        (commit, migration_count(_git("show", f"{commit}:{MIGRATIONS}"))) for commit in history
    ]
    latest = migration_count(_git("show", f"HEAD:{MIGRATIONS}"))
    found = {}
    for version in range(1, latest + 1):
        if version == latest:
            found[version] = _git("rev-parse", "HEAD").strip()
            continue
        after = next(commit for commit, count in counts if count > version)
        if any(count == version for _, count in counts):
            found[version] = _git("rev-parse", f"{after}^").strip()
        else:
            found[version] = after
    return found


def build(version: int, commit: str) -> Path:
    with tempfile.TemporaryDirectory(prefix=f"ragd-schema-v{version}-") as tmp:
        tree = Path(tmp) / "src"
        tree.mkdir()
        archive = Path(tmp) / "services.tar"
        _git("archive", "--format=tar", f"--output={archive}", commit, "services")
        with tarfile.open(archive) as tar:
            tar.extractall(tree, filter="data")
        database = Path(tmp) / "ragd.db"
        env = {**os.environ, "PYTHONPATH": str(tree)}
        subprocess.run(
            [sys.executable, str(HERE / "schema_fixture_rows.py"), str(database), str(version)],
            env=env,
            check=True,
        )
        out = fixture(version)
        # mtime 0: the same database makes the same bytes.
        with gzip.GzipFile(out, "wb", compresslevel=9, mtime=0) as packed:
            packed.write(database.read_bytes())
    return out


def main(argv: list[str]) -> int:
    commits = commits_by_version()
    versions = [int(a) for a in argv] or [v for v in commits if not fixture(v).exists()]
    for version in versions:
        out = build(version, commits[version])
        size = out.stat().st_size
        print(f"schema v{version} from {commits[version][:10]}: {out.name}, {size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
