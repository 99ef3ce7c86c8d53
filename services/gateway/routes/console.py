"""The web console: static files (services/gateway/console/) served at /console/.

The pages hold no data and are served without a key; their script calls the public REST API
of the same gateway with the key the user typed. It is not an API operation, so it is not in
app.ROUTES (which /openapi.json describes) but one route of its own: /console redirects to
/console/ (so the pages' relative links work behind a path prefix too), /console/ is
index.html and /console/<name> one of the directory's files, nothing else.
"""

from __future__ import annotations

from pathlib import Path

from starlette.datastructures import URLPath
from starlette.exceptions import HTTPException
from starlette.responses import FileResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Match, NoMatchFound
from starlette.types import Receive, Scope, Send

PREFIX = "/console"
DIRECTORY = Path(__file__).resolve().parent.parent / "console"
MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}
# Only the console's own files run or load: no inline script, nothing from elsewhere (it works
# offline), no framing; the API it calls is this origin.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # Revalidated each time (ETag): an upgraded gateway serves its own console at once.
    "Cache-Control": "no-cache",
}


def served_files(directory: Path = DIRECTORY) -> dict[str, Path]:
    """The files /console/<name> may name: the directory's own, by name (no subfolders)."""
    if not directory.is_dir():
        return {}
    return {
        path.name: path
        for path in directory.iterdir()
        if path.is_file() and path.suffix in MEDIA_TYPES
    }


class ConsoleRoute(BaseRoute):
    """GET and HEAD of /console, /console/ and /console/<file>."""

    def __init__(self, directory: Path = DIRECTORY) -> None:
        self.directory = directory
        self._files: dict[str, Path] | None = None

    @property
    def files(self) -> dict[str, Path]:
        # Listed on first use, not at import: the app is often built where nobody asks.
        if self._files is None:
            self._files = served_files(self.directory)
        return self._files

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] != "http":
            return Match.NONE, {}
        path = scope["path"]
        if path == PREFIX:
            template = PREFIX
        elif path.startswith(PREFIX + "/"):
            template = PREFIX + "/{file}"
        else:
            return Match.NONE, {}
        # The metrics label (see metrics.TemplatedRoute): never a file name a client made up.
        child = {"route_template": template}
        if scope["method"] not in ("GET", "HEAD"):
            return Match.PARTIAL, child
        return Match.FULL, child

    def url_path_for(self, name: str, /, **path_params: object) -> URLPath:
        raise NoMatchFound(name, path_params)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] not in ("GET", "HEAD"):
            raise HTTPException(405, headers={"Allow": "GET, HEAD"})
        await self.response(scope["path"])(scope, receive, send)

    def response(self, path: str) -> Response:
        if path == PREFIX:
            return RedirectResponse(PREFIX + "/", status_code=307)
        name = path[len(PREFIX) + 1 :] or "index.html"
        found = self.files.get(name)
        if found is None:
            raise HTTPException(404)
        return FileResponse(found, media_type=MEDIA_TYPES[found.suffix], headers=HEADERS)


ROUTE = ConsoleRoute()
