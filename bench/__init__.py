"""ragd's benchmark suite: `make bench` / `python -m bench` (see BENCHMARKS.md)."""
