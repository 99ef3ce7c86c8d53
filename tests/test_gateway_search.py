"""The gateway's search pipeline in process (services/gateway/search.py): fan-out over queries,
the merge, the lexical fallback, and the store's own NOT_FOUND, against a real store and a real
embedder server on loopback (no HTTP)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from services.common.vectors import to_bytes
from services.common.vocabulary import HYBRID, LEXICAL, VECTOR
from services.embedder.config import EmbedderConfig
from services.embedder.model import EmbeddingModel
from services.embedder.server import create_server as create_embedder
from services.gateway import errors
from services.gateway.clients import EmbedderClient, Store, open_channel, store_stub
from services.gateway.embedders import Embedders
from services.gateway.search import Deadlines, Search, search
from services.pb import store_pb2 as pb
from services.store.config import StoreConfig
from services.store.wire.server import create_server as create_store
from tests.embedder_fixtures import MODEL_PATH
from tests.harness import free_port

TEXTS = [
    "The lighthouse keeper climbed the stairs to light the lamp at dusk.",
    "Tides rise and fall twice a day because of the Moon's gravity.",
    "A chimera breathes fire and has a lion's body and a goat's head.",
]

Scenario = Callable[[Embedders, Store, str], Awaitable[None]]


def run(
    tmp_path: Path, model: EmbeddingModel, scenario: Scenario, embedder_up: bool = True
) -> None:
    async def main() -> None:
        store_server, store_port = await create_store(
            StoreConfig(listen="127.0.0.1:0", db_path=tmp_path / "ragd.db", threads=2)
        )
        embedder_server, embedder_port = await create_embedder(
            EmbedderConfig(listen="127.0.0.1:0", model_path=MODEL_PATH, threads=2), model
        )
        if not embedder_up:
            await embedder_server.stop(0)
        target = f"127.0.0.1:{embedder_port if embedder_up else free_port()}"
        embedder_channel = open_channel(target, "embedder", 2.0)
        store_channel = open_channel(f"127.0.0.1:{store_port}", "store", 10.0)
        try:
            store = store_stub(store_channel)
            info = model.info
            vector_store = await store.CreateVectorStore(
                pb.CreateVectorStoreRequest(name="s", model=info.name, dimensions=info.dimensions)
            )
            await store.AddChunks(
                pb.AddChunksRequest(
                    vector_store_id=vector_store.id,
                    file_id="file-1",
                    filename="sea.txt",
                    chunks=[pb.ChunkInput(text=text) for text in TEXTS],
                    vectors=to_bytes(model.embed(TEXTS).vectors),
                    dimensions=info.dimensions,
                    model=info.name,
                )
            )
            await scenario(
                Embedders([(None, EmbedderClient(embedder_channel))]), store, vector_store.id
            )
        finally:
            await embedder_channel.close()
            await store_channel.close()
            await embedder_server.stop(0)
            await store_server.stop(None)

    asyncio.run(main())


def test_queries_fan_out_and_each_chunk_keeps_its_best_score(
    tmp_path: Path,
    embedding_model: EmbeddingModel,
) -> None:
    async def scenario(embedder: Embedders, store: Store, store_id: str) -> None:
        queries = ["who lights the lamp?", "why are there tides?"]
        found = await search(
            embedder, store, Search(store_id, queries, k=2, mode=VECTOR), Deadlines(embed=5.0)
        )
        assert (found.mode, found.degraded) == (VECTOR, False)
        assert {hit.text for hit in found.hits} == {TEXTS[0], TEXTS[1]}
        assert [hit.score for hit in found.hits] == sorted(
            (hit.score for hit in found.hits), reverse=True
        )
        # Each query alone: the merged score of a chunk is the best of its queries' scores.
        alone = [
            await search(
                embedder, store, Search(store_id, [query], k=3, mode=VECTOR), Deadlines(embed=5.0)
            )
            for query in queries
        ]
        best: dict[str, float] = {}
        for result in alone:
            for hit in result.hits:
                best[hit.chunk_id] = max(best.get(hit.chunk_id, 0.0), hit.score)
        # (Up to float rounding: two queries embedded in one pass differ from each alone in
        # the eighth decimal.)
        assert [hit.score for hit in found.hits] == pytest.approx(
            [best[hit.chunk_id] for hit in found.hits], abs=1e-6
        )
        hybrid = await search(
            embedder, store, Search(store_id, queries, k=3, mode=HYBRID), Deadlines(embed=5.0)
        )
        assert hybrid.mode == HYBRID and len(hybrid.hits) == 3

    run(tmp_path, embedding_model, scenario)


def test_vector_and_hybrid_fall_back_to_lexical_when_the_embedder_is_down(
    tmp_path: Path,
    embedding_model: EmbeddingModel,
) -> None:
    async def scenario(embedder: Embedders, store: Store, store_id: str) -> None:
        for mode in (VECTOR, HYBRID):
            found = await search(
                embedder, store, Search(store_id, ["gravity"], 3, mode), Deadlines(embed=1.0)
            )
            assert (found.mode, found.degraded) == (LEXICAL, True)
            assert [hit.text for hit in found.hits] == [TEXTS[1]]
        lexical = await search(
            embedder, store, Search(store_id, ["gravity"], 3, LEXICAL), Deadlines(embed=1.0)
        )
        assert (lexical.mode, lexical.degraded) == (LEXICAL, False)

    run(tmp_path, embedding_model, scenario, embedder_up=False)


def test_an_unknown_store_is_the_stores_not_found(
    tmp_path: Path,
    embedding_model: EmbeddingModel,
) -> None:
    async def scenario(embedder: Embedders, store: Store, store_id: str) -> None:
        for mode in (VECTOR, LEXICAL):
            with pytest.raises(errors.NotFound, match="vs_missing"):
                await search(
                    embedder, store, Search("vs_missing", ["tides"], 3, mode), Deadlines(embed=5.0)
                )

    run(tmp_path, embedding_model, scenario)
