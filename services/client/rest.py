"""The REST calls a command-line tool or script needs: vector stores, search, admin.

OpenAI's API shapes, so any OpenAI SDK works as well; this module adds what the SDK lacks:
names resolved to ids, ragd's extensions (search modes, chunk counts, admin) and errors that
say what to do.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import httpx

from services.client.errors import ClientError, Conflict, NotFound, Unauthenticated, Unreachable

DEFAULT_URL = "http://127.0.0.1:8000"


@dataclass(frozen=True)
class VectorStore:
    id: str
    name: str
    created_at: int
    status: str
    usage_bytes: int
    # in_progress, completed, failed, cancelled, total.
    file_counts: dict[str, int]
    # None when the server does not report it (an older ragd or another OpenAI-style server).
    chunk_count: int | None
    model: str
    raw: dict[str, Any]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> VectorStore:
        model = data.get("embedding_model") or {}
        return cls(
            id=data["id"],
            name=data.get("name") or "",
            created_at=int(data.get("created_at") or 0),
            status=data.get("status") or "",
            usage_bytes=int(data.get("usage_bytes") or 0),
            file_counts={k: int(v) for k, v in (data.get("file_counts") or {}).items()},
            chunk_count=data.get("chunk_count"),
            model=model.get("name", "") if isinstance(model, dict) else "",
            raw=data,
        )


@dataclass(frozen=True)
class SearchHit:
    file_id: str
    filename: str
    score: float
    text: str
    attributes: dict[str, Any]


@dataclass(frozen=True)
class SearchResults:
    hits: list[SearchHit]
    # The ranking the server used, when it reports one ("vector", "lexical", "hybrid").
    mode: str | None
    degraded: bool
    raw: dict[str, Any]


class RestClient:
    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        api_key: str | None = None,
        timeout: float = 60.0,
        project: str | None = None,
    ) -> None:
        """`project`: act in this project (its id or name; admin keys only), as OpenAI's
        SDKs do with the OpenAI-Project header."""
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        if project:
            headers["OpenAI-Project"] = project
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        timeout: Any = httpx.USE_CLIENT_DEFAULT,
    ) -> Any:
        """The decoded JSON reply; raises a ClientError subclass for every failure."""
        try:
            reply = self._http.request(method, path, json=json, params=params, timeout=timeout)
        except httpx.TransportError as error:
            raise unreachable(self.base_url, error) from None
        if reply.status_code >= 400:
            raise error_from(reply, method, path)
        try:
            return reply.json()
        except ValueError:
            raise ClientError(
                f"{method} {path} answered {reply.status_code} with a body that is not JSON",
                status=reply.status_code,
            ) from None

    # Vector stores

    def list_vector_stores(self) -> list[VectorStore]:
        """Every vector store, oldest first."""
        result: list[VectorStore] = []
        params: dict[str, Any] = {"limit": 100, "order": "asc"}
        while True:
            page = self.request("GET", "/v1/vector_stores", params=params)
            result += [VectorStore.from_json(item) for item in page["data"]]
            if not page.get("has_more") or not page["data"]:
                return result
            params["after"] = page["data"][-1]["id"]

    def resolve(self, name_or_id: str) -> VectorStore:
        """The one vector store with this id, or else this name; NotFound or Conflict."""
        if name_or_id.startswith("vs_"):
            try:
                return self.get_vector_store(name_or_id)
            except NotFound:
                pass
        matches = [s for s in self.list_vector_stores() if s.name == name_or_id]
        if not matches:
            raise NotFound(
                f"no index named '{name_or_id}'; create it with `ragd index create -n {name_or_id}`"
                " (or see `ragd index list`)",
                status=404,
            )
        if len(matches) > 1:
            ids = ", ".join(s.id for s in matches)
            raise Conflict(
                f"{len(matches)} indexes are named '{name_or_id}' ({ids}); pass one of these ids "
                "to -n instead",
                status=409,
            )
        return matches[0]

    def create_vector_store(self, name: str, metadata: dict[str, str] | None = None) -> VectorStore:
        body: dict[str, Any] = {"name": name}
        if metadata:
            body["metadata"] = metadata
        return VectorStore.from_json(self.request("POST", "/v1/vector_stores", json=body))

    def get_vector_store(self, vector_store_id: str) -> VectorStore:
        return VectorStore.from_json(self.request("GET", f"/v1/vector_stores/{vector_store_id}"))

    def reindex(
        self, vector_store_id: str, model: str, chunking: dict[str, Any] | None = None
    ) -> VectorStore:
        """Starts re-indexing the store with `model` (ragd extension); see `reindex` on it."""
        body: dict[str, Any] = {"embedding_model": model}
        if chunking is not None:
            body["chunking_strategy"] = chunking
        path = f"/v1/vector_stores/{vector_store_id}/reindex"
        return VectorStore.from_json(self.request("POST", path, json=body))

    def cancel_reindex(self, vector_store_id: str) -> VectorStore:
        path = f"/v1/vector_stores/{vector_store_id}/reindex/cancel"
        return VectorStore.from_json(self.request("POST", path, json={}))

    def delete_vector_store(self, vector_store_id: str) -> bool:
        reply = self.request("DELETE", f"/v1/vector_stores/{vector_store_id}")
        return bool(reply.get("deleted"))

    def search(
        self,
        vector_store_id: str,
        query: str,
        *,
        k: int = 10,
        mode: str | None = None,
        filters: dict[str, Any] | None = None,
    ) -> SearchResults:
        body: dict[str, Any] = {"query": query, "max_num_results": k}
        if mode is not None:
            body["mode"] = mode
        if filters is not None:
            body["filters"] = filters
        reply = self.request("POST", f"/v1/vector_stores/{vector_store_id}/search", json=body)
        hits = [
            SearchHit(
                file_id=item.get("file_id", ""),
                filename=item.get("filename", ""),
                score=float(item.get("score", 0.0)),
                text="\n".join(part.get("text", "") for part in item.get("content", []) if part),
                attributes=item.get("attributes") or {},
            )
            for item in reply.get("data", [])
        ]
        return SearchResults(
            hits=hits, mode=reply.get("mode"), degraded=bool(reply.get("degraded")), raw=reply
        )

    def versions(self) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", "/version")
        return result

    # Administration (the gateway's /admin routes, behind the same API key)

    def backup(self, path: str | None = None) -> dict[str, Any]:
        body = {"path": path} if path else {}
        result: dict[str, Any] = self.request("POST", "/admin/backup", json=body)
        return result

    def restore(self, path: str) -> dict[str, Any]:
        # As long as the database is large: no client deadline beyond the server's own.
        result: dict[str, Any] = self.request(
            "POST", "/admin/restore", json={"path": path}, timeout=None
        )
        return result

    def restore_from_replica(self, timestamp: str = "") -> dict[str, Any]:
        body: dict[str, Any] = {"from_replica": True}
        if timestamp:
            body["timestamp"] = timestamp
        result: dict[str, Any] = self.request("POST", "/admin/restore", json=body, timeout=None)
        return result

    def stats(self) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", "/admin/stats")
        return result

    def backups(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.request("GET", "/admin/backups")["data"]
        return result

    def download_backup(self, path: str, target: Path) -> int:
        """Writes the backup `path` to `target` (via a temporary file beside it); its bytes."""
        partial = target.with_name(f".{target.name}.partial")
        written = 0
        try:
            with self._http.stream(
                "GET", "/admin/backups/content", params={"path": path}, timeout=None
            ) as reply:
                if reply.status_code >= 400:
                    reply.read()
                    raise error_from(reply, "GET", "/admin/backups/content")
                with open(partial, "wb") as out:
                    for piece in reply.iter_bytes():
                        out.write(piece)
                        written += len(piece)
            partial.replace(target)
        except httpx.TransportError as error:
            raise unreachable(self.base_url, error) from None
        finally:
            partial.unlink(missing_ok=True)
        return written

    def create_key(
        self,
        name: str,
        scope: str,
        vector_stores: list[str] | None = None,
        requests_per_minute: int = 0,
        tokens_per_day: int = 0,
        project: str = "",
        project_conversations: bool = False,
    ) -> dict[str, Any]:
        body = {
            "name": name,
            "scope": scope,
            "vector_stores": vector_stores or [],
            "requests_per_minute": requests_per_minute,
            "tokens_per_day": tokens_per_day,
            "project": project,
            "project_conversations": project_conversations,
        }
        result: dict[str, Any] = self.request("POST", "/admin/keys", json=body)
        return result

    def create_project(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request("POST", "/admin/projects", json={"name": name})
        return result

    def projects(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.request("GET", "/admin/projects")["data"]
        return result

    def keys(self, revoked: bool = False) -> list[dict[str, Any]]:
        params = {"revoked": "true"} if revoked else None
        result: list[dict[str, Any]] = self.request("GET", "/admin/keys", params=params)["data"]
        return result

    def revoke_key(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request("DELETE", f"/admin/keys/{name}")
        return result

    def audit(
        self,
        *,
        operation: str = "",
        store: str = "",
        key: str = "",
        since: float = 0.0,
        limit: int = 100,
    ) -> list[dict[str, Any]]:
        """Audit entries newest first, paging back until `limit` entries or `since` (a Unix
        time) is passed."""
        found: list[dict[str, Any]] = []
        params: dict[str, Any] = {"limit": min(limit, 1000)}
        if operation:
            params["operation"] = operation
        if store:
            params["store"] = store
        if key:
            params["key"] = key
        while len(found) < limit:
            page = self.request("GET", "/admin/audit", params=params)
            entries = [entry for entry in page["data"] if entry["at"] >= since]
            found.extend(entries)
            if not page["has_more"] or len(entries) < len(page["data"]):
                break
            params["before"] = page["last_id"]
        return found[:limit]

    def vacuum(self) -> dict[str, Any]:
        result: dict[str, Any] = self.request("POST", "/admin/vacuum", json={})
        return result


def unreachable(base_url: str, error: httpx.TransportError) -> Unreachable:
    reason = str(error) or type(error).__name__
    return Unreachable(
        f"cannot reach the ragd gateway at {base_url} ({reason}); "
        "is the stack running (`make run` or `ragd serve all`), and is this its address "
        "(--url or RAGD_URL)?"
    )


def error_from(reply: httpx.Response, method: str, path: str) -> ClientError:
    """The error an HTTP error reply means, with the server's message."""
    status = reply.status_code
    message, code = "", None
    try:
        error = reply.json().get("error") or {}
        message, code = error.get("message") or "", error.get("code")
    except (ValueError, AttributeError):
        pass
    message = message or reply.text.strip()[:200] or reply.reason_phrase
    text = f"{method} {path} failed with HTTP {status}: {message}"
    if status == 401:
        return Unauthenticated(
            f"{text}; set RAGD_API_KEY or pass --api-key", status=status, code=code
        )
    if status == 404:
        return NotFound(text, status=status, code=code)
    if status == 409:
        return Conflict(text, status=status, code=code)
    if status in (502, 503, 504):
        return Unreachable(text, status=status, code=code)
    return ClientError(text, status=status, code=code)
