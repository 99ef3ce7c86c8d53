"""The embedder's Prometheus figures, per lane ("bulk" for ingest, "interactive" for
queries): passes as histograms (observed as they end), requests, inputs and tokens from the
batchers' own counters (read at scrape time), and the queues."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Protocol

from prometheus_client import REGISTRY, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

PASS_DURATION = Histogram(
    "ragd_embed_pass_duration_seconds",
    "Time of one forward pass of the model.",
    ["lane"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)
BATCH_SIZE = Histogram(
    "ragd_embed_batch_size",
    "Inputs in one forward pass.",
    ["lane"],
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
)
BATCH_TOKENS = Histogram(
    "ragd_embed_batch_tokens",
    "Tokens in one forward pass.",
    ["lane"],
    buckets=(16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192),
)


class _Stats(Protocol):
    requests: int
    inputs: int
    tokens: int
    batches: int
    rejected: int
    busy_seconds: float


class _Lane(Protocol):
    @property
    def stats(self) -> _Stats: ...
    @property
    def queued_inputs(self) -> int: ...
    @property
    def queued_tokens(self) -> int: ...


_COUNTERS = (
    ("ragd_embed_requests", "requests", "Embed calls taken into the queue."),
    ("ragd_embed_inputs", "inputs", "Texts embedded."),
    ("ragd_embed_tokens", "tokens", "Tokens embedded (special tokens included)."),
    ("ragd_embed_passes", "batches", "Forward passes run."),
    ("ragd_embed_rejected", "rejected", "Embed calls refused: the queue was full."),
    (
        "ragd_embed_busy_seconds",
        "busy_seconds",
        "Time spent in forward passes (summed over contexts running side by side).",
    ),
)


class LaneCollector(Collector):
    def __init__(self, lanes: Mapping[str, _Lane]) -> None:
        self._lanes = dict(lanes)

    def collect(self) -> Iterator[Metric]:
        for name, attribute, documentation in _COUNTERS:
            family = CounterMetricFamily(name, documentation, labels=["lane"])
            for lane, batcher in self._lanes.items():
                family.add_metric([lane], getattr(batcher.stats, attribute))
            yield family
        for name, documentation, read in (
            ("ragd_embed_queue_tokens", "Tokens waiting for a pass.", "queued_tokens"),
            ("ragd_embed_queue_inputs", "Texts waiting for a pass.", "queued_inputs"),
        ):
            gauge = GaugeMetricFamily(name, documentation, labels=["lane"])
            for lane, batcher in self._lanes.items():
                gauge.add_metric([lane], getattr(batcher, read))
            yield gauge


def watch(lanes: Mapping[str, _Lane]) -> None:
    """Registers the lanes' counters (once per process: the metrics port is one)."""
    REGISTRY.register(LaneCollector(lanes))
