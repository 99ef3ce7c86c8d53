"""The in-process embedding model against the reference implementation and its limits."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from services.embedder.errors import EmptyInput, InputTooLong, InvalidInput, ModelLoadError
from services.embedder.model import EmbeddingModel, pack
from tests.embedder_fixtures import MODEL_PATH

# "hello" is one token: n words plus [CLS] and [SEP] is n + 2 tokens.
AT_LIMIT = "hello " * 254
OVER_LIMIT = "hello " * 255


def test_info_describes_the_model(embedding_model: EmbeddingModel) -> None:
    info = embedding_model.info
    assert info.name == "all-MiniLM-L6-v2"
    assert info.dimensions == 384
    assert info.max_input_tokens == 256
    assert info.pooling == "mean"
    assert info.normalized is True
    assert info.digest == hashlib.sha256(MODEL_PATH.read_bytes()).hexdigest()
    assert info.max_batch_tokens >= info.max_input_tokens
    assert info.max_batch_inputs >= 1


def test_vectors_match_sentence_transformers(
    embedding_model: EmbeddingModel, reference: list[dict[str, Any]]
) -> None:
    result = embedding_model.embed([item["text"] for item in reference], truncate=True)
    assert result.vectors.shape == (len(reference), 384)
    assert result.vectors.dtype == np.float32
    for item, vector, count, truncated in zip(
        reference, result.vectors, result.token_counts, result.truncated, strict=True
    ):
        expected = np.array(item["vector"], dtype=np.float32)
        cosine = float(vector @ expected / np.linalg.norm(expected))
        assert cosine >= 0.999, f"{item['text'][:40]!r}: cosine {cosine:.5f}"
        assert count == item["embedded_tokens"]
        assert truncated == (item["tokens"] > item["embedded_tokens"])
    # The long reference text checks truncation parity at 256 tokens.
    assert any(result.truncated)


def test_tokens_match_the_reference_tokenizer(
    embedding_model: EmbeddingModel, reference: list[dict[str, Any]]
) -> None:
    ids = embedding_model.tokenize([item["text"] for item in reference])
    for item, tokens in zip(reference, ids, strict=True):
        assert len(tokens) == item["tokens"]
        kept = item["embedded_tokens"]
        assert tokens[: kept - 1] + tokens[-1:] == item["token_ids"]


def test_similar_sentences_are_closer(embedding_model: EmbeddingModel) -> None:
    cat, kitten, stocks = embedding_model.embed(
        ["a cat sits on the mat", "a kitten is on the rug", "stock markets fell sharply"]
    ).vectors
    assert float(cat @ kitten) > float(cat @ stocks) + 0.2


def test_vectors_have_unit_norm(embedding_model: EmbeddingModel) -> None:
    texts = [f"sentence number {i} about {'cats' if i % 2 else 'boats'}" for i in range(64)]
    vectors = embedding_model.embed(texts).vectors
    assert vectors.shape == (64, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_over_long_input_is_rejected_or_truncated(embedding_model: EmbeddingModel) -> None:
    assert embedding_model.embed([AT_LIMIT]).token_counts == [256]
    with pytest.raises(InputTooLong) as raised:
        embedding_model.embed(["short", OVER_LIMIT])
    assert (raised.value.index, raised.value.tokens, raised.value.limit) == (1, 257, 256)
    assert "input 1 has 257 tokens" in str(raised.value)
    assert "at most 256" in str(raised.value)

    result = embedding_model.embed(["short", OVER_LIMIT], truncate=True)
    assert result.token_counts == [3, 256]
    assert result.truncated == [False, True]
    # Truncation keeps the first 255 tokens and [SEP]: the same text as exactly 256 tokens.
    at_limit = embedding_model.embed([AT_LIMIT]).vectors[0]
    assert float(result.vectors[1] @ at_limit) > 0.99999


def test_empty_inputs_are_errors(embedding_model: EmbeddingModel) -> None:
    with pytest.raises(EmptyInput, match="no input texts"):
        embedding_model.embed([])
    with pytest.raises(EmptyInput, match="input 1 is an empty string") as raised:
        embedding_model.embed(["fine", ""])
    assert raised.value.index == 1
    # Counting is lenient: an empty string is [CLS] [SEP].
    assert [len(ids) for ids in embedding_model.tokenize(["", " "])] == [2, 2]


@pytest.mark.parametrize(
    "text",
    [
        "🎉🚀 emoji only",
        "東京タワーは高い",
        "e\u0301te\u0301 with combining accents",
        "NUL in\x00the middle",
        "   ",
        "\u200b\u200d zero-width",
        "مرحبا بالعالم",
        "tab\tand\nnewline\r\n",
        "\x07\x1b control characters",
        "\ufeffbyte order mark",
    ],
)
def test_unusual_text_gives_a_valid_vector(embedding_model: EmbeddingModel, text: str) -> None:
    result = embedding_model.embed([text])
    assert np.all(np.isfinite(result.vectors))
    assert abs(float(np.linalg.norm(result.vectors[0])) - 1.0) < 1e-5
    assert result.token_counts[0] >= 2


def test_accents_are_stripped_like_the_reference(embedding_model: EmbeddingModel) -> None:
    composed, decomposed, plain = embedding_model.tokenize(["café", "cafe\u0301", "cafe"])
    assert composed == decomposed == plain


def test_lone_surrogate_is_invalid(embedding_model: EmbeddingModel) -> None:
    with pytest.raises(InvalidInput, match="input 1 is not valid UTF-8"):
        embedding_model.embed(["ok", "bad \ud800 surrogate"])


def test_large_batch_keeps_order(embedding_model: EmbeddingModel) -> None:
    rng = random.Random(7)
    words = "river stone light bell valley bridge autumn quiet distant glitter".split()
    # Many more tokens and inputs than one forward pass holds, in mixed lengths.
    texts = [" ".join(rng.choices(words, k=rng.choice([3, 40, 120, 250]))) for _ in range(48)]
    lengths = [len(ids) for ids in embedding_model.tokenize(texts)]
    assert sum(lengths) > 4 * embedding_model.info.max_batch_tokens
    together = embedding_model.embed(texts)
    assert together.token_counts == lengths
    for text, vector in zip(texts[::6], together.vectors[::6], strict=True):
        alone = embedding_model.embed([text]).vectors[0]
        assert float(vector @ alone) > 0.9999


@pytest.mark.parametrize("seed", range(5))
def test_pack_respects_both_limits(seed: int) -> None:
    rng = random.Random(seed)
    lengths = [rng.randint(1, 256) for _ in range(rng.randint(1, 200))]
    batches = pack(lengths, max_tokens=512, max_inputs=8)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    for batch in batches:
        assert 1 <= len(batch) <= 8
        assert sum(lengths[i] for i in batch) <= 512


def test_unloadable_model_files_are_load_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="does not exist"):
        EmbeddingModel(tmp_path / "absent.gguf")
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF but not really")
    with pytest.raises(ModelLoadError, match="cannot load"):
        EmbeddingModel(broken)
