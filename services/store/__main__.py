"""`python -m services.store` runs the store service."""

from services.store.server import main

main()
