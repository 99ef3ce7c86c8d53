"""`python -m services.store` runs the store service."""

from services.store.wire.server import main

main()
