"""`python -m services.embedder` runs the embedder service."""

from services.embedder.server import main

main()
