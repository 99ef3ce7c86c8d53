"""ragd services: embedder, store and gateway, plus what they share."""
