"""`ragd`: manage indexes (vector stores), ingest directories and search, from a terminal.

Talks to a running stack: REST for most commands, the gRPC ingest API for `index ingest`.
"""

from __future__ import annotations

import importlib
import json
import platform
import sys
import time
from enum import IntEnum
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click
from rich.console import Console
from rich.markup import escape

from services.cli import chat as chat_session
from services.cli import ingest as ingest_run
from services.cli import reindex as reindex_run
from services.cli import render
from services.cli.lines import Lines
from services.cli.walk import collect
from services.client.chat import ChatClient
from services.client.errors import ClientError, Conflict, NotFound, Unauthenticated, Unreachable
from services.client.ingest import IngestClient
from services.client.rest import DEFAULT_URL, RestClient
from services.common.paths import state_dir
from services.common.versions import ragd_version
from services.common.vocabulary import AUDIT_OPERATIONS, SCOPES, SEARCH_MODES


class Exit(IntEnum):
    OK = 0
    # The server refused or failed the request.
    FAILED = 1
    # Bad command-line usage (click's own code).
    USAGE = 2
    # No index with that name or id (or no such route on the server).
    NOT_FOUND = 3
    # The gateway (REST or gRPC ingest) could not be reached.
    UNREACHABLE = 4
    # Missing or invalid API key.
    AUTH = 5
    # The name is taken or matches several indexes.
    CONFLICT = 6
    # `index ingest` finished, but some files failed.
    PARTIAL = 7


EXIT_CODES_HELP = """\b
Exit codes: 0 ok, 1 request failed, 2 usage error, 3 index not found,
4 gateway unreachable, 5 missing or invalid API key, 6 name taken or ambiguous,
7 ingest finished but some files failed.
"""

_ERRORS: list[tuple[type[ClientError], Exit]] = [
    (Unreachable, Exit.UNREACHABLE),
    (Unauthenticated, Exit.AUTH),
    (NotFound, Exit.NOT_FOUND),
    (Conflict, Exit.CONFLICT),
]

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


class Settings:
    def __init__(
        self,
        url: str,
        ingest_target: str | None,
        api_key: str | None,
        project: str | None = None,
    ) -> None:
        self.url = url
        self.ingest_target = ingest_target or f"{urlsplit(url).hostname or '127.0.0.1'}:50053"
        self.api_key = api_key
        self.project = project

    def rest(self, project: str | None = None) -> RestClient:
        """`project` overrides --project for one command."""
        return RestClient(self.url, self.api_key, project=project or self.project)

    def chat(self) -> ChatClient:
        # Replies stream for as long as the model writes; this bounds the wait between pieces.
        return ChatClient(self.url, self.api_key, timeout=300.0)

    def ingest(self) -> IngestClient:
        return IngestClient(self.ingest_target, self.api_key)


