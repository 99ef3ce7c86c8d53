"""The Embedder gRPC servicer: decodes requests, runs them through the batcher, encodes replies."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import grpc

from services.common import tracing
from services.common.grpc_server import Context
from services.common.vectors import FloatMatrix, to_bytes
from services.common.versions import process_versions
from services.embedder.backend import Backend
from services.embedder.batcher import Batcher, QueueFull
from services.embedder.errors import EmbedderError, InputTooLong, InvalidInput, UpstreamError
from services.pb import embedder_pb2 as pb
from services.pb import embedder_pb2_grpc

log = logging.getLogger(__name__)

T = TypeVar("T")

# Requests up to this many bytes are tokenized on the event loop (about 2 ms at most):
# cheaper than a thread hop. Larger ones go to the tokenizer thread.
_INLINE_BYTES = 64 * 1024
# Lets a client tell an over-long input from other invalid input without parsing the message.
REASON_KEY = "ragd-reason"
INPUT_TOO_LONG = "input-too-long"
UPSTREAM = "upstream"
INPUT_KEY = "ragd-input"


def decode_texts(texts: Sequence[bytes]) -> list[str]:
    """UTF-8 bytes to str, naming the first input that is not valid UTF-8."""
    decoded: list[str] = []
    for index, data in enumerate(texts):
        try:
            decoded.append(data.decode("utf-8"))
        except UnicodeDecodeError as error:
            raise InvalidInput(
                index,
                f"is not valid UTF-8 (byte 0x{data[error.start]:02x} at offset {error.start})",
            ) from None
    return decoded


async def abort_upstream(context: Context, error: UpstreamError) -> None:
    """A transient upstream failure is what a dead replica gives (UNAVAILABLE: retried,
    waited out by ingest, a lexical fallback for search); a permanent one is the upstream's
    fault, not the caller's, and says so (reason upstream: the gateway's 502)."""
    if error.transient:
        log.warning("%s", error)
        await context.abort(grpc.StatusCode.UNAVAILABLE, str(error))
    log.error("%s", error)
    await context.abort(
        grpc.StatusCode.INTERNAL, str(error), trailing_metadata=((REASON_KEY, UPSTREAM),)
    )


class EmbedderServicer(embedder_pb2_grpc.EmbedderServicer):
    def __init__(
        self,
        model: Backend,
        batcher: Batcher,
        tokenizer: ThreadPoolExecutor,
        *,
        truncate_by_default: bool,
        replica_id: str,
        interactive: Batcher | None = None,
        interactive_tokens: int = 0,
    ) -> None:
        """`batcher` runs the forward passes; `tokenizer` tokenizes large requests off the loop
        (tokenizing only reads the vocabulary, so it can overlap a forward pass).
        `interactive`, on a model context of its own, takes PRIORITY_INTERACTIVE requests of up
        to `interactive_tokens` tokens."""
        self._model = model
        self._batcher = batcher
        self._interactive = interactive
        self._interactive_tokens = interactive_tokens
        self._tokenizer = tokenizer
        self._truncate_by_default = truncate_by_default
        self._replica_id = replica_id
        self._started = time.monotonic()
        self._tokenize_requests = 0

    async def _off_loop(self, texts: Sequence[bytes], work: Callable[[], T]) -> T:
        # An upstream model may tokenize over HTTP: never on the loop.
        inline = not getattr(self._model, "blocking_tokenizer", False)
        if inline and sum(len(text) for text in texts) <= _INLINE_BYTES:
            return work()
        return await asyncio.get_running_loop().run_in_executor(self._tokenizer, work)

    async def Embed(self, request: pb.EmbedRequest, context: Context) -> pb.EmbedResponse:
        if request.truncate == pb.TRUNCATE_POLICY_UNSPECIFIED:
            truncate = self._truncate_by_default
        else:
            truncate = request.truncate == pb.TRUNCATE_POLICY_TRUNCATE
        try:
            prepared = await self._off_loop(
                request.texts,
                lambda: self._model.prepare(decode_texts(request.texts), truncate),
            )
            vectors = await self._lane(request.priority, prepared.inputs)
        except InputTooLong as error:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                str(error),
                trailing_metadata=(
                    (REASON_KEY, INPUT_TOO_LONG),
                    # The numbers, for clients that word their own message.
                    (INPUT_KEY, f"{error.index} {error.tokens} {error.limit}"),
                ),
            )
        except EmbedderError as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        except QueueFull as error:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(error))
        except UpstreamError as error:
            await abort_upstream(context, error)
        except Exception:
            log.exception("Embed failed")
            await context.abort(grpc.StatusCode.INTERNAL, "internal error in the embedder")
        token_counts = [len(ids) for ids in prepared.inputs]
        tracing.annotate(
            {
                "gen_ai.operation.name": "embeddings",
                "gen_ai.request.model": self._model.info.name,
                "gen_ai.usage.input_tokens": sum(token_counts),
                "ragd.embed.inputs": len(token_counts),
            }
        )
        return pb.EmbedResponse(
            dimensions=self._model.info.dimensions,
            vectors=to_bytes(vectors),
            token_counts=token_counts,
            truncated=prepared.truncated,
            model=self._model.info.name,
        )

    async def _lane(self, priority: pb.Priority.ValueType, inputs: list[list[int]]) -> FloatMatrix:
        if priority != pb.PRIORITY_INTERACTIVE:
            return await self._batcher.embed(inputs)
        tokens = sum(len(ids) for ids in inputs)
        if self._interactive is not None and tokens <= self._interactive_tokens:
            return await self._interactive.embed(inputs, priority=True)
        return await self._batcher.embed(inputs, priority=True)

    async def Tokenize(self, request: pb.TokenizeRequest, context: Context) -> pb.TokenizeResponse:
        self._tokenize_requests += 1
        try:
            token_lists = await self._off_loop(
                request.texts, lambda: self._model.tokenize(decode_texts(request.texts))
            )
        except EmbedderError as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        except UpstreamError as error:
            await abort_upstream(context, error)
        except Exception:
            log.exception("Tokenize failed")
            await context.abort(grpc.StatusCode.INTERNAL, "internal error in the embedder")
        return pb.TokenizeResponse(
            results=[
                pb.TokenList(count=len(ids), ids=ids if request.return_ids else [])
                for ids in token_lists
            ]
        )

    async def Info(self, request: pb.InfoRequest, context: Context) -> pb.InfoResponse:
        info = self._model.info
        return pb.InfoResponse(
            model=info.name,
            dimensions=info.dimensions,
            max_input_tokens=info.max_input_tokens,
            pooling=info.pooling,
            normalized=info.normalized,
            model_digest=info.digest,
            default_truncate=(
                pb.TRUNCATE_POLICY_TRUNCATE
                if self._truncate_by_default
                else pb.TRUNCATE_POLICY_REJECT
            ),
            max_batch_tokens=self._batcher.limits.max_tokens,
            max_batch_inputs=self._batcher.limits.max_inputs,
            replica_id=self._replica_id,
            max_queued_tokens=self._batcher.limits.max_queued_tokens,
            special_tokens=info.special_tokens,
            tokenizer=info.tokenizer,
            backend=info.backend,
            versions=process_versions() | info.versions,
            model_source=info.source,
        )

    async def Stats(self, request: pb.StatsRequest, context: Context) -> pb.StatsResponse:
        stats = self._batcher.stats
        fast = self._interactive.stats if self._interactive is not None else None
        return pb.StatsResponse(
            replica_id=self._replica_id,
            requests=stats.requests,
            inputs=stats.inputs,
            tokens=stats.tokens,
            batches=stats.batches,
            rejected=stats.rejected,
            queued_inputs=self._batcher.queued_inputs,
            queued_tokens=self._batcher.queued_tokens,
            busy_seconds=stats.busy_seconds,
            uptime_seconds=time.monotonic() - self._started,
            tokenize_requests=self._tokenize_requests,
            interactive_requests=fast.requests if fast is not None else 0,
            interactive_busy_seconds=fast.busy_seconds if fast is not None else 0.0,
        )
