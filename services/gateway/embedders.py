"""The embedding models this gateway serves, each behind its own embedder target, and which of
them a vector store needs.

RAGD_EMBEDDERS names them ("minilm=host:50051 smollm2=a:50061,b:50061"); without it the one
RAGD_EMBEDDER_TARGET serves whatever model its embedders report. A configured name must be the
model's name as its embedders report it (compared without case): routing by name never has to
ask a replica, and a target that serves another model is refused rather than mixed in.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from services.common.model_info import ModelInfo
from services.gateway import errors
from services.gateway.clients import EmbedderClient, Store
from services.gateway.model_aliases import NO_ALIASES, ModelAliases
from services.pb import store_pb2

# Vector stores whose model is remembered; a miss costs one GetVectorStore.
_REMEMBERED = 10_000
# How long one round of Info calls answers `availability`, in seconds.
AVAILABILITY_SECONDS = 1.0


@dataclass(frozen=True)
class EmbedderSpec:
    # None: named by what its embedders serve (the single-model RAGD_EMBEDDER_TARGET).
    name: str | None
    target: str


_PAIR = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._:/-]*)=(\S+)$")


def parse_embedders(raw: str) -> list[EmbedderSpec]:
    """`name=target` pairs separated by spaces or semicolons; a target may list replicas
    ("a:1,b:2") or be a "dns:///" name. ValueError says what is wrong."""
    specs: list[EmbedderSpec] = []
    for part in re.split(r"[\s;]+", raw.strip()):
        if not part:
            continue
        match = _PAIR.match(part)
        if match is None:
            raise ValueError(f"{part!r} is not name=target (e.g. minilm=127.0.0.1:50051)")
        name, target = match.groups()
        if any(spec.name and spec.name.lower() == name.lower() for spec in specs):
            raise ValueError(f"the model {name!r} is named twice")
        specs.append(EmbedderSpec(name, target))
    if not specs:
        raise ValueError("no name=target pairs")
    return specs


class Embedders:
    """The served models' clients; the first is the default (requests that name no model,
    conversations' history)."""

    def __init__(
        self,
        clients: Sequence[tuple[str | None, EmbedderClient]],
        aliases: ModelAliases = NO_ALIASES,
    ) -> None:
        if not clients:
            raise ValueError("a gateway needs at least one embedder")
        self._clients = list(clients)
        self.aliases = aliases
        self._store_models: OrderedDict[str, tuple[str, int]] = OrderedDict()
        # The last availability answer and when it was asked: every ingest worker asks before
        # each claim, and one round of Info calls a second serves them all.
        self._available: tuple[float, tuple[list[ModelInfo], list[str]]] | None = None

    @property
    def default(self) -> EmbedderClient:
        return self._clients[0][1]

    @property
    def configured_names(self) -> list[str]:
        """The names RAGD_EMBEDDERS gives (none for the single-model setting)."""
        return [name for name, _ in self._clients if name is not None]

    @property
    def clients(self) -> list[EmbedderClient]:
        return [client for _, client in self._clients]

    async def info(self, name: str | None, client: EmbedderClient) -> ModelInfo:
        info = await client.info()
        if name is not None and info.name.lower() != name.lower():
            raise errors.BadGateway(
                f"the embedders configured for {name!r} serve {info.name!r}; set their "
                f"RAGD_MODEL_NAME to {name!r} or name them {info.name!r} in RAGD_EMBEDDERS"
            )
        return info

    async def served(self, timeout: float | None = None) -> list[ModelInfo]:
        """The models of the embedders that answer (within `timeout` each)."""
        return (await self.availability(timeout))[0]

    async def availability(self, timeout: float | None = None) -> tuple[list[ModelInfo], list[str]]:
        """The models of the embedders that answer now (asked again, within `timeout` each,
        at most once per AVAILABILITY_SECONDS), and the names of those that do not: configured
        ones, or as last reported."""
        now = time.monotonic()
        if self._available is not None and now - self._available[0] < AVAILABILITY_SECONDS:
            return self._available[1]

        async def one(name: str | None, client: EmbedderClient) -> ModelInfo | str | None:
            try:
                await client.info(refresh=True, timeout=timeout)
                return await self.info(name, client)
            except errors.ApiError:
                return name or client.last_known_name

        found = await asyncio.gather(*(one(name, client) for name, client in self._clients))
        answering = [item for item in found if isinstance(item, ModelInfo)]
        names = {info.name.lower() for info in answering}
        silent = [item for item in found if isinstance(item, str) and item.lower() not in names]
        self._available = (time.monotonic(), (answering, silent))
        return answering, silent

    async def names(self) -> list[str]:
        """Every served model's name: configured ones without asking, others as reported."""
        names = []
        for name, client in self._clients:
            if name is None:
                try:
                    name = (await client.info(timeout=2.0)).name
                except errors.ApiError:
                    continue
            names.append(name)
        return names + self.aliases.names

    async def find(self, model: str) -> tuple[EmbedderClient, ModelInfo] | None:
        """The embedder of `model` (any case, or the model it is an alias of) with its info;
        None when none serves it. Raises the embedders' errors when the one that might serve
        it does not answer."""
        alias = self.aliases.target(model, served=True)
        if alias is not None:
            return await self._served(alias)
        found = await self._served(model)
        wildcard = self.aliases.target(model) if found is None else None
        return found if wildcard is None else await self._served(wildcard)

    async def _served(self, model: str) -> tuple[EmbedderClient, ModelInfo] | None:
        for name, client in self._clients:
            if name is not None and name.lower() == model.lower():
                return client, await self.info(name, client)
        for name, client in self._clients:
            if name is None and (await client.info()).name.lower() == model.lower():
                return client, await client.info()
        return None

    async def unknown(self, model: str) -> str:
        served = ", ".join(repr(name) for name in await self.names()) or "no model right now"
        return (
            f"the model '{model}' is not served here; this server embeds with {served} "
            "(see GET /v1/models)"
        )

    async def get(
        self, model: str | None, param: str = "model"
    ) -> tuple[EmbedderClient, ModelInfo]:
        """The embedder a request names (None: the default); an unknown name is a 400 that
        lists the served ones (/v1/embeddings turns it into OpenAI's 404)."""
        if model is None:
            return self.default, await self.info(self._clients[0][0], self.default)
        found = await self.find(model)
        if found is None:
            raise errors.InvalidRequest(
                await self.unknown(model), param=param, code="model_not_found"
            )
        return found

    async def for_store(
        self, store: Store, vector_store_id: str, refresh: bool = False
    ) -> tuple[EmbedderClient, ModelInfo]:
        """The embedder of the vector store's model. With one model that is the one (the
        store's model rule refuses what does not fit); with several the store's model is
        looked up once and remembered, and `refresh` looks again (after a re-index switched
        it, the store refuses the old model with errors.ModelMismatch)."""
        if len(self._clients) == 1:
            return await self.get(None)
        known = None if refresh else self._store_models.get(vector_store_id)
        if known is None:
            found = await store.GetVectorStore(store_pb2.GetVectorStoreRequest(id=vector_store_id))
            known = (found.model, found.dimensions)
            self._store_models[vector_store_id] = known
            while len(self._store_models) > _REMEMBERED:
                self._store_models.popitem(last=False)
        model, dimensions = known
        client = await self.find(model)
        if client is None or client[1].dimensions != dimensions:
            if not refresh and vector_store_id in self._store_models:
                # Remembered from another request, maybe another key's: a store the caller
                # does not reach must answer 404 here as well (the store checks who asks).
                await store.GetVectorStore(store_pb2.GetVectorStoreRequest(id=vector_store_id))
            raise errors.Refused(
                f"vector store {vector_store_id!r} was indexed with {model} ({dimensions} dims), "
                f"which no embedder here serves ({', '.join(await self.names())}); serve it "
                "(RAGD_EMBEDDERS) or re-index the store with a served model"
            )
        return client
