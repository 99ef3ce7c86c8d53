"""llama-cpp-python builds side by side: the embedder's speed (MiniLM f16, in-process) and
the chat model's (SmolLM2 Q4_1) with each wheel, in the same run, interleaved.

    python -m bench.llama_builds --wheel native=A.whl --wheel noamx=B.whl --wheel portable=C.whl

Each wheel is unpacked to a temporary directory put first on PYTHONPATH of a child process,
which loads the models and times them; repeats alternate between the builds so that machine
noise hits them alike. A child that dies (SIGILL: an instruction this CPU refuses) is
reported as such. `--publish` adds the table to BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from bench.machine import cpu_model
from bench.report import publish_section

ROOT = Path(__file__).resolve().parent.parent
# One 160-token chunk per pass, as ingest embeds them; and 8 short texts per pass.
CHUNK = "The harbour master logs every vessel that enters the port at dawn. " * 12
SHORT = [f"a short query about topic {n}" for n in range(8)]

NOTE = """\
native: pip's default build (-march=native). noamx: `make setup`'s (deploy/llama_wheel.py:
-march=native minus AMX). portable: the Dockerfile's (-DGGML_NATIVE=OFF, which keeps AVX2,
FMA and F16C but no AVX-512). Where the CPU has no AMX and no AVX-512 the three compile the
same kernels, and their differences are the run-to-run noise; on a CPU with AVX-512 and AMX
noamx keeps AVX-512 and VNNI (native speed for the f16 embedder) and, unlike native, runs
quantized models on VMs that do not grant AMX tiles."""

_CHILD = r"""
import json, sys, time
import llama_cpp
from services.embedder.model import EmbeddingModel
from services.local_chat import model_path
from tests.embedder_fixtures import require_model
chunk, short, rounds = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
out = {"llama_cpp": llama_cpp.__file__, "system_info": llama_cpp.llama_print_system_info().decode()}
with EmbeddingModel(require_model(), threads=2) as model:
    model.embed([chunk]); model.embed(short)
    began = time.perf_counter()
    for _ in range(rounds):
        model.embed([chunk])
    out["chunks_per_s"] = rounds / (time.perf_counter() - began)
    began = time.perf_counter()
    for _ in range(rounds):
        model.embed(short)
    out["short_per_s"] = rounds * len(short) / (time.perf_counter() - began)
chat = llama_cpp.Llama(str(model_path()), n_ctx=512, n_threads=2, verbose=False)
ask = [{"role": "user", "content": "Describe the sea in three sentences."}]
chat.create_chat_completion(messages=ask, max_tokens=4)
began = time.perf_counter()
reply = chat.create_chat_completion(messages=ask, max_tokens=48, temperature=0)
out["chat_tokens_per_s"] = reply["usage"]["completion_tokens"] / (time.perf_counter() - began)
print(json.dumps(out))
"""


def _measure(site: Path, rounds: int) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{ROOT}"}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, CHUNK, json.dumps(SHORT), str(rounds)],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    if done.returncode != 0:
        reason = f"signal {-done.returncode}" if done.returncode < 0 else done.stderr[-300:]
        return {"failed": reason}
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--wheel", action="append", required=True, metavar="NAME=PATH")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--publish", action="store_true")
    args = parser.parse_args(argv)
    builds = dict(item.split("=", 1) for item in args.wheel)
    results: dict[str, list[dict[str, object]]] = {name: [] for name in builds}
    with tempfile.TemporaryDirectory(prefix="llama-builds-") as tmp:
        sites = {}
        for name, wheel in builds.items():
            sites[name] = Path(tmp) / name
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(sites[name])
        for _ in range(args.repeats):
            for name in builds:
                results[name].append(_measure(sites[name], args.rounds))
    table = _table(results)
    print(table)
    if args.publish:
        _publish(table, results)
    return 0


def _median(runs: list[dict[str, object]], key: str) -> float | None:
    values = [float(run[key]) for run in runs if key in run]  # type: ignore[arg-type]
    return statistics.median(values) if values else None


def _table(results: dict[str, list[dict[str, object]]]) -> str:
    base = next(iter(results))
    lines = [
        "| build | 160-token chunks/s | short texts/s | SmolLM2 Q4_1 tokens/s | vs "
        f"{base} (chunks) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    reference = _median(results[base], "chunks_per_s")
    for name, runs in results.items():
        failed = [str(run["failed"]) for run in runs if "failed" in run]
        chunks = _median(runs, "chunks_per_s")
        if chunks is None:
            lines.append(f"| {name} | died ({failed[0]}) | | | |")
            continue
        short, chat = _median(runs, "short_per_s"), _median(runs, "chat_tokens_per_s")
        ratio = f"{chunks / reference:.2f}x" if reference else "-"
        lines.append(f"| {name} | {chunks:.1f} | {short or 0:.1f} | {chat or 0:.1f} | {ratio} |")
    return "\n".join(lines)


def _publish(table: str, results: dict[str, list[dict[str, object]]]) -> None:
    machine = f"{cpu_model()}, {len(os.sched_getaffinity(0))} cores"
    flags = {
        name: str(runs[0].get("system_info", "")).strip() for name, runs in results.items() if runs
    }
    stamp = time.strftime("%Y-%m-%d %H:%M")
    section = [
        f"## llama-cpp-python builds ({stamp}, `python -m bench.llama_builds`)",
        "",
        f"Machine: {machine}. Medians of interleaved runs, each in a fresh process.",
        "",
        table,
        "",
        "What each build's ggml reports (llama_print_system_info):",
        "",
        *[f"- {name}: `{info}`" for name, info in flags.items()],
        "",
        NOTE,
    ]
    publish_section(ROOT / "BENCHMARKS.md", "llama-builds", "\n".join(section))


if __name__ == "__main__":
    sys.exit(main())
