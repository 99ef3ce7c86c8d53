"""An embedding model behind an OpenAI-compatible `/embeddings` endpoint (Ollama, llama.cpp's
server, llama-cpp-python's, Hugging Face TEI, vLLM, OpenAI, another ragd), served through the
same gRPC contract, batcher, queue limits, truncation policy, health and drain as a local GGUF.

No gRPC here. Inputs still need token counts, for the batcher's budgets, the truncation policy
and the gateway's chunking; they come from, in order of preference:
- the upstream's own tokenizer endpoint (llama.cpp's `/tokenize`, llama-cpp-python's
  `/extras/tokenize`), found at start-up;
- a `tokenizer.json` the operator gives (the `tokenizers` package);
- else a character budget of CHARS_PER_TOKEN characters per token, conservative for English
  and most European text (a token is 4 characters on average there), not for Chinese or Japanese.
Info says which one is in force. A truncated input is sent as the text of its first tokens.

Failures name the upstream and never carry its API key. Down, too slow, 429 and 5xx are
UpstreamError(transient=True), which the servicer turns into the status a dead replica gets
(ingest waits, search falls back to lexical); a refused key or a vector of the wrong width
are permanent.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import numpy as np

from services.common.model_info import ModelInfo
from services.common.vectors import FloatMatrix
from services.common.vocabulary import CHARS_PER_TOKEN
from services.embedder.backend import Prepared, prepare_inputs
from services.embedder.errors import ModelLoadError, UpstreamError

log = logging.getLogger(__name__)

# Where each kind of server tokenizes: path from the server root, request, reply's ids.
_TOKENIZE_ENDPOINTS = (
    ("/extras/tokenize", "input", "/extras/detokenize", "text"),  # llama-cpp-python
    ("/tokenize", "content", "/detokenize", "content"),  # llama.cpp's llama-server
)


@dataclass(frozen=True)
class UpstreamSettings:
    # Up to and including /v1, e.g. http://127.0.0.1:8080/v1.
    base_url: str
    model: str
    api_key: str | None = None
    # Expected width; 0: taken from the upstream's first answer at start-up.
    dimensions: int = 0
    # The model's context, in tokens: longer inputs are refused or truncated.
    max_input_tokens: int = 512
    # Inputs per upstream request.
    batch_inputs: int = 32
    timeout: float = 30.0
    tokenizer_path: Path | None = None


class Tokens(list[int]):
    """Token ids of one input (as the batcher counts them), with the text they stand for."""

    text: str


class UpstreamModel:
    """Same methods as EmbeddingModel, over HTTP. `tokenize` and `prepare` block (they may ask
    the upstream): the servicer runs them off the event loop. `embed_async` is the forward
    pass."""

    blocking_tokenizer = True

    def __init__(self, settings: UpstreamSettings) -> None:
        self.settings = settings
        headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
        timeout = httpx.Timeout(settings.timeout, connect=5.0)
        base = settings.base_url.rstrip("/")
        self._async = httpx.AsyncClient(base_url=base, headers=headers, timeout=timeout)
        self._sync = httpx.Client(headers=headers, timeout=timeout)
        self._root = base.removesuffix("/v1")
        self._endpoint: tuple[str, str, str, str] | None = None
        self._file_tokenizer: Any = None
        self.tokenizer = self._choose_tokenizer()
        dimensions = settings.dimensions or self._probe_width()
        self.info = ModelInfo(
            name=settings.model,
            dimensions=dimensions,
            max_input_tokens=settings.max_input_tokens,
            pooling="upstream",
            normalized=True,
            digest=hashlib.sha256(f"{base} {settings.model}".encode()).hexdigest(),
            max_batch_tokens=settings.max_input_tokens * settings.batch_inputs,
            max_batch_inputs=settings.batch_inputs,
            tokenizer=self.tokenizer,
            backend="openai",
            source=without_credentials(base),
        )

    def where(self) -> str:
        return f"the embedding upstream at {self.settings.base_url}"

    def close(self) -> None:
        self._sync.close()

    async def aclose(self) -> None:
        await self._async.aclose()
        self.close()

    # Tokens

    def _choose_tokenizer(self) -> str:
        if self.settings.tokenizer_path is not None:
            try:
                from tokenizers import Tokenizer
            except ImportError:
                raise ModelLoadError(
                    "RAGD_EMBEDDER_TOKENIZER needs the tokenizers package: "
                    "pip install 'ragd[tokenizer]'"
                ) from None
            try:
                self._file_tokenizer = Tokenizer.from_file(str(self.settings.tokenizer_path))
            except Exception as error:
                raise ModelLoadError(
                    f"cannot read the tokenizer {self.settings.tokenizer_path}: {error}"
                ) from None
            return "tokenizer.json"
        for endpoint in _TOKENIZE_ENDPOINTS:
            try:
                reply = self._sync.post(self._root + endpoint[0], json={endpoint[1]: "probe"})
            except httpx.HTTPError:
                continue
            if reply.status_code == 200 and isinstance(reply.json().get("tokens"), list):
                self._endpoint = endpoint
                return "upstream"
        return "characters"

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        return [self._tokens(text) for text in texts]

    def _tokens(self, text: str) -> Tokens:
        tokens = Tokens()
        if self._file_tokenizer is not None:
            tokens.extend(self._file_tokenizer.encode(text).ids)
        elif self._endpoint is not None:
            path, field, _, _ = self._endpoint
            tokens.extend(self._call("POST", self._root + path, {field: text})["tokens"])
        else:
            # Stand-in ids: only their number matters.
            tokens.extend(range(max(1, math.ceil(len(text) / CHARS_PER_TOKEN))))
        tokens.text = text
        return tokens

    def _cut(self, tokens: Tokens, limit: int) -> Tokens:
        """The input shortened to its first `limit` tokens, as text the upstream re-reads."""
        if self._file_tokenizer is not None:
            encoding = self._file_tokenizer.encode(tokens.text)
            ends = [end for _, end in encoding.offsets[:limit] if end > 0]
            text = tokens.text[: ends[-1]] if ends else tokens.text[: limit * CHARS_PER_TOKEN]
        elif self._endpoint is not None:
            _, _, path, field = self._endpoint
            # Without the first and last ids: the special tokens the upstream adds again.
            kept = list(tokens[1 : limit - 1])
            text = str(self._call("POST", self._root + path, {"tokens": kept})[field])
        else:
            text = tokens.text[: limit * CHARS_PER_TOKEN]
        cut = Tokens(tokens[:limit])
        cut.text = text
        return cut

    def prepare(self, texts: Sequence[str], truncate: bool = False) -> Prepared:
        return prepare_inputs(
            texts,
            truncate,
            self.info.max_input_tokens,
            lambda _, text: self._tokens(text),
            lambda tokens, limit: self._cut(tokens, limit),  # type: ignore[arg-type]
        )

    # Vectors

    async def embed_async(self, sequences: Sequence[Sequence[int]]) -> FloatMatrix:
        """Unit vectors of prepared inputs, one upstream request."""
        texts = [_text(sequence) for sequence in sequences]
        try:
            reply = await self._async.post(
                "/embeddings", json={"model": self.settings.model, "input": texts}
            )
        except httpx.HTTPError as error:
            raise self._unreachable(error) from None
        return self._vectors(reply, len(texts), self.info.dimensions)

    def _probe_width(self) -> int:
        try:
            reply = self._sync.post(
                self.settings.base_url.rstrip("/") + "/embeddings",
                json={"model": self.settings.model, "input": ["probe"]},
            )
        except httpx.HTTPError as error:
            raise ModelLoadError(str(self._unreachable(error))) from None
        try:
            return int(self._vectors(reply, 1, 0).shape[1])
        except UpstreamError as error:
            raise ModelLoadError(str(error)) from None

    def _vectors(self, reply: httpx.Response, count: int, dimensions: int) -> FloatMatrix:
        self._check(reply)
        try:
            data = sorted(reply.json()["data"], key=lambda item: item["index"])
            vectors = np.asarray([item["embedding"] for item in data], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as error:
            raise UpstreamError(
                f"{self.where()} sent an answer that is not an embeddings list ({error!r})",
                transient=False,
            ) from None
        if vectors.ndim != 2 or len(vectors) != count:
            raise UpstreamError(
                f"{self.where()} sent {len(vectors)} vectors for {count} inputs", transient=False
            )
        if dimensions and vectors.shape[1] != dimensions:
            raise UpstreamError(
                f"{self.where()} sent vectors of {vectors.shape[1]} dimensions for "
                f"{self.settings.model}, expected {dimensions} "
                "(RAGD_EMBEDDER_UPSTREAM_DIMENSIONS)",
                transient=False,
            )
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors /= np.maximum(norms, np.float32(1e-12))
        return vectors

    def _call(self, method: str, url: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            reply = self._sync.request(method, url, json=body)
        except httpx.HTTPError as error:
            raise self._unreachable(error) from None
        self._check(reply)
        result: dict[str, Any] = reply.json()
        return result

    def _unreachable(self, error: httpx.HTTPError) -> UpstreamError:
        if isinstance(error, httpx.TimeoutException):
            what = f"did not answer within {self.settings.timeout:g} s"
        else:
            what = f"cannot be reached ({type(error).__name__})"
        return UpstreamError(f"{self.where()} {what}", transient=True)

    def _check(self, reply: httpx.Response) -> None:
        status = reply.status_code
        if status == 200:
            return
        text = reply.text[:300]
        if status in (401, 403):
            raise UpstreamError(
                f"{self.where()} refused the embedder's credentials ({status}); check "
                "RAGD_EMBEDDER_UPSTREAM_API_KEY",
                transient=False,
            )
        if status == 429 or status >= 500:
            raise UpstreamError(f"{self.where()} answered {status}: {text}", transient=True)
        raise UpstreamError(f"{self.where()} refused the request ({status}): {text}", False)


def _text(sequence: Sequence[int]) -> str:
    text = getattr(sequence, "text", None)
    if not isinstance(text, str):
        raise TypeError("an upstream model embeds prepared inputs (Tokens), not bare ids")
    return text


def without_credentials(url: str) -> str:
    """The URL as /version may show it: any user:password@ dropped."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=host))
