"""Scenario 8, re-index online: a store of man-page paragraphs (one file each) ingested with
MiniLM, then re-indexed to a second, genuinely different model (SmolLM2-135M-Instruct, mean
pooled, 576 dims) through POST /v1/vector_stores/{id}/reindex while a client keeps searching.

Reported: the re-index's files/s against embedding a sample of the same texts in-process with
the second model (what the re-index cannot beat), and search latency during the re-index
against the same searches on the idle stack just before. Every search must answer 200 and not
degraded: the old index serves until the switch.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import httpx

from bench.context import Context, timed
from bench.corpus import Document
from bench.ingest import ingest
from bench.processes import running_stack
from bench.stats import Row, percentile
from services.embedder.model import EmbeddingModel
from services.local_chat import model_path as smollm2_path

SCENARIO = "8 reindex"
MINILM = "all-MiniLM-L6-v2"
SMOL = "smollm2-135m"
_SMOL_SETTINGS = {
    "RAGD_MODEL_PATH": str(smollm2_path()),
    "RAGD_MODEL_NAME": SMOL,
    "RAGD_MODEL_POOLING": "mean",
    "RAGD_MODEL_MAX_TOKENS": "512",
}
# A steady interactive load rather than a saturating one: a person at a search box or an app.
_SEARCHES_PER_SECOND = 4.0
_POLL_SECONDS = 0.5


@dataclass
class Searches:
    latencies_ms: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, float]:
        return {
            "searches": len(self.latencies_ms),
            "p50_ms": percentile(self.latencies_ms, 50),
            "p95_ms": percentile(self.latencies_ms, 95),
            "failures": len(self.failures),
        }


class SearchLoad:
    """Searches at a steady pace on a thread of its own, from start to finish()."""

    def __init__(self, url: str, store_id: str, queries: list[str]) -> None:
        self._url, self._store_id, self._queries = url, store_id, queries
        self._stop = threading.Event()
        self._seen = Searches()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def finish(self) -> Searches:
        self._stop.set()
        self._thread.join()
        return self._seen

    def _loop(self) -> None:
        with httpx.Client(base_url=self._url, timeout=60.0) as http:
            n = 0
            while not self._stop.is_set():
                began = time.perf_counter()
                reply = http.post(
                    f"/v1/vector_stores/{self._store_id}/search",
                    json={"query": self._queries[n % len(self._queries)], "max_num_results": 10},
                )
                elapsed = time.perf_counter() - began
                n += 1
                body = reply.json()
                if reply.status_code != 200 or body.get("degraded"):
                    self._seen.failures.append(f"{reply.status_code} {str(body)[:200]}")
                else:
                    self._seen.latencies_ms.append(elapsed * 1000)
                self._stop.wait(max(0.0, 1 / _SEARCHES_PER_SECOND - elapsed))


def _reindex(http: httpx.Client, store_id: str) -> dict[str, object]:
    started = http.post(f"/v1/vector_stores/{store_id}/reindex", json={"embedding_model": SMOL})
    if started.status_code != 200:
        raise RuntimeError(f"reindex -> {started.status_code}: {started.text[:300]}")
    while True:
        time.sleep(_POLL_SECONDS)
        store = http.get(f"/v1/vector_stores/{store_id}").json()
        if store["reindex"]["status"] != "in_progress":
            return dict(store)


def _in_process_rate(ctx: Context, texts: list[str]) -> float:
    """Texts/s of SmolLM2 in this process, on the embedder's own model class."""
    model = EmbeddingModel(
        smollm2_path(), threads=ctx.config.threads, pooling="mean", max_input_tokens=512
    )
    try:
        began = time.perf_counter()
        for start in range(0, len(texts), 32):
            model.embed(texts[start : start + 32])
        return len(texts) / (time.perf_counter() - began)
    finally:
        model.close()


def run(ctx: Context) -> None:
    config = ctx.config
    count = config.reindex_files
    with timed(ctx, f"reindex: {count} paragraphs of man pages"):
        texts = ctx.corpus.snippets(count + 200, 40, 240)
    docs = [Document(f"para-{n:05d}.txt", text) for n, text in enumerate(texts[:count])]
    queries = [" ".join(text.split()[:8]) for text in texts[count:]]
    detail = ctx.detail(SCENARIO)
    detail.update(files=count, characters=sum(len(d.text) for d in docs))
    replicas = {"embedder-smol": _SMOL_SETTINGS}
    models = {MINILM: "embedder", SMOL: "embedder-smol"}
    with running_stack(ctx.run_dir / "reindex", config.threads, replicas, models) as stack:
        with timed(ctx, f"reindex: ingest {count} files with {MINILM}"):
            ingested = ingest(stack, docs, config.ingest_uploaders, "bench-reindex")
        store_id = ingested.store_id
        SearchLoad(stack.url, store_id, queries).finish()  # warm-up: one search
        load = SearchLoad(stack.url, store_id, queries)
        time.sleep(config.reindex_idle_seconds)
        idle = load.finish()
        with (
            httpx.Client(base_url=stack.url, timeout=60.0) as http,
            timed(ctx, f"reindex: {count} files to {SMOL} while searching"),
        ):
            load = SearchLoad(stack.url, store_id, queries)
            began = time.perf_counter()
            store = _reindex(http, store_id)
            seconds = time.perf_counter() - began
            during = load.finish()
    with timed(ctx, f"reindex: in-process {SMOL} on {len(docs) // 10} of the texts"):
        baseline = _in_process_rate(ctx, [d.text for d in docs[: max(10, len(docs) // 10)]])
    reindex = store["reindex"]
    assert isinstance(reindex, dict)
    detail.update(
        ingest_seconds=ingested.seconds,
        chunks=ingested.chunks,
        reindex_seconds=seconds,
        reindex=reindex,
        embedding_model=store["embedding_model"],
        idle=idle.summary(),
        during=during.summary(),
        failures=(idle.failures + during.failures)[:5],
    )
    ok = reindex["status"] == "completed" and not idle.failures and not during.failures
    note = "" if ok else f"status {reindex['status']}, {len(during.failures)} failed searches"
    ctx.add(
        Row(
            SCENARIO,
            f"re-index {count} files ({ingested.chunks} chunks) {MINILM} -> {SMOL}, "
            f"{seconds:.0f} s",
            count / seconds,
            "files/s",
            baseline_name=f"in-process {SMOL} embedding of the same texts",
            baseline=baseline,
            note=note,
        )
    )
    for name, q in (("p50", 50), ("p95", 95)):
        ctx.add(
            Row(
                SCENARIO,
                f"search {name} during the re-index, {_SEARCHES_PER_SECOND:.0f} searches/s "
                f"({len(during.latencies_ms)} searches, {len(during.failures)} failed)",
                percentile(during.latencies_ms, q),
                "ms",
                baseline_name="same searches on the idle stack just before",
                baseline=percentile(idle.latencies_ms, q),
                direction="lower",
            )
        )
