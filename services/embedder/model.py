"""The embedding model: one GGUF file loaded once into llama.cpp, texts in, unit vectors out.

No gRPC here. Inputs are validated and tokenized first, then packed into forward passes that
never exceed the context's micro-batch: for a non-causal (BERT) model llama.cpp aborts the
whole process on a larger one, so that limit is enforced here and not left to llama.cpp.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

# ggml's OpenMP threads meet at each of a forward pass's hundreds of barriers. By default
# libgomp spins 300k rounds there and between passes, holding a core that the store, the
# gateway or another replica needs (one-text requests ran ~10x slower on a contended host);
# PASSIVE alone puts a thread to sleep at every barrier, which made a 2-thread query pass 4x
# slower (9.4 vs 2.2 ms) and batches ~10% slower. PASSIVE with 10,000 rounds of spinning
# first: barriers are crossed awake, and an idle embedder uses no CPU (0.000 s over 2 s).
# Fewer rounds (1,000) cost a query that finds the embedder idle, as most searches do: through
# gRPC, after 30 ms without work, 19-22 ms against 14-15 ms at 10,000, with the same CPU (the
# cores wake slowly and the first barriers are crossed asleep); beside two busy processes a
# query took 14-18 ms at p50 against 9 ms. 30,000 and 100,000 were faster still when idle but
# had tails of 65-107 ms at p90 beside the busy processes (BENCHMARKS.md, issue 33).
# libgomp reads these when it loads, i.e. at the llama_cpp import below; an operator's own
# settings win.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("GOMP_SPINCOUNT", "10000")

import llama_cpp
import numpy as np

from services.common.model_info import ModelInfo
from services.common.vectors import FloatMatrix
from services.embedder.backend import Prepared, prepare_inputs
from services.embedder.errors import (
    InvalidInput,
    ModelLoadError,
)

log = logging.getLogger(__name__)

# A sentence embedding needs a pooled vector; NONE (per token) and RANK (reranker) are refused.
_POOLING_NAMES = {
    llama_cpp.LLAMA_POOLING_TYPE_MEAN: "mean",
    llama_cpp.LLAMA_POOLING_TYPE_CLS: "cls",
    llama_cpp.LLAMA_POOLING_TYPE_LAST: "last",
}
POOLINGS = {name: kind for kind, name in _POOLING_NAMES.items()}
# Written by ragd-model (services/embedder/convert.py): the reference's truncation length.
# Where the weights came from, as ragd-model and llama.cpp's converters record it.
_KEY_SOURCE_URL = "general.source.url"
_KEY_MAX_INPUT_TOKENS = "ragd.max_input_tokens"


@dataclass(frozen=True)
class EmbedResult:
    # (len(texts), dimensions) float32, each row L2-normalized, in input order.
    vectors: FloatMatrix
    # Tokens embedded per input after truncation, special tokens included.
    token_counts: list[int]
    truncated: list[bool]


def pack(lengths: Sequence[int], max_tokens: int, max_inputs: int) -> list[list[int]]:
    """Groups input indices into forward passes of at most max_tokens tokens and max_inputs inputs.

    Longest first, so inputs of similar length share a pass. Every length must be at most
    max_tokens.
    """
    batches: list[list[int]] = []
    tokens = 0
    for index in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        if not batches or tokens + lengths[index] > max_tokens or len(batches[-1]) >= max_inputs:
            batches.append([])
            tokens = 0
        batches[-1].append(index)
        tokens += lengths[index]
    return batches


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        for block in iter(lambda: source.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class EmbeddingModel:
    """A loaded GGUF embedding model. Not thread-safe: call it from one thread at a time."""

    def __init__(
        self,
        path: Path,
        *,
        threads: int = 2,
        name: str | None = None,
        max_batch_tokens: int = 512,
        max_batch_inputs: int = 32,
        pooling: str | None = None,
        max_input_tokens: int | None = None,
    ) -> None:
        """`pooling` ("mean", "cls", "last") overrides the GGUF's: a causal language model
        (SmolLM2, Qwen) has none of its own and embeds with mean pooling. `max_input_tokens`
        caps the model's context, which for such models is far beyond a pass (8192)."""
        if not path.is_file():
            raise ModelLoadError(f"model file {path} does not exist")
        if pooling is not None and pooling not in POOLINGS:
            raise ModelLoadError(f"pooling must be one of {sorted(POOLINGS)}, not {pooling!r}")
        try:
            self._llm = llama_cpp.Llama(
                model_path=str(path),
                embedding=True,
                # Texts are embedded one forward pass at a time, so the context, the batch
                # and the micro-batch are all one size.
                n_ctx=max_batch_tokens,
                n_batch=max_batch_tokens,
                n_ubatch=max_batch_tokens,
                n_threads=threads,
                n_threads_batch=threads,
                # Same vectors, 1.2-1.6x faster on 160-token inputs (measured on 2 cores).
                flash_attn=True,
                verbose=False,
                pooling_type=(
                    llama_cpp.LLAMA_POOLING_TYPE_UNSPECIFIED
                    if pooling is None
                    else POOLINGS[pooling]
                ),
            )
        except (ValueError, RuntimeError) as error:
            raise ModelLoadError(f"cannot load {path}: {error}") from None
        self._batch: llama_cpp.llama_batch | None = None
        try:
            self.info = self._describe(
                path, name, max_batch_tokens, max_batch_inputs, max_input_tokens
            )
            self._special_tail = self._tail()
            self._batch = llama_cpp.llama_batch_init(max_batch_tokens, 0, 1)
        except BaseException:
            self.close()
            raise

    def _describe(
        self,
        path: Path,
        name: str | None,
        max_batch_tokens: int,
        max_batch_inputs: int,
        max_input_cap: int | None,
    ) -> ModelInfo:
        metadata = self._llm.metadata
        # Annotated as str in llama-cpp-python, but llama.cpp returns the enum's int.
        pooling_type = int(self._llm.pooling_type())
        pooling = _POOLING_NAMES.get(pooling_type)
        if pooling is None:
            raise ModelLoadError(
                f"{path} has no sentence pooling (llama.cpp pooling type {pooling_type}); "
                "it is not a sentence-embedding model"
            )
        trained = llama_cpp.llama_model_n_ctx_train(self._llm.model)
        max_input_tokens = min(int(metadata.get(_KEY_MAX_INPUT_TOKENS, trained)), trained)
        if max_input_cap is not None:
            max_input_tokens = min(max_input_tokens, max_input_cap)
        if max_batch_tokens < max_input_tokens:
            raise ModelLoadError(
                f"the batch size ({max_batch_tokens} tokens) must hold the longest input "
                f"({max_input_tokens} tokens); raise RAGD_EMBEDDER_BATCH_TOKENS"
            )
        # Each input is one llama.cpp sequence.
        max_inputs = min(max_batch_inputs, self._llm.context_params.n_seq_max)
        return ModelInfo(
            name=name or metadata.get("general.name") or path.stem,
            dimensions=self._llm.n_embd(),
            max_input_tokens=max_input_tokens,
            pooling=pooling,
            normalized=True,
            digest=file_digest(path),
            max_batch_tokens=max_batch_tokens,
            max_batch_inputs=max_inputs,
            # What tokenizing nothing yields is what every text gets added.
            special_tokens=len(self._llm.tokenize(b"", add_bos=True, special=False)),
            source=metadata.get(_KEY_SOURCE_URL) or path.name,
            versions={"llama_cpp_python": llama_cpp.__version__},
        )

    def _tail(self) -> int:
        """Special tokens after the text ([SEP] for BERT, none for most causal models)."""
        empty = self._llm.tokenize(b"", add_bos=True, special=False)
        text = self._llm.tokenize(b"x", add_bos=True, special=False)
        lead = 0
        while lead < len(empty) and lead < len(text) and empty[lead] == text[lead]:
            lead += 1
        return len(empty) - lead

    def close(self) -> None:
        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
        self._llm.close()

    def __enter__(self) -> EmbeddingModel:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text, untruncated, with the [CLS] and [SEP] the model adds.

        Counting is lenient: an empty string is two tokens and an empty list gives [].
        """
        return [self._tokenize(index, text) for index, text in enumerate(texts)]

    def _tokenize(self, index: int, text: str) -> list[int]:
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:
            # Only reachable from Python callers: a str with lone surrogates.
            raise InvalidInput(index, "is not valid UTF-8 (it contains a lone surrogate)") from None
        return self._llm.tokenize(data, add_bos=True, special=False)

    def prepare(self, texts: Sequence[str], truncate: bool = False) -> Prepared:
        """Validates and tokenizes `texts` for `forward`, applying the truncation policy.

        Raises EmptyInput for no texts or an empty string, InvalidInput for text that is not
        valid UTF-8, and InputTooLong for an input over max_input_tokens unless `truncate`,
        which keeps the first tokens and the final special tokens ([SEP]), as the reference
        sentence-transformers tokenizer does. Whitespace-only text is embedded, as
        [CLS] [SEP], like the reference does: it is not empty, only uninformative.

        Only reads the vocabulary, so it may run on another thread while `forward` runs.
        """
        tail = self._special_tail
        return prepare_inputs(
            texts,
            truncate,
            self.info.max_input_tokens,
            self._tokenize,
            lambda ids, limit: ids[: limit - tail] + ids[len(ids) - tail :],
        )

    def embed(self, texts: Sequence[str], truncate: bool = False) -> EmbedResult:
        """Unit vectors for `texts`, in order, in as few passes as the limits allow.

        Errors as for `prepare`. The server batches across requests instead (batcher.py).
        """
        prepared = self.prepare(texts, truncate)
        inputs = prepared.inputs
        vectors = np.empty((len(inputs), self.info.dimensions), dtype=np.float32)
        lengths = [len(ids) for ids in inputs]
        for group in pack(lengths, self.info.max_batch_tokens, self.info.max_batch_inputs):
            vectors[group] = self.forward([inputs[i] for i in group])
        return EmbedResult(vectors=vectors, token_counts=lengths, truncated=prepared.truncated)

    def forward(self, sequences: Sequence[Sequence[int]]) -> FloatMatrix:
        """Unit vectors for token sequences that fit one pass (RuntimeError if they do not)."""
        vectors = self._forward(sequences)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors /= np.maximum(norms, np.float32(1e-12))
        return vectors

    def _forward(self, sequences: Sequence[Sequence[int]]) -> FloatMatrix:
        """One llama.cpp pass over `sequences` (sequence i gets seq_id i); pooled, unnormalized."""
        batch = self._batch
        if batch is None:
            raise RuntimeError("the model is closed")
        total = sum(len(ids) for ids in sequences)
        # The guard that keeps llama.cpp from aborting the process (see the module docstring).
        if total > self.info.max_batch_tokens or len(sequences) > self.info.max_batch_inputs:
            raise RuntimeError(
                f"a pass of {len(sequences)} inputs and {total} tokens exceeds the micro-batch"
            )
        if not sequences or not all(sequences):
            raise RuntimeError("a pass needs at least one input and no input can be empty")
        position = 0
        for seq_id, ids in enumerate(sequences):
            for offset, token in enumerate(ids):
                batch.token[position] = token
                # pos is a flat int32 array; the binding annotates it as nested.
                batch.pos[position] = offset  # type: ignore[call-overload]
                batch.n_seq_id[position] = 1
                batch.seq_id[position][0] = seq_id
                # Pooling reads every token's output.
                batch.logits[position] = 1
                position += 1
        batch.n_tokens = total
        # Encoder-only models keep no memory between passes; others must start clean.
        memory = llama_cpp.llama_get_memory(self._llm.ctx)
        if memory is not None:
            llama_cpp.llama_memory_clear(memory, True)
        status = llama_cpp.llama_decode(self._llm.ctx, batch)
        if status != 0:
            raise RuntimeError(f"llama_decode returned {status}")
        out = np.empty((len(sequences), self.info.dimensions), dtype=np.float32)
        for seq_id in range(len(sequences)):
            pointer = llama_cpp.llama_get_embeddings_seq(self._llm.ctx, seq_id)
            if not pointer:
                raise RuntimeError(f"llama.cpp returned no embedding for sequence {seq_id}")
            out[seq_id] = np.ctypeslib.as_array(
                ctypes.cast(pointer, ctypes.POINTER(ctypes.c_float)), shape=(out.shape[1],)
            )
        return out