class _Cli(click.Group):
    """Turns client errors into one red line and a documented exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ClientError as error:
            err.print(f"[bold red]error:[/] {escape(error.message)}", soft_wrap=True)
            code = next((c for kind, c in _ERRORS if isinstance(error, kind)), Exit.FAILED)
            ctx.exit(int(code))


def _print_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
name_option = click.option(
    "-n", "--name", required=True, help="The index: its name, or its id (vs_...)."
)


@click.group(
    cls=_Cli, epilog=EXIT_CODES_HELP, context_settings={"help_option_names": ["-h", "--help"]}
)
@click.option(
    "--url",
    envvar="RAGD_URL",
    default=DEFAULT_URL,
    show_default=True,
    help="The gateway's REST address [env RAGD_URL].",
)
@click.option(
    "--ingest-target",
    envvar="RAGD_INGEST_TARGET",
    help="The gateway's gRPC ingest address [env RAGD_INGEST_TARGET; default: the --url host, "
    "port 50053].",
)
@click.option("--api-key", envvar="RAGD_API_KEY", help="API key [env RAGD_API_KEY].")
@click.option(
    "--project",
    envvar="RAGD_PROJECT",
    help="Act in this project, by id or name (admin keys; other keys act in their own) "
    "[env RAGD_PROJECT].",
)
@click.version_option(
    ragd_version(),
    "-V",
    "--version",
    prog_name="ragd",
    message=f"%(prog)s %(version)s (Python {platform.python_version()}); "
    "`ragd version` asks the server",
)
@click.pass_context
def cli(
    ctx: click.Context,
    url: str,
    ingest_target: str | None,
    api_key: str | None,
    project: str | None,
) -> None:
    """ragd: a self-hosted retrieval service, from the command line."""
    ctx.obj = Settings(url, ingest_target, api_key, project)


@cli.group()
def index() -> None:
    """Create, fill, inspect and drop indexes (vector stores)."""


@index.command("create")
@name_option
@json_option
@click.pass_obj
def index_create(settings: Settings, name: str, as_json: bool) -> None:
    """Create an empty index named NAME."""
    with settings.rest() as rest:
        taken = [s.id for s in rest.list_vector_stores() if s.name == name]
        if taken:
            raise Conflict(f"an index named '{name}' already exists ({', '.join(taken)})")
        store = rest.create_vector_store(name)
    if as_json:
        _print_json(store.raw)
    else:
        out.print(f"created index [bold]{escape(name)}[/] ({store.id})")


@index.command("list")
@json_option
@click.pass_obj
def index_list(settings: Settings, as_json: bool) -> None:
    """List every index."""
    with settings.rest() as rest:
        stores = rest.list_vector_stores()
    if as_json:
        _print_json([s.raw for s in stores])
    elif not stores:
        out.print("no indexes yet: create one with `ragd index create -n NAME`")
    else:
        out.print(render.stores_table(stores))


@index.command("stats")
@name_option
@json_option
@click.pass_obj
def index_stats(settings: Settings, name: str, as_json: bool) -> None:
    """Files, chunks and size of one index."""
    with settings.rest() as rest:
        store = rest.resolve(name)
    if as_json:
        _print_json(store.raw)
    else:
        render.stats(out, store)


@index.command("drop")
@name_option
@click.pass_obj
def index_drop(settings: Settings, name: str) -> None:
    """Delete an index with its chunks (uploaded files stay)."""
    with settings.rest() as rest:
        store = rest.resolve(name)
        rest.delete_vector_store(store.id)
    out.print(f"dropped index [bold]{escape(store.name)}[/] ({store.id})")


@index.command("reindex")
@name_option
@click.option("--model", "-m", required=True, help="The served model to re-index with.")
@click.option(
    "--chunk-tokens", type=click.IntRange(100, 4096), help="New chunk size (default: each file's)."
)
@click.option("--overlap-tokens", type=click.IntRange(0, 2048), help="New chunk overlap.")
@click.option("--no-wait", is_flag=True, help="Start it and return; progress shows in `stats`.")
@click.option("--cancel", is_flag=True, help="Stop the re-index in progress instead.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@click.pass_obj
def index_reindex(
    settings: Settings,
    name: str,
    model: str,
    chunk_tokens: int | None,
    overlap_tokens: int | None,
    no_wait: bool,
    cancel: bool,
    quiet: bool,
) -> None:
    """Re-index with another embedding model (or chunking), online.

    Searches keep using the old index until every file is indexed anew; then the index
    switches in one step. A failure keeps the old index. Interrupting this command does not
    stop the re-index (use --cancel).
    """
    chunking = None
    if chunk_tokens is not None:
        overlap = overlap_tokens if overlap_tokens is not None else min(chunk_tokens // 4, 400)
        static = {"max_chunk_size_tokens": chunk_tokens, "chunk_overlap_tokens": overlap}
        chunking = {"type": "static", "static": static}
    with settings.rest() as rest:
        store = rest.resolve(name)
        if cancel:
            rest.cancel_reindex(store.id)
            out.print(f"cancelled the re-index of [bold]{escape(store.name)}[/]")
            return
        started = rest.reindex(store.id, model, chunking)
        if no_wait:
            out.print(f"re-indexing [bold]{escape(store.name)}[/] with {escape(model)}")
            return
        state = reindex_run.wait(rest, started, err, show_progress=not quiet)
    if state.get("status") != "completed":
        err.print(
            f"[bold red]error:[/] the re-index ended {state.get('status')}: "
            f"{escape(str(state.get('last_error') or ''))}",
            soft_wrap=True,
        )
        sys.exit(Exit.FAILED)
    counts = state.get("file_counts") or {}
    out.print(
        f"re-indexed [bold]{escape(store.name)}[/] with {escape(model)}: "
        f"{counts.get('completed', 0)} files"
    )


@index.command("ingest")
@name_option
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--glob",
    "patterns",
    multiple=True,
    metavar="PATTERN",
    help="Only files under directories whose relative path or name matches (repeatable), "
    "e.g. --glob '*.md'.",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@json_option
@click.pass_obj
def index_ingest(
    settings: Settings,
    name: str,
    paths: tuple[Path, ...],
    patterns: tuple[str, ...],
    quiet: bool,
    as_json: bool,
) -> None:
    """Index files and directories (recursively) into an existing index.

    Files stream through the gateway's gRPC ingest API. Content already in the index is not
    indexed again, so re-running after an interruption is safe and adds nothing twice.
    """
    with settings.rest() as rest:
        store = rest.resolve(name)
    candidates = list(collect(paths, patterns))
    with settings.ingest() as client:
        outcome = ingest_run.run(client, store.id, candidates, err, show_progress=not quiet)
    if as_json:
        _print_json(outcome.as_json())
    else:
        render.ingest_summary(out, store.name, outcome)
    if outcome.sent == 0 and not outcome.failures:
        err.print(
            "[bold red]error:[/] no files to ingest (check the paths and --glob)", soft_wrap=True
        )
        sys.exit(Exit.FAILED)
    if outcome.failures:
        sys.exit(Exit.PARTIAL)


def _filters(pairs: tuple[str, ...]) -> dict[str, Any] | None:
    comparisons = []
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"'{pair}' is not KEY=VALUE", param_hint="--filter")
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        if not isinstance(value, str | int | float | bool):
            value = raw
        comparisons.append({"type": "eq", "key": key, "value": value})
    if not comparisons:
        return None
    return comparisons[0] if len(comparisons) == 1 else {"type": "and", "filters": comparisons}


@cli.command()
@name_option
@click.option("-q", "--query", required=True, help="What to look for.")
@click.option("-k", "k", type=click.IntRange(1, 50), default=5, show_default=True, help="Results.")
@click.option(
    "--mode",
    type=click.Choice(list(SEARCH_MODES)),
    help="Ranking (default: the server's).",
)
@click.option(
    "--filter",
    "filter_pairs",
    multiple=True,
    metavar="KEY=VALUE",
    help="Only files whose attribute KEY equals VALUE (repeatable; all must match). VALUE is "
    'read as JSON when it can be: 3, true, "3" (a string).',
)
@json_option
@click.pass_obj
def search(
    settings: Settings,
    name: str,
    query: str,
    k: int,
    mode: str | None,
    filter_pairs: tuple[str, ...],
    as_json: bool,
) -> None:
    """Search an index."""
    filters = _filters(filter_pairs)
    with settings.rest() as rest:
        store = rest.resolve(name)
        results = rest.search(store.id, query, k=k, mode=mode, filters=filters)
    if as_json:
        _print_json(results.raw)
    else:
        render.hits(out, results)


@cli.command()
@click.option(
    "--resume",
    "resume",
    metavar="ID|last",
    help="Continue a conversation, with the index, system prompt and model it started with.",
)
@click.option("--list", "list_recent", is_flag=True, help="Recent conversations, and exit.")
@click.option("--search", metavar="TEXT", help="Search every conversation, and exit.")
@click.option(
    "--forget",
    metavar="ID|last",
    help="Delete a conversation from the store (its items, their search index and vectors), "
    "and exit.",
)
@click.option(
    "--no-store",
    is_flag=True,
    help="Keep nothing: not on the server (the API's store: false), not in the line history.",
)
@click.option(
    "-n", "--index", "index_name", help="Answer from this index (name or id) with file_search."
)
@click.option("--model", help="The model to ask (default: the gateway's RAGD_CHAT_MODEL).")
@click.option("--system", help="Instructions for the model, for every turn.")
@click.option("-q", "--question", help="Ask once, print the answer, exit.")
@click.option(
    "-k",
    "k",
    type=click.IntRange(1, 100),
    default=10,
    show_default=True,
    help="Hits of --search, conversations of --list.",
)
@json_option
@click.pass_obj
def chat(
    settings: Settings,
    resume: str | None,
    list_recent: bool,
    search: str | None,
    index_name: str | None,
    model: str | None,
    system: str | None,
    question: str | None,
    k: int,
    as_json: bool,
    forget: str | None,
    no_store: bool,
) -> None:
    """Chat with the stack's model; conversations are kept and can be resumed.

    In a session: /clear starts over, /regen asks the last question again, /sources shows
    what the last answer was given, Ctrl-C stops a reply (kept as incomplete), Ctrl-D leaves.
    The up arrow recalls earlier lines, kept in $XDG_STATE_HOME/ragd/chat_history
    (~/.local/state/ragd/chat_history).
    """
    if no_store and resume:
        raise click.UsageError("--no-store keeps nothing, so it cannot continue a conversation")
    with settings.chat() as client:
        if forget is not None:
            chat_session.forget(out, client, forget)
            return
        if list_recent:
            recent = client.recent_conversations(limit=k)
            if as_json:
                _print_json([c.__dict__ for c in recent])
            elif not recent:
                out.print("no conversations yet: start one with `ragd chat`")
            else:
                out.print(chat_session.conversations_table(recent))
            return
        if search is not None:
            chat_session.history_hits(out, client, search, k, as_json)
            return
        vector_store_id = client.resolve(index_name).id if index_name else None
        session = chat_session.Session(
            client, out, model, system, vector_store_id, store=not no_store
        )
        if resume:
            chat_session.resume(session, resume, quiet=as_json)
        if question is not None:
            chat_session.once(session, question, as_json)
        else:
            history = None if no_store else state_dir() / "chat_history"
            chat_session.interactive(session, Lines(history))


@cli.command("version")
@json_option
@click.pass_obj
def version_command(settings: Settings, as_json: bool) -> None:
    """The versions every service of the stack runs, and its model."""
    with settings.rest() as rest:
        try:
            versions = rest.versions()
        except NotFound:
            raise ClientError("this gateway has no /version route: an older ragd?") from None
    if as_json:
        _print_json(versions)
        return
    out.print(f"ragd {ragd_version()} (this command), gateway {versions.get('version')}")
    rows = [("gateway", versions.get("gateway", {})), ("store", versions.get("store", {}))]
    rows += [("embedder", embedder) for embedder in versions.get("embedders", [])]
    for service, parts in rows:
        text = ", ".join(f"{key} {value}" for key, value in parts.items() if value != "")
        # Not wrapped at the terminal's width: digests and versions stay whole for copying.
        out.print(f"[bold]{service}[/]: {escape(text)}", soft_wrap=True)


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _duration(text: str) -> float:
    """'90s', '15m', '1h', '7d' -> seconds."""
    number, unit = text[:-1], text[-1:].lower()
    if unit not in _UNITS or not number.isdigit():
        raise click.BadParameter(f"{text!r}: use a number and s, m, h or d (e.g. 1h, 7d)")
    return int(number) * _UNITS[unit]


@cli.command("audit")
@click.option("--since", help="Only this recent: 90s, 15m, 1h, 7d.")
@click.option("--op", "operation", type=click.Choice(AUDIT_OPERATIONS), help="One operation.")
@click.option("-n", "--name", "store", help="One index: its name or id.")
@click.option("--key", help="One API key, by name (bootstrap: the RAGD_API_KEYS keys).")
@click.option("--limit", type=click.IntRange(1, 100_000), default=100, show_default=True)
@json_option
@click.pass_obj
def audit_command(
    settings: Settings,
    since: str | None,
    operation: str | None,
    store: str | None,
    key: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """Who did what: every request's key, operation, vector store, outcome and time, and
    every ingest, newest first."""
    after = time.time() - _duration(since) if since else 0.0
    with settings.rest() as rest:
        vector_store_id = rest.resolve(store).id if store else ""
        try:
            entries = rest.audit(
                operation=operation or "",
                store=vector_store_id,
                key=key or "",
                since=after,
                limit=limit,
            )
        except NotFound as error:
            raise _admin_missing(error) from None
    if as_json:
        _print_json(entries)
    elif entries:
        out.print(render.audit_table(entries))
    else:
        err.print("no audit entries match")


@cli.group()
def keys() -> None:
    """API keys: make, list, revoke (the gateway's /admin/keys; needs an admin key)."""


@keys.command("create")
@click.argument("name")
@click.option(
    "--scope",
    type=click.Choice(SCOPES),
    required=True,
    help="read: search and reads; write: also ingest and changes; admin: everything.",
)
@click.option(
    "--project",
    help="The project the key belongs to and reaches (id or name; default: the default "
    "project, or --project before the command).",
)
@click.option(
    "--stores", help="Only these vector stores of its project (names or ids, comma-separated)."
)
@click.option(
    "--project-conversations",
    is_flag=True,
    help="With --stores: reach every conversation of the project, not only the key's own.",
)
@click.option("--rpm", type=click.IntRange(0), default=0, help="Requests per minute (0: no limit).")
@click.option(
    "--tokens-per-day", type=click.IntRange(0), default=0, help="Embedded tokens per UTC day."
)
@json_option
@click.pass_obj
def keys_create(
    settings: Settings,
    name: str,
    scope: str,
    project: str | None,
    stores: str | None,
    project_conversations: bool,
    rpm: int,
    tokens_per_day: int,
    as_json: bool,
) -> None:
    """Make the key NAME and print it: this is the only time it is shown."""
    project = project or settings.project or ""
    # Store names are looked up in the key's project.
    with settings.rest(project) as rest:
        ids = [rest.resolve(s.strip()).id for s in (stores or "").split(",") if s.strip()]
        made = rest.create_key(
            name, scope, ids, rpm, tokens_per_day, project, project_conversations
        )
    if as_json:
        _print_json(made)
        return
    err.print(f"key [bold]{escape(name)}[/] ({scope}) made; it is shown once, keep it now:")
    out.print(str(made["key"]), soft_wrap=True)


@keys.command("list")
@click.option("--revoked", is_flag=True, help="Include revoked keys.")
@json_option
@click.pass_obj
def keys_list(settings: Settings, revoked: bool, as_json: bool) -> None:
    """The keys, their scope, limits and usage."""
    with settings.rest() as rest:
        found = rest.keys(revoked)
    if as_json:
        _print_json(found)
        return
    out.print(render.keys_table(found))


@keys.command("usage")
@json_option
@click.pass_obj
def keys_usage(settings: Settings, as_json: bool) -> None:
    """Requests, searches and embedded tokens per key (revoked ones included)."""
    with settings.rest() as rest:
        found = rest.keys(revoked=True)
    if as_json:
        _print_json({key["name"]: key["usage"] for key in found})
        return
    out.print(render.keys_table(found))


@keys.command("revoke")
@click.argument("name")
@click.pass_obj
def keys_revoke(settings: Settings, name: str) -> None:
    """Revoke the key NAME for good (within a second on every gateway)."""
    with settings.rest() as rest:
        rest.revoke_key(name)
    out.print(f"revoked [bold]{escape(name)}[/]")


@cli.group()
def projects() -> None:
    """Projects: what vector stores, files, conversations and keys belong to; a key reaches
    its project's only (the gateway's /admin/projects; needs an admin key)."""


@projects.command("create")
@click.argument("name")
@json_option
@click.pass_obj
def projects_create(settings: Settings, name: str, as_json: bool) -> None:
    """Make the project NAME; then `ragd keys create KEY --project NAME`."""
    with settings.rest() as rest:
        made = rest.create_project(name)
    if as_json:
        _print_json(made)
        return
    out.print(f"project [bold]{escape(name)}[/] made: {made['id']}")


@projects.command("list")
@json_option
@click.pass_obj
def projects_list(settings: Settings, as_json: bool) -> None:
    """Every project."""
    with settings.rest() as rest:
        found = rest.projects()
    if as_json:
        _print_json(found)
        return
    out.print(render.projects_table(found))


@cli.group()
def db() -> None:
    """Database maintenance (the gateway's admin routes)."""


def _admin_missing(error: NotFound) -> ClientError:
    return ClientError(f"{error.message} (this gateway has no admin routes: an older ragd?)")


@db.command("backup")
@click.argument("path", required=False)
@json_option
@click.pass_obj
def db_backup(settings: Settings, path: str | None, as_json: bool) -> None:
    """Write a consistent copy of the database while it stays in use.

    PATH names the copy inside the store's backup directory (RAGD_BACKUP_DIR, on the store's
    machine); without it the server picks a dated name. Existing backups are never overwritten.
    """
    with settings.rest() as rest:
        try:
            result = rest.backup(path)
        except NotFound as error:
            raise _admin_missing(error) from None
    if as_json:
        _print_json(result)
    else:
        written = render.size(float(result.get("bytes", 0)))
        seconds = float(result.get("seconds", 0))
        out.print(
            f"backup written to [bold]{escape(str(result.get('path')))}[/] "
            f"({written}, {seconds:.1f} s)"
        )


@db.command("backups")
@json_option
@click.pass_obj
def db_backups(settings: Settings, as_json: bool) -> None:
    """List the backups in the store's backup directory, newest first."""
    with settings.rest() as rest:
        found = rest.backups()
    if as_json:
        _print_json(found)
        return
    for info in found:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(info["modified_at"])))
        out.print(f"{escape(str(info['path']))}  {render.size(float(info['bytes']))}  {when}")


