"""Shared fixtures for the embedder tests: the real model, loaded once, and reference vectors.

Test modules import the fixtures they use. The model is cached per process, so modules that
each import the fixture still share one loaded model.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest

from services.embedder.model import EmbeddingModel

ROOT = Path(__file__).resolve().parent.parent
MODEL_PATH = ROOT / "models" / "all-MiniLM-L6-v2.gguf"
REFERENCE_PATH = Path(__file__).resolve().parent / "data" / "minilm_reference.json"


@functools.cache
def _shared_model() -> EmbeddingModel:
    # Two threads leave a core to the test process and to a server under test.
    return EmbeddingModel(MODEL_PATH, threads=2)


@pytest.fixture(scope="session")
def embedding_model() -> EmbeddingModel:
    if not MODEL_PATH.is_file():
        pytest.fail(f"{MODEL_PATH} is missing: run `make model` (or `make test`, which does it)")
    return _shared_model()


@pytest.fixture(scope="session")
def reference() -> list[dict[str, Any]]:
    """Sentences with all-MiniLM-L6-v2 vectors and token ids from sentence-transformers."""
    sentences: list[dict[str, Any]] = json.loads(REFERENCE_PATH.read_text(encoding="utf-8"))[
        "sentences"
    ]
    return sentences
