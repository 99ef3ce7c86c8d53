"""Typed Python clients for a running ragd: bulk ingest over gRPC (ingest.py), REST (rest.py)."""