@db.command("restore")
@click.argument("path", required=False)
@click.option(
    "--from-replica",
    is_flag=True,
    help="Restore the Litestream replica's latest state (RAGD_REPLICA_URL) instead of a backup.",
)
@click.option(
    "--timestamp",
    default="",
    help="With --from-replica: the replica's state at this RFC 3339 time (2026-01-31T12:00:00Z).",
)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@json_option
@click.pass_obj
def db_restore(
    settings: Settings,
    path: str | None,
    from_replica: bool,
    timestamp: str,
    yes: bool,
    as_json: bool,
) -> None:
    """Replace the database with the backup PATH (as `ragd db backups` lists it), or with the
    replica's state (--from-replica [--timestamp T]).

    The store checks the backup first (integrity, and a schema that is ragd's at its version),
    keeps a copy of the database it replaces in the backup directory's replaced/, and keeps
    keys revoked since the backup revoked; writes wait while it copies.
    """
    if from_replica == bool(path):
        raise click.UsageError("name a backup PATH or give --from-replica (not both)")
    if timestamp and not from_replica:
        raise click.UsageError("--timestamp goes with --from-replica")
    source = (
        f"the backup {path!r}"
        if path
        else "the replica" + (f" as of {timestamp}" if timestamp else "")
    )
    if not yes:
        click.confirm(f"Replace everything the store holds with {source}?", abort=True, err=True)
    with settings.rest() as rest:
        result = rest.restore(path) if path else rest.restore_from_replica(timestamp)
    if as_json:
        _print_json(result)
        return
    out.print(
        f"restored [bold]{escape(str(result.get('path')))}[/] "
        f"({render.size(float(result.get('bytes', 0)))}, schema "
        f"{result.get('restored_schema_version')} -> {result.get('schema_version')}, "
        f"{float(result.get('seconds', 0)):.1f} s); the replaced database is kept as "
        f"{escape(str(result.get('replaced_path')))}"
    )


