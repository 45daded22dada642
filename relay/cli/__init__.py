"""The `talaria-relay` command: `main` has the parser and exit codes, a module each the commands,
`output` how they speak. Nothing a web app embeds imports this package."""

from relay.cli.main import main

__all__ = ["main"]
