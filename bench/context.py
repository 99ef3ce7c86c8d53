"""What the scenarios share in one run: settings, the corpus, the in-process model, results."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import profile
from bench.config import BenchConfig
from bench.corpus import Corpus
from bench.processes import MODEL_PATH
from bench.stats import Row
from services.embedder.config import EmbedderConfig, thread_shares
from services.embedder.model import EmbeddingModel


@dataclass
class Context:
    config: BenchConfig
    run_dir: Path
    corpus: Corpus
    rows: list[Row] = field(default_factory=list)
    # Per-scenario raw figures for the JSON file.
    details: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Cold starts and memory seen by any scenario, reported by the footprint scenario.
    cold_starts: list[dict[str, float]] = field(default_factory=list)
    _model: EmbeddingModel | None = None
    _contexts: list[EmbeddingModel] = field(default_factory=list)
    _started: float = field(default_factory=time.monotonic)

    def log(self, message: str) -> None:
        print(f"[{time.monotonic() - self._started:6.1f}s] {message}", file=sys.stderr, flush=True)

    def model(self) -> EmbeddingModel:
        """The embedder's own model class, in this process, at the same thread budget."""
        if self._model is None:
            self._model = EmbeddingModel(MODEL_PATH, threads=self.config.threads)
        return self._model

    def contexts(self) -> list[EmbeddingModel]:
        """The embedder's own arrangement in this process: its default number of model
        contexts (EmbedderConfig.contexts), sharing the same thread budget."""
        if not self._contexts:
            count = min(EmbedderConfig.contexts, self.config.threads)
            self._contexts = [
                EmbeddingModel(MODEL_PATH, threads=threads)
                for threads in thread_shares(self.config.threads, count)
            ]
        return self._contexts

    def close(self) -> None:
        if self._model is not None:
            self._model.close()
            self._model = None
        for model in self._contexts:
            model.close()
        self._contexts = []

    def add(self, row: Row) -> None:
        self.rows.append(row)

    def detail(self, scenario: str) -> dict[str, Any]:
        return self.details.setdefault(scenario, {})

    def profiling(self, scenario: str, pids: Mapping[str, int]) -> AbstractContextManager[None]:
        if scenario not in self.config.profile:
            return nullcontext()
        self.log(f"profiling {scenario} with py-spy: {dict(pids)}")
        return profile.recording(pids, self.run_dir / f"profile-{scenario}")


@contextmanager
def timed(ctx: Context, what: str) -> Iterator[None]:
    began = time.monotonic()
    ctx.log(f"{what} ...")
    yield
    ctx.log(f"{what}: done in {time.monotonic() - began:.1f}s")