@db.command("status")
@json_option
@click.pass_obj
def db_status(settings: Settings, as_json: bool) -> None:
    """The database's size and schema, and where its Litestream replica stands."""
    with settings.rest() as rest:
        stats = rest.stats()
    found = {"global": stats.get("global"), "replica": stats.get("replica")}
    if as_json:
        _print_json(found)
        return
    database = stats.get("global") or {}
    out.print(
        f"database: schema {database.get('schema_version')}, "
        f"{render.size(float(database.get('db_bytes', 0)))} "
        f"(+{render.size(float(database.get('wal_bytes', 0)))} WAL), "
        f"{database.get('files', 0)} files, {database.get('chunks', 0)} chunks"
    )
    replica = stats.get("replica")
    if not replica:
        out.print("replica: off (set RAGD_REPLICA_URL on the store and run Litestream)")
        return
    lag = replica.get("lag_seconds")
    out.print(
        f"replica: [bold]{escape(str(replica.get('state')))}[/] {escape(str(replica.get('url')))}"
        f" (every {replica.get('sync_interval_seconds')} s)"
    )
    out.print(
        f"  position: replica txid {replica.get('replica_txid') or 'unknown'}, "
        f"local txid {replica.get('local_txid') or 'unknown'}; "
        f"lag {'unknown' if lag is None else f'{float(lag):.1f} s'}"
    )
    if replica.get("error"):
        out.print(f"  [yellow]{escape(str(replica['error']))}[/]")


