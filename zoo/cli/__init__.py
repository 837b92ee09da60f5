"""The command line (``zoo ...``, ``python -m zoo``): `main` parses, then runs one command."""

from zoo.cli.parser import main

__all__ = ["main"]
