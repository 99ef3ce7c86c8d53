"""Search data sets: real MiniLM embeddings of real paragraphs, cached, plus stated derivations.

Recall depends on how the vectors are spread, so random vectors would mislead; but embedding
100k texts on 2 cores takes a quarter of an hour. Real vectors are computed once per model
and snippet list (cached under the results directory) up to a limit; a larger set is filled
with normalized mixes of two real vectors, and every report says how many rows are real.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from services.common.vectors import FloatMatrix

# Mixing weights of the first vector: kept away from 0 and 1 so no derived row is a
# near-duplicate of a real one (near-duplicates would make recall artificially hard).
_MIX_LOW, _MIX_HIGH = 0.3, 0.7
EMBED_BATCH = 64

Embed = Callable[[Sequence[str]], FloatMatrix]


# Words of a realistic chunk: the gateway cuts pages into the model's 256-token window, ~180
# words of man-page English.
CHUNK_WORDS = 180


@dataclass(frozen=True)
class DataSet:
    vectors: FloatMatrix
    # Row i < real is the embedding of texts[i]; later rows are derived (see derive()).
    real: int
    texts: list[str]
    # The two real rows each derived row mixes (row real + j mixes first[j] and second[j]).
    first: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    second: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @property
    def size(self) -> int:
        return int(self.vectors.shape[0])


def chunk_texts(snippets: Sequence[str], words: int = CHUNK_WORDS) -> list[str]:
    """Realistic chunk texts, one per snippet: the snippet followed by the next ones (mostly
    the following paragraphs of its page) up to `words` words, as a chunk of a page starts
    at one paragraph and runs on."""
    split = [snippet.split() for snippet in snippets]
    texts = []
    for start in range(len(split)):
        taken: list[str] = []
        row = start
        while len(taken) < words and row < start + len(split):
            taken += split[row % len(split)]
            row += 1
        texts.append(" ".join(taken[:words]))
    return texts


def long_text(row: int, data: DataSet) -> str:
    """Row `row`'s chunk text ("#<row> " first): a real row's own text; a derived row the
    first halves of its two parents' texts, the way its vector mixes theirs."""
    if row < data.real:
        text = data.texts[row]
    else:
        a = data.texts[int(data.first[row - data.real])].split()
        b = data.texts[int(data.second[row - data.real])].split()
        text = " ".join(a[: len(a) // 2] + b[: len(b) // 2])
    return f"#{row} {text}"


def derive(real: FloatMatrix, count: int, seed: int = 0) -> FloatMatrix:
    """`count` unit vectors, each normalize(w * a + (1 - w) * b) for two distinct random real
    rows a, b and w uniform in [0.3, 0.7]."""
    return derive_with_parents(real, count, seed)[0]


def derive_with_parents(
    real: FloatMatrix, count: int, seed: int = 0
) -> tuple[FloatMatrix, npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """derive(), with the rows a and b of each derived vector."""
    rng = np.random.default_rng(seed)
    n = real.shape[0]
    if n < 2:
        raise ValueError("deriving vectors needs at least two real ones")
    first = rng.integers(0, n, count)
    second = (first + rng.integers(1, n, count)) % n
    weight = rng.uniform(_MIX_LOW, _MIX_HIGH, (count, 1)).astype(np.float32)
    mixed = weight * real[first] + (1 - weight) * real[second]
    mixed /= np.linalg.norm(mixed, axis=1, keepdims=True)
    result: FloatMatrix = mixed.astype(np.float32)
    return result, first.astype(np.int64), second.astype(np.int64)


def _common_prefix(a: Sequence[str], b: Sequence[str]) -> int:
    for index, (left, right) in enumerate(zip(a, b, strict=False)):
        if left != right:
            return index
    return min(len(a), len(b))


def real_vectors(
    texts: Sequence[str],
    embed: Embed,
    cache_dir: Path,
    model_digest: str,
    log: Callable[[str], None] = print,
) -> FloatMatrix:
    """Embeddings of `texts`, reusing the cached vectors of the longest common prefix.

    One cache per model digest: the texts (JSON) and their vectors (.npy), so a later run
    that asks for more snippets only embeds the new ones.
    """
    stem = cache_dir / f"snippets-{model_digest[:12]}"
    texts_file, vectors_file = stem.with_suffix(".json"), stem.with_suffix(".npy")
    cached_texts: list[str] = []
    cached: FloatMatrix = np.zeros((0, 0), dtype=np.float32)
    if texts_file.exists() and vectors_file.exists():
        cached_texts = json.loads(texts_file.read_text(encoding="utf-8"))
        cached = np.load(vectors_file)
    have = _common_prefix(cached_texts, texts)
    if have == len(texts):
        return cached[:have]
    missing = list(texts[have:])
    log(f"embedding {len(missing)} snippets in-process, once (cached in {cache_dir})")
    started = time.monotonic()
    parts = [cached[:have]] if have else []
    for start in range(0, len(missing), EMBED_BATCH):
        parts.append(embed(missing[start : start + EMBED_BATCH]))
    vectors = np.vstack(parts).astype(np.float32)
    log(f"  {len(missing)} snippets in {time.monotonic() - started:.0f}s")
    if len(texts) > len(cached_texts) or have < len(cached_texts):
        cache_dir.mkdir(parents=True, exist_ok=True)
        np.save(vectors_file, vectors)
        texts_file.write_text(json.dumps(list(texts)), encoding="utf-8")
    return vectors


def data_set(real: FloatMatrix, texts: Sequence[str], size: int, seed: int = 0) -> DataSet:
    """`size` rows: the first min(size, len(real)) real ones, then derived mixes."""
    count = min(size, real.shape[0])
    rows = real[:count]
    first = second = np.zeros(0, dtype=np.int64)
    if size > count:
        derived, first, second = derive_with_parents(real, size - count, seed)
        rows = np.vstack([rows, derived])
    return DataSet(
        vectors=np.ascontiguousarray(rows, dtype=np.float32),
        real=count,
        texts=list(texts[:count]),
        first=first,
        second=second,
    )