@db.command("download")
@click.argument("path")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to write it (default: the backup's file name, here).",
)
@click.pass_obj
def db_download(settings: Settings, path: str, output: Path | None) -> None:
    """Copy the backup PATH from the store's machine to this one, through the gateway."""
    target = output or Path(path.rsplit("/", 1)[-1])
    with settings.rest() as rest:
        written = rest.download_backup(path, target)
    out.print(
        f"downloaded {escape(path)} to [bold]{escape(str(target))}[/] ({render.size(written)})"
    )


@db.command("vacuum")
@json_option
@click.pass_obj
def db_vacuum(settings: Settings, as_json: bool) -> None:
    """Reclaim the space of deleted data."""
    with settings.rest() as rest:
        try:
            result = rest.vacuum()
        except NotFound as error:
            raise _admin_missing(error) from None
    if as_json:
        _print_json(result)
    else:
        before, after = float(result.get("bytes_before", 0)), float(result.get("bytes_after", 0))
        out.print(f"vacuumed: {render.size(before)} -> {render.size(after)}")


@cli.command()
@click.argument("service", type=click.Choice(["embedder", "store", "gateway", "all"]))
def serve(service: str) -> None:
    """Run one service in the foreground, or all three (as `make run` does).

    Configured by the RAGD_* environment variables (see the README).
    """
    if service == "all":
        from services.run import main as run_all

        sys.exit(run_all())
    try:
        module = importlib.import_module(f"services.{service}.server")
    except ImportError as error:
        raise ClientError(
            f"the {service} cannot start here: {error}; install its extra, "
            f"e.g. pip install 'ragd[{service}]'"
        ) from None
    module.main()


def main() -> None:
    cli(prog_name="ragd")
