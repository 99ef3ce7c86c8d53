"""Schemathesis over the gateway's own /openapi.json: every operation, with stateful links.

`make fuzz` runs it against a fresh stack (a few minutes); tests/test_fuzz.py runs a short
smoke of it against the test session's stack. Passing means no 5xx and every response
matching its schema.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

CHECKS = "not_a_server_error,response_schema_conformance"
CONFIG = Path(__file__).with_name("fuzz.toml")


@dataclass(frozen=True)
class FuzzResult:
    returncode: int
    generated: int
    passed: int
    operations: int
    output: str


def run_schemathesis(base_url: str, max_examples: int, seed: int | None = None) -> FuzzResult:
    """Runs every phase (examples, coverage, fuzzing, stateful) with one worker: hypothesis
    describes its lambdas with ast.parse, which is not thread-safe on CPython 3.11."""
    st = Path(sys.executable).with_name("st")
    command = [
        str(st) if st.exists() else (shutil.which("st") or "st"),
        "--config-file",
        str(CONFIG),
        "run",
        f"{base_url}/openapi.json",
        "--checks",
        CHECKS,
        "--max-examples",
        str(max_examples),
        "--workers",
        "1",
        "--no-color",
    ]
    if seed is not None:
        command += ["--seed", str(seed)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
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


def main(argv: list[str]) -> int:
    from tests.harness import started_stack

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max-examples", type=int, default=200)
    parser.add_argument("--seed", type=int)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ragd-fuzz-") as tmp:
        for stack in started_stack(Path(tmp), RAGD_BACKUP_KEEP="3"):
            result = run_schemathesis(stack.gateway_url, args.max_examples, args.seed)
    summary = result.output[result.output.rfind("SUMMARY") :]
    print(summary or result.output[-4000:])
    print(
        f"fuzz: {result.generated} cases over {result.operations} operations, "
        f"{result.passed} passed, exit {result.returncode}"
    )
    return result.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
