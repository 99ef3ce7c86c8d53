"""Pieces every service shares: configuration, vector wire format, gRPC plumbing."""
