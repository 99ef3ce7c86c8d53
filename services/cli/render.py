"""How the CLI shows things to people (tables, search hits, summaries); --json skips all this."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any, Literal

from rich.console import Console
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from services.cli.ingest import Outcome
from services.client.rest import SearchResults, VectorStore

MAX_FAILURES_SHOWN = 20
SNIPPET_CHARS = 320


def size(count: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(count) < 1000 or unit == "GB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1000
    raise AssertionError("unreachable")


def when(seconds: int) -> str:
    if not seconds:
        return "-"
    moment = datetime.datetime.fromtimestamp(seconds)
    return moment.strftime("%Y-%m-%d %H:%M")


def audit_table(entries: Sequence[dict[str, Any]]) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("TIME", "KEY", "OPERATION", "VECTOR STORE", "RESULTS", "TOKENS", "MS",
                   "DETAIL"):  # fmt: skip
        wide = column in ("DETAIL", "VECTOR STORE")
        table.add_column(
            column,
            no_wrap=not wide,
            overflow="fold" if wide else "ellipsis",
            justify=_RIGHT.get(column, "left"),
        )
    for entry in entries:
        moment = datetime.datetime.fromtimestamp(float(entry["at"]))
        detail = str(entry.get("detail") or "")
        if entry.get("degraded"):
            detail = f"degraded {detail}".strip()
        if entry.get("error_code"):
            detail = f"{detail} [{entry['error_code']}]"
        table.add_row(
            moment.strftime("%Y-%m-%d %H:%M:%S"),
            escape(str(entry.get("key") or "-")),
            str(entry["operation"]),
            str(entry.get("vector_store_id") or "-"),
            f"{entry.get('result_count', 0):,}",
            f"{entry.get('embedded_tokens', 0):,}",
            f"{float(entry.get('latency_ms', 0)):.1f}",
            escape(detail),
        )
    return table


_RIGHT: dict[str, Literal["right"]] = {"RESULTS": "right", "TOKENS": "right", "MS": "right"}


def keys_table(keys: Sequence[dict[str, Any]]) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("NAME", "SCOPE", "PROJECT", "STORES", "RPM", "TOKENS/DAY", "REQUESTS",
                   "SEARCHES", "TOKENS", "TODAY", "STORED", "LAST USED", "REVOKED"):  # fmt: skip
        table.add_column(column, overflow="fold")
    for key in keys:
        usage = key["usage"]
        table.add_row(
            escape(str(key["name"])),
            str(key["scope"]),
            escape(str(key.get("project", ""))),
            ",".join(key["vector_stores"]) or "all",
            str(key["requests_per_minute"] or "-"),
            str(key["tokens_per_day"] or "-"),
            f"{usage['requests']:,}",
            f"{usage['searches']:,}",
            f"{usage['embedded_tokens']:,}",
            f"{usage['embedded_tokens_today']:,}",
            size(usage.get("bytes_stored", 0)),
            when(key["last_used_at"] or 0),
            when(key["revoked_at"] or 0),
        )
    return table


def projects_table(projects: Sequence[dict[str, Any]]) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("NAME", overflow="fold")
    table.add_column("ID", no_wrap=True)
    table.add_column("CREATED", no_wrap=True)
    for project in projects:
        table.add_row(escape(str(project["name"])), str(project["id"]), when(project["created_at"]))
    return table


def _chunks(store: VectorStore) -> str:
    return "-" if store.chunk_count is None else f"{store.chunk_count:,}"


def stores_table(stores: Sequence[VectorStore]) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("NAME", overflow="fold")
    # Ids are for copying: never shortened.
    table.add_column("ID", no_wrap=True, min_width=27)
    for column in ("FILES", "CHUNKS", "SIZE"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("STATUS")
    table.add_column("CREATED", no_wrap=True)
    for store in stores:
        counts = store.file_counts
        table.add_row(
            escape(store.name or "(unnamed)"),
            store.id,
            f"{counts.get('completed', 0):,}/{counts.get('total', 0):,}",
            _chunks(store),
            size(store.usage_bytes),
            store.status,
            when(store.created_at),
        )
    return table


def stats(console: Console, store: VectorStore) -> None:
    counts = store.file_counts
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    rows = [
        ("name", escape(store.name or "(unnamed)")),
        ("id", store.id),
        ("status", store.status),
        ("model", escape(store.model or "-")),
        (
            "files",
            f"{counts.get('total', 0):,} (completed {counts.get('completed', 0):,}, "
            f"in progress {counts.get('in_progress', 0):,}, failed {counts.get('failed', 0):,}, "
            f"cancelled {counts.get('cancelled', 0):,})",
        ),
        ("chunks", _chunks(store)),
        # exact / building / coarse; absent from gateways before the coarse index.
        ("search index", escape(str(store.raw.get("vector_index", "-")))),
        ("size", f"{size(store.usage_bytes)} ({store.usage_bytes:,} bytes)"),
        ("created", when(store.created_at)),
    ]
    for key, value in rows:
        table.add_row(key, value)
    console.print(table)


def snippet(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= SNIPPET_CHARS else flat[: SNIPPET_CHARS - 1].rstrip() + "…"


def hits(console: Console, results: SearchResults) -> None:
    if not results.hits:
        console.print("no results")
    for rank, hit in enumerate(results.hits, 1):
        console.print(
            f"[bold]{rank:>2}.[/] [cyan]{hit.score:.4f}[/]  [bold]{escape(hit.filename)}[/]"
            f"  [dim]{hit.file_id}[/]"
        )
        if hit.attributes:
            pairs = ", ".join(f"{k}={v!r}" for k, v in hit.attributes.items())
            console.print(f"    [dim]{escape(pairs)}[/]")
        console.print(Padding(Text(snippet(hit.text)), (0, 0, 0, 4), expand=False))
    notes = []
    if results.mode:
        notes.append(f"{results.mode} search")
    if results.degraded:
        notes.append("degraded: the server fell back to a simpler ranking")
    if notes:
        console.print(f"[dim]({'; '.join(notes)})[/]")


def ingest_summary(console: Console, name: str, outcome: Outcome) -> None:
    console.print(
        f"[bold]{escape(name)}[/] ({outcome.vector_store_id}): {outcome.sent:,} files sent "
        f"in {outcome.seconds:.1f} s"
    )
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_column(style="dim")
    table.add_row(
        "completed",
        f"{outcome.completed:,}",
        f"{outcome.chunks:,} chunks, {outcome.rate:.1f} chunks/s",
    )
    table.add_row("unchanged", f"{outcome.unchanged:,}", "content already indexed")
    table.add_row("failed", f"{len(outcome.failures):,}", "")
    if outcome.skipped:
        kinds = ", ".join(f"{suffix} {count}" for suffix, count in outcome.skipped.most_common())
        table.add_row(
            "skipped", f"{sum(outcome.skipped.values()):,}", f"unsupported types: {kinds}"
        )
    console.print(table)
    if outcome.failures:
        console.print("[bold red]failures:[/]")
        for failure in outcome.failures[:MAX_FAILURES_SHOWN]:
            line = Text.assemble(f"{failure.path}: ", (failure.code, "red"), f" {failure.message}")
            console.print(Padding(line, (0, 0, 0, 2), expand=False))
        hidden = len(outcome.failures) - MAX_FAILURES_SHOWN
        if hidden > 0:
            console.print(f"  … and {hidden} more (--json lists them all)")
