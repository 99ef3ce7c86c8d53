"""The Embedder gRPC servicer: decodes requests, calls the model, encodes replies."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import grpc

from services.common.vectors import to_bytes
from services.embedder.errors import EmbedderError, InvalidInput
from services.embedder.model import EmbeddingModel
from services.pb import embedder_pb2 as pb
from services.pb import embedder_pb2_grpc

log = logging.getLogger(__name__)

T = TypeVar("T")


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


class EmbedderServicer(embedder_pb2_grpc.EmbedderServicer):
    def __init__(
        self, model: EmbeddingModel, executor: ThreadPoolExecutor, *, truncate_by_default: bool
    ) -> None:
        """`executor` must have a single worker: llama.cpp contexts are not thread-safe (and
        the model uses every core anyway), so model calls run one at a time, off the loop."""
        self._model = model
        self._executor = executor
        self._truncate_by_default = truncate_by_default

    async def _run(self, context: grpc.aio.ServicerContext, work: Callable[[], T]) -> T:
        """Runs `work` on the model thread; domain errors become INVALID_ARGUMENT."""
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, work)
        except EmbedderError as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        except Exception:
            log.exception("embedder call failed")
            await context.abort(grpc.StatusCode.INTERNAL, "internal error in the embedder")
        raise AssertionError("context.abort() returned")

    async def Embed(
        self, request: pb.EmbedRequest, context: grpc.aio.ServicerContext
    ) -> pb.EmbedResponse:
        if request.truncate == pb.TRUNCATE_POLICY_UNSPECIFIED:
            truncate = self._truncate_by_default
        else:
            truncate = request.truncate == pb.TRUNCATE_POLICY_TRUNCATE
        result = await self._run(
            context, lambda: self._model.embed(decode_texts(request.texts), truncate)
        )
        return pb.EmbedResponse(
            dimensions=self._model.info.dimensions,
            vectors=to_bytes(result.vectors),
            token_counts=result.token_counts,
            truncated=result.truncated,
            model=self._model.info.name,
        )

    async def Tokenize(
        self, request: pb.TokenizeRequest, context: grpc.aio.ServicerContext
    ) -> pb.TokenizeResponse:
        token_lists = await self._run(
            context, lambda: self._model.tokenize(decode_texts(request.texts))
        )
        return pb.TokenizeResponse(
            results=[
                pb.TokenList(count=len(ids), ids=ids if request.return_ids else [])
                for ids in token_lists
            ]
        )

    async def Info(
        self, request: pb.InfoRequest, context: grpc.aio.ServicerContext
    ) -> pb.InfoResponse:
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
            max_batch_tokens=info.max_batch_tokens,
            max_batch_inputs=info.max_batch_inputs,
        )
