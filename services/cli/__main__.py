"""`python -m services.cli`: the same as the `ragd` command."""

from services.cli.main import main

main()
