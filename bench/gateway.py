"""Scenario 5, gateway overhead: REST search against the store's gRPC search on the same
queries and vector store, measured by the search scenario (bench.search.gateway_split).

A REST search also embeds its query, so the overhead proper is what remains of the REST
latency after the query's Embed call and the store's Search (both measured alone).
"""

from __future__ import annotations

from bench.context import Context
from bench.stats import Row, not_available

SCENARIO = "5 gateway"


def run(ctx: Context) -> None:
    sizes = ctx.details.get("3 search", {}).get("sizes", {})
    if not sizes:
        ctx.add(not_available(SCENARIO, "REST vs gRPC search", "the search scenario did not run"))
        return
    for size, figures in sizes.items():
        split = figures["gateway_split_ms"]
        label = f"{int(size) // 1000}k"
        ctx.add(
            Row(
                SCENARIO,
                f"{label}: REST search p50, 1 client",
                split["rest_p50"],
                "ms",
                baseline_name="store gRPC search p50 on the same queries",
                baseline=split["search_p50"],
                direction="lower",
                note="interleaved per query",
            )
        )
        ctx.add(
            Row(
                SCENARIO,
                f"{label}: gateway overhead (REST - query Embed - store Search), p50",
                split["overhead_p50"],
                "ms",
                note=f"query Embed alone p50 {split['embed_p50']:.1f} ms",
            )
        )
