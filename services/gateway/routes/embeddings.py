"""POST /v1/embeddings and GET /v1/models."""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, WithJsonSchema
from starlette.requests import Request
from starlette.responses import JSONResponse

from services.common import tracing
from services.common.model_info import ModelInfo
from services.common.vocabulary import MAX_EMBED_INPUTS, MAX_REQUEST_TOKENS
from services.gateway import objects
from services.gateway.audit import AUDIT_INFO
from services.gateway.auth import charge
from services.gateway.clients import EmbedderClient
from services.gateway.errors import InvalidRequest, NotFound, invalid
from services.gateway.models import embeddings_model
from services.gateway.operations import operation
from services.gateway.params import extensions, json_body
from services.gateway.requests import RequestModel, Text, fail, parse
from services.gateway.routes import services

_STARTED = int(time.time())


def _listed(value: Any) -> Any:
    """One input is a list of one; token ids are refused by name."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list):
        raise fail("invalid_type", "'input' must be a string or an array of strings")
    for item in items:
        if isinstance(item, int | list) and not isinstance(item, bool):
            raise fail(
                "unsupported_input",
                "token-id inputs are not supported: this server's model has its own "
                "tokenizer; send the text instead",
            )
    return items


def _no_empty(items: list[str]) -> list[str]:
    for index, item in enumerate(items):
        if not item:
            raise fail(
                "invalid_value", f"'input[{index}]' is an empty string; every input needs text"
            )
    return items


_TEXT = {"type": "string", "minLength": 1}


class EmbeddingRequest(RequestModel):
    input: Annotated[
        list[str],
        BeforeValidator(_listed),
        Field(min_length=1, max_length=MAX_EMBED_INPUTS),
        AfterValidator(_no_empty),
        WithJsonSchema(
            {
                "oneOf": [
                    _TEXT,
                    {
                        "type": "array",
                        "items": _TEXT,
                        "minItems": 1,
                        "maxItems": MAX_EMBED_INPUTS,
                    },
                ]
            }
        ),
    ]
    model: Text | None = None
    encoding_format: Literal["float", "base64"] = "float"
    # Checked against the model's own (it is not shortened).
    dimensions: int | None = None
    truncate: Annotated[
        bool, Field(description="ragd extension: embed the first tokens of over-long inputs")
    ] = False


# 2048 inputs of a few KiB each, JSON-escaped.
MAX_BODY_BYTES = 16 << 20


async def _check_total_tokens(
    embedder: EmbedderClient, texts: list[str], info: ModelInfo, truncate: bool
) -> None:
    """OpenAI's 300,000 tokens per request. A token covers at least one byte of UTF-8, so
    requests under that many bytes are counted only when they could exceed it."""
    bound = sum(len(text.encode("utf-8", "surrogatepass")) for text in texts)
    if bound + info.special_tokens * len(texts) <= MAX_REQUEST_TOKENS:
        return
    counts = await embedder.count_tokens(texts)
    if truncate:
        counts = [min(count, info.max_input_tokens) for count in counts]
    if (total := sum(counts)) > MAX_REQUEST_TOKENS:
        raise invalid(
            f"the inputs hold {total} tokens; a request may hold at most {MAX_REQUEST_TOKENS}",
            param="input",
            code="max_tokens_per_request",
        )


@operation("Create embeddings", "EmbeddingList", EmbeddingRequest)
async def embeddings(request: Request) -> JSONResponse:
    deps = services(request)
    asked = parse(
        EmbeddingRequest,
        extensions(await json_body(request, limit=MAX_BODY_BYTES), "truncate"),
    )
    texts, encoding, truncate = asked.input, asked.encoding_format, asked.truncate
    embedder, info = await embeddings_model(asked.model, deps.embedders)
    dimensions = asked.dimensions
    if dimensions is not None and dimensions != info.dimensions:
        raise invalid(
            f"'dimensions' must be {info.dimensions} for {info.name}: the model was not trained "
            "to be shortened, so ragd does not truncate its vectors",
            param="dimensions",
        )
    # Extension: over-long inputs are a 400 like OpenAI's unless the client allows truncation.
    await _check_total_tokens(embedder, texts, info, truncate)
    try:
        result = await embedder.embed(texts, truncate=truncate)
    except InvalidRequest as error:
        if error.code == "context_length_exceeded":
            error.message += ' ("truncate": true embeds its first tokens)'
        raise
    tokens = sum(result.token_counts)
    charge(request.scope, tokens=tokens)
    request.scope[AUDIT_INFO] = {
        "operation": "embeddings",
        "embedded_tokens": tokens,
        "result_count": len(texts),
        "detail": result.model or info.name,
    }
    tracing.annotate(
        {
            "gen_ai.operation.name": "embeddings",
            "gen_ai.request.model": info.name,
            "gen_ai.usage.input_tokens": tokens,
        }
    )
    return JSONResponse(
        objects.embedding_list(result, result.model or info.name, encoding, truncate)
    )


async def model_names(request: Request) -> list[str]:
    """The embedding models, then the chat models, each name once (aliases included)."""
    deps = services(request)
    names = await deps.embedders.names()
    if deps.chat is not None:
        names += deps.chat.settings.names
    unique: dict[str, str] = {}
    for name in names:
        unique.setdefault(name.lower(), name)
    return list(unique.values())


@operation("List the served models", "ModelList")
async def models(request: Request) -> JSONResponse:
    return JSONResponse(objects.model_list(await model_names(request), _STARTED))


@operation("Retrieve a served model", "Model")
async def model(request: Request) -> JSONResponse:
    """GET /v1/models/{model}: a listed name (any case), as OpenAI's Model object."""
    wanted = request.path_params["model"]
    for name in await model_names(request):
        if name.lower() == wanted.lower():
            return JSONResponse(objects.model(name, _STARTED))
    raise NotFound(
        f"the model '{wanted}' does not exist here (see GET /v1/models)",
        param="model",
        code="model_not_found",
    )
