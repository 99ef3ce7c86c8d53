"""Runs the selected scenarios in order and writes the table, results.json and chart.png
under bench/results/<timestamp>/; with --publish also BENCHMARKS.md and bench/latest.png.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from bench import (
    chat,
    contention,
    embedding,
    footprint,
    gateway,
    ingest,
    limits,
    machine,
    observability,
    postgres,
    quality,
    reindex,
    report,
    search,
)
from bench.config import DEFAULT_SCENARIOS, BenchConfig, parse, run_dir
from bench.context import Context
from bench.corpus import Corpus
from bench.processes import ROOT

SCENARIOS: dict[str, Callable[[Context], None]] = {
    "embedding": embedding.run,
    "ingest": ingest.run,
    "search": search.run,
    "footprint": footprint.run,
    "gateway": gateway.run,
    "contention": contention.run,
    "chat": chat.run,
    "reindex": reindex.run,
    "quality": quality.run,
    "observability": observability.run,
    "limits": limits.run,
    "postgres": postgres.run,
}


def _selected(config: BenchConfig) -> list[str]:
    chosen = set(config.scenarios)
    if "gateway" in chosen:
        # Gateway overhead is read off the search measurements.
        chosen.add("search")
    return [name for name in SCENARIOS if name in chosen]


def main(argv: Sequence[str] | None = None) -> int:
    config = parse(argv)
    out = run_dir(config)
    out.mkdir(parents=True, exist_ok=True)
    ctx = Context(config, out, Corpus(config.cache_dir))
    about = machine.describe(config.threads)
    command = "python -m bench " + shlex.join(sys.argv[1:] if argv is None else argv)
    failed: list[str] = []
    started = time.monotonic()
    try:
        for name in _selected(config):
            ctx.log(f"scenario {name}")
            try:
                SCENARIOS[name](ctx)
            except Exception:
                # One broken scenario should not cost the others' results.
                failed.append(name)
                ctx.log(f"scenario {name} failed:\n{traceback.format_exc()}")
    finally:
        ctx.close()
    about["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    elapsed = time.monotonic() - started
    markdown = report.table(ctx.rows)
    title = f"ragd benchmarks ({config.label}), {time.strftime('%Y-%m-%d %H:%M')}"
    report.write_json(
        out / "results.json",
        {
            "title": title,
            "command": command,
            "seconds": elapsed,
            "config": {k: str(v) for k, v in vars(config).items()},
            "machine": about,
            "details": ctx.details,
            "failed_scenarios": failed,
        },
        ctx.rows,
    )
    report.chart(out / "chart.png", ctx.rows, ctx.details, f"{title}: {machine.summary(about)}")
    section = _section(title, command, about, markdown, elapsed, failed)
    (out / "table.md").write_text(section)
    print(section)
    print(f"\nresults: {out}/ (results.json, chart.png, table.md)")
    if config.publish and set(config.scenarios) == set(DEFAULT_SCENARIOS):
        report.publish(
            ROOT / "BENCHMARKS.md", out / "chart.png", ROOT / "bench" / "latest.png", section
        )
        print("published: BENCHMARKS.md, bench/latest.png")
    elif config.publish:
        # A partial run keeps the full run's table: it gets a section of its own.
        name = "-".join(config.scenarios)
        heading = title.replace(
            "ragd benchmarks", f"ragd benchmarks, {', '.join(config.scenarios)} only"
        )
        chartless = _section(heading, command, about, markdown, elapsed, failed, chart=False)
        report.publish_section(ROOT / "BENCHMARKS.md", name, chartless)
        print(f"published: BENCHMARKS.md, section {name}")
    return 1 if failed else 0


def _section(
    title: str,
    command: str,
    about: dict[str, Any],
    markdown: str,
    elapsed: float,
    failed: list[str],
    chart: bool = True,
) -> str:
    lines = [
        f"## {title}",
        "",
        f"`{command}` took {elapsed / 60:.1f} min.",
        "",
        f"Machine: {machine.summary(about)}.",
        "",
        markdown,
    ]
    if chart:
        lines += ["", "![benchmark chart](bench/latest.png)"]
    if failed:
        lines += ["", f"**Failed scenarios:** {', '.join(failed)} (see the log)."]
    return "\n".join(lines) + "\n"
