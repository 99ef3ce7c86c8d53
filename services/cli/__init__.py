"""The `ragd` command-line tool."""
