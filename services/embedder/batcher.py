"""Dynamic batching: concurrent Embed requests share forward passes.

No gRPC here. A request is queued as its tokenized inputs; one worker task fills each pass with
inputs from every waiting request in turn (so a short request is not stuck behind a long one)
up to the pass limits, which the caller sets to the model's micro-batch and which are never
exceeded. The forward pass itself runs elsewhere (the model's thread): the worker only awaits
it, so the event loop keeps accepting requests and fills the next pass meanwhile.

A pass starts when it is full, or `max_wait` after the oldest waiting input arrived or the
model became free, whichever is later. "Full" includes "as many requests as were in flight when
the last pass ended": clients that send their next request on each answer come back within
that wait, so they keep sharing passes instead of splitting into alternating halves, and a
lone client's request starts at once instead of waiting for company that will not come. It
also includes "an eighth of the pass's tokens": only short work waits for company.

The queue is bounded in tokens (the work it represents): a request that would take it past the
bound is refused at once with QueueFull, unless the queue is empty, so that a request of any
size can make progress.

With several forwards (model contexts of one thread each: server.py), passes run side by
side, each on a free one; the worker fills the next pass while the others run.

A `priority` request (a search's query) goes ahead of every other waiting request and starts
the next pass without waiting for company. It still waits for a pass already running; the
embedder's interactive lane (server.py) avoids even that by running such requests on a model
context of their own.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import numpy as np

from services.common.vectors import FloatMatrix
from services.embedder import metrics

log = logging.getLogger(__name__)

# Runs one pass: unit vectors for sequences that fit the pass limits, in order.
Forward = Callable[[list[Sequence[int]]], Awaitable[FloatMatrix]]


class QueueFull(Exception):
    """Too much work is waiting: the request was refused before any was done for it."""

    def __init__(self, queued_tokens: int, limit: int) -> None:
        super().__init__(
            f"the embedder is overloaded ({queued_tokens} tokens queued, limit {limit}); "
            "retry shortly"
        )
        self.queued_tokens = queued_tokens
        self.limit = limit


# A pass of at least 1/_ALONE_FRACTION of the token limit starts without waiting for
# company. Below that a pass costs about the same whatever it holds (thread start-up and the
# graph's fixed work dominate), so waiting max_wait for other short requests pays; above it
# the wait is idle time: a bulk client (an ingest worker) comes back only after writing its
# file, and waiting for it cost ~20% of ingest throughput (BENCHMARKS.md, quality).
_ALONE_FRACTION = 8


@dataclass(frozen=True)
class BatchLimits:
    # One forward pass. Must be within the model's micro-batch.
    max_tokens: int
    max_inputs: int
    # Longest time, seconds, the oldest waiting input waits for a fuller pass.
    max_wait: float = 0.010
    # Waiting tokens beyond which requests are refused (see the module docstring).
    max_queued_tokens: int = 65536


@dataclass
class BatcherStats:
    requests: int = 0
    inputs: int = 0
    tokens: int = 0
    batches: int = 0
    rejected: int = 0
    # Summed over the passes, which may run side by side.
    busy_seconds: float = 0.0


class _Job:
    """One request: its inputs, those not yet in a pass, and the vectors gathered so far."""

    def __init__(
        self,
        inputs: Sequence[Sequence[int]],
        dimensions: int,
        loop: asyncio.AbstractEventLoop,
        priority: bool = False,
    ) -> None:
        self.inputs = inputs
        self.priority = priority
        self.lengths = [len(ids) for ids in inputs]
        # Longest first, so a pass takes the longest input that still fits: passes pack
        # tightly and a request's inputs of similar length share one.
        self.waiting = sorted(range(len(inputs)), key=lambda i: -self.lengths[i])
        self.vectors: FloatMatrix = np.empty((len(inputs), dimensions), dtype=np.float32)
        self.remaining = len(inputs)
        self.future: asyncio.Future[FloatMatrix] = loop.create_future()
        self.arrived = loop.time()

    def take(self, budget: int) -> int | None:
        """Removes and returns the longest waiting input of at most `budget` tokens."""
        position = bisect.bisect_left(self.waiting, -budget, key=lambda i: -self.lengths[i])
        if position == len(self.waiting):
            return None
        return self.waiting.pop(position)

    def waiting_tokens(self) -> int:
        return sum(self.lengths[i] for i in self.waiting)


class Batcher:
    """Coalesces concurrent `embed` calls into passes of `forward`. Use from one event loop."""

    def __init__(
        self,
        forward: Forward | Sequence[Forward],
        limits: BatchLimits,
        dimensions: int,
        lane: str = "bulk",
    ) -> None:
        if limits.max_tokens < 1 or limits.max_inputs < 1:
            raise ValueError("a pass must hold at least one input of one token")
        self.limits = limits
        self.lane = lane
        self._pass_seconds = metrics.PASS_DURATION.labels(lane)
        self._pass_inputs = metrics.BATCH_SIZE.labels(lane)
        self._pass_tokens = metrics.BATCH_TOKENS.labels(lane)
        self.stats = BatcherStats()
        # The forwards no pass is running on.
        self._free = [forward] if callable(forward) else list(forward)
        if not self._free:
            raise ValueError("a batcher needs at least one forward")
        self._dimensions = dimensions
        # Requests with inputs still waiting, oldest first.
        self._jobs: list[_Job] = []
        self._queued_inputs = 0
        self._queued_tokens = 0
        # Requests in flight (queued or in the pass) when the last pass ended.
        self._expected_requests = 1
        self._free_since = 0.0
        # The passes running, with their inputs.
        self._in_pass: dict[asyncio.Task[None], list[tuple[_Job, int]]] = {}
        # Set by an arrival and by a pass's end: the worker's reasons to look again.
        self._arrival = asyncio.Event()
        self._worker: asyncio.Task[None] | None = None

    @property
    def queued_inputs(self) -> int:
        return self._queued_inputs

    @property
    def queued_tokens(self) -> int:
        return self._queued_tokens

    def start(self) -> None:
        if self._worker is None:
            self._worker = asyncio.create_task(self._run(), name="embedder-batcher")

    async def close(self) -> None:
        """Stops the worker and its passes; requests still waiting fail."""
        in_pass = [job for batch in self._in_pass.values() for job, _ in batch]
        tasks = [*self._in_pass, *([self._worker] if self._worker is not None else [])]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._worker = None
        self._in_pass.clear()
        for job in [*self._jobs, *in_pass]:
            self._fail(job, RuntimeError("the embedder is shutting down"))

    async def embed(self, inputs: Sequence[Sequence[int]], priority: bool = False) -> FloatMatrix:
        """Unit vectors for tokenized inputs, in order. Raises QueueFull when overloaded."""
        if not inputs:
            return np.empty((0, self._dimensions), dtype=np.float32)
        for index, ids in enumerate(inputs):
            if not 0 < len(ids) <= self.limits.max_tokens:
                raise ValueError(
                    f"input {index} has {len(ids)} tokens; a pass holds 1 to "
                    f"{self.limits.max_tokens}"
                )
        tokens = sum(len(ids) for ids in inputs)
        if self._queued_tokens and self._queued_tokens + tokens > self.limits.max_queued_tokens:
            self.stats.rejected += 1
            raise QueueFull(self._queued_tokens, self.limits.max_queued_tokens)
        job = _Job(inputs, self._dimensions, asyncio.get_running_loop(), priority)
        if priority:
            # Behind the other priority requests, ahead of everything else.
            position = sum(1 for waiting in self._jobs if waiting.priority)
            self._jobs.insert(position, job)
        else:
            self._jobs.append(job)
        self._queued_inputs += len(inputs)
        self._queued_tokens += tokens
        self.stats.requests += 1
        self._arrival.set()
        try:
            return await job.future
        except asyncio.CancelledError:
            # The caller gave up (deadline, disconnect): its waiting inputs leave the queue.
            self._drop(job)
            raise

    def _full(self) -> bool:
        return (
            # Company would wait for nothing: another forward is free to take it.
            len(self._free) > 1
            or self._queued_inputs >= self.limits.max_inputs
            or self._queued_tokens * _ALONE_FRACTION >= self.limits.max_tokens
            or len(self._jobs) >= self._expected_requests
            or self._jobs[0].priority
        )

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._jobs or not self._free:
                self._arrival.clear()
                await self._arrival.wait()
                continue
            while self._jobs and not self._full():
                start = max(self._jobs[0].arrived, self._free_since)
                delay = start + self.limits.max_wait - loop.time()
                if delay <= 0:
                    break
                self._arrival.clear()
                try:
                    async with asyncio.timeout(delay):
                        await self._arrival.wait()
                except TimeoutError:
                    break
            batch = self._fill()
            if batch:
                forward = self._free.pop()
                task = asyncio.create_task(self._run_pass(batch, forward))
                self._in_pass[task] = batch

    def _passed(self, task: asyncio.Task[None], forward: Forward) -> None:
        """A pass ended: its forward is free, and the next pass may wait for company."""
        batch = self._in_pass.pop(task, [])
        self._free.append(forward)
        in_flight = {id(job) for job, _ in batch}
        in_flight |= {id(job) for other in self._in_pass.values() for job, _ in other}
        in_flight |= {id(job) for job in self._jobs}
        self._expected_requests = len(in_flight) or 1
        self._free_since = asyncio.get_running_loop().time()
        self._arrival.set()

    def _fill(self) -> list[tuple[_Job, int]]:
        """Takes the next pass's inputs: one per waiting request in turn, while they fit.

        While priority requests wait, a pass holds only theirs: short, so they are answered
        after one short pass rather than one filled with bulk inputs. With several forwards
        free, a pass takes its share of the waiting tokens and leaves the rest to the next,
        which runs beside it."""
        share = -(-self._queued_tokens // len(self._free))
        batch = self._take(min(self.limits.max_tokens, share)) or self._take(self.limits.max_tokens)
        tokens = sum(job.lengths[index] for job, index in batch)
        self._jobs = [job for job in self._jobs if job.waiting]
        self._queued_inputs -= len(batch)
        self._queued_tokens -= tokens
        return batch

    def _take(self, budget: int) -> list[tuple[_Job, int]]:
        batch: list[tuple[_Job, int]] = []
        tokens = 0
        progressed = True
        candidates = [job for job in self._jobs if job.priority] or self._jobs
        while progressed and len(batch) < self.limits.max_inputs:
            progressed = False
            for job in candidates:
                if len(batch) >= self.limits.max_inputs:
                    break
                index = job.take(budget - tokens)
                if index is not None:
                    batch.append((job, index))
                    tokens += job.lengths[index]
                    progressed = True
        return batch

    async def _run_pass(self, batch: list[tuple[_Job, int]], forward: Forward) -> None:
        task = asyncio.current_task()
        assert task is not None
        started = time.perf_counter()
        try:
            vectors = await forward([job.inputs[index] for job, index in batch])
            if vectors.shape != (len(batch), self._dimensions):
                raise RuntimeError(f"a pass returned vectors of shape {vectors.shape}")
            self._deliver(batch, vectors)
        except Exception as error:
            # Whatever failed, the pass's requests get the error: none waits for ever.
            log.exception("forward pass of %d inputs failed", len(batch))
            for job in {id(job): job for job, _ in batch}.values():
                self._fail(job, error)
            return
        finally:
            elapsed = time.perf_counter() - started
            self.stats.busy_seconds += elapsed
            self._passed(task, forward)
        self.stats.batches += 1
        self._pass_seconds.observe(elapsed)
        self._pass_inputs.observe(len(batch))
        self._pass_tokens.observe(sum(job.lengths[index] for job, index in batch))

    def _deliver(self, batch: list[tuple[_Job, int]], vectors: FloatMatrix) -> None:
        for (job, index), vector in zip(batch, vectors, strict=True):
            self.stats.inputs += 1
            self.stats.tokens += job.lengths[index]
            if job.future.done():
                continue
            job.vectors[index] = vector
            job.remaining -= 1
            if job.remaining == 0:
                job.future.set_result(job.vectors)

    def _drop(self, job: _Job) -> None:
        if job in self._jobs:
            self._jobs.remove(job)
            self._queued_inputs -= len(job.waiting)
            self._queued_tokens -= job.waiting_tokens()
        job.waiting = []

    def _fail(self, job: _Job, error: Exception) -> None:
        self._drop(job)
        if not job.future.done():
            job.future.set_exception(error)
