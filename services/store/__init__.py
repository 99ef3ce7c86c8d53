"""The store: sole owner of the SQLite database (collections, chunks and their vectors)."""
