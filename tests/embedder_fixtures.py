"""The real model and the reference vectors of the embedder tests, as plain functions
(conftest.py serves them as the session fixtures embedding_model and reference)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from services.embedder.model import EmbeddingModel

ROOT = Path(__file__).resolve().parent.parent
MODEL_PATH = ROOT / "models" / "all-MiniLM-L6-v2.gguf"
REFERENCE_PATH = Path(__file__).resolve().parent / "data" / "minilm_reference.json"


def require_model() -> Path:
    """MODEL_PATH; a test that needs it fails, saying how to get it, while it is missing."""
    if not MODEL_PATH.is_file():
        pytest.fail(f"{MODEL_PATH} is missing: run `make model` (or `make test`, which does it)")
    return MODEL_PATH


def load_model() -> EmbeddingModel:
    # Two threads leave a core to the test process and to a server under test.
    return EmbeddingModel(require_model(), threads=2)


def load_reference() -> list[dict[str, Any]]:
    """Sentences with all-MiniLM-L6-v2 vectors and token ids from sentence-transformers."""
    sentences: list[dict[str, Any]] = json.loads(REFERENCE_PATH.read_text(encoding="utf-8"))[
        "sentences"
    ]
    return sentences
