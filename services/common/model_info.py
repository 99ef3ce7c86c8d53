"""An embedding model as the embedder describes it (its Info RPC) and the gateway knows it:
one definition for both sides of that RPC."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ModelInfo:
    name: str
    dimensions: int
    # Longest input in tokens, [CLS] and [SEP] included.
    max_input_tokens: int
    pooling: str
    normalized: bool
    # sha256 of the GGUF file.
    digest: str
    # Tokens the model adds to every text ([CLS] and [SEP] for BERT).
    special_tokens: int = 0
    # Most tokens / inputs in one forward pass (the embedder's own; 0 where unknown).
    max_batch_tokens: int = 0
    max_batch_inputs: int = 0
    # Where token counts come from: gguf (the model's own vocabulary), upstream (the
    # upstream's tokenize endpoint), tokenizer.json, or characters (an estimate).
    tokenizer: str = "gguf"
    # llama.cpp, or openai (an OpenAI-compatible endpoint).
    backend: str = "llama.cpp"
    # Where the weights came from: the GGUF's recorded source or file name; the upstream URL.
    source: str = ""
    # The libraries computing the vectors -> version.
    versions: dict[str, str] = field(default_factory=dict)
