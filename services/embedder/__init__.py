"""The embedder: a stateless gRPC wrapper around one GGUF sentence-embedding model."""
