"""Scenario 1, embedding throughput: /v1/embeddings through the stack against the same texts
embedded in-process, and against llama-cpp-python's own OpenAI-compatible server under the
same client load. Alternatives are interleaved within each repeat; medians are reported.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx
import llama_cpp
import numpy as np

from bench.context import Context, timed
from bench.load import http_session, post_json, run_load
from bench.processes import MODEL_PATH, llama_server, running_stack
from bench.stats import Row, median

SCENARIO = "1 embedding"
# Targets from the issue.
TARGET_VS_IN_PROCESS = 0.95
TARGET_VS_LLAMA_SERVER = 1.2
TARGET_CLIENTS = 8

Measure = Callable[[], float]


def _batches(texts: Sequence[str], size: int) -> list[list[str]]:
    return [list(texts[i : i + size]) for i in range(0, len(texts), size)]


def _timed(work: Callable[[], object]) -> float:
    began = time.perf_counter()
    work()
    return time.perf_counter() - began


def _rest_batched(url: str, batches: list[list[str]], encoding: str | None) -> Measure:
    def measure() -> float:
        with httpx.Client(base_url=url, timeout=120.0) as http:
            began = time.perf_counter()
            for batch in batches:
                body: dict[str, Any] = {"input": batch}
                if encoding:
                    body["encoding_format"] = encoding
                post_json(http, "/v1/embeddings", body)
            return time.perf_counter() - began

    return measure


def _rest_concurrent(url: str, requests: list[list[str]], clients: int) -> Measure:
    def measure() -> float:
        return run_load(
            requests,
            clients,
            http_session(url),
            lambda http, batch: post_json(http, "/v1/embeddings", {"input": batch}),
            lambda http: http.close(),
        ).elapsed

    return measure


def _first_vectors(url: str, texts: list[str]) -> np.ndarray:
    with httpx.Client(base_url=url, timeout=60.0) as http:
        body = post_json(http, "/v1/embeddings", {"input": texts, "encoding_format": "base64"})
    data = body["data"]
    assert isinstance(data, list)
    rows = [np.frombuffer(base64.b64decode(item["embedding"]), "<f4") for item in data]
    return np.vstack(rows)


def run(ctx: Context) -> None:
    config = ctx.config
    texts = ctx.corpus.snippets(config.embed_texts)
    batches = _batches(texts, config.embed_batch)
    requests = _batches(texts, config.embed_request_texts)
    model = ctx.model()
    tokens = sum(len(ids) for ids in model.tokenize(texts))
    llama = llama_cpp.Llama(
        model_path=str(MODEL_PATH),
        embedding=True,
        n_ctx=512,
        n_batch=512,
        n_ubatch=512,
        n_threads=config.threads,
        n_threads_batch=config.threads,
        flash_attn=True,
        verbose=False,
    )
    detail = ctx.detail(SCENARIO)
    detail.update(texts=len(texts), tokens=tokens, batch=config.embed_batch)
    try:
        with (
            running_stack(ctx.run_dir / "embedding", config.threads) as stack,
            llama_server(ctx.run_dir / "embedding", config.threads) as server,
            # The embedder's OpenAI-compatible backend in front of that same server.
            running_stack(
                ctx.run_dir / "embedding-upstream",
                config.threads,
                RAGD_EMBEDDER_UPSTREAM_URL=f"{server.url}/v1",
                RAGD_EMBEDDER_UPSTREAM_MODEL=model.info.name,
                RAGD_EMBEDDER_UPSTREAM_MAX_TOKENS=str(model.info.max_input_tokens),
            ) as upstream,
        ):
            ctx.cold_starts.append(stack.cold_start)
            detail["rss_at_rest_mb"] = {**stack.rss(), "llama_cpp.server": server.rss()}
            detail["llama_cpp_server_cold_start_s"] = server.cold_start
            detail["llama_cpp_server_command"] = " ".join(server.command)
            # Also the warm-up: one request to each server, one pass of each engine.
            llama.embed(batches[0])
            _rest_batched(server.url, batches[:1], None)()
            same = _first_vectors(stack.url, batches[0])
            detail["max_abs_diff_rest_vs_in_process"] = float(
                np.abs(same - model.embed(batches[0]).vectors).max()
            )
            through = _first_vectors(upstream.url, batches[0])
            detail["min_cosine_upstream_backend_vs_in_process"] = float(
                np.sum(through * model.embed(batches[0]).vectors, axis=1).min()
            )

            measures: dict[str, Measure] = {
                "in_process_ragd": lambda: _timed(lambda: [model.embed(b) for b in batches]),
                "in_process_llama": lambda: _timed(lambda: [llama.embed(b) for b in batches]),
                "rest_base64": _rest_batched(stack.url, batches, "base64"),
                "rest_float": _rest_batched(stack.url, batches, None),
                "llama_server_batched": _rest_batched(server.url, batches, None),
                "rest_upstream_backend": _rest_batched(upstream.url, batches, None),
            }
            for clients in config.embed_clients:
                measures[f"rest_c{clients}"] = _rest_concurrent(stack.url, requests, clients)
                measures[f"llama_server_c{clients}"] = _rest_concurrent(
                    server.url, requests, clients
                )
            rates = _interleaved(ctx, measures, len(texts), config.repeats, stack.pids())
    finally:
        llama.close()
    detail["texts_per_s"] = rates
    _rows(ctx, {name: median(values) for name, values in rates.items()})


def _interleaved(
    ctx: Context, measures: dict[str, Measure], count: int, repeats: int, pids: dict[str, int]
) -> dict[str, list[float]]:
    rates: dict[str, list[float]] = {name: [] for name in measures}
    with ctx.profiling("embedding", pids):
        for repeat in range(repeats):
            with timed(ctx, f"embedding: repeat {repeat + 1}/{repeats}"):
                for name, measure in measures.items():
                    rates[name].append(count / measure())
    return rates


def _rows(ctx: Context, rate: dict[str, float]) -> None:
    config = ctx.config
    batch = config.embed_batch
    best_name, best = max(
        (("llama-cpp-python Llama.embed", rate["in_process_llama"]),
         ("ragd EmbeddingModel", rate["in_process_ragd"])),
        key=lambda item: item[1],
    )  # fmt: skip
    unit = "texts/s"
    ctx.add(
        Row(SCENARIO, "in-process, llama-cpp-python Llama.embed", rate["in_process_llama"], unit)
    )
    ctx.add(Row(SCENARIO, "in-process, ragd EmbeddingModel", rate["in_process_ragd"], unit))
    ctx.add(
        Row(
            SCENARIO,
            f"REST /v1/embeddings, {batch} texts/request, base64, 1 client",
            rate["rest_base64"],
            unit,
            baseline_name=f"best in-process: {best_name}",
            baseline=best,
            target=TARGET_VS_IN_PROCESS,
        )
    )
    ctx.add(
        Row(
            SCENARIO,
            f"REST /v1/embeddings, {batch} texts/request, float JSON, 1 client",
            rate["rest_float"],
            unit,
            baseline_name=f"best in-process: {best_name}",
            baseline=best,
        )
    )
    ctx.add(
        Row(
            SCENARIO,
            f"llama_cpp.server, {batch} texts/request, 1 client",
            rate["llama_server_batched"],
            unit,
            baseline_name=f"best in-process: {best_name}",
            baseline=best,
        )
    )
    ctx.add(
        Row(
            SCENARIO,
            f"REST /v1/embeddings, upstream backend over llama_cpp.server, {batch} texts/request,"
            " float JSON, 1 client",
            rate["rest_upstream_backend"],
            unit,
            baseline_name="llama_cpp.server, same requests",
            baseline=rate["llama_server_batched"],
        )
    )
    per = config.embed_request_texts
    for clients in config.embed_clients:
        ctx.add(
            Row(
                SCENARIO,
                f"REST /v1/embeddings, {per} text/request, {clients} client"
                + ("s" if clients > 1 else ""),
                rate[f"rest_c{clients}"],
                unit,
                baseline_name="llama_cpp.server, same load",
                baseline=rate[f"llama_server_c{clients}"],
                target=TARGET_VS_LLAMA_SERVER if clients == TARGET_CLIENTS else None,
            )
        )
