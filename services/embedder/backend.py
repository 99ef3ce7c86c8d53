"""What the servicer needs of an embedding model, whichever backend serves it: the local
GGUF (model.py) or an OpenAI-compatible endpoint (remote.py). No llama_cpp here."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from services.common.model_info import ModelInfo
from services.embedder.errors import EmptyInput, InputTooLong


@dataclass(frozen=True)
class Prepared:
    # Token ids per input, truncated when allowed, [CLS] and [SEP] included.
    inputs: list[list[int]]
    truncated: list[bool]


class Backend(Protocol):
    info: ModelInfo

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]: ...

    def prepare(self, texts: Sequence[str], truncate: bool = False) -> Prepared: ...


def prepare_inputs(
    texts: Sequence[str],
    truncate: bool,
    limit: int,
    tokenize: Callable[[int, str], list[int]],
    cut: Callable[[list[int], int], list[int]],
) -> Prepared:
    """The one truncation policy: EmptyInput for no texts or an empty one; an input over
    `limit` tokens is InputTooLong unless `truncate`, then `cut` to `limit` tokens."""
    if not texts:
        raise EmptyInput()
    for index, text in enumerate(texts):
        if text == "":
            raise EmptyInput(index)
    inputs: list[list[int]] = []
    truncated: list[bool] = []
    for index, text in enumerate(texts):
        ids = tokenize(index, text)
        too_long = len(ids) > limit
        if too_long:
            if not truncate:
                raise InputTooLong(index, len(ids), limit)
            ids = cut(ids, limit)
        inputs.append(ids)
        truncated.append(too_long)
    return Prepared(inputs, truncated)
