"""The store: sole owner of the SQLite database (vector_stores, chunks and their vectors)."""
