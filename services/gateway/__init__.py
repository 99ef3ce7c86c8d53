"""The gateway: OpenAI-shaped REST in front of the embedder and store gRPC services."""
