"""Scenario 4, footprint: memory of each service at rest and after loading vectors, database
bytes per vector, cold start to ready. Uses what the other scenarios saw; starts a stack of
its own only when none ran.
"""

from __future__ import annotations

import math
from typing import Any

from bench.context import Context
from bench.processes import running_stack
from bench.stats import Row, median

SCENARIO = "4 footprint"
# Bytes of one float32 component: a vector costs at least dimensions * 4 on disk.
_FLOAT_BYTES = 4


def run(ctx: Context) -> None:
    detail = ctx.detail(SCENARIO)
    if not ctx.cold_starts:
        with running_stack(ctx.run_dir / "footprint", ctx.config.threads) as stack:
            ctx.cold_starts.append(stack.cold_start)
            detail["rss_at_rest_mb"] = stack.rss()
    embedding = ctx.details.get("1 embedding", {})
    at_rest: dict[str, float] = detail.get("rss_at_rest_mb") or embedding.get("rss_at_rest_mb", {})
    llama_rss = embedding.get("rss_at_rest_mb", {}).get("llama_cpp.server", math.nan)
    llama_cold = embedding.get("llama_cpp_server_cold_start_s", math.nan)
    # llama_cpp.server runs in the embedding scenario only.
    rss_vs = "llama_cpp.server at rest" if math.isfinite(llama_rss) else ""
    cold_vs = "llama_cpp.server" if math.isfinite(llama_cold) else ""
    services = ("store", "embedder", "gateway")
    for name in services:
        ctx.add(
            Row(
                SCENARIO,
                f"RSS at rest: {name}",
                at_rest.get(name, math.nan),
                "MiB",
                baseline_name=rss_vs if name == "embedder" else "",
                baseline=llama_rss if name == "embedder" else math.nan,
                direction="lower",
            )
        )
    ctx.add(
        Row(
            SCENARIO,
            "RSS at rest: all three services",
            sum(at_rest.get(name, math.nan) for name in services),
            "MiB",
            baseline_name=rss_vs,
            baseline=llama_rss,
            direction="lower",
        )
    )
    loads: list[dict[str, Any]] = detail.get("after_load", [])
    if loads:
        largest = max(loads, key=lambda entry: entry["vectors"])
        count = largest["vectors"]
        for when in ("rss_mb", "rss_after_queries_mb"):
            suffix = "" if when == "rss_mb" else " and the queries"
            ctx.add(
                Row(
                    SCENARIO,
                    f"RSS after loading {count} vectors{suffix}: store",
                    largest[when]["store"],
                    "MiB",
                    direction="lower",
                )
            )
        dims = largest["dimensions"]
        ctx.add(
            Row(
                SCENARIO,
                f"database bytes per vector ({count} vectors, with WAL)",
                largest["db_bytes"] / count,
                "B/vector",
                baseline_name=f"float32 x {dims}",
                baseline=float(_FLOAT_BYTES * dims),
                direction="lower",
                note="chunk texts are short row labels here",
            )
        )
    for name in (*services, "stack"):
        values = [cold[name] for cold in ctx.cold_starts if name in cold]
        ctx.add(
            Row(
                SCENARIO,
                f"cold start to ready: {name if name != 'stack' else 'whole stack (/ready)'}",
                median(values),
                "s",
                baseline_name=cold_vs if name in ("embedder", "stack") else "",
                baseline=llama_cold if name in ("embedder", "stack") else math.nan,
                direction="lower",
                note=f"median of {len(values)} starts",
            )
        )
